//go:build linux

package bounded_test

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded/boundedtest"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

// within fails the test if f does not return within 5 s: a read that
// blocks is the bug these tests are about.
func within[T any](t *testing.T, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("blocked for 5 s")
		panic("unreachable")
	}
}

type result struct {
	b   []byte
	err error
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	regular := write("regular", []byte("hello\n"))
	exact := write("exact", bytes.Repeat([]byte("x"), 1024))
	over := write("over", bytes.Repeat([]byte("x"), 1025))
	empty := write("empty", nil)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO with a writer that never writes: a blocking read would wait
	// for it forever, a non-blocking one would get EAGAIN.
	fifoW := filepath.Join(dir, "fifo-with-writer")
	boundedtest.FIFOWithWriter(t, fifoW)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("regular", link); err != nil {
		t.Fatal(err)
	}
	linkZero := filepath.Join(dir, "link-zero")
	if err := os.Symlink("/dev/zero", linkZero); err != nil {
		t.Fatal(err)
	}
	linkFIFO := filepath.Join(dir, "link-fifo")
	if err := os.Symlink("fifo", linkFIFO); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name    string
		path    string
		follow  bool
		want    string
		wantErr error  // errors.Is
		wantIn  string // in the message
	}{
		{name: "regular", path: regular, want: "hello\n"},
		{name: "regular, following", path: regular, follow: true, want: "hello\n"},
		{name: "empty", path: empty, want: ""},
		{name: "exactly the limit", path: exact, want: strings.Repeat("x", 1024)},
		{name: "one byte over", path: over, wantErr: bounded.ErrTooLarge, wantIn: over + ": larger than 1 KiB: "},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: fs.ErrNotExist, wantIn: "nope"},
		{name: "FIFO", path: fifo, wantErr: bounded.ErrNotRegular, wantIn: fifo + ": not a regular file (a FIFO): replace it with a regular file"},
		{name: "FIFO with a writer", path: fifoW, wantErr: bounded.ErrNotRegular, wantIn: "(a FIFO)"},
		{name: "FIFO through a followed symlink", path: linkFIFO, follow: true, wantErr: bounded.ErrNotRegular, wantIn: linkFIFO + ": not a regular file (a FIFO)"},
		{name: "/dev/zero", path: "/dev/zero", follow: true, wantErr: bounded.ErrNotRegular, wantIn: "/dev/zero: not a regular file (a character device)"},
		{name: "/dev/null", path: "/dev/null", wantErr: bounded.ErrNotRegular, wantIn: "(a character device)"},
		{name: "/dev/zero through a followed symlink", path: linkZero, follow: true, wantErr: bounded.ErrNotRegular, wantIn: "(a character device)"},
		{name: "directory", path: sub, wantErr: bounded.ErrNotRegular, wantIn: sub + ": not a regular file (a directory)"},
		{name: "socket", path: sock, wantErr: bounded.ErrNotRegular, wantIn: sock + ": not a regular file (a socket)"},
		{name: "symlink, followed", path: link, follow: true, want: "hello\n"},
		{name: "symlink, refused", path: link, wantErr: bounded.ErrSymlink, wantIn: link + ": a symbolic link, which is not followed here: "},
		{name: "symlink to /dev/zero, refused", path: linkZero, wantErr: bounded.ErrSymlink, wantIn: "symbolic link"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := within(t, func() result {
				b, err := bounded.ReadFile(tt.path, 1024, tt.follow)
				return result{b, err}
			})
			if tt.wantErr == nil {
				if r.err != nil || string(r.b) != tt.want {
					t.Fatalf("ReadFile = %q, %v; want %q", r.b, r.err, tt.want)
				}
				return
			}
			if !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("ReadFile = %q, %v; want an error wrapping %v", r.b, r.err, tt.wantErr)
			}
			if !strings.Contains(r.err.Error(), tt.wantIn) {
				t.Errorf("error %q does not contain %q", r.err, tt.wantIn)
			}
			if r.b != nil {
				t.Errorf("ReadFile returned %d bytes with its error", len(r.b))
			}
		})
	}
}

// The bound is on the read, not on what stat says: /proc and /sys files
// report a size of 0 or 4096 whatever they hold.
func TestReadFileStatSizeIsNoBound(t *testing.T) {
	t.Parallel()
	// /proc/self/maps is a regular file of size 0 holding more than 16 bytes.
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		t.Skip(err)
	}
	r := within(t, func() result {
		b, err := bounded.ReadFile("/proc/self/maps", 16, false)
		return result{b, err}
	})
	if !errors.Is(r.err, bounded.ErrTooLarge) {
		t.Fatalf("ReadFile(/proc/self/maps, 16) = %d bytes, %v; want ErrTooLarge", len(r.b), r.err)
	}
	r = within(t, func() result {
		b, err := bounded.ReadFile("/proc/self/maps", 64<<20, false)
		return result{b, err}
	})
	if r.err != nil || len(r.b) == 0 {
		t.Fatalf("ReadFile(/proc/self/maps) = %d bytes, %v", len(r.b), r.err)
	}
}

// A large file is read whole, past the first buffer.
func TestReadFileLarge(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "large")
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := bounded.ReadFile(p, 1<<20, false)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("ReadFile = %d bytes, %v; want %d", len(b), err, len(want))
	}
	if _, err := bounded.ReadFile(p, 1<<20-1, false); !errors.Is(err, bounded.ErrTooLarge) {
		t.Fatalf("ReadFile(limit 1 MiB - 1) = %v; want ErrTooLarge", err)
	}
}

func TestCheckMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        fifo + ": not a regular file (a FIFO): replace it with a regular file",
		"/dev/zero": "/dev/zero: not a regular file (a character device): replace it with a regular file",
		dir:         dir + ": not a regular file (a directory): replace it with a regular file",
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := bounded.CheckMode(path, st.Mode()); err == nil || err.Error() != want || !errors.Is(err, bounded.ErrNotRegular) {
			t.Errorf("CheckMode(%s) = %v; want %q", path, err, want)
		}
	}
	st, err := os.Stat("/proc/self/maps")
	if err == nil {
		if err := bounded.CheckMode("/proc/self/maps", st.Mode()); err != nil {
			t.Errorf("CheckMode(regular) = %v", err)
		}
	}
}

func TestErrorWithoutPathAndFix(t *testing.T) {
	t.Parallel()
	_, err := bounded.ReadFile("/dev/null", 10, false)
	var be *bounded.Error
	if !errors.As(err, &be) {
		t.Fatalf("ReadFile(/dev/null) = %v, not an *Error", err)
	}
	bare := *be
	bare.Path, bare.Fix = "", ""
	if got := bare.Error(); got != "not a regular file (a character device)" {
		t.Errorf("bare error = %q", got)
	}
	if !errors.Is(&bare, bounded.ErrNotRegular) {
		t.Error("bare error does not wrap ErrNotRegular")
	}
}

func TestSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{1 << 20: "1 MiB", 64 << 20: "64 MiB", 4096: "4 KiB", 100: "100 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := bounded.Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

// ReadDirNames: every name of a directory larger than one getdents buffer,
// "." and ".." left out; a symlink refused unless followed; a file or a
// missing path is a *fs.PathError that errors.Is tells apart.
func TestReadDirNames(t *testing.T) {
	dir := t.TempDir()
	want := map[string]bool{}
	for i := range 1000 {
		n := fmt.Sprintf("nqn.2014-08.org.example:subsystem-with-a-long-name-%04d", i)
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		want[n] = true
	}
	names, err := bounded.ReadDirNames(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(want) {
		t.Fatalf("%d names, want %d", len(names), len(want))
	}
	for _, n := range names {
		if !want[n] {
			t.Errorf("unexpected name %q", n)
		}
		delete(want, n)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := bounded.ReadDirNames(link, false); err == nil {
		t.Error("a symlink was followed with followSymlinks false")
	}
	if got, err := bounded.ReadDirNames(link, true); err != nil || len(got) != 1000 {
		t.Errorf("followed: %d names, %v", len(got), err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var pe *fs.PathError
	if _, err := bounded.ReadDirNames(file, false); !errors.As(err, &pe) || !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a file: %v", err)
	}
	if _, err := bounded.ReadDirNames(filepath.Join(dir, "missing"), false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
