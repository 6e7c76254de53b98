package configfs_test

import (
	"errors"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded/boundedtest"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

// TestReadAttrsNonRegular: an attribute that is not a regular file never
// blocks the read (a FIFO, with or without a silent writer), never makes
// it unbounded (/dev/zero) and is an error naming it; regular attributes
// next to it read as usual.
func TestReadAttrsNonRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good", "192.0.2.1\n")
	write("empty", "")
	write("huge", strings.Repeat("1", 5000))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifoW := filepath.Join(dir, "fifo-writer")
	boundedtest.FIFOWithWriter(t, fifoW)
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "link-zero")); err != nil {
		t.Fatal(err)
	}
	names := []string{"good", "empty", "huge", "fifo", "fifo-writer", "dir", "sock", "link-zero"}
	want := map[string]string{ // value, or a part of the error
		"good":        "=192.0.2.1",
		"empty":       "=",
		"huge":        "larger than",
		"fifo":        "not a regular file (a FIFO)",
		"fifo-writer": "not a regular file (a FIFO)",
		"dir":         "not a regular file (a directory)",
		"sock":        "not a regular file (a socket)",
		"link-zero":   "too many levels of symbolic links", // O_NOFOLLOW
	}
	// Devices (mknod needs CAP_MKNOD): /dev/null reads nothing, /dev/zero
	// never ends.
	if syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o644, 1<<8|3) == nil &&
		syscall.Mknod(filepath.Join(dir, "zero"), syscall.S_IFCHR|0o644, 1<<8|5) == nil {
		names = append(names, "null", "zero")
		want["null"] = "not a regular file (a character device)"
		want["zero"] = "not a regular file (a character device)"
	} else {
		t.Log("no mknod: device cases not run")
	}
	done := make(chan []configfs.Attrs, 1)
	go func() { done <- configfs.OSOps{}.ReadAttrs([]string{dir}, names) }()
	var got []configfs.Attrs
	select {
	case got = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadAttrs blocked for 5 s")
	}
	if len(got) != 1 || got[0].Err != nil {
		t.Fatalf("ReadAttrs = %+v", got)
	}
	for i, n := range names {
		v, err := got[0].Values[i], got[0].Errs[i]
		if w, ok := strings.CutPrefix(want[n], "="); ok {
			if err != nil || v != w {
				t.Errorf("%s = %q, %v; want %q", n, v, err, w)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want[n]) || !strings.Contains(err.Error(), filepath.Join(dir, n)) {
			t.Errorf("%s = %q, %v; want an error naming it: %s", n, v, err, want[n])
		}
		if strings.HasPrefix(want[n], "not a regular") && !errors.Is(err, bounded.ErrNotRegular) {
			t.Errorf("%s: %v does not wrap ErrNotRegular", n, err)
		}
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v is fs.ErrNotExist (a missing attribute)", n, err)
		}
	}
}
