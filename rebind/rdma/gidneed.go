package rdma

// Netdev is one link of rtnetlink's link dump, what RoCENeeds needs of it.
type Netdev struct {
	Index int
	Name  string
	// Kind is IFLA_INFO_KIND ("vlan", "macvlan", "bond", "veth", …); ""
	// for a link without one (a physical NIC, lo).
	Kind string
	// Parent is IFLA_LINK: the lower device of a VLAN, macvlan, ipvlan or
	// macsec, a veth's peer, a tunnel's underlying device; 0 when none.
	Parent int
	// ParentNS: IFLA_LINK_NETNSID was sent, Parent is an index in
	// another network namespace.
	ParentNS bool
	Master   int // IFLA_MASTER: the bond, team, bridge or VRF it is enslaved to; 0 when none
	Loopback bool
}

// leafKinds are link kinds that are never an upper device of another
// netdev (they call no netdev_upper_dev_link): a physical NIC (no kind),
// veth (its IFLA_LINK is its peer, not a lower device), dummy.
var leafKinds = map[string]bool{"": true, "veth": true, "dummy": true}

// GIDNeeds says, for each RoCE port, which GID table entries can matter:
// the keys (IP, netdev) an address lookup (Carriers.Of) can ask of that
// port's table. roce_gid_mgmt.c adds a RoCE GID for each IP of the port's
// netdev and of its upper devices — VLAN, macvlan, bond, bridge, VRF,
// recursively — with the netdev holding the IP; an IP of any other netdev
// is never in the port's table. The uppers are read from rtnetlink:
// IFLA_MASTER (bond, team, bridge, VRF) and IFLA_LINK (VLAN, macvlan,
// ipvlan, macsec; not a veth's peer). An IP on a netdev related to no RoCE
// port that could be an upper by a relation rtnetlink does not show (any
// kind but a physical NIC, veth, dummy, lo) is a key of every port.
type GIDNeeds struct {
	ports map[portKey]map[GIDKey]bool
}

type portKey struct{ dev, port uint32 }

// RoCENeeds computes GIDNeeds from one reading of the devices, links and
// addresses. With an IPoIB address (20-byte hardware address, looked up by
// its GID, not by IP) every table is read whole: Of reports false.
func RoCENeeds(devs []Device, links []Netdev, addrs []Addr) GIDNeeds {
	n := GIDNeeds{ports: map[portKey]map[GIDKey]bool{}}
	for _, a := range addrs {
		if len(a.HWAddr) == 20 {
			return GIDNeeds{}
		}
	}
	byIndex := make(map[int]Netdev, len(links))
	uppers := map[int][]int{} // lower → its uppers
	for _, l := range links {
		byIndex[l.Index] = l
	}
	for _, l := range links {
		if l.Master != 0 && l.Master != l.Index {
			uppers[l.Index] = append(uppers[l.Index], l.Master)
		}
		if l.Parent != 0 && l.Parent != l.Index && !l.ParentNS && l.Kind != "veth" {
			uppers[l.Parent] = append(uppers[l.Parent], l.Index)
		}
	}
	ipsOf := map[int][]GIDKey{}
	for _, a := range addrs {
		if a.IP.IsValid() && a.Netdev != "" {
			ipsOf[a.Ifindex] = append(ipsOf[a.Ifindex], GIDKey{a.IP.WithZone("").Unmap(), a.Netdev})
		}
	}
	related := map[int]bool{} // netdevs related to some RoCE port
	closure := map[portKey][]int{}
	for _, d := range devs {
		if d.Protocol != "roce" {
			continue
		}
		for _, p := range d.Ports {
			if _, ok := byIndex[int(p.NetdevIndex)]; p.NetdevIndex == 0 || !ok {
				continue // no netdev known: read whole
			}
			seen := map[int]bool{int(p.NetdevIndex): true}
			todo := []int{int(p.NetdevIndex)}
			for len(todo) > 0 {
				x := todo[len(todo)-1]
				todo = todo[:len(todo)-1]
				for _, u := range uppers[x] {
					if !seen[u] {
						seen[u] = true
						todo = append(todo, u)
					}
				}
			}
			k := portKey{d.Index, p.Index}
			for x := range seen {
				closure[k] = append(closure[k], x)
				related[x] = true
			}
		}
	}
	var anywhere []GIDKey // IPs of netdevs that might be an upper unseen
	for _, l := range links {
		if !related[l.Index] && !l.Loopback && !leafKinds[l.Kind] {
			anywhere = append(anywhere, ipsOf[l.Index]...)
		}
	}
	for k, nds := range closure {
		keys := map[GIDKey]bool{}
		for _, x := range nds {
			for _, g := range ipsOf[x] {
				keys[g] = true
			}
		}
		for _, g := range anywhere {
			keys[g] = true
		}
		n.ports[k] = keys
	}
	return n
}

// Of returns the keys of port p of d; false: read its table whole (not a
// RoCE port, its netdev unknown, or an IPoIB address on the host).
func (n GIDNeeds) Of(d Device, p Port) (map[GIDKey]bool, bool) {
	keys, ok := n.ports[portKey{d.Index, p.Index}]
	return keys, ok
}
