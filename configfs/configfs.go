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
// real kernel's system calls, its writes kept beneath root.
func New(root string) *FS { return NewWithOps(root, OSOps{Root: root}) }

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

func (f *FS) nvmet(elem ...string) string {
	return filepath.Join(append([]string{f.root, "nvmet"}, elem...)...)
}

func (f *FS) iscsi(elem ...string) string {
	return filepath.Join(append([]string{f.root, "target", "iscsi"}, elem...)...)
}

// iserPath is f.iscsi(iqn, tpg, "np", np, "iser") of a parsed portal id,
// made without filepath.Join's cleaning: each part is a name (checkName),
// which cleaning leaves as it is, and root is clean (NewWithOps). A
// shared portal's heal makes one for each of its sharers.
func (f *FS) iserPath(iqn, tpg, np string) string {
	root := f.root
	if root == "/" {
		root = ""
	}
	return root + "/target/iscsi/" + iqn + "/" + tpg + "/np/" + np + "/iser"
}

// names lists a directory through Ops: the names it can represent, and
// the errors of those it cannot (checkName), which the caller reports as
// objects it shows and never touches. A missing directory is an empty
// list when optional.
func (f *FS) names(dir string, optional bool) ([]string, []badName, error) {
	names, err := f.ops.ReadDirNames(dir)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	out := names[:0]
	var bad []badName
	for _, n := range names {
		if err := checkName(n); err != nil {
			bad = append(bad, badName{n, err})
			continue
		}
		out = append(out, n)
	}
	return out, bad, nil
}

// badName is a directory entry whose name the engine cannot represent.
type badName struct {
	name string
	err  error
}

// invalid is how such an entry is reported: as an object shown (status,
// check) and never read further nor written.
func (b badName) invalid() error {
	return fmt.Errorf("%w: remove it and create it again with a name of printable characters", b.err)
}

// Ports lists every nvmet port with its addr_* attributes (Links empty:
// read them with Links, only for the ports that need them). A missing
// nvmet tree (module not loaded) is an empty list.
func (f *FS) Ports() ([]Port, error) {
	ids, bad, err := f.names(f.nvmet("ports"), true)
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
	for _, b := range bad {
		ports = append(ports, Port{ID: b.name, Err: fmt.Errorf("nvmet port: %w", b.invalid())})
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
	iqns, bad, err := f.names(f.iscsi(), true)
	if err != nil {
		return nil, fmt.Errorf("lio iscsi: %w", err)
	}
	// One unreadable target must not hide the others: errors are
	// collected and returned with every portal that could be read.
	var found []Portal // IQN, TPG, NP
	var dirs []string
	var errs []error
	for _, b := range bad {
		errs = append(errs, fmt.Errorf("lio target: %w", b.invalid()))
	}
	for _, iqn := range iqns {
		if !strings.Contains(iqn, ".") && !strings.Contains(iqn, ":") {
			continue // discovery_auth and other non-target groups
		}
		tpgs, bad, err := f.names(f.iscsi(iqn), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("lio target %s: %w", iqn, err))
			continue
		}
		for _, b := range bad {
			if strings.HasPrefix(b.name, "tpgt_") {
				errs = append(errs, fmt.Errorf("lio target %s: %w", iqn, b.invalid()))
			}
		}
		for _, tpg := range tpgs {
			if !strings.HasPrefix(tpg, "tpgt_") {
				continue
			}
			nps, bad, err := f.names(f.iscsi(iqn, tpg, "np"), true)
			if err != nil {
				errs = append(errs, fmt.Errorf("lio target %s/%s: np: %w", iqn, tpg, err))
				continue
			}
			for _, b := range bad {
				errs = append(errs, fmt.Errorf("lio portal %s/%s: %w", iqn, tpg, b.invalid()))
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
	slices.SortStableFunc(portals, ComparePortals)
	return portals, errors.Join(errs...)
}

// ComparePortals orders portals as strings.Compare of their IDs
// (<iqn>/<tpg>/<np>) would, without building the IDs.
func ComparePortals(a, b Portal) int {
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

// Subsystems lists nvmet/subsystems/*.
func (f *FS) Subsystems() ([]string, error) {
	n, _, err := f.names(f.nvmet("subsystems"), true) // a subsystem is only a link's target: one it cannot name is no port's
	if err != nil {
		return nil, fmt.Errorf("nvmet subsystems: %w", err)
	}
	return n, nil
}
