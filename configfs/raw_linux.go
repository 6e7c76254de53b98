package configfs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls of an attribute's open, check, read and close, made
// without the Go scheduler's system-call accounting (RawSyscall). None of
// them waits on another thread: configfs keeps every dentry in memory (the
// walk takes no sleeping lock), the open and the close take only the open
// file's own locks, and a read of iser only a spinlock. Through
// syscall.Syscall each of them, taking longer than the scheduler's monitor
// tick under emulation, had its P taken and given back, and the monitor
// ran at its shortest period for the whole run: 256 swaps of four calls
// took 110-127 ms that way and 32-37 ms raw, in the guest right after
// `rdma link add` (BENCHMARKS.md). The write itself, which waits for the
// kernel's np thread (iser=0) or for modprobe (iser=1), and every unlink
// and link, which take nvmet's configuration lock, stay ordinary calls,
// so that no P is held while the kernel waits.

// rawOpenat2 is openat2(2).
func rawOpenat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	for {
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
			uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, e
	}
}

// rawOpenDir opens path with O_PATH|O_DIRECTORY.
func rawOpenDir(path string) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	cwd := unix.AT_FDCWD
	for {
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(p)),
			uintptr(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), 0, 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, e
	}
}

// rawFstat is fstat(2).
func rawFstat(fd int, st *unix.Stat_t) error {
	if _, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0); e != 0 {
		return e
	}
	return nil
}

// rawRead is read(2).
func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// rawClose is close(2).
func rawClose(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}
