package configfs

// The objects of the tree as the engine sees them.

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Link is one port→subsystem symlink, nvmet/ports/<id>/subsystems/<Name>.
type Link struct {
	Name string `json:"name"` // the link's own name (normally the NQN)
	NQN  string `json:"nqn"`  // the subsystem it points at (nvmet/subsystems/<NQN>)
}

// Transport is a port's addr_trtype as the kernel spells it
// (nvmet_transport_names, drivers/nvme/target/configfs.c).
type Transport string

// The transports the engine tells apart.
const (
	TransportRDMA Transport = "rdma"
	TransportTCP  Transport = "tcp"
)

// AddrFamily is a port's addr_adrfam (nvmet_addr_family).
type AddrFamily string

// The address families.
const (
	FamilyIPv4 AddrFamily = "ipv4"
	FamilyIPv6 AddrFamily = "ipv6"
)

// IP reports an IP family (ipv4, ipv6): an address rdma_cm or TCP binds.
func (f AddrFamily) IP() bool { return f == FamilyIPv4 || f == FamilyIPv6 }

// Port is one NVMe-oF target port, nvmet/ports/<ID>.
type Port struct {
	ID      string     // nvmet/ports/<ID>
	Trtype  Transport  // addr_trtype: rdma, tcp, fc, loop, pci
	Adrfam  AddrFamily // addr_adrfam: ipv4, ipv6, ib, fc, loop
	Traddr  string     // addr_traddr: bare address, no brackets for IPv6
	Trsvcid string     // addr_trsvcid: the service (TCP/RDMA port) as text
	Links   []Link     // subsystems/*: in creation order
	// Err is set when the port could not be read completely (garbage in an
	// attribute, a link pointing outside the tree); such a port is shown,
	// never touched.
	Err error
}

// Addr returns the port's address and service, or an error naming the port
// when they do not parse (an unset traddr, a name, garbage).
func (p Port) Addr() (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(p.Traddr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("nvmet port %s: addr_traddr %q is not an IP address", p.ID, p.Traddr)
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("nvmet port %s: addr_traddr %q: zoned addresses are not supported", p.ID, p.Traddr)
	}
	svc, err := strconv.ParseUint(p.Trsvcid, 10, 16)
	if err != nil || svc == 0 {
		return netip.AddrPort{}, fmt.Errorf("nvmet port %s: addr_trsvcid %q is not a port number", p.ID, p.Trsvcid)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(svc)), nil
}

// Portal is one LIO iSCSI network portal,
// target/iscsi/<IQN>/<TPG>/np/<NP>.
type Portal struct {
	IQN  string         // target/iscsi/<IQN>
	TPG  string         // tpgt_<N>
	NP   string         // np/<ip>:<port> or np/[<v6>]:<port>
	Addr netip.AddrPort // parsed from NP
	ISER bool           // np/<NP>/iser reads 1
	Err  error          // set when the portal could not be read completely
}

// ID names the portal the way status and journals do: <iqn>/<tpgt_N>/<np>.
func (p Portal) ID() string { return p.IQN + "/" + p.TPG + "/" + p.NP }
