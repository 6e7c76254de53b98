package configfs

// The configfs paths of the objects a heal writes, as an admin would type
// them under root (`nvmet-rebind plan` prints them; the writes themselves go
// through FS and its Ops).

// LinkPath is nvmet/ports/<port>/subsystems/<name>: a port's link.
func LinkPath(root, portID, name string) string {
	return NewWithOps(root, nil).nvmet("ports", portID, "subsystems", name)
}

// SubsystemPath is nvmet/subsystems/<nqn>: what a port's link points to.
func SubsystemPath(root, nqn string) string {
	return NewWithOps(root, nil).nvmet("subsystems", nqn)
}

// ISERPath is target/iscsi/<iqn>/<tpgt_N>/np/<np>/iser of a portal id;
// "" when the id does not parse.
func ISERPath(root, portalID string) string {
	iqn, tpg, np, err := ParsePortalID(portalID)
	if err != nil {
		return ""
	}
	return NewWithOps(root, nil).iserPath(iqn, tpg, np)
}

// Magic is CONFIGFS_MAGIC (include/uapi/linux/magic.h), configfs's
// f_type in statfs.
const Magic = 0x62656570
