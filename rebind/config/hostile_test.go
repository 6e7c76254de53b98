package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
)

// TestLoadHostile: a config that is not a regular file is refused at once
// with its path, what it is and what to do; a symlink to a regular config
// is followed (/etc alternatives), one to a FIFO is not read.
func TestLoadHostile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte("[[watch]]\nsubnet = \"192.0.2.0/24\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	linkGood := filepath.Join(dir, "link-good.toml")
	linkFIFO := filepath.Join(dir, "link-fifo.toml")
	linkZero := filepath.Join(dir, "link-zero.toml")
	for target, link := range map[string]string{good: linkGood, fifo: linkFIFO, "/dev/zero": linkZero} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		path, wantIn string // "" for success
	}{
		{fifo, "config " + fifo + ": not a regular file (a FIFO): replace it with a regular file"},
		{"/dev/zero", "config /dev/zero: not a regular file (a character device): replace it with a regular file"},
		{dir, "config " + dir + ": not a regular file (a directory)"},
		{linkFIFO, "config " + linkFIFO + ": not a regular file (a FIFO)"},
		{linkZero, "config " + linkZero + ": not a regular file (a character device)"},
		{linkGood, ""},
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			t.Parallel()
			done := make(chan error, 1)
			go func() { _, err := config.Load(tt.path); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Load blocked for 5 s")
			}
			if tt.wantIn == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("Load = %v; want %q", err, tt.wantIn)
			}
		})
	}
}
