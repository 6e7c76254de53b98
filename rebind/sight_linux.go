package rebind

import "golang.org/x/sys/unix"

// configfsMagic is CONFIGFS_MAGIC (include/uapi/linux/magic.h).
const configfsMagic = 0x62656570

// isConfigfsMount reports whether root is a configfs mount.
func isConfigfsMount(root string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return false
	}
	return uint64(st.Type) == configfsMagic
}
