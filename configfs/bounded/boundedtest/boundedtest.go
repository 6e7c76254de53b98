//go:build unix

// Package boundedtest makes the files that must not block a reader, for
// the tests of every package that reads files (configfs/bounded's users).
package boundedtest

import (
	"syscall"
	"testing"
)

// FIFO makes a FIFO at path with no writer: an open without O_NONBLOCK
// blocks, a read of it returns nothing.
func FIFO(t testing.TB, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FIFOWithWriter makes a FIFO at path held open for writing (and reading)
// until the test ends: a blocking read of it waits forever, a
// non-blocking one returns EAGAIN.
func FIFOWithWriter(t testing.TB, path string) {
	t.Helper()
	FIFO(t, path)
	r, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(r)
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(r); syscall.Close(w) })
}
