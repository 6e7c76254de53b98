package rebind

import (
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"golang.org/x/sys/unix"
)

// isConfigfsMount reports whether root is a configfs mount.
func isConfigfsMount(root string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return false
	}
	return uint64(st.Type) == configfs.Magic
}
