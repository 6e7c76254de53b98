// Package owndir owns one fact: which directories nvmet-rebind may keep its
// files in (the state directory, its journal, the run directory of the
// control socket). Like sshd's StrictModes, it never changes a directory it
// did not create:
//
//   - a directory that does not exist is created with mode 0700 (less the
//     umask), parents as needed; only the directories it creates get a mode;
//   - an existing directory keeps its mode and owner; it is refused when
//     group or others can write it, or, when the process runs as root, when
//     it is not owned by root;
//   - a symlink as the directory itself is followed only when the link is
//     root's (when running as root) and its target passes the same checks:
//     a root-owned /var/lib/x -> /srv/x is an admin's choice, a link someone
//     else could replace is not. Parents are followed as the kernel follows
//     them (/var/run -> /run is normal) and are not checked.
package owndir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Ensure makes dir usable as a directory of the daemon's own: it creates
// it (mode 0700) when missing, and checks it as the package says. The
// error names the directory, what is wrong and what to fix.
func Ensure(dir string) error {
	dir = filepath.Clean(dir)
	if err := create(dir); err != nil {
		return err
	}
	return Check(dir)
}

// create makes dir and its missing parents, each with mode 0700. Nothing
// that exists is touched, whatever it is (Check judges it).
func create(dir string) error {
	if _, err := os.Lstat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
			if err := create(parent); err != nil {
				return err
			}
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// Check checks an existing dir without changing anything.
func Check(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		return check(dir, st)
	}
	target, err := os.Readlink(dir)
	if err != nil {
		return err
	}
	if uid, ok := owner(st); ok && root() && uid != 0 {
		return fmt.Errorf("%s: a symlink (to %s) owned by uid %d, not root, so not followed: use the directory itself, or a link root owns (chown -h root %s)", dir, target, uid, dir)
	}
	tst, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: a symlink to %s, which is not usable: %w", dir, target, err)
	}
	return check(fmt.Sprintf("%s (a symlink to %s)", dir, target), tst)
}

// check judges a directory as described by st; name is how errors name it.
func check(name string, st fs.FileInfo) error {
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory (%v): remove it, or choose another directory", name, st.Mode().Type())
	}
	mode := unixMode(st.Mode())
	who := "its owner"
	if root() {
		who = "root"
	}
	switch {
	case mode&0o002 != 0:
		return fmt.Errorf("%s: world-writable (mode %04o): use a directory only %s can write, or chmod go-w it", name, mode, who)
	case mode&0o020 != 0:
		return fmt.Errorf("%s: group-writable (mode %04o): use a directory only %s can write, or chmod go-w it", name, mode, who)
	}
	if uid, ok := owner(st); ok && root() && uid != 0 {
		return fmt.Errorf("%s: owned by uid %d, not root: use a directory root owns, or chown root it", name, uid)
	}
	return nil
}

// root reports whether the process runs as root: only then is a directory
// not owned by root refused (tests run as anyone).
func root() bool { return os.Geteuid() == 0 }

// owner is the uid owning the file st describes.
func owner(st fs.FileInfo) (uint32, bool) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid, true
	}
	return 0, false
}

// unixMode is m as chmod(1) spells it: permissions with the setuid, setgid
// and sticky bits.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}
