package control

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An existing run directory keeps its mode (--run-dir /tmp must not be
// chmod-ed 0700); one others can write is refused, and left as it was.
func TestRunDirNotChanged(t *testing.T) {
	h := func(context.Context, Request) (any, error) { return nil, nil }
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(filepath.Join(dir, "control.sock"), h)
	if err != nil {
		t.Fatal(err)
	}
	s.ln.Close()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
		t.Errorf("existing run dir: mode %v, want 0755 kept", st.Mode().Perm())
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	_, err = Listen(filepath.Join(open, "control.sock"), h)
	if err == nil || !strings.Contains(err.Error(), open+": world-writable (mode 1777)") || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("world-writable run dir: %v", err)
	}
	if st, _ := os.Stat(open); st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("refused run dir changed: %v", st.Mode())
	}
	if _, err := os.Lstat(filepath.Join(open, "control.sock")); !os.IsNotExist(err) {
		t.Errorf("socket created in a refused dir: %v", err)
	}
}
