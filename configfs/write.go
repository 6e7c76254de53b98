package configfs

// What the write path of OSOps shares on every system: where a write may
// go (beneath Root) and the error for a symlink found on the way.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
)

// beneath splits path into the configfs root and the path relative to it;
// a path that is not strictly under the root is refused.
func (o OSOps) beneath(path string) (root, rel string, err error) {
	if o.Root == "" {
		return "", "", fmt.Errorf("configfs: %s: not written: OSOps has no Root (use configfs.New, or set OSOps.Root)", path)
	}
	root = filepath.Clean(o.Root)
	if r := len(root); len(path) > r+1 && path[r] == '/' && path[:r] == root && cleanRel(path[r+1:]) {
		return root, path[r+1:], nil // what Rel gives, without its work (a run of 256 writes makes 256)
	}
	rel, err = filepath.Rel(root, filepath.Clean(path))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", "", fmt.Errorf("configfs: %s: outside the configfs root %s; not written", path, root)
	}
	return root, rel, nil
}

// cleanRel tells whether rel is a clean relative path below its root:
// names between single slashes, none empty, "." or "..".
func cleanRel(rel string) bool {
	for rel != "" {
		name, rest, more := strings.Cut(rel, "/")
		if name == "" || name == "." || name == ".." || more && rest == "" {
			return false
		}
		rel = rest
	}
	return true
}

// symlinkError is a symlink found where configfs has a directory (on the
// way to a write) or an attribute (the file written). It is ELOOP, what
// the kernel answers for a symlink it will not follow.
type symlinkError struct {
	path string // the symlink
	has  string // what configfs has there: "a directory", "an attribute"
	root string
}

func (e *symlinkError) Error() string {
	return fmt.Sprintf("configfs: %s: a symlink where configfs has %s; not followed: the kernel never makes one there, so remove it and re-create the configfs object (or check that %s is the kernel's configfs)", e.path, e.has, e.root)
}

func (e *symlinkError) Unwrap() error { return syscall.ELOOP }

// notLinkError is a Remove of something that is not a symlink: OSOps
// removes a port's links only, never a group (rmdir) nor a file.
func notLinkError(path, what string) error {
	return fmt.Errorf("configfs: %s: %s, not a symlink; not removed: only a port's subsystem links are removed", path, what)
}

// notAttrError is a WriteAttr of something that is not a regular file.
func notAttrError(path, what string) error {
	return fmt.Errorf("configfs: %s: %s, not an attribute; not written", path, what)
}
