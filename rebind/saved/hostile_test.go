package saved_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// TestLoadHostile: a saved config that is a FIFO or a device is refused
// with its path, at once; a symlink to a saved config is followed (the
// tools' configs may be managed links).
func TestLoadHostile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "config.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.Abs("../testdata/saveconfig.json")
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "saveconfig.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		cfg    rebind.Config
		wantIn string // "" for success
	}{
		{"FIFO nvmetcli config", rebind.Config{NvmetConfig: fifo}, "nvmetcli config " + fifo + ": not a regular file (a FIFO): replace it with a regular file"},
		{"/dev/zero targetcli config", rebind.Config{TargetConfig: "/dev/zero"}, "targetcli config /dev/zero: not a regular file (a character device)"},
		{"directory", rebind.Config{TargetConfig: dir}, "not a regular file (a directory)"},
		{"symlink followed", rebind.Config{TargetConfig: link}, ""},
		{"missing", rebind.Config{NvmetConfig: filepath.Join(dir, "nope")}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			type res struct {
				d   []rebind.Declared
				err error
			}
			done := make(chan res, 1)
			go func() { d, err := saved.Load(tt.cfg); done <- res{d, err} }()
			var r res
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Load blocked for 5 s")
			}
			if tt.wantIn == "" {
				if r.err != nil {
					t.Fatalf("Load: %v", r.err)
				}
				if tt.cfg.TargetConfig != "" && len(r.d) == 0 {
					t.Error("Load through a symlink declared nothing")
				}
				return
			}
			if r.err == nil || !strings.Contains(r.err.Error(), tt.wantIn) {
				t.Errorf("Load = %v; want %q", r.err, tt.wantIn)
			}
		})
	}
}
