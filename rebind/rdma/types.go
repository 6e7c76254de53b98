// Package rdma reads the parts of the running kernel's RDMA state that
// nvmet-rebind needs: RDMA devices and their ports (RDMA netlink), each
// port's GID table (sysfs /sys/class/infiniband/<dev>/ports/<n>/gids and
// gid_attrs) and from it which RDMA port carries an IP address (Carriers),
// the live rdma_cm identifiers (RDMA netlink RDMA_NLDEV_CMD_RES_CM_ID_GET,
// what `rdma resource show cm_id` prints) and the IP addresses of netdevs
// (rtnetlink, through vishvananda/netlink). Live puts them together, and
// Index answers what a plan asks of one reading of them (which port
// carries an address, which listeners an endpoint has).
//
// The NETLINK_RDMA requests and their parsing are written by hand: no Go
// library speaks RDMA netlink's nldev family (the cm_id resource dump in
// particular). The netlink framing, the request socket and the monitor are
// udev/rdmanl's; the nldev dumps and their wire rules (KERNEL.md) are in
// nldev.go. Parsing is done by pure functions over recorded bytes; the
// sockets live in _linux.go files. The package never logs and never
// decides anything.
package rdma

import (
	"bytes"
	"net/netip"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// ErrUnsupported is returned when the running kernel (or the platform) has no
// RDMA netlink: whether a listener is alive is then unknown. It is
// rdmanl.ErrUnsupported, which OpenRDMA's error wraps.
var ErrUnsupported = rdmanl.ErrUnsupported

// CM identifier states (enum rdma_cm_state, drivers/infiniband/core/cma_priv.h;
// not part of the uapi).
const (
	CMStateConnect uint8 = 5
	CMStateListen  uint8 = 8
)

// Port states (enum ib_port_state).
const PortActive uint8 = 4

// Device is one RDMA device (RDMA_NLDEV_CMD_GET, /sys/class/infiniband/<dev>).
type Device struct {
	Index    uint32 // RDMA_NLDEV_ATTR_DEV_INDEX; 0 is valid, never reused
	Name     string // RDMA_NLDEV_ATTR_DEV_NAME; changes on rename, not an identity
	NodeGUID uint64 // RDMA_NLDEV_ATTR_NODE_GUID, /sys/class/infiniband/<dev>/node_guid
	NodeType uint8  // RDMA_NLDEV_ATTR_DEV_NODE_TYPE: 1 CA, 4 RNIC
	Protocol string // RDMA_NLDEV_ATTR_DEV_PROTOCOL: "roce", "iw", "ib"
	Ports    []Port // RDMA_NLDEV_CMD_PORT_GET, /sys/class/infiniband/<dev>/ports/<n>
}

// Port is one port of an RDMA device and the netdev under it.
type Port struct {
	Index       uint32 // RDMA_NLDEV_ATTR_PORT_INDEX
	State       uint8  // RDMA_NLDEV_ATTR_PORT_STATE: 4 ACTIVE
	PhysState   uint8  // RDMA_NLDEV_ATTR_PORT_PHYS_STATE: 5 LINK_UP
	NetdevIndex uint32 // RDMA_NLDEV_ATTR_NDEV_INDEX; 0 when there is none
	Netdev      string // RDMA_NLDEV_ATTR_NDEV_NAME; "" when there is none
	GIDs        []GID  // the port's GID table (sysfs ports/<n>/gids, gid_attrs); entries that are all zero are left out; Live reads a RoCE port's only as far as the entries its addresses need (ReadSysfsGIDsNeeded)
	GIDsKnown   bool   // false: the table could not be read (GIDs nil); never guess from it then
}

// GID is one valid entry of a port's GID table
// (/sys/class/infiniband/<dev>/ports/<n>/gids/<i> and gid_attrs/*/<i>).
type GID struct {
	Index  uint32   // <i> of /sys/class/infiniband/<dev>/ports/<n>/gids/<i>
	Raw    [16]byte // gids/<i>, "fe80:0000:...:" parsed
	Netdev string   // gid_attrs/ndevs/<i>; "" when the entry has none (IB; iWARP before 6.12; the read fails with EINVAL)
	Type   string   // gid_attrs/types/<i>: "IB/RoCE v1", "RoCE v2"; "" when absent/unreadable
}

// IP returns the IP address a RoCE GID encodes: an IPv4-mapped GID as
// plain IPv4 (netip Unmap), else the IPv6 address.
func (g GID) IP() netip.Addr { return netip.AddrFrom16(g.Raw).Unmap() }

// CMID is one rdma_cm identifier of the RES_CM_ID table.
type CMID struct {
	DevIndex uint32         // RDMA_NLDEV_ATTR_DEV_INDEX of the table
	DevName  string         // RDMA_NLDEV_ATTR_DEV_NAME of the table
	Port     uint32         // RDMA_NLDEV_ATTR_PORT_INDEX; 0 = absent (wildcard child)
	State    uint8          // RDMA_NLDEV_ATTR_RES_STATE: 8 LISTEN, 5 CONNECT
	PS       uint32         // RDMA_NLDEV_ATTR_RES_PS: 0x106 TCP
	Src      netip.AddrPort // RDMA_NLDEV_ATTR_RES_SRC_ADDR
	Dst      netip.AddrPort // RDMA_NLDEV_ATTR_RES_DST_ADDR; invalid when absent
	CMIDN    uint32         // RDMA_NLDEV_ATTR_RES_CM_IDN
	KernName string         // RDMA_NLDEV_ATTR_RES_KERN_NAME: "nvmet_rdma", "ib_isert"
	PID      uint32         // RDMA_NLDEV_ATTR_RES_PID; 0 = absent
}

// Listening reports whether the identifier is in the LISTEN state.
func (c CMID) Listening() bool { return c.State == CMStateListen }

// Addr is one IP address on a netdev (rtnetlink RTM_GETADDR).
type Addr struct {
	Ifindex int        // ifa_index
	Netdev  string     // IFLA_IFNAME of that link
	IP      netip.Addr // IFA_LOCAL / IFA_ADDRESS, unmapped
	HWAddr  []byte     // the link's hardware address (rtnetlink IFLA_ADDRESS): 6 bytes Ethernet, 20 bytes IPoIB
}

// Equal tells whether two readings of a device are the same, GID tables
// included.
func (d Device) Equal(o Device) bool {
	return d.Index == o.Index && d.Name == o.Name && d.NodeGUID == o.NodeGUID && d.NodeType == o.NodeType &&
		d.Protocol == o.Protocol && slices.EqualFunc(d.Ports, o.Ports, Port.Equal)
}

// Equal tells whether two readings of a port are the same, its GID table
// included.
func (p Port) Equal(o Port) bool {
	return p.Index == o.Index && p.State == o.State && p.PhysState == o.PhysState && p.NetdevIndex == o.NetdevIndex &&
		p.Netdev == o.Netdev && p.GIDsKnown == o.GIDsKnown && slices.Equal(p.GIDs, o.GIDs)
}

// Equal tells whether two readings of an address are the same.
func (a Addr) Equal(o Addr) bool {
	return a.Ifindex == o.Ifindex && a.Netdev == o.Netdev && a.IP == o.IP && bytes.Equal(a.HWAddr, o.HWAddr)
}
