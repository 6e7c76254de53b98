// Package configfstest is a fake configfs for tests: the nvmet and LIO
// trees in a temporary directory, whose writes behave like the kernel's
// nvmet and LIO code (KERNEL.md), and an ordered log of every write the
// code under test makes, for tests to assert on.
//
// It is only the configfs side of the kernel. Where an address binds, and
// whether a listener is still alive, it asks an injected Binder: the RDMA
// side (rdmatest.Kernel in this project's tests). What it models, because
// the engine depends on it:
//   - the first subsystem link enables an nvmet port (the transport binds
//     and listens); unlinking the last one disables it;
//   - a bind the Binder refuses (EADDRNOTAVAIL: no netdev holds the
//     address, ENODEV: no RDMA device carries it) refuses the link or the
//     iser=1, and the refused write leaves nothing behind;
//   - addr_* and param_* writes fail with EACCES while the port is enabled;
//   - the kernel never changes configfs by itself: a dead listener leaves
//     its links in place and iser reading 1;
//   - one iSER listener (LIO's np) per address:port is shared by every
//     portal with iser=1 on it: iser=1 re-attaches to an existing np even
//     when its listener is dead, and the np (with its listener) goes only
//     when every sharer is back at 0 or removed;
//   - two nvmet ports cannot listen on one address:port (EADDRINUSE);
//   - directories list in creation order, like configfs.
//
// Tests set the tree up as an administrator would (AddSubsystem, AddPort,
// AddPortal, Admin, RemovePort, RemovePortal), fail the code's writes
// (Fault) or change the tree between its reads (ReadDirHook), and ask
// whether a port or portal listens (Listening, ListeningOn).
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
)

// The owners the Fake binds listeners for, as the cm_id table names them.
const (
	NVMET    = "nvmet_rdma" // an nvmet port's listener; its id is the port id
	NVMETTCP = "nvmet_tcp"  // an nvmet TCP port's listener (a TCP socket); its id is the port id
	ISER     = "ib_isert"   // an iSER np's listener; its id is the np's address:port
)

// Binder is the RDMA side of the kernel as the nvmet and LIO code use it
// (rdma_cm): rdmatest.Kernel implements it.
type Binder interface {
	// Bind creates listener id of owner on addr (rdma_bind_addr and
	// rdma_listen), or returns the errno the bind is refused with.
	Bind(owner, id string, addr netip.AddrPort) error
	// Unbind destroys the listener (rdma_destroy_id); one that is already
	// gone is no error.
	Unbind(owner, id string)
	// Bound reports whether the listener is alive and the device it is
	// bound to ("" for a wildcard address).
	Bound(owner, id string) (dev string, ok bool)
}

// Write is one write the code under test made through Ops.
type Write struct {
	Op    string // "symlink", "remove", "write", "mkdir"
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

// np is LIO's iscsi_np of the iSER transport: one per address:port,
// reference-counted by the portals with iser=1. Its listener is the
// Binder's (ISER, address:port); it may be dead while the np stays.
type np struct {
	refs map[string]bool // portal ids
}

// Fake is the fake configfs. Its zero value is not usable; use New.
type Fake struct {
	Root string // the configfs root, a temporary directory

	bind    Binder
	mu      sync.Mutex
	order   map[string][]string // dir → children in creation order
	log     []Write
	enabled map[string]netip.AddrPort // nvmet port id → the address it bound (rdma ports with a link)
	nps     map[netip.AddrPort]*np    // iSER nps

	// Fault, when set, is called before every write of the code under test
	// with the index of the write (0-based) and may fail it (return an
	// error) — the write is then not performed.
	Fault func(n int, w Write) error
	// ReadDirHook, when set, runs before every directory read (to let a
	// test change the tree at a precise moment, like another tool would).
	ReadDirHook func(dir string)
}

// New makes an empty configfs tree (nvmet and target/iscsi) in a
// temporary directory, whose listeners bind through b.
func New(tb interface{ TempDir() string }, b Binder) *Fake { return NewAt(tb.TempDir(), b) }

// NewAt makes the tree under root, an empty directory (e.g. on tmpfs for
// benchmarks).
func NewAt(root string, b Binder) *Fake {
	k := &Fake{
		Root:    root,
		bind:    b,
		order:   map[string][]string{},
		enabled: map[string]netip.AddrPort{},
		nps:     map[netip.AddrPort]*np{},
	}
	for _, d := range []string{"nvmet/ports", "nvmet/subsystems", "nvmet/hosts", "target/iscsi", "target/core"} {
		k.mkdir(filepath.Join(root, d))
	}
	return k
}

// FS returns a configfs.FS over the fake tree.
func (k *Fake) FS() *configfs.FS { return configfs.NewWithOps(k.Root, k) }

func (k *Fake) mkdir(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	k.addChild(dir)
}

func (k *Fake) addChild(path string) {
	parent := filepath.Dir(path)
	if !slices.Contains(k.order[parent], filepath.Base(path)) {
		k.order[parent] = append(k.order[parent], filepath.Base(path))
	}
	if parent != k.Root && parent != "/" && len(parent) > len(k.Root) {
		k.addChild(parent)
	}
}

func (k *Fake) dropChild(path string) {
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
func (k *Fake) AddSubsystem(nqn string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mkdir(filepath.Join(k.Root, "nvmet/subsystems", nqn))
}

// AddPort creates nvmet/ports/<id> with its addr_* attributes.
func (k *Fake) AddPort(id, trtype, adrfam, traddr, trsvcid string) {
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
func (k *Fake) AddPortal(iqn, tpg, np string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Join(k.Root, "target/iscsi", iqn, tpg, "np", np)
	k.mkdir(dir)
	writeFile(filepath.Join(dir, "iser"), "0")
}

// Admin performs an operation as an administrator would (ln -s, rm, echo):
// with the kernel's semantics but without being logged as the code's write.
func (k *Fake) Admin() configfs.Ops { return adminOps{k} }

// adminOps reads like the code under test and writes without logging.
type adminOps struct{ *Fake }

func (a adminOps) Symlink(t, l string) error {
	return a.do(Write{Op: "symlink", Path: l, Value: t}, false)
}
func (a adminOps) Remove(p string) error { return a.do(Write{Op: "remove", Path: p}, false) }
func (a adminOps) Mkdir(p string) error  { return a.do(Write{Op: "mkdir", Path: p}, false) }
func (a adminOps) WriteAttr(p, v string) error {
	return a.do(Write{Op: "write", Path: p, Value: v}, false)
}
func (a adminOps) SwapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	return a.swaps(paths, from, to, done, false)
}
func (a adminOps) RemoveLinks(dir string, names []string, done func(int, error) bool) error {
	return a.removeLinks(dir, names, done, false)
}
func (a adminOps) SymlinkAll(dir string, targets, names []string, done func(int, error) bool) error {
	return a.symlinks(dir, targets, names, done, false)
}

// RemovePort removes a port as an admin must: unlink every subsystem, rmdir.
func (k *Fake) RemovePort(id string) error {
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
func (k *Fake) RemovePortal(id string) error {
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

// --- Ops: the code under test's reads and writes ---

// Log returns the code's writes so far, in order.
func (k *Fake) Log() []Write {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.log)
}

// LogStrings returns Log as strings, for cmp.Diff.
func (k *Fake) LogStrings() []string {
	var s []string
	for _, w := range k.Log() {
		s = append(s, w.String())
	}
	return s
}

// ResetLog forgets the writes logged so far.
func (k *Fake) ResetLog() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = nil
}

// ReadDirNames implements configfs.Ops: creation order.
func (k *Fake) ReadDirNames(dir string) ([]string, error) {
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

// ReadAttrs implements configfs.Ops: the tree is on disk, so the real
// kernel's reads (configfs.OSOps) read it as they would read configfs.
func (k *Fake) ReadAttrs(dirs, names []string) []configfs.Attrs {
	return configfs.OSOps{}.ReadAttrs(dirs, names)
}

// Lstat implements configfs.Ops.
func (k *Fake) Lstat(path string) (fs.FileInfo, error) { return configfs.OSOps{}.Lstat(path) }

// Readlink implements configfs.Ops.
func (k *Fake) Readlink(path string) (string, error) { return configfs.OSOps{}.Readlink(path) }

// Symlink implements configfs.Ops.
func (k *Fake) Symlink(target, link string) error {
	return k.do(Write{Op: "symlink", Path: link, Value: target}, true)
}

// Mkdir implements configfs.Ops.
func (k *Fake) Mkdir(path string) error { return k.do(Write{Op: "mkdir", Path: path}, true) }

// Remove implements configfs.Ops.
func (k *Fake) Remove(path string) error { return k.do(Write{Op: "remove", Path: path}, true) }

// WriteAttr implements configfs.Ops.
func (k *Fake) WriteAttr(path, value string) error {
	return k.do(Write{Op: "write", Path: path, Value: value}, true)
}

// RemoveLinks implements configfs.Ops: each removal logged as Remove's.
func (k *Fake) RemoveLinks(dir string, names []string, done func(int, error) bool) error {
	return k.removeLinks(dir, names, done, true)
}

func (k *Fake) removeLinks(dir string, names []string, done func(int, error) bool, logged bool) error {
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	for i, n := range names {
		if !done(i, k.do(Write{Op: "remove", Path: filepath.Join(dir, n)}, logged)) {
			break
		}
	}
	return nil
}

// SymlinkAll implements configfs.Ops: each link logged as Symlink's.
func (k *Fake) SymlinkAll(dir string, targets, names []string, done func(int, error) bool) error {
	return k.symlinks(dir, targets, names, done, true)
}

func (k *Fake) symlinks(dir string, targets, names []string, done func(int, error) bool, logged bool) error {
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	for i, n := range names {
		if !done(i, k.do(Write{Op: "symlink", Path: filepath.Join(dir, n), Value: targets[i]}, logged)) {
			break
		}
	}
	return nil
}

// SwapAttrs implements configfs.Ops: each read and write (logged as a
// write, when made) under the fake kernel's lock.
func (k *Fake) SwapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	return k.swaps(paths, from, to, done, true)
}

func (k *Fake) swaps(paths []string, from, to string, done func(int, string, error) bool, logged bool) error {
	for i, p := range paths {
		if got, err := k.swap(p, from, to, logged); !done(i, got, err) {
			break
		}
	}
	return nil
}

func (k *Fake) swap(path, from, to string, logged bool) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := configfs.OSOps{}.ReadAttrs([]string{filepath.Dir(path)}, []string{filepath.Base(path)})[0]
	if a.Err != nil {
		return "", a.Err
	}
	if a.Errs[0] != nil || a.Values[0] != from {
		return a.Values[0], a.Errs[0]
	}
	return from, k.doLocked(Write{Op: "write", Path: path, Value: to}, logged)
}

func (k *Fake) rel(p string) string {
	r, err := filepath.Rel(k.Root, p)
	if err != nil || strings.HasPrefix(r, "..") {
		return p
	}
	return r
}

func (k *Fake) do(w Write, logged bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.doLocked(w, logged)
}

func (k *Fake) doLocked(w Write, logged bool) error {
	abs := filepath.Clean(w.Path)
	w.Path = k.rel(abs)
	if w.Op == "symlink" && !strings.HasPrefix(w.Path, "target/") {
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
		if rest, ok := k.allowedHostOf(abs); ok {
			err = k.allowHost(abs, rest)
			break
		}
		if strings.HasPrefix(k.rel(abs), "target/") {
			err = k.lioLink(abs, filepath.Clean(w.Value))
			break
		}
		err = k.symlink(abs, filepath.Join(k.Root, "nvmet/subsystems", w.Value))
	case "mkdir":
		err = k.mkdirObject(abs)
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
func (k *Fake) portOf(p string) (id string, rest []string, ok bool) {
	r := k.rel(p)
	parts := strings.Split(r, "/")
	if len(parts) < 3 || parts[0] != "nvmet" || parts[1] != "ports" {
		return "", nil, false
	}
	return parts[2], parts[3:], true
}

func (k *Fake) portLinks(id string) int {
	ents, _ := os.ReadDir(filepath.Join(k.Root, "nvmet/ports", id, "subsystems"))
	return len(ents)
}

// portAddr is the address the port's listener binds and its owner (NVMET
// or NVMETTCP); invalid for other transports, which bind nothing here.
func (k *Fake) portAddr(id string) (netip.AddrPort, string, error) {
	p, err := configfs.New(k.Root).Port(id)
	if err != nil {
		return netip.AddrPort{}, "", err
	}
	owner := map[configfs.Transport]string{configfs.TransportRDMA: NVMET, configfs.TransportTCP: NVMETTCP}[p.Trtype]
	if owner == "" {
		return netip.AddrPort{}, "", nil
	}
	a, err := p.Addr()
	return a, owner, err
}

func (k *Fake) symlink(link, target string) error {
	id, rest, ok := k.portOf(link)
	if !ok || len(rest) != 2 || rest[0] != "subsystems" {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EPERM}
	}
	if _, err := os.Lstat(target); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.ENOENT}
	}
	if _, err := os.Lstat(filepath.Dir(link)); err != nil {
		// The port is gone: the kernel's path lookup fails before nvmet
		// sees the link.
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.ENOENT}
	}
	if _, err := os.Lstat(link); err == nil {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EEXIST}
	}
	if k.portLinks(id) == 0 {
		addr, owner, err := k.portAddr(id)
		if err != nil {
			return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EINVAL}
		}
		if addr.IsValid() {
			for other, a := range k.enabled {
				if _, alive := k.bind.Bound(owner, other); other != id && a == addr && alive {
					return &os.LinkError{Op: "symlink", Old: target, New: link, Err: syscall.EADDRINUSE}
				}
			}
			if err := k.bind.Bind(owner, id, addr); err != nil {
				return &os.LinkError{Op: "symlink", Old: target, New: link, Err: err}
			}
			k.enabled[id] = addr
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

func (k *Fake) remove(p string) error {
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
		if _, on := k.enabled[id]; on && k.portLinks(id) == 0 {
			delete(k.enabled, id)
			_, owner, _ := k.portAddr(id)
			k.bind.Unbind(owner, id)
		}
		return nil
	}
	return &fs.PathError{Op: "remove", Path: p, Err: syscall.EPERM}
}

func (k *Fake) write(p, v string) error {
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
	if err, ok := k.writeObject(p, v); ok {
		return err
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
				if err := k.bind.Bind(ISER, addr.String(), addr); err != nil {
					return &fs.PathError{Op: "write", Path: p, Err: err}
				}
				k.nps[addr] = &np{refs: map[string]bool{id: true}}
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

// detach drops portal id from its np (iser=0 or rmdir); the np goes with
// its last sharer.
func (k *Fake) detach(id string) {
	for a, n := range k.nps {
		if n.refs[id] {
			delete(n.refs, id)
			if len(n.refs) == 0 {
				delete(k.nps, a)
				k.bind.Unbind(ISER, a.String())
			}
		}
	}
}

// Listening reports whether the nvmet port (owner NVMET) or LIO portal
// (owner ISER) with this id has a live listener: the port's own, or the
// one of the np the portal shares.
func (k *Fake) Listening(owner, id string) bool {
	_, ok := k.listener(owner, id)
	return ok
}

// ListeningOn returns the device the listener of the port or portal is
// bound to ("" when there is none or it is a wildcard).
func (k *Fake) ListeningOn(owner, id string) string {
	dev, _ := k.listener(owner, id)
	return dev
}

func (k *Fake) listener(owner, id string) (dev string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner != ISER {
		return k.bind.Bound(owner, id)
	}
	for a, n := range k.nps {
		if n.refs[id] {
			return k.bind.Bound(ISER, a.String())
		}
	}
	return "", false
}

// ErrInjected is what Fault functions conventionally return.
var ErrInjected = errors.New("injected fault")

// String summarises the enabled ports and the iSER nps, for test failure
// messages.
func (k *Fake) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s []string
	for id, a := range k.enabled {
		_, owner, _ := k.portAddr(id)
		_, alive := k.bind.Bound(owner, id)
		s = append(s, fmt.Sprintf("%s port %s on %s alive=%v", owner, id, a, alive))
	}
	for a, n := range k.nps {
		_, alive := k.bind.Bound(ISER, a.String())
		ids := slices.Sorted(maps.Keys(n.refs))
		s = append(s, fmt.Sprintf("iser np %s alive=%v sharers=%s", a, alive, strings.Join(ids, ",")))
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}
