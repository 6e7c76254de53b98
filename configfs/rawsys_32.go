//go:build linux && !(amd64 || arm64 || riscv64 || ppc64le || ppc64 || s390x || loong64 || mips64 || mips64le)

package configfs

// On 32-bit kernels these go through x/sys/unix (fstat64, fstatat64, the
// split pwrite64 offset), scheduler-aware: only 64-bit targets are packaged.

import "golang.org/x/sys/unix"

func rawFstat(fd int, st *unix.Stat_t) error { return unix.Fstat(fd, st) }

func rawFstatat(dirfd int, path string, st *unix.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, path, st, flags)
}

func rawPwrite(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }
