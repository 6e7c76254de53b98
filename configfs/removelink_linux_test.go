package configfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// On configfs the kernel refuses to unlink anything but a link, so the
// unlink comes first there: a directory (EISDIR, as on any filesystem) is
// named as such and kept, a link is removed. A regular file is refused by
// configfs alone (EPERM), which is why a tree elsewhere is looked at first:
// TestRemoveOnlyLinks keeps a file on tmpfs, where onConfigfs is false.
func TestRemoveLinkKernelFirst(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if onConfigfs(dfd) {
		t.Fatalf("%s: onConfigfs says configfs", dir)
	}
	err = removeLink(dfd, "d", filepath.Join(dir, "d"), true)
	if err == nil || !strings.Contains(err.Error(), "a directory, not a symlink; not removed") {
		t.Errorf("removing a directory: %v, want it named and refused", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d")); err != nil {
		t.Errorf("the directory is gone: %v", err)
	}
	if err := removeLink(dfd, "l", filepath.Join(dir, "l"), true); err != nil {
		t.Errorf("removing a link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "l")); !os.IsNotExist(err) {
		t.Errorf("the link is still there: %v", err)
	}
	if err := removeLink(dfd, "l", filepath.Join(dir, "l"), true); !os.IsNotExist(err) {
		t.Errorf("removing a missing link: %v, want ENOENT", err)
	}
}
