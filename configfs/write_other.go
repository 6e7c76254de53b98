//go:build !linux

package configfs

// The write path of OSOps elsewhere than Linux (tests only: configfs is
// Linux's): each component beneath Root is Lstat-ed and a symlink refused,
// then the plain system call is made. Unlike write_linux.go it is not
// race-free.

import (
	"fmt"
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

func (o OSOps) writeAttr(path, value string) error {
	st, root, err := o.check(path)
	if err != nil {
		return err
	}
	switch {
	case st == nil:
		return &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	case st.Mode()&fs.ModeSymlink != 0:
		return &symlinkError{path: path, has: "an attribute", root: root}
	case !st.Mode().IsRegular():
		return notAttrError(path, "a "+st.Mode().Type().String())
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(value + "\n")); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
