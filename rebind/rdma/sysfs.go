package rdma

import (
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"golang.org/x/sys/unix"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
//
// As configfs attributes are read (configfs/read_linux.go): the open is
// non-blocking and does not follow a symlink, the read is bounded and
// ends at the first short read (an attribute is produced whole), and
// what is not a regular file is an error; the fstat that tells is made
// only when the read was empty, failed or hit the bound (a FIFO without a
// writer reads nothing, with a silent one EAGAIN, /dev/zero never ends):
// the GID tables are thousands of reads per observation.
func (s sysfs) readAt(name string) (string, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(int(s.dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		var st unix.Stat_t
		if err == unix.ENXIO && unix.Fstatat(int(s.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return "", notAttr("", st.Mode) // a socket, a device without a driver
		}
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
			if err := checkRegular(fd); err != nil {
				return "", err
			}
			return "", &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break
		}
		short := m < len(buf)-n
		n += m
		if short {
			// sysfs produces an attribute whole: a short read is the
			// end (saves the read that would return 0).
			break
		}
	}
	if n == 0 || n > maxAttrSize {
		if err := checkRegular(fd); err != nil {
			return "", err
		}
	}
	if n > maxAttrSize {
		return "", fmt.Errorf("%s: larger than %d bytes", name, maxAttrSize)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// checkRegular refuses an open attribute that is not a regular file; the
// error does not name it (readAt's callers do: "gids/3: ...").
func checkRegular(fd int) error {
	var st unix.Stat_t
	var err error
	for {
		err = unix.Fstat(fd, &st)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return notAttr("", st.Mode)
	}
	return nil
}

// notAttr is the error for an attribute that is not a regular file; name
// may be "" when the caller names it.
func notAttr(name string, mode uint32) error {
	return &bounded.Error{Path: name, Problem: "not a regular file (" + bounded.Kind(mode) + ")",
		Fix: "sysfs attributes are regular files: check that the sysfs root is sysfs", Err: bounded.ErrNotRegular}
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
	// Non-blocking, not through a final symlink, and only a regular
	// file (checked before the read: an os.File of a FIFO would wait in
	// the poller).
	f, err := s.root.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", notAttr(p, uint32(st.Sys().(*syscall.Stat_t).Mode))
	}
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
