package rdma

import (
	"cmp"
	"net/netip"
	"slices"
)

// Carriers indexes where addresses bind: which RDMA device and port
// rdma_cm would pick for a specific-address bind (rdma_bind_addr →
// cma_acquire_dev_by_src_ip, drivers/infiniband/core/cma.c).
type Carriers struct {
	at   []carrier // (device, port) in rdma_cm's order; the maps point here
	roce map[roceKey]int
	ib   map[[16]byte]int
	iwNd map[string]int   // the netdev of GID entry 0 of an iWARP port
	iwHW map[[16]byte]int // every GID of an iWARP port
	ndIf map[int]int      // fallback: the netdev ifindex of a port whose table is unknown
	ndNm map[string]int   // fallback: its netdev name
}

type carrier struct {
	dev  Device
	port uint32
}

// roceKey is what a RoCE GID entry matches: the IP it encodes (unmapped,
// no zone) on the netdev it was added for.
type roceKey struct {
	ip     netip.Addr
	netdev string
}

// IndexCarriers indexes the GID tables (and, for ports whose table is
// unknown, the netdevs) of devs.
func IndexCarriers(devs []Device) Carriers {
	c := Carriers{
		roce: map[roceKey]int{}, ib: map[[16]byte]int{},
		iwNd: map[string]int{}, iwHW: map[[16]byte]int{},
		ndIf: map[int]int{}, ndNm: map[string]int{},
	}
	// cma_acquire_dev_by_src_ip walks dev_list (registration order: the
	// device index order) and each device's ports in order, and takes the
	// first port cma_validate_port accepts. Only the first position of a
	// key is kept.
	devs = slices.Clone(devs)
	slices.SortStableFunc(devs, func(a, b Device) int { return cmp.Compare(a.Index, b.Index) })
	for _, d := range devs {
		ports := slices.Clone(d.Ports)
		slices.SortStableFunc(ports, func(a, b Port) int { return cmp.Compare(a.Index, b.Index) })
		for _, p := range ports {
			pos := len(c.at)
			c.at = append(c.at, carrier{dev: d, port: p.Index})
			if !p.GIDsKnown {
				if p.NetdevIndex != 0 {
					first(c.ndIf, int(p.NetdevIndex), pos)
				}
				if p.Netdev != "" {
					first(c.ndNm, p.Netdev, pos)
				}
				continue
			}
			for _, g := range p.GIDs {
				switch {
				case d.Protocol == "iw":
					first(c.iwHW, g.Raw, pos)
					if g.Index == 0 && g.Netdev != "" {
						first(c.iwNd, g.Netdev, pos)
					}
				case g.Netdev != "":
					// RoCE: roce_gid_mgmt.c adds one entry per IP
					// of the port's netdev and of its uppers
					// (VLAN, macvlan, bond) for each GID type,
					// with the netdev holding the IP
					// (update_gid_ip).
					first(c.roce, roceKey{g.IP(), g.Netdev}, pos)
				default:
					// InfiniBand: the port GIDs, no netdev.
					first(c.ib, g.Raw, pos)
				}
			}
		}
	}
	return c
}

func first[K comparable](m map[K]int, k K, pos int) {
	if _, ok := m[k]; !ok {
		m[k] = pos
	}
}

// Of returns the RDMA device and port number that rdma_cm would bind an
// address to now, and how it was found. how is "gid" when decided from GID
// tables, "netdev" when a port's GID table is unknown and the port's own
// netdev holds the address (fallback, old behaviour), "" with ok=false when
// nothing carries it. Of several candidates the first device in index
// order wins, then the lowest port.
//
// The rules of cma_validate_port (read in Debian's 6.1.192 and 6.12.117
// sources, and checked against those kernels: testdata/README.md):
//   - an address on an IPoIB netdev (20-byte hardware address, dev_type
//     ARPHRD_INFINIBAND) binds only to an InfiniBand port, any other only
//     to a RoCE or iWARP port;
//   - RoCE: rdma_find_gid_by_port with the GID rdma_ip2gid makes of the
//     address (IPv4-mapped for IPv4) and the address's netdev: an entry of
//     that IP on that netdev (of the port's default GID type, RoCE v2 when
//     supported; the table holds every supported type of each IP, so any
//     type is taken here);
//   - InfiniBand: the GID in the IPoIB hardware address (bytes 4..19:
//     rdma_addr_gid_offset), on any entry of the port; IPoIB children
//     (ib0.8001) carry the same GID;
//   - iWARP on 6.1: rdma_find_gid_by_port with the netdev's hardware
//     address as the GID (MAC and ten zero bytes, which is what siw_query_gid
//     reports for the netdev the device was created on, and what a VLAN on
//     it keeps; the entry has no netdev); on 6.12 (the iWARP branch of
//     cma_validate_port): entry 0, whose netdev must be the address's
//     netdev or the real device of a VLAN holding it (the MAC match stands
//     in for the VLAN test here, Addr knows no VLAN). Either is accepted.
func (c Carriers) Of(a Addr) (dev Device, port uint32, how string, ok bool) {
	best, how := -1, ""
	take := func(pos int, found bool, h string) {
		if found && (best < 0 || pos < best) {
			best, how = pos, h
		}
	}
	var pos int
	var found bool
	if len(a.HWAddr) == 20 {
		pos, found = c.ib[[16]byte(a.HWAddr[4:20])]
		take(pos, found, "gid")
	} else {
		if a.IP.IsValid() && a.Netdev != "" {
			pos, found = c.roce[roceKey{a.IP.WithZone("").Unmap(), a.Netdev}]
			take(pos, found, "gid")
		}
		if a.Netdev != "" {
			pos, found = c.iwNd[a.Netdev]
			take(pos, found, "gid")
		}
		if len(a.HWAddr) == 6 {
			var raw [16]byte
			copy(raw[:], a.HWAddr)
			pos, found = c.iwHW[raw]
			take(pos, found, "gid")
		}
	}
	if a.Ifindex > 0 {
		pos, found = c.ndIf[a.Ifindex]
		take(pos, found, "netdev")
	}
	if a.Netdev != "" {
		pos, found = c.ndNm[a.Netdev]
		take(pos, found, "netdev")
	}
	if best < 0 {
		return Device{}, 0, "", false
	}
	return c.at[best].dev, c.at[best].port, how, true
}
