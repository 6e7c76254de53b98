package configfs

import (
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// maxAttr bounds every attribute read: configfs attributes are at most a page.
const maxAttr = 4096

// Ops is the seam between FS and the kernel: every read and every write of
// the tree goes through it. The real kernel is OSOps; configfstest.Fake
// stands in for it in tests. Paths are under the FS root.
type Ops interface {
	// ReadDirNames lists a directory in the order its entries were created.
	ReadDirNames(dir string) ([]string, error)
	// ReadAttrs reads the same attributes in many directories (every
	// port's addr_*, every np's iser), one Attrs per directory.
	ReadAttrs(dirs, names []string) []Attrs
	// Lstat describes path without following a final symlink.
	Lstat(path string) (fs.FileInfo, error)
	// Readlink returns a symlink's target as stored.
	Readlink(path string) (string, error)
	// Symlink creates link pointing at target (ln -s target link).
	Symlink(target, link string) error
	// Remove removes a symlink (unlink): a port's subsystem link.
	Remove(path string) error
	// RemoveLinks removes the symlinks names of dir, in order, each as
	// Remove would, through one open of dir; done is told each removal's
	// result and stops the rest by returning false. The error is dir's
	// own (not opened: nothing removed, done never called).
	RemoveLinks(dir string, names []string, done func(i int, err error) bool) error
	// SymlinkAll creates the symlinks names[i] → targets[i] in dir, in
	// order, each as Symlink would, through one open of dir; done is told
	// each result and stops the rest by returning false. The error is
	// dir's own (not opened: nothing created, done never called).
	SymlinkAll(dir string, targets, names []string, done func(i int, err error) bool) error
	// WriteAttr writes an attribute in place, once (echo value > path).
	WriteAttr(path, value string) error
	// Mkdir creates a configfs object (mkdir path): the kernel makes its
	// attributes and default children. Boot completion's one creation.
	Mkdir(path string) error
	// SwapAttrs reads each attribute of paths, in order, and, when it
	// reads from, writes to, on one open file: the precondition of a write
	// checked with the write. done is told what each read (trimmed; written
	// only when that is from) or its error, and stops the rest by
	// returning false. from and to are of one length (a regular file is
	// written in place). The error is the run's own (a path outside the
	// root, the root not opened: nothing written, done never called).
	SwapAttrs(paths []string, from, to string, done func(i int, got string, err error) bool) error
}

// Attrs is what ReadAttrs found in one directory.
type Attrs struct {
	// Err is about the directory itself: fs.ErrNotExist when it is missing
	// or is not a directory (a symlink is not followed). Values and Errs
	// are then empty.
	Err error
	// Values are the attributes in the order asked for, read whole,
	// bounded (an attribute larger than a page is an error) and trimmed.
	Values []string
	// Errs are the per-attribute errors (fs.ErrNotExist: no such attribute).
	Errs []error
}

// OSOps is the real kernel: plain system calls on configfs. Attributes are
// read with open/read/close only, several directories at a time: both pay
// on large trees (BENCHMARKS.md).
//
// Writes stay beneath Root and never follow a symlink (write_linux.go):
// configfs has none on the way to a link or an attribute, so one there was
// made by someone else and could lead the write out of the tree. New sets
// Root; an OSOps without one reads, but refuses every write.
type OSOps struct {
	// Root is the configfs root (normally /sys/kernel/config) that every
	// write is resolved beneath.
	Root string

	walk bool // resolve as on kernels without openat2 (tests)
}

// ReadDirNames returns entries in creation order. configfs keeps a
// directory's entries in a list and readdir walks it: up to Linux 6.12 (and
// on every kernel before the change, whatever its number) a new directory
// or link went at the head of its parent's list (configfs_new_dirent:
// list_add), so readdir returns the newest first and reversing gives
// creation order; Debian's 6.18 and 7.3 add them at the tail (creation
// order already). Which one this kernel does is read from the kernel
// itself (newestFirst), not guessed from its version.
func (o OSOps) ReadDirNames(dir string) ([]string, error) {
	names, err := readDirNames(dir)
	if err != nil {
		return nil, err
	}
	if newestFirst(o.Root) {
		slices.Reverse(names)
	}
	return names, nil
}

func readDirNames(dir string) ([]string, error) {
	return bounded.ReadDirNames(dir, false) // a FIFO there fails at once; a symlink is not configfs's
}

// listing remembers, per configfs root, whether readdir lists the newest
// entry first (true) or in creation order (false), once it is known.
var listing sync.Map // root → bool

// newestFirst tells whether readdir under root lists directories and links
// newest first. The kernel's own creations tell: nvmet makes its three
// default groups in the order subsystems, ports, hosts when it loads
// (nvmet_init_configfs), so the order readdir gives <root>/nvmet/ shows
// the kernel's list discipline. Known once nvmet is loaded; until then
// (and for a root without nvmet, as LIO-only hosts and some test trees
// have) newest first is assumed, what every kernel did before 6.18 — LIO's
// objects are not linked in an order that matters.
func newestFirst(root string) bool {
	if root == "" {
		return true
	}
	if v, ok := listing.Load(root); ok {
		return v.(bool)
	}
	names, err := readDirNames(filepath.Join(root, "nvmet"))
	if err != nil {
		return true
	}
	v, known := newestFirstFrom(names)
	if known {
		listing.Store(root, v)
	}
	return v
}

// newestFirstFrom reads the list discipline from readdir's order of
// nvmet/: hosts before subsystems is newest first (known false without
// both).
func newestFirstFrom(names []string) (v, known bool) {
	subsys, hosts := slices.Index(names, "subsystems"), slices.Index(names, "hosts")
	if subsys < 0 || hosts < 0 {
		return true, false
	}
	return hosts < subsys, true
}

// readers bounds the directories ReadAttrs reads at a time: attribute reads
// are system-call bound and independent (BENCHMARKS.md).
const readers = 4

// ReadAttrs implements Ops, reading up to readers directories at a time.
func (OSOps) ReadAttrs(dirs, names []string) []Attrs {
	out := make([]Attrs, len(dirs))
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(dirs); i = int(next.Add(1) - 1) {
			out[i] = readAttrs(dirs[i], names)
		}
	}
	var wg sync.WaitGroup
	for range min(readers, len(dirs)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return out
}

func readAttrs(dir string, names []string) Attrs {
	var st syscall.Stat_t // on the stack: os.Lstat's FileInfo is an allocation per directory
	var err error
	for {
		if err = syscall.Lstat(dir, &st); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return Attrs{Err: &fs.PathError{Op: "lstat", Path: dir, Err: err}}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return Attrs{Err: fmt.Errorf("%s: not a directory: %w", dir, fs.ErrNotExist)}
	}
	a := Attrs{Values: make([]string, len(names)), Errs: make([]error, len(names))}
	for i, n := range names {
		a.Values[i], a.Errs[i] = readAttr(dir + "/" + n) // n is one of FS's attribute names
	}
	return a
}

// Lstat implements Ops.
func (OSOps) Lstat(path string) (fs.FileInfo, error) { return os.Lstat(path) }

// Readlink implements Ops.
func (OSOps) Readlink(path string) (string, error) { return os.Readlink(path) }

// Symlink implements Ops: link's directory is reached beneath Root without
// following a symlink.
func (o OSOps) Symlink(target, link string) error { return o.symlink(target, link) }

// Remove implements Ops: path's directory is reached beneath Root without
// following a symlink, and path must itself be a symlink.
func (o OSOps) Remove(path string) error { return o.remove(path) }

// RemoveLinks implements Ops: dir is reached beneath Root without following
// a symlink, once; each name must be a symlink in it.
func (o OSOps) RemoveLinks(dir string, names []string, done func(int, error) bool) error {
	return o.removeLinks(dir, names, done)
}

// SymlinkAll implements Ops: dir is reached beneath Root without following
// a symlink, once.
func (o OSOps) SymlinkAll(dir string, targets, names []string, done func(int, error) bool) error {
	return o.symlinks(dir, targets, names, done)
}

// Mkdir implements Ops: it creates the object path (mkdir), beneath Root,
// never through a symlink.
func (o OSOps) Mkdir(path string) error { return o.mkdir(path) }

// WriteAttr implements Ops: the attribute is reached beneath Root without
// following a symlink and must be a regular file. configfs attributes take
// one write(2); a partial write or a short count is an error.
func (o OSOps) WriteAttr(path, value string) error { return o.writeAttr(path, value) }

// SwapAttrs implements Ops: each attribute is reached and checked as by
// WriteAttr, from one open of Root for the run, opened once for reading
// and writing (configfs takes a write after a read on the same file), and
// written only when it reads from.
func (o OSOps) SwapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	return o.swapAttrs(paths, from, to, done)
}

// trimAttr is an attribute's value as read: bounded, trimmed.
func trimAttr(path string, b []byte) (string, error) {
	if len(b) > maxAttr {
		return "", fmt.Errorf("%s: attribute larger than %d bytes", path, maxAttr)
	}
	return strings.TrimSpace(string(b)), nil
}

// readAttr reads one attribute, bounded and trimmed. A missing attribute
// is fs.ErrNotExist.
func readAttr(path string) (string, error) {
	var buf [256]byte // most attributes fit: no allocation but the value's string
	b, err := readSmall(path, maxAttr, buf[:0])
	if err != nil {
		return "", err
	}
	return trimAttr(path, b)
}
