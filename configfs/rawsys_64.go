//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || ppc64 || s390x || loong64 || mips64 || mips64le)

package configfs

// rawsys_linux.go's calls whose layout is the 64-bit one: struct stat as
// unix.Stat_t, pwrite64's offset in one register.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func rawFstat(fd int, st *unix.Stat_t) error {
	_, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
	return rawErr(e)
}

func rawFstatat(dirfd int, path string, st *unix.Stat_t, flags int) error {
	p, err := rawPath(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	return rawErr(e)
}

func rawPwrite(fd int, b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(off), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
