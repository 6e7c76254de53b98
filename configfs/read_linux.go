package configfs

import (
	"io/fs"
	"syscall"
)

// readSmall reads at most max+1 bytes with open/read/close and nothing
// else: os.Open would also try to register the fd with the poller, one
// more system call per attribute, and observe reads thousands of them.
func readSmall(path string, max int) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 256)
	for len(buf) <= max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
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
	return buf, nil
}
