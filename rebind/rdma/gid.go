package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// maxGIDEntries bounds the size of a GID table read from sysfs (rxe has
// 1024 entries per port, mlx5 256).
const maxGIDEntries = 1 << 16

// gidAttempts bounds the re-reads of a GID entry that changed while its
// attributes were read (roce_gid_mgmt.c updates the table from a work queue).
const gidAttempts = 3

// ReadSysfsGIDs reads the GID table of port <port> of RDMA device <dev>
// under sysfsRoot (<sysfsRoot>/class/infiniband/<dev>/ports/<port>/gids/*
// and gid_attrs/{ndevs,types}/*). Reads are bounded and resolved inside
// sysfsRoot (os.Root); a missing device or port wraps fs.ErrNotExist. Empty
// (all-zero) entries are left out; the result is sorted by Index.
func ReadSysfsGIDs(sysfsRoot, dev string, port uint32) ([]GID, error) {
	return readSysfsGIDs(sysfsRoot, dev, port, nil)
}

// ReadSysfsGIDsNeeded is ReadSysfsGIDs for a RoCE port of which only the
// entries of need can matter (RoCENeeds): it reads the table in index
// order and stops at the entry in which the last key of need was seen —
// at once when need is empty (readNeededGIDs). The kernel gives a new
// entry the lowest free index (cache.c), so the entries in use are at the
// start of the table: with every key found, the 1,024 entries of an rxe
// port cost the few in use and the empty ones between them, and the
// directory is not listed. A key that is not in the table (not filled
// yet, or never) makes it read the whole table, as ReadSysfsGIDs does.
// The result holds the valid entries read.
func ReadSysfsGIDsNeeded(sysfsRoot, dev string, port uint32, need map[GIDKey]bool) ([]GID, error) {
	return readSysfsGIDs(sysfsRoot, dev, port, maps.Clone(need)) // readGIDs marks the keys it saw
}

// GIDKey is what a RoCE GID entry is looked up by (Carriers): the IP it
// encodes (unmapped, no zone) and the netdev it was added for.
type GIDKey struct {
	IP     netip.Addr
	Netdev string
}

// readSysfsGIDs reads the table, all of it when need is nil (readGIDs).
func readSysfsGIDs(sysfsRoot, dev string, port uint32, need map[GIDKey]bool) ([]GID, error) {
	if !validName(dev) {
		return nil, fmt.Errorf("sysfs rdma device %q: invalid name", dev)
	}
	root, err := os.OpenRoot(sysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("sysfs %s: %w", sysfsRoot, err)
	}
	defer root.Close()
	dir := path.Join("class/infiniband", dev, "ports", strconv.FormatUint(uint64(port), 10))
	// Roots at the port directory and at its gids/: an open then walks
	// one or three names, not eight (rxe has 1024 entries), and nothing
	// may lead out of the port directory (sysfs has only attribute files
	// there).
	pr, err := root.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("sysfs rdma device %q port %d: %w", dev, port, err)
	}
	defer pr.Close()
	gr, err := pr.OpenRoot("gids")
	if err != nil {
		return nil, fmt.Errorf("sysfs %s: %w", dir, err)
	}
	defer gr.Close()
	gdir, err := gr.Open(".")
	if err != nil {
		return nil, fmt.Errorf("sysfs %s/gids: %w", dir, err)
	}
	defer gdir.Close()
	pd := &portDir{sysfs: sysfs{root: pr}}
	defer pd.close()
	gids, err := readGIDs(pd, sysfs{root: gr, dir: gdir}, need)
	if err != nil {
		return nil, fmt.Errorf("sysfs %s: %w", dir, err)
	}
	return gids, nil
}

// attrFS is what readGIDs needs of sysfs (a fake in tests returns the
// errnos of the real attribute files).
type attrFS interface {
	list(dir string) ([]string, error)
	read(p string) (string, error)
}

// Batches of readNeededGIDs: the entries read one at a time first, then
// the first batch read by several readers, and the largest (each batch is
// twice the one before).
const (
	gidFirstBatch = 16
	gidMaxBatch   = 256
)

// readGIDs reads the GID table of a port: port is the port directory,
// gids its gids/ directory. With need nil the whole table, as its
// directory lists it; else only as far as need matters (readNeededGIDs).
func readGIDs(port, gids attrFS, need map[GIDKey]bool) ([]GID, error) {
	if need != nil {
		return readNeededGIDs(port, gids, need)
	}
	names, err := gids.list(".")
	if err != nil {
		return nil, fmt.Errorf("gids: %w", err)
	}
	if len(names) > maxGIDEntries {
		return nil, fmt.Errorf("gids: %d entries, more than %d", len(names), maxGIDEntries)
	}
	es := make([]uint32, len(names))
	for i, n := range names {
		idx, err := strconv.ParseUint(n, 10, 32)
		if err != nil || strconv.FormatUint(idx, 10) != n { // the kernel names them "%d"; each is read by its index
			return nil, fmt.Errorf("gids/%s: not a GID index", n)
		}
		es[i] = uint32(idx)
	}
	slices.Sort(es)
	// Most entries are empty (rxe has 1,024, mlx5 256 per port): read
	// every gids/<i> first, several at a time, and read the attributes
	// (and the entry again) only for the ones in use.
	var table []GID
	pre := preread(gids, es)
	for i, r := range pre {
		if r.err == nil && r.raw == ([16]byte{}) {
			continue
		}
		first := &r.raw
		if r.err != nil {
			first = nil // read it again, and report it
		}
		g, ok, err := readGID(port, gids, es[i], first)
		if err != nil {
			return nil, err
		}
		if ok {
			table = append(table, g)
		}
	}
	return table, nil
}

// readNeededGIDs reads the table of a RoCE port in index order and stops
// at the entry in which the last key of need is seen. The kernel names
// the entries gids/0 … gids/<gid_tbl_len-1> (alloc_port_table_group,
// drivers/infiniband/core/sysfs.c) and gives a new entry the lowest free
// index (cache.c), so the keys are in the first few entries: the table is
// probed by index, not listed (its directory has 1,024 names on rxe), and
// the first gidFirstBatch entries one at a time, each entry in use read
// whole before the next (rxe with one IPv4 address has two: the default
// GID and the IPv4 one: eight reads — gids/<i>, its netdev and type,
// gids/<i> again — instead of a listing of 1,024 names and a batch of 16
// entries). A key still missing makes it read on in batches, several
// readers at a time, to the end of the table (the first index whose
// gids/<i> does not exist).
func readNeededGIDs(port, gids attrFS, need map[GIDKey]bool) ([]GID, error) {
	var table []GID
	missing := len(need)
	take := func(g GID) {
		table = append(table, g)
		if k := (GIDKey{g.IP(), g.Netdev}); g.Netdev != "" && need[k] {
			need[k] = false // seen: counted once
			missing--
		}
	}
	i := uint32(0)
	for ; i < gidFirstBatch && missing > 0; i++ {
		raw, err := readRawGID(gids, strconv.FormatUint(uint64(i), 10))
		if errors.Is(err, fs.ErrNotExist) {
			return endOfTable(port, gids, i, table)
		}
		if err != nil {
			return nil, err
		}
		if raw == ([16]byte{}) {
			continue
		}
		g, ok, err := readGID(port, gids, i, &raw)
		if err != nil {
			return nil, err
		}
		if ok {
			take(g)
		}
	}
	for batch := uint32(gidFirstBatch); missing > 0; batch = min(2*batch, gidMaxBatch) {
		if i >= maxGIDEntries {
			return nil, fmt.Errorf("gids: more than %d entries", maxGIDEntries)
		}
		idx := make([]uint32, min(batch, maxGIDEntries-i))
		for j := range idx {
			idx[j] = i + uint32(j)
		}
		pre := preread(gids, idx)
		for j, r := range pre {
			if errors.Is(r.err, fs.ErrNotExist) {
				return endOfTable(port, gids, idx[j], table)
			}
			if r.err == nil && r.raw == ([16]byte{}) {
				continue
			}
			first := &r.raw
			if r.err != nil {
				first = nil
			}
			g, ok, err := readGID(port, gids, idx[j], first)
			if err != nil {
				return nil, err
			}
			if ok {
				take(g)
			}
		}
		i += uint32(len(idx))
	}
	return table, nil
}

// endOfTable returns table, read up to entry n (whose gids/<n> does not
// exist), once it is told from the directory having gone: gids/<n-1> must
// still read. With no entry 0 the table is read as its directory lists it.
func endOfTable(port, gids attrFS, n uint32, table []GID) ([]GID, error) {
	if n == 0 {
		return readGIDs(port, gids, nil)
	}
	if _, err := readRawGID(gids, strconv.FormatUint(uint64(n-1), 10)); err != nil {
		return nil, err
	}
	return table, nil
}

// gidReaders is how many gids/<i> files preread reads at a time.
const gidReaders = 4

// rawRead is one read of gids/<i>: the GID, or the error.
type rawRead struct {
	raw [16]byte
	err error
}

// preread reads gids/<i> for every index of idx (ascending), gidReaders at
// a time. Once an entry does not exist (the end of the table), entries
// after it are not read (they report fs.ErrNotExist). The readers take the
// next index from a shared counter (no channel: a hand-off per entry costs
// a wake-up, under TCG a slow one).
func preread(gids attrFS, idx []uint32) []rawRead {
	out := make([]rawRead, len(idx))
	var wg sync.WaitGroup
	var next atomic.Int64
	var end atomic.Int64 // the first index found missing
	end.Store(int64(len(idx)))
	for range min(gidReaders, len(idx)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(idx) {
					return
				}
				if int64(i) > end.Load() {
					out[i].err = fs.ErrNotExist
					continue
				}
				out[i].raw, out[i].err = readRawGID(gids, strconv.FormatUint(uint64(idx[i]), 10))
				if errors.Is(out[i].err, fs.ErrNotExist) {
					for e := end.Load(); int64(i) < e && !end.CompareAndSwap(e, int64(i)); e = end.Load() {
					}
				}
			}
		})
	}
	wg.Wait()
	return out
}

// readGID reads entry i; ok is false for an empty entry. first, when not
// nil, is what gids/<i> read just before (preread, readNeededGIDs): it is
// not read again before the attributes.
//
// The kernel (drivers/infiniband/core/sysfs.c) prints an empty or invalid
// entry as the zero GID in gids/<i> (show_port_gid), and fails the read of
// gid_attrs/ndevs/<i> and gid_attrs/types/<i> with EINVAL
// (_show_port_gid_attr: "-EINVAL is returned for user space compatibility
// reasons"); ndevs/<i> of a valid entry without a netdev (IB; siw before
// 6.12, whose config_non_roce_gid_cache sets none) fails with EINVAL too
// (print_ndev). Observed on 6.1 and 6.12: see testdata/README.md. EINVAL
// there means "none", as does a missing file (kernels without types).
func readGID(port, gids attrFS, i uint32, first *[16]byte) (GID, bool, error) {
	is := strconv.FormatUint(uint64(i), 10)
	var raw [16]byte
	if first != nil {
		raw = *first
	} else {
		var err error
		if raw, err = readRawGID(gids, is); err != nil {
			return GID{}, false, err
		}
	}
	for range gidAttempts {
		if raw == ([16]byte{}) {
			return GID{}, false, nil
		}
		g := GID{Index: i, Raw: raw}
		var err error
		if g.Netdev, err = readGIDAttr(port, "gid_attrs/ndevs/"+is); err != nil {
			return GID{}, false, err
		}
		if g.Netdev != "" && !validName(g.Netdev) {
			return GID{}, false, fmt.Errorf("gid_attrs/ndevs/%s: invalid netdev name %q", is, g.Netdev)
		}
		if g.Type, err = readGIDAttr(port, "gid_attrs/types/"+is); err != nil {
			return GID{}, false, err
		}
		// The entry may have been deleted or replaced between the reads:
		// keep the attributes only when the GID is still the same.
		again, err := readRawGID(gids, is)
		if err != nil {
			return GID{}, false, err
		}
		if again == raw {
			return g, true, nil
		}
		raw = again
	}
	return GID{}, false, fmt.Errorf("gids/%s: changed during %d reads", is, gidAttempts)
}

// portDir is a port directory: gid_attrs/ndevs/<i> and gid_attrs/types/<i>
// are read through their directory, opened at the first read (one openat,
// read and close per attribute, as gids/<i>; a path from the port
// directory is walked a name at a time and the file registered with the
// poller: some ten system calls). Not for concurrent use: readGID reads the
// attributes, one entry at a time.
type portDir struct {
	sysfs
	subs map[string]*sub // by directory
}

type sub struct {
	root *os.Root // nil: not openable, read from the port directory
	dir  *os.File
}

var gidAttrDirs = map[string]bool{"gid_attrs/ndevs": true, "gid_attrs/types": true}

func (p *portDir) read(name string) (string, error) {
	d, base := path.Split(name)
	d = strings.TrimSuffix(d, "/")
	if !gidAttrDirs[d] || !validName(base) {
		return p.sysfs.read(name)
	}
	s, ok := p.subs[d]
	if !ok {
		s = &sub{}
		if r, err := p.root.OpenRoot(d); err == nil {
			if f, err := r.Open("."); err == nil {
				s.root, s.dir = r, f
			} else {
				r.Close()
			}
		}
		if p.subs == nil {
			p.subs = map[string]*sub{}
		}
		p.subs[d] = s
	}
	if s.root == nil {
		// Missing (a kernel without types) or not a directory: the path
		// read reports it as it is.
		return p.sysfs.read(name)
	}
	v, err := sysfs{root: s.root, dir: s.dir}.readAt(base)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

func (p *portDir) close() {
	for _, s := range p.subs {
		if s.root != nil {
			s.dir.Close()
			s.root.Close()
		}
	}
}

// readRawGID reads gids/<i> (i = is, in gids).
func readRawGID(gids attrFS, is string) ([16]byte, error) {
	s, err := gids.read(is)
	if err != nil {
		return [16]byte{}, fmt.Errorf("gids/%s: %w", is, err)
	}
	raw, err := parseGID16(s)
	if err != nil {
		return [16]byte{}, fmt.Errorf("gids/%s: %w", is, err)
	}
	return raw, nil
}

// readGIDAttr reads gid_attrs/{ndevs,types}/<i>; "" when the entry has none.
func readGIDAttr(fsys attrFS, p string) (string, error) {
	v, err := fsys.read(p)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, syscall.EINVAL), errors.Is(err, fs.ErrNotExist):
		return "", nil
	default:
		return "", err
	}
}

// parseGID16 parses a GID as sysfs prints it ("%pI6": eight groups of four
// hex digits, "fe80:0000:0000:0000:a8bb:ccff:fedd:eeff").
func parseGID16(s string) ([16]byte, error) {
	var g [16]byte
	parts := strings.Split(s, ":")
	if len(parts) != 8 {
		return g, fmt.Errorf("%q: want eight groups of four hex digits", s)
	}
	for i, p := range parts {
		if len(p) != 4 {
			return g, fmt.Errorf("%q: want eight groups of four hex digits", s)
		}
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return g, fmt.Errorf("%q: %w", s, err)
		}
		g[2*i], g[2*i+1] = byte(v>>8), byte(v)
	}
	return g, nil
}
