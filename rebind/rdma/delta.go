package rdma

import "net/netip"

// Delta is what changed between an earlier reading of the kernel's tables
// and the one an Index indexes (Index.Since), in the terms of the Index's
// answers: the keys Carrier, Listeners and Wildcard look up. An answer of
// the new Index about an address:port the Delta does not touch
// (Touches) is the answer the earlier reading's Index gave; Device
// answers likewise for an index DeviceChanged does not name. A reset of
// one device of many touches the addresses that device's GID tables
// carried and the listeners it held, nothing else: a round judges those
// endpoints again and carries the others' verdicts (rebind).
type Delta struct {
	ix *Index // the new reading's index
	// Carrier's inputs: address records, and the keys of the GID entries
	// (and the netdevs of ports whose table is unknown) that were added,
	// removed or moved to another port.
	ips       map[netip.Addr]bool // address records of these IPs; RoCE GIDs encoding them
	netdevs   map[string]bool     // iWARP entry 0's netdev; the netdev fallback's name
	ifindexes map[int]bool        // the netdev fallback's ifindex
	hw        map[[16]byte]bool   // InfiniBand and iWARP GIDs
	// Listeners' and Wildcard's input: the keys whose LISTEN entries differ.
	listen map[listenKey]bool
	// devs are the device indexes whose identity (name, node GUID, type,
	// protocol) changed, or that came or went; count: the number of
	// devices changed (Wildcard's verdict reads whether there is any).
	devs  map[uint32]bool
	count bool
}

// Empty reports whether the two readings read the same to an Index.
func (d *Delta) Empty() bool {
	return len(d.ips)+len(d.netdevs)+len(d.ifindexes)+len(d.hw)+len(d.listen)+len(d.devs) == 0 && !d.count
}

// Touches reports whether the Index's Carrier of ap's address, or owner's
// Listeners or Wildcard on ap, may answer otherwise than the earlier
// reading's did.
func (d *Delta) Touches(owner string, ap netip.AddrPort) bool {
	if d.listen[keyOf(owner, ap)] || d.listen[keyOf("", ap)] {
		return true
	}
	ip := ap.Addr()
	if ip.IsUnspecified() {
		return d.count // a wildcard's verdict reads only whether there is a device
	}
	if d.ips[ip] || d.ips[ip.WithZone("").Unmap()] {
		return true
	}
	if len(d.hw)+len(d.netdevs)+len(d.ifindexes) == 0 {
		return false // the address record's other keys: none touched
	}
	a, ok := d.ix.addrs[ip]
	if !ok {
		return false // held by no netdev, before as now (else ips has it): no carrier
	}
	// The keys Carriers.Of looks up for a.
	if len(a.HWAddr) == 20 && d.hw[[16]byte(a.HWAddr[4:20])] {
		return true
	}
	if len(a.HWAddr) == 6 {
		var raw [16]byte
		copy(raw[:], a.HWAddr)
		if d.hw[raw] {
			return true
		}
	}
	return d.netdevs[a.Netdev] || d.ifindexes[a.Ifindex]
}

// DeviceChanged reports whether the device of an index came, went or
// changed its identity (what Device answers, its ports aside).
func (d *Delta) DeviceChanged(index uint32) bool { return d.devs[index] }

// Since returns what changed from the reading (devs, addrs, cmids) to the
// one ix indexes. Entries are matched in table order, as both readings
// list them (the kernel dumps in a stable order; a reset removes a
// device's entries and adds new ones): every entry of either reading that
// is not matched to an equal one of the other touches its key. So a key
// that is not touched has the same entries, in the same order, in both.
func (ix *Index) Since(devs []Device, addrs []Addr, cmids []CMID) *Delta {
	d := &Delta{ix: ix, ips: map[netip.Addr]bool{}, netdevs: map[string]bool{}, ifindexes: map[int]bool{},
		hw: map[[16]byte]bool{}, listen: map[listenKey]bool{}, devs: map[uint32]bool{}}
	d.count = (len(devs) == 0) != (len(ix.devByIdx) == 0)
	d.sinceDevices(devs)
	d.sinceAddrs(addrs)
	d.sinceListeners(cmids)
	return d
}

func (d *Delta) sinceDevices(old []Device) {
	seen := make(map[uint32]bool, len(old))
	for _, o := range old {
		seen[o.Index] = true
		n, ok := d.ix.devByIdx[o.Index]
		switch {
		case !ok || !sameIdentity(o, n):
			d.devs[o.Index] = true
			for _, p := range o.Ports {
				d.port(o, p)
			}
			if ok {
				d.devs[n.Index] = true
				for _, p := range n.Ports {
					d.port(n, p)
				}
			}
		default:
			d.ports(o, n)
		}
	}
	for _, n := range d.ix.devByIdx {
		if !seen[n.Index] {
			d.devs[n.Index] = true
			for _, p := range n.Ports {
				d.port(n, p)
			}
		}
	}
}

// sameIdentity: what a carrier or an entry's device says of it, and how
// its GID entries are read (the protocol), are the same.
func sameIdentity(a, b Device) bool {
	return a.Index == b.Index && a.Name == b.Name && a.NodeGUID == b.NodeGUID && a.NodeType == b.NodeType && a.Protocol == b.Protocol
}

// ports touches what changed between two readings of one device's ports:
// a port that came, went or changed how it is read (its netdev, whether
// its table is known) touches all its keys; else the GID entries added
// or removed.
func (d *Delta) ports(o, n Device) {
	at := make(map[uint32]Port, len(n.Ports))
	for _, p := range n.Ports {
		at[p.Index] = p
	}
	for _, op := range o.Ports {
		np, ok := at[op.Index]
		delete(at, op.Index)
		switch {
		case !ok || op.GIDsKnown != np.GIDsKnown || op.Netdev != np.Netdev || op.NetdevIndex != np.NetdevIndex:
			d.port(o, op)
			if ok {
				d.port(n, np)
			}
		case !op.GIDsKnown:
		default:
			d.gids(o, op.GIDs, np.GIDs)
		}
	}
	for _, np := range at {
		d.port(n, np)
	}
}

// gids touches the keys of the entries of one port's table that are in
// one reading and not the other (matched in table order).
func (d *Delta) gids(dev Device, a, b []GID) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case j >= len(b) || (i < len(a) && a[i].Index < b[j].Index):
			d.gid(dev, a[i])
			i++
		case i >= len(a) || b[j].Index < a[i].Index:
			d.gid(dev, b[j])
			j++
		default: // the same entry index holds another GID
			d.gid(dev, a[i])
			d.gid(dev, b[j])
			i, j = i+1, j+1
		}
	}
}

// port touches every key a port is found by (Carriers.Reindex).
func (d *Delta) port(dev Device, p Port) {
	if !p.GIDsKnown {
		if p.NetdevIndex != 0 {
			d.ifindexes[int(p.NetdevIndex)] = true
		}
		if p.Netdev != "" {
			d.netdevs[p.Netdev] = true
		}
		return
	}
	for _, g := range p.GIDs {
		d.gid(dev, g)
	}
}

// gid touches the key one GID entry is found by (Carriers.Reindex).
func (d *Delta) gid(dev Device, g GID) {
	switch {
	case dev.Protocol == "iw":
		d.hw[g.Raw] = true
		if g.Index == 0 && g.Netdev != "" {
			d.netdevs[g.Netdev] = true
		}
	case g.Netdev != "":
		d.ips[g.IP()] = true
	default:
		d.hw[g.Raw] = true
	}
}

// sinceAddrs touches the IPs whose address records differ: the first
// record of an IP is the Index's (Reindex), so an IP none of whose
// records is unmatched has the same first record.
func (d *Delta) sinceAddrs(old []Addr) {
	cur := d.ix.addrList
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case i < len(old) && j < len(cur) && old[i].Equal(cur[j]):
			i, j = i+1, j+1
		case i < len(old) && (j >= len(cur) || !d.hasAddr(old[i])):
			d.ips[old[i].IP.Unmap()] = true // gone (or moved: its new record is touched when met)
			i++
		default:
			d.ips[cur[j].IP.Unmap()] = true
			j++
		}
	}
}

func (d *Delta) hasAddr(a Addr) bool {
	n, ok := d.ix.addrs[a.IP.Unmap()]
	return ok && n.Equal(a)
}

// sinceListeners touches the keys whose LISTEN entries differ (what
// judge reads of an entry: device, port, address, owner; not the
// identifiers of host connections).
func (d *Delta) sinceListeners(old []CMID) {
	cur := d.ix.cmids
	i, j := nextListening(old, 0), nextListening(cur, 0)
	for i < len(old) || j < len(cur) {
		switch {
		case i < len(old) && j < len(cur) && SameListener(old[i], cur[j]):
			i, j = nextListening(old, i+1), nextListening(cur, j+1)
		case i < len(old) && (j >= len(cur) || !d.hasListener(old[i])):
			d.listen[keyOf(old[i].KernName, old[i].Src)] = true
			i = nextListening(old, i+1)
		default:
			d.listen[keyOf(cur[j].KernName, cur[j].Src)] = true
			j = nextListening(cur, j+1)
		}
	}
}

func (d *Delta) hasListener(c CMID) bool {
	if c.Port == 0 {
		return false // a wildcard child: touched when unmatched
	}
	for _, e := range d.ix.bound(keyOf(c.KernName, c.Src)) {
		if SameListener(e, c) {
			return true
		}
	}
	return false
}
