//go:build !linux

package configfs

// The write path of OSOps elsewhere than Linux (tests only: configfs is
// Linux's): each component beneath Root is Lstat-ed and a symlink refused,
// then the plain system call is made. Unlike write_linux.go it is not
// race-free.

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// check refuses a symlink or a non-directory on the way to path's last
// component, and returns the last component's Lstat.
func (o OSOps) check(path string) (fs.FileInfo, string, error) {
	root, rel, err := o.beneath(path)
	if err != nil {
		return nil, "", err
	}
	cur := root
	parts := strings.Split(rel, "/")
	for _, c := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, c)
		st, err := os.Lstat(cur)
		if err != nil {
			return nil, root, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil, root, &symlinkError{path: cur, has: "a directory", root: root}
		}
		if !st.IsDir() {
			return nil, root, fmt.Errorf("configfs: %s: not a directory", cur)
		}
	}
	st, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, root, err
	}
	return st, root, nil
}

func (o OSOps) symlink(target, link string) error {
	if _, _, err := o.check(link); err != nil {
		return err
	}
	return os.Symlink(target, link)
}

func (o OSOps) mkdir(path string) error {
	if _, _, err := o.check(path); err != nil {
		return err
	}
	return os.Mkdir(path, 0o755)
}

func (o OSOps) remove(path string) error {
	st, _, err := o.check(path)
	if err != nil {
		return err
	}
	if st == nil {
		return &fs.PathError{Op: "remove", Path: path, Err: fs.ErrNotExist}
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		return notLinkError(path, "a "+st.Mode().Type().String())
	}
	return os.Remove(path)
}

func (o OSOps) removeLinks(dir string, names []string, done func(int, error) bool) error {
	if _, _, err := o.check(filepath.Join(dir, "x")); err != nil {
		return err
	}
	for i, name := range names {
		if !done(i, o.remove(filepath.Join(dir, name))) {
			break
		}
	}
	return nil
}

func (o OSOps) symlinks(dir string, targets, names []string, done func(int, error) bool) error {
	if _, _, err := o.check(filepath.Join(dir, "x")); err != nil {
		return err
	}
	for i, name := range names {
		if !done(i, o.symlink(targets[i], filepath.Join(dir, name))) {
			break
		}
	}
	return nil
}

func (o OSOps) writeAttr(path, value string) error {
	f, err := o.openAttr(path, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(value + "\n")); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (o OSOps) swapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	if len(from) != len(to) {
		return fmt.Errorf("configfs: swap of %q for %q: values of different lengths", from, to)
	}
	for _, p := range paths {
		if _, _, err := o.beneath(p); err != nil {
			return err
		}
	}
	for i, p := range paths {
		if got, err := o.swapAttr(p, from, to); !done(i, got, err) {
			break
		}
	}
	return nil
}

func (o OSOps) swapAttr(path, from, to string) (string, error) {
	if len(from) != len(to) {
		return "", fmt.Errorf("configfs: %s: swap of %q for %q: values of different lengths", path, from, to)
	}
	f, err := o.openAttr(path, os.O_RDWR)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttr+1))
	if err != nil {
		return "", err
	}
	got, err := trimAttr(path, b)
	if err != nil || got != from {
		return got, err
	}
	if _, err := f.WriteAt([]byte(to+"\n"), 0); err != nil {
		return got, err
	}
	return got, f.Close()
}

func (o OSOps) openAttr(path string, flags int) (*os.File, error) {
	st, root, err := o.check(path)
	if err != nil {
		return nil, err
	}
	switch {
	case st == nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	case st.Mode()&fs.ModeSymlink != 0:
		return nil, &symlinkError{path: path, has: "an attribute", root: root}
	case !st.Mode().IsRegular():
		return nil, notAttrError(path, "a "+st.Mode().Type().String())
	}
	return os.OpenFile(path, flags, 0)
}
