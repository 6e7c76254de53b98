//go:build unix

package bounded

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ReadFile reads the regular file at path, at most limit bytes. With
// followSymlinks false a symlink at path (the last element) is refused,
// not followed. A missing file is an error wrapping fs.ErrNotExist, as
// os.ReadFile's is; anything but a regular file, or a file of more than
// limit bytes, is an *Error naming path, what is wrong and what to do.
func ReadFile(path string, limit int64, followSymlinks bool) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY|unix.O_NONBLOCK, followSymlinks)
	if err != nil {
		return nil, openError(path, err, followSymlinks)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	for {
		err = unix.Fstat(fd, &st)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if e := check(path, uint32(st.Mode)); e != nil {
		return nil, e
	}
	// The size is a hint for the first buffer, never a bound.
	size := max(int64(st.Size), 511) + 1
	buf := make([]byte, 0, min(size, limit+1))
	for int64(len(buf)) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		end := min(int64(cap(buf)), limit+1)
		n, err := unix.Read(fd, buf[len(buf):end])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	if int64(len(buf)) > limit {
		return nil, TooLarge(path, limit)
	}
	return buf, nil
}

// check is ReadFile's error for a file of the kind given by the S_IFMT
// bits of mode (fstat's st_mode), nil for a regular file.
func check(path string, mode uint32) error {
	if mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	if mode&unix.S_IFMT == unix.S_IFLNK {
		return symlinkError(path)
	}
	return notRegular(path, Kind(mode))
}

// openError explains a failed open: a symlink refused by O_NOFOLLOW
// (ELOOP) and a socket (ENXIO) are refused files, not failed calls.
func openError(path string, err error, followSymlinks bool) error {
	if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.EACCES || err == unix.EPERM {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	var serr error
	if followSymlinks {
		serr = unix.Stat(path, &st)
	} else {
		serr = unix.Lstat(path, &st)
	}
	if serr == nil {
		if e := check(path, uint32(st.Mode)); e != nil {
			return e
		}
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// Kind names the file type of a stat(2) st_mode: "a FIFO", "a directory".
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// OpenDir opens the directory at path for reading its entries: O_DIRECTORY,
// so a FIFO, device or file there fails at once (ENOTDIR) instead of
// blocking the open, and with O_NOFOLLOW unless followSymlinks.
func OpenDir(path string, followSymlinks bool) (*os.File, error) {
	flags := os.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !followSymlinks {
		flags |= unix.O_NOFOLLOW
	}
	return os.OpenFile(path, flags, 0)
}

// ReadDir is os.ReadDir through OpenDir.
func ReadDir(path string, followSymlinks bool) ([]os.DirEntry, error) {
	d, err := OpenDir(path, followSymlinks)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// direntBufs are getdents buffers, reused: a directory's names are copied
// out of one before it goes back.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

// ReadDirNames is the names in the directory at path, in readdir's order,
// "." and ".." left out: opened as OpenDir does, read with getdents(2)
// straight, without the runtime poller's registration, the non-blocking
// fcntl and the finalizer that an *os.File costs each directory (a rescan
// at 4,096 ports and portals reads about 20,000). Errors are *fs.PathError,
// as os's are.
func ReadDirNames(path string, followSymlinks bool) ([]string, error) {
	fd, err := open(path, unix.O_RDONLY|unix.O_DIRECTORY, followSymlinks)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	var names []string
	for {
		n, err := unix.Getdents(fd, *bp)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent((*bp)[:n], -1, names)
	}
}

// open is open(2) of path with flags, O_CLOEXEC, and O_NOFOLLOW unless
// followSymlinks, tried again on EINTR.
func open(path string, flags int, followSymlinks bool) (int, error) {
	flags |= unix.O_CLOEXEC
	if !followSymlinks {
		flags |= unix.O_NOFOLLOW
	}
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
