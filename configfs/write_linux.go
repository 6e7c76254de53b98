package configfs

// The write path of OSOps on Linux: every write is resolved beneath Root
// without following a symlink, with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) from an fd of the root; then symlinkat, unlinkat
// or openat act on the last component relative to its directory's fd.
// Where openat2 is missing (ENOSYS: before Linux 5.6) or refused by a
// seccomp filter (EPERM), the same walk is made one component at a time
// (openat O_PATH|O_NOFOLLOW, then fstat: a symlink is refused); it is also
// how a symlink found by openat2 (ELOOP) is named in the error.

import (
	"errors"
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openRoot opens root, the configfs root, with O_PATH.
func openRoot(root string) (int, error) {
	rfd, err := eintr(func() (int, error) {
		return rawOpenat(unix.AT_FDCWD, root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return rfd, nil
}

// openDir opens rel, a directory beneath root, with O_PATH.
func (o OSOps) openDir(root, rel string) (int, error) {
	rfd, err := openRoot(root)
	if err != nil {
		return -1, err
	}
	return o.openDirAt(rfd, root, rel)
}

// openDirAt is openDir from rfd, root's fd, which it closes.
func (o OSOps) openDirAt(rfd int, root, rel string) (int, error) {
	if !o.walk {
		how := &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
		}
		fd, err := eintr(func() (int, error) { return rawOpenat2(rfd, rel, how) })
		switch err {
		case nil:
			rawClose(rfd)
			return fd, nil
		case unix.ENOSYS, unix.EPERM, unix.ELOOP, unix.EXDEV, unix.ENOTDIR:
			// No openat2, or a symlink (or no directory) on the way:
			// the walk works without it and names what it finds.
		default:
			rawClose(rfd)
			return -1, &fs.PathError{Op: "open", Path: filepath.Join(root, rel), Err: err}
		}
	}
	return walk(rfd, root, rel)
}

// walk opens rel beneath the directory fd (root), one component at a time,
// refusing a symlink; it closes fd.
func walk(fd int, root, rel string) (int, error) {
	cur := root
	for _, c := range strings.Split(rel, "/") {
		if c == "." || c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		if c == ".." {
			rawClose(fd)
			return -1, fmt.Errorf("configfs: %s: outside the configfs root %s; not written", cur, root)
		}
		next, err := eintr(func() (int, error) {
			return rawOpenat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		rawClose(fd)
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: cur, Err: err}
		}
		var st unix.Stat_t
		if err := rawFstat(next, &st); err != nil {
			rawClose(next)
			return -1, &fs.PathError{Op: "stat", Path: cur, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			rawClose(next)
			return -1, &symlinkError{path: cur, has: "a directory", root: root}
		default:
			rawClose(next)
			return -1, &fs.PathError{Op: "open", Path: cur, Err: unix.ENOTDIR}
		}
		fd = next
	}
	return fd, nil
}

// parent opens the directory of path (beneath Root, no symlink followed)
// and returns it with path's last component.
func (o OSOps) parent(path string) (dirfd int, name, root string, err error) {
	root, rel, err := o.beneath(path)
	if err != nil {
		return -1, "", "", err
	}
	fd, err := o.openDir(root, filepath.Dir(rel))
	if err != nil {
		return -1, "", "", err
	}
	return fd, filepath.Base(rel), root, nil
}

func (o OSOps) symlink(target, link string) error {
	dfd, name, _, err := o.parent(link)
	if err != nil {
		return err
	}
	defer rawClose(dfd)
	if _, err := eintr(func() (int, error) { return 0, rawSymlinkat(target, dfd, name) }); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: err}
	}
	return nil
}

// openLinkDir opens dir, a port's subsystems directory beneath Root, for
// a run of link writes.
func (o OSOps) openLinkDir(dir string) (int, error) {
	root, rel, err := o.beneath(filepath.Join(dir, "x"))
	if err != nil {
		return -1, err
	}
	return o.openDir(root, filepath.Dir(rel))
}

func (o OSOps) symlinks(dir string, targets, names []string, done func(int, error) bool) error {
	dfd, err := o.openLinkDir(dir)
	if err != nil {
		return err
	}
	defer rawClose(dfd)
	for i, name := range names {
		_, err := eintr(func() (int, error) { return 0, rawSymlinkat(targets[i], dfd, name) })
		if err != nil {
			err = &os.LinkError{Op: "symlink", Old: targets[i], New: filepath.Join(dir, name), Err: err}
		}
		if !done(i, err) {
			break
		}
	}
	return nil
}

func (o OSOps) mkdir(path string) error {
	dfd, name, _, err := o.parent(path)
	if err != nil {
		return err
	}
	defer rawClose(dfd)
	if _, err := eintr(func() (int, error) { return 0, unix.Mkdirat(dfd, name, 0o755) }); err != nil {
		return &fs.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return nil
}

func (o OSOps) remove(path string) error {
	dfd, name, _, err := o.parent(path)
	if err != nil {
		return err
	}
	defer rawClose(dfd)
	return removeLink(dfd, name, path, false)
}

func (o OSOps) removeLinks(dir string, names []string, done func(int, error) bool) error {
	dfd, err := o.openLinkDir(dir)
	if err != nil {
		return err
	}
	defer rawClose(dfd)
	kernel := onConfigfs(dfd)
	for i, name := range names {
		if !done(i, removeLink(dfd, name, filepath.Join(dir, name), kernel)) {
			break
		}
	}
	return nil
}

// onConfigfs tells whether the directory fd is on configfs.
func onConfigfs(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && uint64(st.Type) == Magic
}

// removeLink removes name of the directory dfd (path, for errors), which
// must be a symlink. On configfs (kernel) the kernel itself refuses to
// unlink anything else (configfs_unlink: EPERM; a directory: EISDIR), so
// the unlink comes first and only a refusal is looked at; elsewhere (a
// copy of the tree, tests) the entry is looked at first.
func removeLink(dfd int, name, path string, kernel bool) error {
	unlink := func() error {
		// unlinkat without AT_REMOVEDIR never removes a directory nor
		// follows a symlink.
		if _, err := eintr(func() (int, error) { return 0, rawUnlinkat(dfd, name, 0) }); err != nil {
			return &fs.PathError{Op: "remove", Path: path, Err: err}
		}
		return nil
	}
	if kernel {
		err := unlink()
		if err == nil || !(errors.Is(err, unix.EPERM) || errors.Is(err, unix.EISDIR)) {
			return err
		}
		if what := notLink(dfd, name); what != "" {
			return notLinkError(path, what)
		}
		return err
	}
	var st unix.Stat_t
	if err := rawFstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "remove", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return notLinkError(path, bounded.Kind(st.Mode))
	}
	return unlink()
}

// notLink names what name of dfd is when it is not a symlink ("" when it
// is one, or cannot be looked at).
func notLink(dfd int, name string) string {
	var st unix.Stat_t
	if rawFstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return ""
	}
	return bounded.Kind(st.Mode)
}

func (o OSOps) writeAttr(path, value string) error {
	fd, err := o.openAttr(path, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	return writeClose(fd, path, value)
}

// swapAttrs is SwapAttrs: one open of the root (and one look at what it
// is) for the run; each attribute opened from it, read once, written when
// it reads from, closed.
func (o OSOps) swapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	if len(from) != len(to) {
		return fmt.Errorf("configfs: swap of %q for %q: values of different lengths", from, to)
	}
	if len(paths) == 0 {
		return nil
	}
	rels := make([]string, len(paths))
	var root string
	for i, p := range paths {
		r, rel, err := o.beneath(p)
		if err != nil {
			return err
		}
		root, rels[i] = r, rel
	}
	rfd, err := openRoot(root)
	if err != nil {
		return err
	}
	defer rawClose(rfd)
	kernel := !o.walk && onConfigfs(rfd)
	buf := make([]byte, maxAttr+1)
	for i, p := range paths {
		if got, err := o.swapAt(rfd, kernel, root, rels[i], p, from, to, buf); !done(i, got, err) {
			break
		}
	}
	return nil
}

// swapAt is one swap of SwapAttrs: path (rel beneath root, whose fd is
// rfd) opened, read into buf, written when it reads from.
func (o OSOps) swapAt(rfd int, kernel bool, root, rel, path, from, to string, buf []byte) (string, error) {
	fd, err := o.openAttrAt(rfd, kernel, root, rel, path, unix.O_RDWR)
	if err != nil {
		return "", err
	}
	// One read: a short one is the whole file. configfs hands a show's
	// whole output (at most a page) to the first read
	// (simple_read_from_buffer), as a regular file does up to its end;
	// more than maxAttr bytes is trimAttr's error.
	n, err := eintr(func() (int, error) { return rawRead(fd, buf) })
	if err != nil {
		rawClose(fd)
		return "", &fs.PathError{Op: "read", Path: path, Err: err}
	}
	got, err := trimAttr(path, buf[:n])
	if err != nil || got != from {
		rawClose(fd)
		return got, err
	}
	// At offset 0: configfs ignores the offset; a regular file (the
	// tests' trees) is overwritten in place, from and to being of one
	// length.
	b := []byte(to + "\n")
	pwrite := rawPwrite
	if to == "1" {
		// iser=1: the kernel spawns modprobe and waits for it
		// (rawsys_linux.go).
		pwrite = unix.Pwrite
	}
	m, err := eintr(func() (int, error) { return pwrite(fd, b, 0) })
	if err == nil && m != len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", m, len(b))
	}
	if err != nil {
		rawClose(fd)
		return got, &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if err := rawClose(fd); err != nil {
		return got, &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return got, nil
}

// openAttr opens the attribute at path (beneath Root, no symlink followed)
// with flags (O_WRONLY or O_RDWR); it must be a regular file.
func (o OSOps) openAttr(path string, flags int) (int, error) {
	root, rel, err := o.beneath(path)
	if err != nil {
		return -1, err
	}
	rfd, err := openRoot(root)
	if err != nil {
		return -1, err
	}
	defer rawClose(rfd)
	return o.openAttrAt(rfd, !o.walk && onConfigfs(rfd), root, rel, path, flags)
}

// openAttrAt is openAttr from rfd, root's fd, which it leaves open; kernel
// says that rfd is configfs itself (onConfigfs).
//
// On configfs (the kernel) one openat2 is the whole open: configfs has no
// device, FIFO or socket, a directory refuses a write open (EISDIR), a
// symlink is refused by the resolution and RESOLVE_NO_XDEV keeps the open
// on configfs' own mount, so what opens is an attribute. Each system
// call counts there: under TCG one costs about 40 us, and 256 writes of 0
// over 0 to sharers' iser took 97 ms (median) in 11 calls each through
// the checked open below against 55 ms in 7 through this one (6.1,
// alternated in one boot; BENCHMARKS.md); a run of swaps (SwapAttrs)
// opens and looks at the root once, 4 calls a swap.
//
// Elsewhere (a copy of the tree, the tests' trees), or when that open is
// refused, the entry is looked at before the open (opening a device or a
// FIFO is not harmless) and again on the fd (what was opened is what is
// written); a refusal is named there.
func (o OSOps) openAttrAt(rfd int, kernel bool, root, rel, path string, flags int) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if kernel {
		fd, err := openOnConfigfs(rfd, rel, flags)
		switch err {
		case nil:
			return fd, nil
		case unix.ENOENT:
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		// Refused: the checked open below names why.
	}
	// openDirAt closes the fd it is given: a copy of the root's.
	dup, err := unix.FcntlInt(uintptr(rfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	dfd, err := o.openDirAt(dup, root, filepath.Dir(rel))
	if err != nil {
		return -1, err
	}
	defer rawClose(dfd)
	name := filepath.Base(rel)
	var st unix.Stat_t
	if err := rawFstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := isAttr(path, root, st.Mode); err != nil {
		return -1, err
	}
	fd, err := eintr(func() (int, error) { return rawOpenat(dfd, name, flags, 0) })
	if err == unix.ELOOP {
		return -1, &symlinkError{path: path, has: "an attribute", root: root}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := rawFstat(fd, &st); err != nil {
		rawClose(fd)
		return -1, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := isAttr(path, root, st.Mode); err != nil {
		rawClose(fd)
		return -1, err
	}
	return fd, nil
}

// openOnConfigfs is openAttr's one openat2 of rel beneath rfd (the
// root's fd) on configfs: the fd, or the kernel's refusal. On any tree it
// opens nothing that the checked open refuses but a device, a FIFO or a
// socket, which configfs cannot hold (openattr_linux_test.go compares the
// two).
func openOnConfigfs(rfd int, rel string, flags int) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV,
	}
	return eintr(func() (int, error) { return rawOpenat2(rfd, rel, how) })
}

// writeClose writes value and a newline to fd in one write(2), and closes
// it: a short count is an error.
func writeClose(fd int, path, value string) error {
	b := []byte(value + "\n")
	n, err := eintr(func() (int, error) { return unix.Write(fd, b) })
	if err == nil && n != len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	if err != nil {
		rawClose(fd)
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if err := rawClose(fd); err != nil {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// isAttr refuses anything but a regular file as an attribute.
func isAttr(path, root string, mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		return &symlinkError{path: path, has: "an attribute", root: root}
	default:
		return notAttrError(path, bounded.Kind(mode))
	}
}

// eintr retries f while it is interrupted, as package os does.
func eintr(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}
