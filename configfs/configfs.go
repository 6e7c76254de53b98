// Package configfs gives typed access to the kernel's NVMe-oF target tree
// (<root>/nvmet) and LIO iSCSI tree (<root>/target/iscsi) under a configfs
// root that is a value, not a constant.
//
// It owns the tree: listing nvmet ports (Ports: attributes only; Links, or
// Port for one port with its links), LIO portals (Portals, Portal) and
// subsystems (Subsystems), and the few writes a heal needs (Unlink, Relink,
// SetISER). It knows the kernel's object rules (a port is enabled by its
// first subsystem link, `iser` adds or removes the iSER listener of a network
// portal) but not why anything is done: no policy, no RDMA, no engine.
//
// Names read from the tree are validated so that no path ever leaves the
// root, and attribute reads are bounded and trimmed. Every read and every
// write goes through one seam, Ops: OSOps is the real kernel (system calls,
// several directories read at a time), configfstest.Fake a fake one for
// tests.
package configfs

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// FS is a configfs tree under Root.
type FS struct {
	root string
	ops  Ops
}

// New returns the tree under root (normally /sys/kernel/config) using the
// real kernel's system calls.
func New(root string) *FS { return NewWithOps(root, OSOps{}) }

// NewWithOps returns the tree under root with every read and write going
// through ops.
func NewWithOps(root string, ops Ops) *FS {
	return &FS{root: filepath.Clean(root), ops: ops}
}

// Root returns the configfs root.
func (f *FS) Root() string { return f.root }

// Ops returns the seam every read and write of the tree goes through, for
// a layer that reads the same tree (configfs/watch caches it).
func (f *FS) Ops() Ops { return f.ops }

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

// ParseNP parses an np directory name: "192.0.2.1:3260" or
// "[2001:db8::1]:3260" (the form iscsi_target_configfs.c accepts).
func ParseNP(name string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(name)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("np %q is not <ip>:<port> or [<ipv6>]:<port>", name)
	}
	if ap.Addr().Zone() != "" || ap.Addr().Is4In6() {
		return netip.AddrPort{}, fmt.Errorf("np %q: zoned or IPv4-mapped addresses are not supported", name)
	}
	return ap, nil
}

// ParsePortalID splits "<iqn>/<tpgt_N>/<np>".
func ParsePortalID(id string) (iqn, tpg, np string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("portal %q: want <iqn>/tpgt_<N>/<ip>:<port>", id)
	}
	for _, p := range parts {
		if err := checkName(p); err != nil {
			return "", "", "", fmt.Errorf("portal %q: %w", id, err)
		}
	}
	return parts[0], parts[1], parts[2], nil
}

// The kernel's naming rules for the objects a journal entry names, so that
// an entry is refused before any write, as the kernel would refuse it
// after the first.
const (
	maxName = 255 // NAME_MAX: a configfs directory entry
	maxNQN  = 223 // NVMF_NQN_SIZE less its NUL (include/linux/nvme.h)
	maxIQN  = 223 // ISCSI_IQN_LEN less its NUL (target/iscsi_target_core.h)
)

// CheckPortID checks an nvmet port id as nvmet_ports_make does: a u16 as
// kstrtou16(name, 0) reads it (decimal, 0x hex, 0 octal).
func CheckPortID(id string) error {
	if err := checkName(id); err != nil {
		return fmt.Errorf("nvmet port id: %w", err)
	}
	digits, base := id, 10
	switch {
	case len(id) > 2 && (id[:2] == "0x" || id[:2] == "0X"):
		digits, base = id[2:], 16
	case len(id) > 1 && id[0] == '0':
		digits, base = id[1:], 8
	}
	if strings.ContainsAny(digits, "+-_") {
		digits = ""
	}
	if _, err := strconv.ParseUint(digits, base, 16); err != nil {
		return fmt.Errorf("nvmet port id %q: not a number from 0 to 65535", id)
	}
	return nil
}

// CheckLink checks a port's link: its name a configfs entry, its target
// an NQN the kernel can have (nvmet_subsys_make).
func CheckLink(l Link) error {
	if err := checkName(l.Name); err != nil {
		return fmt.Errorf("link name: %w", err)
	}
	if err := checkName(l.NQN); err != nil {
		return fmt.Errorf("link target: %w", err)
	}
	if len(l.NQN) > maxNQN {
		return fmt.Errorf("link target %.40q…: an NQN is at most %d bytes", l.NQN, maxNQN)
	}
	return nil
}

// CheckPortalID checks "<iqn>/tpgt_<N>/<np>" as LIO's configfs makes them:
// an IQN of at most 223 bytes, tpgt_ and a u16, an np that ParseNP reads.
func CheckPortalID(id string) error {
	iqn, tpg, np, err := ParsePortalID(id)
	if err != nil {
		return err
	}
	if len(iqn) > maxIQN {
		return fmt.Errorf("portal %q: an IQN is at most %d bytes", id, maxIQN)
	}
	n, ok := strings.CutPrefix(tpg, "tpgt_")
	if _, err := strconv.ParseUint(n, 10, 16); !ok || err != nil {
		return fmt.Errorf("portal %q: %q is not tpgt_<0-65535>", id, tpg)
	}
	if _, err := ParseNP(np); err != nil {
		return fmt.Errorf("portal %q: %w", id, err)
	}
	return nil
}

// checkName refuses a directory entry that could lead out of the tree or
// confuse a line-oriented reader.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid name %q", name)
	}
	if len(name) > maxName {
		return fmt.Errorf("invalid name %.40q…: longer than %d bytes", name, maxName)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("invalid name %q: control character", name)
		}
	}
	return nil
}

func (f *FS) nvmet(elem ...string) string {
	return filepath.Join(append([]string{f.root, "nvmet"}, elem...)...)
}

func (f *FS) iscsi(elem ...string) string {
	return filepath.Join(append([]string{f.root, "target", "iscsi"}, elem...)...)
}

// names lists a directory through Ops, dropping invalid names. A missing
// directory is an empty list when optional.
func (f *FS) names(dir string, optional bool) ([]string, error) {
	names, err := f.ops.ReadDirNames(dir)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if checkName(n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// Ports lists every nvmet port with its addr_* attributes (Links empty:
// read them with Links, only for the ports that need them). A missing
// nvmet tree (module not loaded) is an empty list.
func (f *FS) Ports() ([]Port, error) {
	ids, err := f.names(f.nvmet("ports"), true)
	if err != nil {
		return nil, fmt.Errorf("nvmet ports: %w", err)
	}
	dirs := make([]string, len(ids))
	for i, id := range ids {
		dirs[i] = f.nvmet("ports", id)
	}
	var ports []Port
	for i, a := range f.ops.ReadAttrs(dirs, portAttrs) {
		p, err := f.portFrom(ids[i], a)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while we read, or not a directory
		}
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	slices.SortStableFunc(ports, func(a, b Port) int { return ComparePortIDs(a.ID, b.ID) })
	return ports, nil
}

// portAttrs are the attributes of a port that Port mirrors, in field order.
var portAttrs = []string{"addr_trtype", "addr_adrfam", "addr_traddr", "addr_trsvcid"}

// ComparePortIDs orders nvmet port ids numerically when both are numbers.
func ComparePortIDs(a, b string) int {
	ai, aerr := strconv.Atoi(a)
	bi, berr := strconv.Atoi(b)
	if aerr == nil && berr == nil {
		return ai - bi
	}
	return strings.Compare(a, b)
}

// Port reads nvmet/ports/<id> with its links. A missing port is
// fs.ErrNotExist. Problems with the port's content are reported in
// Port.Err, not as an error.
func (f *FS) Port(id string) (Port, error) {
	if err := checkName(id); err != nil {
		return Port{}, fmt.Errorf("nvmet port: %w", err)
	}
	p, err := f.portFrom(id, f.ops.ReadAttrs([]string{f.nvmet("ports", id)}, portAttrs)[0])
	if err != nil {
		return Port{}, err
	}
	links, err := f.links(id)
	if err != nil {
		if g := f.gone(id); g != nil {
			return Port{}, g
		}
		p.Err = errors.Join(p.Err, err)
	}
	p.Links = links
	return p, nil
}

// portFrom makes the port id of what ReadAttrs found in its directory.
func (f *FS) portFrom(id string, a Attrs) (Port, error) {
	if a.Err != nil {
		return Port{}, fmt.Errorf("nvmet port %s: %w", id, a.Err)
	}
	p := Port{ID: id}
	var trtype, adrfam string
	dst := []*string{&trtype, &adrfam, &p.Traddr, &p.Trsvcid}
	for i, name := range portAttrs {
		if err := a.Errs[i]; err != nil {
			if g := f.gone(id); g != nil {
				return Port{}, g
			}
			p.Err = errors.Join(p.Err, fmt.Errorf("nvmet port %s: %s: %w", id, name, err))
			continue
		}
		*dst[i] = a.Values[i]
	}
	p.Trtype, p.Adrfam = Transport(trtype), AddrFamily(adrfam)
	return p, nil
}

// gone tells a read that failed because the port was removed meanwhile
// ("no such port") from a problem of the port: it is fs.ErrNotExist when
// the port's directory no longer exists, nil otherwise.
func (f *FS) gone(id string) error {
	if _, err := f.ops.Lstat(f.nvmet("ports", id)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("nvmet port %s: %w", id, err)
	}
	return nil
}

// Links reads nvmet/ports/<id>/subsystems/* in creation order; a missing
// port is fs.ErrNotExist.
func (f *FS) Links(id string) ([]Link, error) {
	if err := checkName(id); err != nil {
		return nil, fmt.Errorf("nvmet port: %w", err)
	}
	links, err := f.links(id)
	if err != nil {
		if g := f.gone(id); g != nil {
			return nil, g
		}
	}
	return links, err
}

// links reads ports/<id>/subsystems/*, resolving every symlink and
// refusing any that points outside nvmet/subsystems of this root.
func (f *FS) links(id string) ([]Link, error) {
	dir := f.nvmet("ports", id, "subsystems")
	names, err := f.ops.ReadDirNames(dir)
	if err != nil {
		return nil, fmt.Errorf("nvmet port %s: subsystems: %w", id, err)
	}
	for _, n := range names {
		// A link we cannot name cannot be relinked: the port is shown,
		// never touched (unlinking the others would not disable it).
		if err := checkName(n); err != nil {
			return nil, fmt.Errorf("nvmet port %s: subsystems: %w", id, err)
		}
	}
	subsys := f.nvmet("subsystems")
	var links []Link
	for _, n := range names {
		target, err := f.ops.Readlink(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return links, fmt.Errorf("nvmet port %s: link %q: %w", id, n, err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		target = filepath.Clean(target)
		if filepath.Dir(target) != subsys {
			return links, fmt.Errorf("nvmet port %s: link %q points at %q, outside %s", id, n, target, subsys)
		}
		links = append(links, Link{Name: n, NQN: filepath.Base(target)})
	}
	return links, nil
}

// Portals lists every LIO iSCSI network portal. A missing target/iscsi
// tree (iscsi_target_mod not loaded) is an empty list.
func (f *FS) Portals() ([]Portal, error) {
	iqns, err := f.names(f.iscsi(), true)
	if err != nil {
		return nil, fmt.Errorf("lio iscsi: %w", err)
	}
	// One unreadable target must not hide the others: errors are
	// collected and returned with every portal that could be read.
	var found []Portal // IQN, TPG, NP
	var dirs []string
	var errs []error
	for _, iqn := range iqns {
		if !strings.Contains(iqn, ".") && !strings.Contains(iqn, ":") {
			continue // discovery_auth and other non-target groups
		}
		tpgs, err := f.names(f.iscsi(iqn), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("lio target %s: %w", iqn, err))
			continue
		}
		for _, tpg := range tpgs {
			if !strings.HasPrefix(tpg, "tpgt_") {
				continue
			}
			nps, err := f.names(f.iscsi(iqn, tpg, "np"), true)
			if err != nil {
				errs = append(errs, fmt.Errorf("lio target %s/%s: np: %w", iqn, tpg, err))
				continue
			}
			if len(nps) == 0 || !f.realDirs(f.iscsi(iqn), f.iscsi(iqn, tpg), f.iscsi(iqn, tpg, "np")) {
				continue
			}
			for _, np := range nps {
				found = append(found, Portal{IQN: iqn, TPG: tpg, NP: np})
				dirs = append(dirs, f.iscsi(iqn, tpg, "np", np))
			}
		}
	}
	portals := make([]Portal, 0, len(found))
	for i, a := range f.ops.ReadAttrs(dirs, portalAttrs) {
		p, err := portalFrom(found[i], a)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		portals = append(portals, p)
	}
	slices.SortStableFunc(portals, comparePortalIDs)
	return portals, errors.Join(errs...)
}

// comparePortalIDs orders portals as strings.Compare of their IDs
// (<iqn>/<tpg>/<np>) would, without building the IDs.
func comparePortalIDs(a, b Portal) int {
	as := [3]string{a.IQN, a.TPG, a.NP}
	bs := [3]string{b.IQN, b.TPG, b.NP}
	// Walk both IDs byte by byte: part i, then "/", then part i+1.
	ai, aj, bi, bj := 0, 0, 0, 0
	at := func(parts *[3]string, i, j int) (byte, bool) {
		if i > 2 {
			return 0, false
		}
		if j < len(parts[i]) {
			return parts[i][j], true
		}
		if i == 2 {
			return 0, false
		}
		return '/', true
	}
	step := func(parts *[3]string, i, j *int) {
		if *j < len(parts[*i]) {
			*j++
			return
		}
		*i, *j = *i+1, 0
	}
	for {
		x, okA := at(&as, ai, aj)
		y, okB := at(&bs, bi, bj)
		switch {
		case !okA && !okB:
			return 0
		case !okA:
			return -1
		case !okB:
			return 1
		case x != y:
			return cmp.Compare(x, y)
		}
		step(&as, &ai, &aj)
		step(&bs, &bi, &bj)
	}
}

// portalAttrs are the attributes of an np that Portal mirrors.
var portalAttrs = []string{"iser"}

// Portal reads one portal by its ID (<iqn>/<tpgt_N>/<np>).
func (f *FS) Portal(id string) (Portal, error) {
	iqn, tpg, np, err := ParsePortalID(id)
	if err != nil {
		return Portal{}, err
	}
	if !f.realDirs(f.iscsi(iqn), f.iscsi(iqn, tpg), f.iscsi(iqn, tpg, "np")) {
		return Portal{}, fmt.Errorf("lio portal %s: %w", id, fs.ErrNotExist)
	}
	a := f.ops.ReadAttrs([]string{f.iscsi(iqn, tpg, "np", np)}, portalAttrs)[0]
	return portalFrom(Portal{IQN: iqn, TPG: tpg, NP: np}, a)
}

// realDirs reports whether every path is a directory, not a symlink:
// configfs has no symlinks on the path to a portal, and one would lead
// writes out of the root.
func (f *FS) realDirs(paths ...string) bool {
	for _, d := range paths {
		if st, err := f.ops.Lstat(d); err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

// portalFrom completes p (IQN, TPG, NP) with what ReadAttrs found in its
// np directory, whose parents were checked.
func portalFrom(p Portal, a Attrs) (Portal, error) {
	if a.Err != nil {
		return Portal{}, fmt.Errorf("lio portal %s: %w", p.ID(), a.Err)
	}
	var err error
	if p.Addr, err = ParseNP(p.NP); err != nil {
		p.Err = fmt.Errorf("lio portal %s: %w", p.ID(), err)
	}
	switch v, err := a.Values[0], a.Errs[0]; {
	case errors.Is(err, fs.ErrNotExist):
		// ib_isert was never loaded on this kernel: no iser attribute.
	case err != nil:
		p.Err = fmt.Errorf("lio portal %s: iser: %w", p.ID(), err)
	case v == "1":
		p.ISER = true
	case v == "0":
	default:
		p.Err = fmt.Errorf("lio portal %s: iser reads %q, want 0 or 1", p.ID(), v)
	}
	return p, nil
}

// Unlink removes ports/<id>/subsystems/<link.Name>. Unlinking the last
// subsystem disables the port (the listener goes away).
func (f *FS) Unlink(portID string, l Link) error {
	if err := checkName(portID); err != nil {
		return fmt.Errorf("nvmet port: %w", err)
	}
	if err := checkName(l.Name); err != nil {
		return fmt.Errorf("nvmet port %s: %w", portID, err)
	}
	if err := f.ops.Remove(f.nvmet("ports", portID, "subsystems", l.Name)); err != nil {
		return fmt.Errorf("nvmet port %s: unlink %q: %w", portID, l.Name, err)
	}
	return nil
}

// Relink creates ports/<id>/subsystems/<link.Name> → subsystems/<link.NQN>.
// The first link enables the port; when the transport cannot bind, the
// kernel refuses the link (EADDRNOTAVAIL: no netdev holds the address,
// ENODEV: no RDMA device on it) and no link is left behind.
func (f *FS) Relink(portID string, l Link) error {
	for _, n := range []string{portID, l.Name, l.NQN} {
		if err := checkName(n); err != nil {
			return fmt.Errorf("nvmet port %s: relink: %w", portID, err)
		}
	}
	target := f.nvmet("subsystems", l.NQN)
	if err := f.ops.Symlink(target, f.nvmet("ports", portID, "subsystems", l.Name)); err != nil {
		return fmt.Errorf("nvmet port %s: relink %q: %w", portID, l.Name, err)
	}
	return nil
}

// SetISER writes np/<np>/iser. 1 adds the iSER listener (refused with the
// bind error when the address has no RDMA device); 0 removes it.
func (f *FS) SetISER(portalID string, on bool) error {
	iqn, tpg, np, err := ParsePortalID(portalID)
	if err != nil {
		return err
	}
	v := "0"
	if on {
		v = "1"
	}
	if err := f.ops.WriteAttr(f.iscsi(iqn, tpg, "np", np, "iser"), v); err != nil {
		return fmt.Errorf("lio portal %s: write iser=%s: %w", portalID, v, err)
	}
	return nil
}

// Subsystems lists nvmet/subsystems/*.
func (f *FS) Subsystems() ([]string, error) {
	n, err := f.names(f.nvmet("subsystems"), true)
	if err != nil {
		return nil, fmt.Errorf("nvmet subsystems: %w", err)
	}
	return n, nil
}
