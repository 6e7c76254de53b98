// Package configfstest is a fake kernel for tests: a configfs tree in a
// temporary directory whose writes behave like the real nvmet and LIO code
// (see KERNEL.md), and the RDMA devices, addresses and rdma_cm listeners
// behind it.
//
// What it models, because the engine depends on it:
//   - the first subsystem link enables an nvmet port (the transport binds
//     and listens); unlinking the last one disables it;
//   - a bind is refused with EADDRNOTAVAIL when no netdev holds the address
//     and ENODEV when the netdev has no RDMA device, and the refused link or
//     iser=1 leaves nothing behind;
//   - addr_* writes fail with EACCES while the port is enabled;
//   - removing an RDMA device destroys its address-bound listeners and
//     changes nothing in configfs (links stay, iser keeps reading 1);
//   - wildcard listeners re-appear on every device added later;
//   - removing an address does not touch listeners; a listener stays on
//     the device it was bound on when its address moves (stranded);
//   - a bind goes to the RDMA device whose GID table holds the address on
//     the address's netdev: the device's own netdev and its uppers (VLAN,
//     macvlan, bond: AddUpper); the table can be held empty for a moment
//     after a device appears (HoldGIDs, FillGIDs);
//   - one iSER listener (np) per address:port is shared by every portal
//     with iser=1 on it: iser=1 re-attaches to an existing np even when its
//     listener is dead, and the np goes only when every sharer is at 0;
//   - two nvmet ports cannot listen on one address:port (EADDRINUSE).
//
// Every write is appended to an ordered log that tests assert on.
package configfstest

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Write is one write the code under test made through Ops.
type Write struct {
	Op    string // "symlink", "remove", "write"
	Path  string // relative to the configfs root
	Value string // the link target's base name, or the value written
	Err   error  // what the fake kernel answered
}

func (w Write) String() string {
	s := w.Op + " " + w.Path
	if w.Value != "" {
		s += " " + w.Value
	}
	if w.Err != nil {
		s += " -> " + w.Err.Error()
	}
	return s
}

type listenerKey struct {
	owner string // "nvmet_rdma" or "ib_isert"
	id    string // port id or portal id
}

type listener struct {
	addr netip.AddrPort
	dev  string // "" for wildcard
}

// np is LIO's iscsi_np of the iSER transport: one per address:port,
// reference-counted by the portals with iser=1.
type np struct {
	listener
	alive bool            // its rdma_cm listener exists
	refs  map[string]bool // portal ids
}

type device struct {
	index     uint32
	name      string
	guid      uint64
	netdev    string
	cmidn     uint32
	gidsReady bool
}

// Kernel is the fake kernel. Its zero value is not usable; use New.
type Kernel struct {
	Root string // the configfs root, a temporary directory

	mu        sync.Mutex
	order     map[string][]string // dir → children in creation order
	log       []Write
	devs      []*device
	nextIndex uint32
	addrs     map[string][]netip.Addr // netdev → addresses
	ifindex   map[string]int
	lower     map[string]string        // upper netdev → the netdev under it
	listen    map[listenerKey]listener // nvmet ports
	nps       map[netip.AddrPort]*np   // iSER nps
	// HoldGIDs makes devices added later start with an empty GID table
	// until FillGIDs, as the kernel fills it a moment after the device.
	HoldGIDs bool
	// Fault, when set, is called before every Ops call with the index of
	// the write (0-based) and may fail it (return an error) — the write is
	// then not performed.
	Fault func(n int, w Write) error
	// CMIDsErr, when set, is returned by CMIDs (e.g. rdma.ErrUnsupported).
	CMIDsErr error
	// ReadDirHook, when set, runs before every directory read (to let a
	// test change the tree at a precise moment, like another tool would).
	ReadDirHook func(dir string)
	cmidCalls   int
}

// New makes an empty configfs tree (nvmet and target/iscsi) in a
// temporary directory and a kernel with no devices.
func New(tb interface{ TempDir() string }) *Kernel { return NewAt(tb.TempDir()) }

// NewAt makes the tree under root, an empty directory (e.g. on tmpfs for
// benchmarks).
func NewAt(root string) *Kernel {
	k := &Kernel{
		Root:    root,
		order:   map[string][]string{},
		addrs:   map[string][]netip.Addr{},
		ifindex: map[string]int{},
		lower:   map[string]string{},
		listen:  map[listenerKey]listener{},
		nps:     map[netip.AddrPort]*np{},
	}
	for _, d := range []string{"nvmet/ports", "nvmet/subsystems", "nvmet/hosts", "target/iscsi"} {
		k.mkdir(filepath.Join(root, d))
	}
	return k
}

// FS returns a configfs.FS over the fake tree.
func (k *Kernel) FS() *configfs.FS { return configfs.NewWithOps(k.Root, k) }

func (k *Kernel) mkdir(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	k.addChild(dir)
}

func (k *Kernel) addChild(path string) {
	parent := filepath.Dir(path)
	if !slices.Contains(k.order[parent], filepath.Base(path)) {
		k.order[parent] = append(k.order[parent], filepath.Base(path))
	}
	if parent != k.Root && parent != "/" && len(parent) > len(k.Root) {
		k.addChild(parent)
	}
}

func (k *Kernel) dropChild(path string) {
	parent := filepath.Dir(path)
	k.order[parent] = slices.DeleteFunc(k.order[parent], func(s string) bool { return s == filepath.Base(path) })
}

func writeFile(path, v string) {
	if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
		panic(err)
	}
}

// --- the admin's side of the tree (set-up and changes during a test) ---

// AddSubsystem creates nvmet/subsystems/<nqn>.
func (k *Kernel) AddSubsystem(nqn string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mkdir(filepath.Join(k.Root, "nvmet/subsystems", nqn))
}

// AddPort creates nvmet/ports/<id> with its addr_* attributes.
func (k *Kernel) AddPort(id, trtype, adrfam, traddr, trsvcid string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Join(k.Root, "nvmet/ports", id)
	k.mkdir(filepath.Join(dir, "subsystems"))
	k.mkdir(filepath.Join(dir, "referrals"))
	for name, v := range map[string]string{"addr_trtype": trtype, "addr_adrfam": adrfam, "addr_traddr": traddr, "addr_trsvcid": trsvcid, "addr_treq": "not specified"} {
		writeFile(filepath.Join(dir, name), v)
	}
}

// AddPortal creates target/iscsi/<iqn>/<tpg>/np/<np> with iser=0.
func (k *Kernel) AddPortal(iqn, tpg, np string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Join(k.Root, "target/iscsi", iqn, tpg, "np", np)
	k.mkdir(dir)
	writeFile(filepath.Join(dir, "iser"), "0")
}

// Admin performs an operation as an administrator would (ln -s, rm, echo):
// with the kernel's semantics but without being logged as the code's write.
func (k *Kernel) Admin() configfs.Ops { return adminOps{k} }

type adminOps struct{ k *Kernel }

func (a adminOps) ReadDirNames(dir string) ([]string, error) { return a.k.ReadDirNames(dir) }
func (a adminOps) Symlink(t, l string) error {
	return a.k.do(Write{Op: "symlink", Path: l, Value: t}, false)
}
func (a adminOps) Remove(p string) error { return a.k.do(Write{Op: "remove", Path: p}, false) }
func (a adminOps) WriteAttr(p, v string) error {
	return a.k.do(Write{Op: "write", Path: p, Value: v}, false)
}

// RemovePort removes a port as an admin must: unlink every subsystem, rmdir.
func (k *Kernel) RemovePort(id string) error {
	fsys := configfs.NewWithOps(k.Root, k.Admin())
	p, err := fsys.Port(id)
	if err != nil {
		return err
	}
	for _, l := range p.Links {
		if err := fsys.Unlink(id, l); err != nil {
			return err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Join(k.Root, "nvmet/ports", id)
	k.dropChild(dir)
	return os.RemoveAll(dir)
}

// RemovePortal removes an np as an admin would (rmdir; iser goes with it).
func (k *Kernel) RemovePortal(id string) error {
	iqn, tpg, np, err := configfs.ParsePortalID(id)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.detach(id)
	dir := filepath.Join(k.Root, "target/iscsi", iqn, tpg, "np", np)
	k.dropChild(dir)
	return os.RemoveAll(dir)
}

// --- Ops: the code under test's writes ---

// Log returns the code's writes so far, in order.
func (k *Kernel) Log() []Write {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.log)
}

// LogStrings returns Log as strings, for cmp.Diff.
func (k *Kernel) LogStrings() []string {
	var s []string
	for _, w := range k.Log() {
		s = append(s, w.String())
	}
	return s
}

// ResetLog forgets the writes logged so far.
func (k *Kernel) ResetLog() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = nil
}

// ReadDirNames implements configfs.Ops: creation order.
func (k *Kernel) ReadDirNames(dir string) ([]string, error) {
	if h := k.ReadDirHook; h != nil {
		h(dir)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	dir = filepath.Clean(dir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	for _, e := range ents {
		present[e.Name()] = true
	}
	var out []string
	for _, n := range k.order[dir] {
		if present[n] {
			out = append(out, n)
			delete(present, n)
		}
	}
	var rest []string
	for n := range present {
		rest = append(rest, n)
	}
	slices.Sort(rest)
	return append(out, rest...), nil
}

// Symlink implements configfs.Ops.
func (k *Kernel) Symlink(target, link string) error {
	return k.do(Write{Op: "symlink", Path: link, Value: target}, true)
}

// Remove implements configfs.Ops.
func (k *Kernel) Remove(path string) error { return k.do(Write{Op: "remove", Path: path}, true) }

// WriteAttr implements configfs.Ops.
func (k *Kernel) WriteAttr(path, value string) error {
	return k.do(Write{Op: "write", Path: path, Value: value}, true)
}

func (k *Kernel) rel(p string) string {
	r, err := filepath.Rel(k.Root, p)
	if err != nil || strings.HasPrefix(r, "..") {
		return p
	}
	return r
}

func (k *Kernel) do(w Write, logged bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	abs := filepath.Clean(w.Path)
	w.Path = k.rel(abs)
	if w.Op == "symlink" {
		w.Value = filepath.Base(w.Value)
	}
	if logged && k.Fault != nil {
		if err := k.Fault(len(k.log), w); err != nil {
			return err
		}
	}
	var err error
	switch w.Op {
	case "symlink":
		err = k.symlink(abs, filepath.Join(k.Root, "nvmet/subsystems", w.Value))
	case "remove":
		err = k.remove(abs)
	case "write":
		err = k.write(abs, w.Value)
	}
	if logged {
		w.Err = err
		k.log = append(k.log, w)
	}
	return err
}

// portOf returns the port id when p is ports/<id>/<rest...>.
func (k *Kernel) portOf(p string) (id string, rest []string, ok bool) {
	r := k.rel(p)
	parts := strings.Split(r, "/")
	if len(parts) < 3 || parts[0] != "nvmet" || parts[1] != "ports" {
		return "", nil, false
	}
	return parts[2], parts[3:], true
}

func (k *Kernel) portLinks(id string) int {
	ents, _ := os.ReadDir(filepath.Join(k.Root, "nvmet/ports", id, "subsystems"))
	return len(ents)
}

func (k *Kernel) portAddr(id string) (netip.AddrPort, error) {
	p, err := configfs.New(k.Root).Port(id)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if p.Trtype != "rdma" {
		return netip.AddrPort{}, nil
	}
	return p.Addr()
}

func (k *Kernel) symlink(link, target string) error {
	id, rest, ok := k.portOf(link)
	if !ok || len(rest) != 2 || rest[0] != "subsystems" {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EPERM}
	}
	if _, err := os.Lstat(target); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.ENOENT}
	}
	if _, err := os.Lstat(link); err == nil {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EEXIST}
	}
	if k.portLinks(id) == 0 {
		addr, err := k.portAddr(id)
		if err != nil {
			return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EINVAL}
		}
		if addr.IsValid() {
			for key, l := range k.listen {
				if key.id != id && l.addr == addr {
					return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EADDRINUSE}
				}
			}
			dev, err := k.bind(addr)
			if err != nil {
				return &os.LinkError{Op: "symlink", Old: target, New: link, Err: err}
			}
			k.listen[listenerKey{"nvmet_rdma", id}] = listener{addr: addr, dev: dev}
		}
	}
	// configfs stores a relative target; so does the fake.
	rel, err := filepath.Rel(filepath.Dir(link), target)
	if err != nil {
		return err
	}
	if err := os.Symlink(rel, link); err != nil {
		return err
	}
	k.addChild(link)
	return nil
}

func (k *Kernel) remove(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: p, Err: syscall.ENOENT}
	}
	id, rest, ok := k.portOf(p)
	if st.Mode()&fs.ModeSymlink != 0 && ok && len(rest) == 2 && rest[0] == "subsystems" {
		if err := os.Remove(p); err != nil {
			return err
		}
		k.dropChild(p)
		if k.portLinks(id) == 0 {
			delete(k.listen, listenerKey{"nvmet_rdma", id})
		}
		return nil
	}
	return &fs.PathError{Op: "remove", Path: p, Err: syscall.EPERM}
}

func (k *Kernel) write(p, v string) error {
	if _, err := os.Lstat(p); err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
	}
	if id, rest, ok := k.portOf(p); ok && len(rest) == 1 {
		if (strings.HasPrefix(rest[0], "addr_") || strings.HasPrefix(rest[0], "param_")) && k.portLinks(id) > 0 {
			return &fs.PathError{Op: "write", Path: p, Err: syscall.EACCES}
		}
		writeFile(p, v)
		return nil
	}
	if filepath.Base(p) == "iser" {
		npDir := filepath.Dir(p)
		r := strings.Split(k.rel(npDir), "/") // target iscsi iqn tpg np name
		if len(r) != 6 {
			return &fs.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
		}
		id := r[2] + "/" + r[3] + "/" + r[5]
		cur, _ := os.ReadFile(p)
		on := strings.TrimSpace(string(cur)) == "1"
		switch v {
		case "1":
			if on {
				return &fs.PathError{Op: "write", Path: p, Err: syscall.EEXIST}
			}
			addr, err := configfs.ParseNP(r[5])
			if err != nil {
				return &fs.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
			}
			if n, ok := k.nps[addr]; ok {
				n.refs[id] = true // re-attached, alive or not
			} else {
				dev, err := k.bind(addr)
				if err != nil {
					return &fs.PathError{Op: "write", Path: p, Err: err}
				}
				k.nps[addr] = &np{listener: listener{addr: addr, dev: dev}, alive: true, refs: map[string]bool{id: true}}
			}
		case "0":
			if on {
				k.detach(id)
			}
		default:
			return &fs.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
		}
		writeFile(p, v)
		return nil
	}
	writeFile(p, v)
	return nil
}

// bind does what rdma_bind_addr does for a kernel ULP: it returns the
// device that carries the address ("" for a wildcard).
func (k *Kernel) bind(addr netip.AddrPort) (string, error) {
	if addr.Addr().IsUnspecified() {
		return "", nil
	}
	netdev := k.netdevOf(addr.Addr())
	if netdev == "" {
		return "", syscall.EADDRNOTAVAIL
	}
	if d := k.carrier(netdev); d != nil {
		return d.name, nil
	}
	return "", syscall.ENODEV
}

func (k *Kernel) netdevOf(ip netip.Addr) string {
	names := make([]string, 0, len(k.addrs))
	for n := range k.addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if slices.Contains(k.addrs[n], ip) {
			return n
		}
	}
	return ""
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

// detach drops portal id from its np (iser=0 or rmdir); the np goes with
// its last sharer.
func (k *Kernel) detach(id string) {
	for a, n := range k.nps {
		if n.refs[id] {
			delete(n.refs, id)
			if len(n.refs) == 0 {
				delete(k.nps, a)
			}
		}
	}
}

// --- the RDMA side ---

// AddNetdev creates a netdev (ip link add).
func (k *Kernel) AddNetdev(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.ifindex[name]; !ok {
		k.ifindex[name] = len(k.ifindex) + 2
	}
}

// DelNetdev deletes a netdev with its addresses and RDMA devices.
func (k *Kernel) DelNetdev(name string) {
	k.mu.Lock()
	delete(k.addrs, name)
	delete(k.ifindex, name)
	var gone []string
	for _, d := range k.devs {
		if d.netdev == name {
			gone = append(gone, d.name)
		}
	}
	k.mu.Unlock()
	for _, g := range gone {
		k.RemoveDevice(g)
	}
}

// AddUpper creates netdev name stacked on lower (a VLAN, macvlan, or a
// bond over it): addresses on it are in lower's RDMA device's GID table.
func (k *Kernel) AddUpper(name, lower string) {
	k.AddNetdev(name)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lower[name] = lower
}

// MoveAddr moves an address to another netdev; listeners stay where they
// were bound (KERNEL.md: a stranded listener).
func (k *Kernel) MoveAddr(from, to, ip string) {
	k.DelAddr(from, ip)
	k.AddAddr(to, ip)
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

// AddAddr adds an IP address to a netdev (ip addr add).
func (k *Kernel) AddAddr(netdev, ip string) {
	k.AddNetdev(netdev)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[netdev] = append(k.addrs[netdev], netip.MustParseAddr(ip))
}

// DelAddr removes an IP address; listeners are not touched (KERNEL.md).
func (k *Kernel) DelAddr(netdev, ip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[netdev] = slices.DeleteFunc(k.addrs[netdev], func(a netip.Addr) bool { return a == netip.MustParseAddr(ip) })
}

// AddDevice registers an RDMA device on a netdev (rdma link add). Like the
// kernel, it gives wildcard listeners a child on the new device and
// re-creates nothing else.
func (k *Kernel) AddDevice(name string, guid uint64, netdev string) {
	k.AddNetdev(netdev)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.devs = append(k.devs, &device{index: k.nextIndex, name: name, guid: guid, netdev: netdev, gidsReady: !k.HoldGIDs})
	k.nextIndex++
}

// RemoveDevice unregisters an RDMA device (rdma link delete, a reset): its
// address-bound listeners are destroyed; configfs is not changed.
func (k *Kernel) RemoveDevice(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.devs = slices.DeleteFunc(k.devs, func(d *device) bool { return d.name == name })
	for key, l := range k.listen {
		if l.dev == name {
			delete(k.listen, key)
		}
	}
	for _, n := range k.nps {
		if n.dev == name {
			n.alive = false // the np stays while its sharers hold it
		}
	}
}

// Listening reports whether the port (owner nvmet_rdma) or portal
// (ib_isert) with this id has a live listener.
func (k *Kernel) Listening(owner, id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner == "ib_isert" {
		for _, n := range k.nps {
			if n.refs[id] {
				return n.alive
			}
		}
		return false
	}
	_, ok := k.listen[listenerKey{owner, id}]
	return ok
}

// ListeningOn returns the device the listener of the port or portal is
// bound to ("" when there is none or it is a wildcard).
func (k *Kernel) ListeningOn(owner, id string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner == "ib_isert" {
		for _, n := range k.nps {
			if n.refs[id] && n.alive {
				return n.dev
			}
		}
		return ""
	}
	return k.listen[listenerKey{owner, id}].dev
}

// CMIDCalls counts CMIDs calls (one dump per reconcile is the goal).
func (k *Kernel) CMIDCalls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cmidCalls
}

// Devices implements the engine's kernel view.
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
	names := make([]string, 0, len(k.addrs))
	for n := range k.addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []rdma.GID
	for _, n := range names {
		if !k.under(n, d.netdev) {
			continue
		}
		for _, a := range k.addrs[n] {
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
	var out []rdma.CMID
	all := maps.Clone(k.listen)
	for a, n := range k.nps {
		if n.alive {
			all[listenerKey{"ib_isert", a.String()}] = n.listener
		}
	}
	keys := make([]listenerKey, 0, len(all))
	for key := range all {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b listenerKey) int { return strings.Compare(a.owner+a.id, b.owner+b.id) })
	for _, d := range k.devs {
		for _, key := range keys {
			l := all[key]
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

// Addrs implements the engine's kernel view.
func (k *Kernel) Addrs() ([]rdma.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []rdma.Addr
	names := make([]string, 0, len(k.addrs))
	for n := range k.addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, a := range k.addrs[n] {
			out = append(out, rdma.Addr{Ifindex: k.ifindex[n], Netdev: n, IP: a})
		}
	}
	return out, nil
}

// ErrInjected is what Fault functions conventionally return.
var ErrInjected = errors.New("injected fault")

// String summarises the listeners, for test failure messages.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s []string
	for key, l := range k.listen {
		s = append(s, fmt.Sprintf("%s %s %s on %q", key.owner, key.id, l.addr, l.dev))
	}
	for _, n := range k.nps {
		ids := slices.Sorted(maps.Keys(n.refs))
		s = append(s, fmt.Sprintf("ib_isert np %s on %q alive=%v sharers=%s", n.addr, n.dev, n.alive, strings.Join(ids, ",")))
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}

// KillListener destroys one listener the way a device removal does for
// it, leaving configfs alone (for benchmarks and targeted tests).
func (k *Kernel) KillListener(owner, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner == "ib_isert" {
		for _, n := range k.nps {
			if n.refs[id] {
				n.alive = false
			}
		}
		return
	}
	delete(k.listen, listenerKey{owner, id})
}
