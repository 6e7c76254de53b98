package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRoundTripAndPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "control.sock")
	s, err := Listen(path, func(ctx context.Context, r Request) (any, error) {
		if r.Cmd == "fail" {
			return nil, errors.New("lio portal x: not found")
		}
		return map[string]string{"echo": r.Cmd + ":" + r.ID}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, st.Mode().Perm(), want)
		}
	}
	var out map[string]string
	if err := Call(context.Background(), path, Request{Cmd: "rebind", ID: "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if out["echo"] != "rebind:1" {
		t.Errorf("result %v", out)
	}
	if err := Call(context.Background(), path, Request{Cmd: "fail"}, nil); err == nil || !strings.Contains(err.Error(), "lio portal x") {
		t.Errorf("error not passed through: %v", err)
	}
	// A second daemon must not steal the socket.
	if _, err := Listen(path, nil); err == nil {
		t.Error("second Listen on a live socket succeeded")
	}
	// Peer check: deny our own uid and see the refusal.
	s.mu.Lock()
	s.allowed = func(uid uint32) bool { return uid != uint32(os.Getuid()) }
	s.mu.Unlock()
	if err := Call(context.Background(), path, Request{Cmd: "status"}, nil); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("peer check: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if err := Call(context.Background(), path, Request{Cmd: "status"}, nil); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("no daemon: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(path, func(context.Context, Request) (any, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	s.ln.Close()
}
