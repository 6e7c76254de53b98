package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLockKeepsExistingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
		t.Errorf("existing state dir: mode %v, want 0755 kept", st.Mode().Perm())
	}
	if _, err := Lock(dir); err == nil || !strings.Contains(err.Error(), "locked by another") {
		t.Errorf("second lock: %v", err)
	}
}

func TestLockCreatesMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("created %s: %v %v, want mode 0700", d, st.Mode(), err)
		}
	}
}

func TestLockRefusesWorldWritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	_, err := Lock(dir)
	if err == nil || !strings.Contains(err.Error(), dir+": world-writable (mode 1777)") {
		t.Errorf("world-writable state dir: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "lock")); !os.IsNotExist(err) {
		t.Errorf("lock created in a refused dir: %v", err)
	}
}

// A symlink as the lock file is not followed: refused, naming it, and its
// target is not created.
func TestLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	lock := filepath.Join(dir, "lock")
	if err := os.Symlink(target, lock); err != nil {
		t.Fatal(err)
	}
	_, err := Lock(dir)
	if err == nil || !strings.Contains(err.Error(), lock+" is a symlink; not followed") {
		t.Errorf("symlinked lock: %v", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was created: %v", err)
	}
	// To an existing file: refused too, the file untouched.
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir); err == nil {
		t.Error("symlink to an existing file accepted")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("target changed: %q", b)
	}
}

// A lock held for a while (a trigger reconciling) is waited for; one held
// past the wait is Lock's error; stop's error ends the wait at once.
func TestAwaitLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); unlock() }()
	stops := 0
	got, err := AwaitLock(context.Background(), dir, 10*time.Second, func() error { stops++; return nil })
	if err != nil || stops == 0 {
		t.Fatalf("lock freed after 300 ms: %v after %d stops, want it taken after waiting", err, stops)
	}
	if _, err := AwaitLock(context.Background(), dir, 250*time.Millisecond, func() error { return nil }); !errors.Is(err, syscall.EWOULDBLOCK) || !strings.Contains(err.Error(), "locked by another") {
		t.Errorf("lock held past the wait: %v, want EWOULDBLOCK", err)
	}
	answering := errors.New("a daemon answers")
	if _, err := AwaitLock(context.Background(), dir, 10*time.Second, func() error { return answering }); err != answering {
		t.Errorf("stop said a daemon answers: %v, want its error", err)
	}
	got()
	if u, err := AwaitLock(context.Background(), dir, 0, nil); err != nil {
		t.Errorf("free lock: %v", err)
	} else {
		u()
	}
}
