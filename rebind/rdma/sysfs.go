package rdma

import (
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// maxAttrSize bounds every sysfs attribute read (sysfs attributes are one page).
const maxAttrSize = 4096

// sysfs reads attribute files under an os.Root (the sysfs mount).
type sysfs struct {
	root *os.Root
	// dir, when set, is root's directory opened for openat(2): a single
	// name is read with openat (O_NOFOLLOW), read, close — three system
	// calls instead of os.Root's path walk and poller registration (the
	// GID tables: thousands of files per observation).
	dir *os.File
}

// readAt reads the attribute file name (one path element) of s.dir.
func (s sysfs) readAt(name string) (string, error) {
	fd, err := unix.Openat(int(s.dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var buf [maxAttrSize + 1]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n > maxAttrSize {
		return "", fmt.Errorf("%s: larger than %d bytes", name, maxAttrSize)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// list returns the entry names of directory dir.
func (s sysfs) list(dir string) ([]string, error) {
	f, err := s.root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	for _, n := range names {
		if !validName(n) {
			return nil, fmt.Errorf("entry %q: invalid name", n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// read returns the trimmed contents of attribute file p.
func (s sysfs) read(p string) (string, error) {
	if s.dir != nil && validName(p) {
		return s.readAt(p)
	}
	f, err := s.root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxAttrSize {
		return "", fmt.Errorf("%s: larger than %d bytes", p, maxAttrSize)
	}
	return strings.TrimSpace(string(b)), nil
}

// FormatGUID renders a node GUID as sysfs and `rdma dev` print it:
// "80dd:69ff:fe0d:1e0b". It is the one format of GUIDs in logs, status
// and the state directory.
func FormatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// ParseGUID parses what FormatGUID prints.
func ParseGUID(s string) (uint64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return 0, fmt.Errorf("GUID %q: want four groups of four hex digits", s)
	}
	var g uint64
	for _, p := range parts {
		if len(p) != 4 {
			return 0, fmt.Errorf("GUID %q: want four groups of four hex digits", s)
		}
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("GUID %q: %w", s, err)
		}
		g = g<<16 | v
	}
	return g, nil
}
