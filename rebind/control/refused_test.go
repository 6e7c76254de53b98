package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// "The daemon refused you" is told apart from "no daemon is running".
func TestRefusedIsNotNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	s, err := Listen(path, func(context.Context, Request) (any, error) { return "ok", nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	s.mu.Lock()
	s.allowed = func(uint32) bool { return false }
	s.mu.Unlock()
	err = Call(context.Background(), path, Request{Cmd: "status"}, nil)
	if !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoDaemon) {
		t.Errorf("the daemon refusing the peer: %v, want ErrRefused", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err = Call(context.Background(), path, Request{Cmd: "status"}, nil)
	if !errors.Is(err, ErrNoDaemon) || errors.Is(err, ErrRefused) {
		t.Errorf("no daemon: %v, want ErrNoDaemon", err)
	}
}

// The socket's mode refusing the connect (a non-root caller: the kernel's
// EACCES) is a refusal, not a missing daemon.
func TestModeRefusalIsRefused(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root connects whatever the mode (TestRefusedIsNotNoDaemon and cmd/nvmet-rebind's TestRefusedNotRoot cover it)")
	}
	path := filepath.Join(t.TempDir(), "control.sock")
	s, err := Listen(path, func(context.Context, Request) (any, error) { return "ok", nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	err = Call(context.Background(), path, Request{Cmd: "status"}, nil)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, os.ErrPermission) {
		t.Errorf("a socket of mode 000: %v, want ErrRefused", err)
	}
}
