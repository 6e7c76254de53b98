package configfs

import (
	"io/fs"
	"syscall"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

// readSmall reads at most max+1 bytes, appended to buf, with open/read/close and nothing
// else: os.Open would also try to register the fd with the poller, one
// more system call per attribute, and observe reads thousands of them.
//
// The open is non-blocking and never follows a symlink, and the read is
// bounded whatever the file's stat size says (configfs reports 4096 for
// every attribute): a FIFO (whose read would wait for a writer) or a
// device (/dev/zero never ends) cannot hold it. configfs and sysfs
// attributes are regular files; anything else was put in the tree by
// someone else (configfs itself has no mknod) and is an error. Checking
// that costs an fstat, 10-15% of an attribute read (0.6-0.9 µs of 5.5 µs
// of CPU on a VM), so it is made only when what was read is not a plain attribute value: nothing
// (a FIFO without a writer, /dev/null), an error (EAGAIN: a FIFO with a
// silent writer; EISDIR) or more than max bytes. A FIFO or a device that
// does yield a short value reads as that value: in a tree where one can be
// made, so can a regular file holding the same.
func readSmall(path string, max int, buf []byte) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		var st syscall.Stat_t
		if err == syscall.ENXIO && syscall.Lstat(path, &st) == nil { // a socket, a device without a driver
			return nil, notAttr(path, st.Mode)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	for len(buf) <= max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			if err := checkRegular(fd, path); err != nil {
				return nil, err
			}
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		short := n < cap(buf)-len(buf)
		buf = buf[:len(buf)+n]
		if short {
			// configfs and sysfs attributes are produced whole: a short
			// read is the end (saves the read that would return 0).
			break
		}
	}
	if len(buf) == 0 || len(buf) > max {
		if err := checkRegular(fd, path); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// checkRegular refuses an open attribute that is not a regular file.
func checkRegular(fd int, path string) error {
	var st syscall.Stat_t
	var err error
	for {
		err = syscall.Fstat(fd, &st)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return notAttr(path, st.Mode)
	}
	return nil
}

// notAttr is the error for an attribute that is not a regular file.
func notAttr(path string, mode uint32) error {
	return &bounded.Error{Path: path, Problem: "not a regular file (" + bounded.Kind(mode) + ")",
		Fix: "configfs attributes are regular files: remove it, or check that the configfs root is configfs", Err: bounded.ErrNotRegular}
}
