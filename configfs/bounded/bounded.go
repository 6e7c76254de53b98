// Package bounded reads files that cannot block the daemon, exhaust its
// memory or lead it through a symlink it does not expect: the config, the
// journal, the pins, the saved configs of nvmetcli and targetcli.
//
// A file is opened non-blocking (a FIFO opens at once, a device does not
// wait for a carrier), checked with fstat(2) to be a regular file before a
// byte is read, and read at most limit+1 bytes: the bound is on the read,
// never on the size stat reports (sysfs and configfs report 4096 whatever
// they hold, /dev/zero reports 0).
package bounded

import (
	"errors"
	"fmt"
	"io/fs"
)

// The reasons a file is refused; an *Error unwraps to one of them.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrSymlink    = errors.New("a symbolic link")
	ErrTooLarge   = errors.New("too large")
)

// Error is a file refused for what it is rather than for a failed system
// call: "<path>: not a regular file (a FIFO): replace it with a regular
// file". Callers that name the file themselves (a journal entry) may clear
// Path, and Fix when they do something about it.
type Error struct {
	Path    string
	Problem string // "not a regular file (a FIFO)", "larger than 1 MiB"
	Fix     string // "replace it with a regular file"
	Err     error  // ErrNotRegular, ErrSymlink or ErrTooLarge
}

func (e *Error) Error() string {
	s := e.Problem
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Fix != "" {
		s += ": " + e.Fix
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// CheckMode refuses a mode (from os.Stat or os.Lstat of path) that is not
// a regular file's, with the error ReadFile would return.
func CheckMode(path string, mode fs.FileMode) error {
	if mode.IsRegular() {
		return nil
	}
	if mode&fs.ModeSymlink != 0 {
		return symlinkError(path)
	}
	return notRegular(path, kindOfMode(mode))
}

// TooLarge is ReadFile's error for a file above limit bytes.
func TooLarge(path string, limit int64) error {
	return &Error{Path: path, Problem: "larger than " + Size(limit), Fix: "this is not a file the daemon expects: check what it is, shorten or remove it", Err: ErrTooLarge}
}

func notRegular(path, kind string) error {
	return &Error{Path: path, Problem: "not a regular file (" + kind + ")", Fix: "replace it with a regular file", Err: ErrNotRegular}
}

func symlinkError(path string) error {
	return &Error{Path: path, Problem: "a symbolic link, which is not followed here", Fix: "replace it with the regular file it points to", Err: ErrSymlink}
}

func kindOfMode(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "file type " + mode.Type().String()
}

// Size renders a limit: "1 MiB", "4 KiB", "100 bytes".
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
