package rdma

import "net/netip"

// Index answers, for one reading of the kernel's tables (devices, netdev
// addresses, cm_id entries), the questions a plan asks of them: which
// netdev holds an address and which RDMA port carries it (Carrier), which
// address-bound LISTEN entries a kernel owner has on an address:port
// (Listeners), and whether it has a wildcard listener (Wildcard).
//
// It is built once per observation (NewIndex) and never changed.
type Index struct {
	addrs    map[netip.Addr]Addr
	carriers Carriers
	devByIdx map[uint32]Device
	spans    map[listenKey]span // address-bound LISTEN entries: backing[start:end]
	backing  []CMID
	wild     map[listenKey]bool // wildcard children (no port)
	// The tables indexed, as given (never written): what Since compares
	// an earlier reading with.
	addrList []Addr
	cmids    []CMID
}

// Carrier is where an address is and which RDMA port would carry it.
type Carrier struct {
	Addr    Addr   // the netdev address (valid when Held)
	Held    bool   // some netdev holds the address
	Dev     Device // the RDMA device rdma_cm would bind it to (valid when HasDev)
	Port    uint32
	FromGID bool // decided from a GID table (else: the netdev fallback of a port whose table is unknown)
	HasDev  bool
}

// listenKey indexes listeners by kernel owner and source address (the zone
// left out). It holds no pointer: the GC never scans the index, and it
// hashes as plain memory.
type listenKey struct {
	ip    [16]byte
	port  uint16
	is4   bool
	owner uint8 // ownerCode
}

// span is a key's run of entries in Index.backing.
type span struct{ start, end int }

// ownerCode numbers the kernel owners (RES_KERN_NAME) a listener is looked
// up by; every other owner shares one code (never looked up).
func ownerCode(name string) uint8 {
	switch name {
	case "":
		return 0 // kernels without RES_KERN_NAME
	case "nvmet_rdma":
		return 1
	case "ib_isert":
		return 2
	}
	return 3
}

func keyOf(owner string, ap netip.AddrPort) listenKey {
	a := ap.Addr()
	return listenKey{ip: a.As16(), port: ap.Port(), is4: a.Is4(), owner: ownerCode(owner)}
}

// NewIndex returns the index of one reading of the tables.
func NewIndex(devs []Device, addrs []Addr, cmids []CMID) *Index {
	// Sized up front: at thousands of listeners, growing these maps was
	// most of a plan's garbage (BENCHMARKS.md).
	ix := &Index{addrs: make(map[netip.Addr]Addr, len(addrs)), devByIdx: make(map[uint32]Device, len(devs)),
		spans: make(map[listenKey]span, len(cmids)), wild: map[listenKey]bool{}, carriers: IndexCarriers(devs)}
	ix.addrList, ix.cmids = addrs, cmids
	// The bound listeners share one backing array, grouped by key in
	// table order: each key's entries are a span of it (one allocation
	// instead of one per listener, and one map).
	n := 0
	for _, c := range cmids {
		if !c.Listening() {
			continue
		}
		k := keyOf(c.KernName, c.Src)
		if c.Port == 0 {
			ix.wild[k] = true
			continue
		}
		sp := ix.spans[k]
		sp.end++ // a count, for now
		ix.spans[k] = sp
		n++
	}
	at := 0
	for k, sp := range ix.spans {
		ix.spans[k] = span{at, at} // end is the fill cursor
		at += sp.end
	}
	ix.backing = make([]CMID, n)
	for _, c := range cmids {
		if !c.Listening() || c.Port == 0 {
			continue
		}
		k := keyOf(c.KernName, c.Src)
		sp := ix.spans[k]
		ix.backing[sp.end] = c
		sp.end++
		ix.spans[k] = sp
	}
	for _, a := range addrs {
		if _, dup := ix.addrs[a.IP.Unmap()]; !dup {
			ix.addrs[a.IP.Unmap()] = a
		}
	}
	for _, d := range devs {
		ix.devByIdx[d.Index] = d
	}
	return ix
}

// Carrier returns where ip is and which RDMA port rdma_cm would bind it to.
func (ix *Index) Carrier(ip netip.Addr) Carrier {
	a, ok := ix.addrs[ip]
	if !ok {
		return Carrier{}
	}
	c := Carrier{Addr: a, Held: true}
	var how string
	c.Dev, c.Port, how, c.HasDev = ix.carriers.Of(a)
	c.FromGID = how == "gid"
	return c
}

// Addr returns the netdev address record of ip (what Carrier starts from),
// without deciding which RDMA port carries it.
func (ix *Index) Addr(ip netip.Addr) (Addr, bool) {
	a, ok := ix.addrs[ip]
	return a, ok
}

// Devices is the number of registered devices.
func (ix *Index) Devices() int { return len(ix.devByIdx) }

// Device returns the registered device of an index.
func (ix *Index) Device(index uint32) (Device, bool) {
	d, ok := ix.devByIdx[index]
	return d, ok
}

// Listeners returns owner's address-bound LISTEN entries on ap; on kernels
// without RES_KERN_NAME, those of no owner. The slice is capacity-limited:
// appending to it never writes into another key's entries.
func (ix *Index) Listeners(owner string, ap netip.AddrPort) []CMID {
	if es := ix.bound(keyOf(owner, ap)); len(es) > 0 {
		return es
	}
	return ix.bound(keyOf("", ap))
}

func (ix *Index) bound(k listenKey) []CMID {
	sp, ok := ix.spans[k]
	if !ok {
		return nil
	}
	return ix.backing[sp.start:sp.end:sp.end]
}

// Wildcard reports whether owner (or no owner, on old kernels) has a
// wildcard child listener on ap's service.
func (ix *Index) Wildcard(owner string, ap netip.AddrPort) bool {
	return ix.wild[keyOf(owner, ap)] || ix.wild[keyOf("", ap)]
}
