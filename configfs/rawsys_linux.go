package configfs

// The system calls of the write path (write_linux.go), made as raw system
// calls: the Go scheduler is not told (unix.RawSyscall, no entersyscall),
// so the P of the writing goroutine is never retaken by sysmon while the
// call runs, and the call returns to the same thread with its P.
//
// Why: a configfs write is short (a link, an unlink, iser=0: tens of
// microseconds to a millisecond), and a heal makes hundreds of them in a
// row. Through syscall.Syscall, each one that outlasts a sysmon tick while
// the daemon's other P is busy has its P handed to another thread, and
// returns to find it gone (exitsyscall's slow path: a thread woken, the
// goroutine queued, another woken to run it). Under qemu without KVM,
// where a wake-up across vCPUs costs hundreds of microseconds, the 256
// iser=0 of a shared iSER portal took 120–280 ms in the daemon's heal
// against 60–80 ms for a shell loop; raw, 69–98 ms (BENCHMARKS.md,
// 2026-12-04).
//
// The cost: while a raw call blocks, its P runs nothing else, and a
// stop-the-world waits for it. So the calls that wait on something else
// stay scheduler-aware: the write of iser=1 (the kernel spawns modprobe and
// waits for it, tens of milliseconds; the writers side by side need the
// scheduler), every other attribute write (WriteAttr: boot completion's,
// whose store callbacks may open block devices), and mkdir. The calls
// whose argument layout differs on 32-bit kernels (fstat, fstatat,
// pwrite64) are raw on 64-bit ones only (rawsys_64.go).

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func rawErr(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func rawPath(p string) (*byte, error) { return unix.BytePtrFromString(p) }

func rawOpenat(dirfd int, path string, flags int, mode uint32) (int, error) {
	p, err := rawPath(path)
	if err != nil {
		return -1, err
	}
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_LARGEFILE), uintptr(mode), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawOpenat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	p, err := rawPath(path)
	if err != nil {
		return -1, err
	}
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawClose(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return rawErr(e)
}

func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawUnlinkat(dirfd int, path string, flags int) error {
	p, err := rawPath(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags))
	return rawErr(e)
}

func rawSymlinkat(target string, dirfd int, path string) error {
	t, err := rawPath(target)
	if err != nil {
		return err
	}
	p, err := rawPath(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), uintptr(dirfd), uintptr(unsafe.Pointer(p)))
	return rawErr(e)
}
