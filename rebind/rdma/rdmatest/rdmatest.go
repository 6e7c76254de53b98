// Package rdmatest is a fake of the running kernel's RDMA side for tests:
// netdevs and their addresses, RDMA devices and their GID tables, and the
// rdma_cm listeners the kernel's ULPs (nvmet_rdma, ib_isert) create. It is
// the engine's rebind.Kernel (Devices, CMIDs, Addrs) and the binder behind
// configfstest.Fake (Bind, Unbind, Bound): configfs decides when a ULP
// listens, this package where the listener binds and when it dies.
//
// What it models, because the engine depends on it (KERNEL.md):
//   - a bind goes to the RDMA device whose GID table holds the address on
//     the address's netdev: the device's own netdev and its uppers (VLAN,
//     macvlan, bond: AddUpper); it is refused with EADDRNOTAVAIL when no
//     netdev holds the address and ENODEV when no device carries it;
//   - a device's GID table can be held empty for a moment after the device
//     appears (HoldGIDs, FillGIDs), as the kernel fills it a little later;
//   - removing an RDMA device (RemoveDevice, DelNetdev) destroys the
//     listeners bound to it and nothing else; adding it back re-creates
//     none of them; device indices are never reused;
//   - wildcard listeners (0.0.0.0, ::) are bound to no device and show up
//     as a port-less child on every device, including devices added later;
//   - removing an address does not touch listeners; a listener stays on
//     the device it was bound on when its address moves (MoveAddr): it is
//     stranded;
//   - an nvmet_tcp listener is a TCP socket (TCPListeners): refused with
//     EADDRNOTAVAIL while no netdev holds its address, never bound to a
//     device, outliving its address and netdev; never in the cm_id table;
//   - the cm_id table (CMIDs) is what RDMA netlink shows: address-bound
//     listeners on their device with port 1 and a zero destination, and
//     CMIDCalls counts the dumps; CMIDsErr makes the dump fail.
package rdmatest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

type listenerKey struct {
	owner string // the ULP: "nvmet_rdma" or "ib_isert"
	id    string // the ULP's name for it: a port id, an np's address:port
}

type listener struct {
	addr netip.AddrPort
	dev  string // "" for wildcard
	tcp  bool   // a TCP socket (nvmet_tcp), not an rdma_cm listener
}

// tcpOwner is the owner whose listeners are TCP sockets (configfstest.NVMETTCP).
const tcpOwner = "nvmet_tcp"

type device struct {
	index     uint32
	name      string
	guid      uint64
	netdev    string
	cmidn     uint32
	gidsReady bool
}

// Kernel is the fake RDMA kernel. Its zero value is not usable; use New.
type Kernel struct {
	mu        sync.Mutex
	devs      []*device
	nextIndex uint32
	addrs     map[string][]netip.Addr // netdev → addresses
	ifindex   map[string]int
	lower     map[string]string // upper netdev → the netdev under it
	listen    map[listenerKey]listener
	sorted    []keyed // listen ordered by key (keys()), kept in step by set and del once built
	cmidCalls int

	// HoldGIDs makes devices added later start with an empty GID table
	// until FillGIDs, as the kernel fills it a moment after the device.
	HoldGIDs bool
	// HoldAddrGIDs keeps addresses added (or moved) later out of every
	// GID table until FillAddrGIDs: the kernel's GID cache adds an
	// address's entry a moment after the address event, and no event
	// says when (an address move under a listener is seen first as an
	// address on a netdev whose device has no entry for it).
	HoldAddrGIDs bool
	lagging      map[netip.Addr]bool
	// CMIDsErr, when set, is returned by CMIDs (e.g. rdma.ErrUnsupported).
	CMIDsErr error
	// TCPErr, when set, is returned by TCPListeners.
	TCPErr error
}

// New returns a kernel with no netdev, no device and no listener.
func New() *Kernel {
	return &Kernel{
		addrs:   map[string][]netip.Addr{},
		ifindex: map[string]int{},
		lower:   map[string]string{},
		listen:  map[listenerKey]listener{},
	}
}

// --- netdevs, addresses, devices (the admin's and the hardware's side) ---

// AddNetdev creates a netdev (ip link add).
func (k *Kernel) AddNetdev(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addNetdev(name)
}

func (k *Kernel) addNetdev(name string) {
	if _, ok := k.ifindex[name]; !ok {
		k.ifindex[name] = len(k.ifindex) + 2
	}
}

// DelNetdev deletes a netdev with its addresses and RDMA devices.
func (k *Kernel) DelNetdev(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.addrs, name)
	delete(k.ifindex, name)
	var gone []string
	for _, d := range k.devs {
		if d.netdev == name {
			gone = append(gone, d.name)
		}
	}
	for _, g := range gone {
		k.removeDevice(g)
	}
}

// AddUpper creates netdev name stacked on lower (a VLAN, macvlan, or a
// bond over it): addresses on it are in lower's RDMA device's GID table.
func (k *Kernel) AddUpper(name, lower string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addNetdev(name)
	k.lower[name] = lower
}

// AddAddr adds an IP address to a netdev (ip addr add), creating the
// netdev if needed.
func (k *Kernel) AddAddr(netdev, ip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addNetdev(netdev)
	a := netip.MustParseAddr(ip)
	k.addrs[netdev] = append(k.addrs[netdev], a)
	if k.HoldAddrGIDs {
		if k.lagging == nil {
			k.lagging = map[netip.Addr]bool{}
		}
		k.lagging[a] = true
	}
}

// FillAddrGIDs puts an address held by HoldAddrGIDs in the GID tables.
func (k *Kernel) FillAddrGIDs(ip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.lagging, netip.MustParseAddr(ip))
}

// DelAddr removes an IP address; listeners are not touched (KERNEL.md).
func (k *Kernel) DelAddr(netdev, ip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[netdev] = slices.DeleteFunc(k.addrs[netdev], func(a netip.Addr) bool { return a == netip.MustParseAddr(ip) })
}

// MoveAddr moves an address to another netdev; listeners stay where they
// were bound (KERNEL.md: a stranded listener).
func (k *Kernel) MoveAddr(from, to, ip string) {
	k.DelAddr(from, ip)
	k.AddAddr(to, ip)
}

// AddDevice registers an RDMA device on a netdev (rdma link add) with a
// new index. Like the kernel, it gives wildcard listeners a child on the
// new device and re-creates nothing else.
func (k *Kernel) AddDevice(name string, guid uint64, netdev string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addNetdev(netdev)
	k.devs = append(k.devs, &device{index: k.nextIndex, name: name, guid: guid, netdev: netdev, gidsReady: !k.HoldGIDs})
	k.nextIndex++
}

// FillGIDs fills the GID table of a device added while HoldGIDs was set.
func (k *Kernel) FillGIDs(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, d := range k.devs {
		if d.name == name {
			d.gidsReady = true
		}
	}
}

// RemoveDevice unregisters an RDMA device (rdma link delete, a reset): the
// listeners bound to it are destroyed; nothing else changes.
func (k *Kernel) RemoveDevice(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeDevice(name)
}

func (k *Kernel) removeDevice(name string) {
	k.devs = slices.DeleteFunc(k.devs, func(d *device) bool { return d.name == name })
	for key, l := range k.listen {
		if l.dev == name {
			delete(k.listen, key)
		}
	}
	if k.sorted != nil {
		k.sorted = slices.DeleteFunc(k.sorted, func(e keyed) bool { return e.l.dev == name })
	}
}

// keyed is one listener with its key.
type keyed struct {
	key listenerKey
	l   listener
}

func compareKeys(a, b listenerKey) int {
	if c := strings.Compare(a.owner, b.owner); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// set and del change a listener, and the ordered list once it is built
// (the fake's own cost must not dominate the engine's benchmarks: a reset
// of 1 % of thousands of listeners does not sort them all again).
func (k *Kernel) set(key listenerKey, l listener) {
	k.listen[key] = l
	if k.sorted == nil {
		return
	}
	i, found := slices.BinarySearchFunc(k.sorted, key, func(e keyed, t listenerKey) int { return compareKeys(e.key, t) })
	if found {
		k.sorted[i].l = l
		return
	}
	k.sorted = slices.Insert(k.sorted, i, keyed{key, l})
}

func (k *Kernel) del(key listenerKey) {
	delete(k.listen, key)
	if k.sorted == nil {
		return
	}
	if i, found := slices.BinarySearchFunc(k.sorted, key, func(e keyed, t listenerKey) int { return compareKeys(e.key, t) }); found {
		k.sorted = slices.Delete(k.sorted, i, i+1)
	}
}

// KillListener destroys one listener the way a device removal does for
// it (for benchmarks and targeted tests). id is the ULP's name for it, as
// given to Bind: the nvmet port id, or the np's address:port for ib_isert.
func (k *Kernel) KillListener(owner, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.del(listenerKey{owner, id})
}

// --- rdma_cm as a kernel ULP uses it (configfstest.Binder) ---

// Bind is what a kernel ULP does to listen (rdma_bind_addr, rdma_listen):
// it creates listener id of owner on addr, bound to the device that
// carries the address, or to none for a wildcard address. It fails with
// EADDRNOTAVAIL when no netdev holds the address and with ENODEV when no
// RDMA device's GID table has it.
func (k *Kernel) Bind(owner, id string, addr netip.AddrPort) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner == tcpOwner {
		// nvmet-tcp binds a TCP socket without IP_FREEBIND: refused
		// with EADDRNOTAVAIL while no netdev holds the address; once up
		// it outlives the address, its netdev and every RDMA device.
		if !addr.Addr().IsUnspecified() && k.netdevOf(addr.Addr()) == "" {
			return syscall.EADDRNOTAVAIL
		}
		k.set(listenerKey{owner, id}, listener{addr: addr, tcp: true})
		return nil
	}
	dev, err := k.bind(addr)
	if err != nil {
		return err
	}
	k.set(listenerKey{owner, id}, listener{addr: addr, dev: dev})
	return nil
}

// Unbind destroys listener id of owner (rdma_destroy_id); a listener that
// is already gone is no error.
func (k *Kernel) Unbind(owner, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.del(listenerKey{owner, id})
}

// Bound reports whether listener id of owner exists, and the device it is
// bound to ("" for a wildcard).
func (k *Kernel) Bound(owner, id string) (dev string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.listen[listenerKey{owner, id}]
	return l.dev, ok
}

// bind does what rdma_bind_addr does: it returns the device that carries
// the address ("" for a wildcard).
func (k *Kernel) bind(addr netip.AddrPort) (string, error) {
	if addr.Addr().IsUnspecified() {
		return "", nil
	}
	netdev := k.netdevOf(addr.Addr())
	if netdev == "" {
		return "", syscall.EADDRNOTAVAIL
	}
	if d := k.carrier(netdev); d != nil && !k.lagging[addr.Addr()] {
		return d.name, nil
	}
	return "", syscall.ENODEV
}

func (k *Kernel) netdevOf(ip netip.Addr) string {
	for _, n := range k.netdevs() {
		if slices.Contains(k.addrs[n], ip) {
			return n
		}
	}
	return ""
}

// netdevs returns the names of the netdevs with addresses, sorted.
func (k *Kernel) netdevs() []string {
	names := make([]string, 0, len(k.addrs))
	for n := range k.addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// carrier is the first device whose GID table holds addresses of netdev:
// the device's own netdev or one of its uppers.
func (k *Kernel) carrier(netdev string) *device {
	for _, d := range k.devs {
		if d.gidsReady && k.under(netdev, d.netdev) {
			return d
		}
	}
	return nil
}

// under reports whether netdev is base or stacked on it.
func (k *Kernel) under(netdev, base string) bool {
	for i := 0; netdev != "" && i < 8; i++ {
		if netdev == base {
			return true
		}
		netdev = k.lower[netdev]
	}
	return false
}

// --- the engine's view (rebind.Kernel) ---

// Devices implements the engine's kernel view: one RoCE port per device.
func (k *Kernel) Devices() ([]rdma.Device, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []rdma.Device
	for _, d := range k.devs {
		port := rdma.Port{Index: 1, State: rdma.PortActive, PhysState: 5, NetdevIndex: uint32(k.ifindex[d.netdev]), Netdev: d.netdev, GIDsKnown: true}
		if d.gidsReady {
			port.GIDs = k.gids(d)
		}
		out = append(out, rdma.Device{Index: d.index, Name: d.name, NodeGUID: d.guid, NodeType: 1, Protocol: "roce", Ports: []rdma.Port{port}})
	}
	return out, nil
}

// gids is the RoCE GID table of d: one RoCE v2 entry per address on its
// netdev and the netdevs stacked on it.
func (k *Kernel) gids(d *device) []rdma.GID {
	var out []rdma.GID
	for _, n := range k.netdevs() {
		if !k.under(n, d.netdev) {
			continue
		}
		for _, a := range k.addrs[n] {
			if k.lagging[a] {
				continue
			}
			out = append(out, rdma.GID{Index: uint32(len(out)), Raw: a.As16(), Netdev: n, Type: "RoCE v2"})
		}
	}
	return out
}

// CMIDs implements the engine's kernel view: the LISTEN table as the
// kernel shows it (address-bound listeners on their device with port 1,
// wildcard listeners as a port-less child on every device).
func (k *Kernel) CMIDs(devs []rdma.Device) ([]rdma.CMID, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cmidCalls++
	if k.CMIDsErr != nil {
		return nil, k.CMIDsErr
	}
	keys := k.keys()
	out := make([]rdma.CMID, 0, len(keys)) // one entry per listener, but for wildcards
	for _, d := range k.devs {
		for _, e := range keys {
			key, l := e.key, e.l
			if l.tcp {
				continue
			}
			c := rdma.CMID{DevIndex: d.index, DevName: d.name, State: rdma.CMStateListen, PS: 0x106, Src: l.addr, KernName: key.owner, CMIDN: d.cmidn}
			switch {
			case l.dev == d.name:
				c.Port = 1
				c.Dst = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
				if l.addr.Addr().Is6() {
					c.Dst = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
				}
			case l.dev == "":
			default:
				continue
			}
			d.cmidn++
			out = append(out, c)
		}
	}
	return out, nil
}

// keys returns the listeners ordered by owner and id.
func (k *Kernel) keys() []keyed {
	if k.sorted != nil {
		return k.sorted
	}
	keys := make([]keyed, 0, len(k.listen))
	for key, l := range k.listen {
		keys = append(keys, keyed{key, l})
	}
	slices.SortFunc(keys, func(a, b keyed) int { return compareKeys(a.key, b.key) })
	k.sorted = keys
	return keys
}

// TCPListeners implements the engine's TCP view (rebind.TCPKernel): the
// address:port of every nvmet_tcp listener, sorted, as sock_diag lists
// the sockets in LISTEN.
func (k *Kernel) TCPListeners() ([]netip.AddrPort, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.TCPErr != nil {
		return nil, k.TCPErr
	}
	var out []netip.AddrPort
	for _, l := range k.listen {
		if l.tcp {
			out = append(out, l.addr)
		}
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out), nil
}

// CMIDCalls counts CMIDs calls (one dump per reconcile is the goal).
func (k *Kernel) CMIDCalls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cmidCalls
}

// Addrs implements the engine's kernel view.
func (k *Kernel) Addrs() ([]rdma.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, as := range k.addrs {
		n += len(as)
	}
	out := make([]rdma.Addr, 0, n)
	for _, n := range k.netdevs() {
		for _, a := range k.addrs[n] {
			out = append(out, rdma.Addr{Ifindex: k.ifindex[n], Netdev: n, IP: a})
		}
	}
	return out, nil
}

// String summarises the listeners, for test failure messages.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s []string
	for _, e := range k.keys() {
		s = append(s, fmt.Sprintf("%s %s %s on %q", e.key.owner, e.key.id, e.l.addr, e.l.dev))
	}
	return strings.Join(s, "; ")
}
