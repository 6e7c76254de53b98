package rdma

import (
	"cmp"
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
// order, a batch at a time, and stops after the batch in which the last
// key of need was seen — at once when need is empty. The kernel gives a
// new entry the lowest free index (cache.c), so the entries in use are at
// the start of the table: with every key found, the 1,024 entries of an
// rxe port cost a batch, not 1,024 files. A key that is not in the table
// (not filled yet, or never) makes it read the whole table, as
// ReadSysfsGIDs does. The result holds the valid entries read.
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
	gids, err := readGIDs(sysfs{root: pr}, sysfs{root: gr, dir: gdir}, need)
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

// Batches of readGIDs with a need: the first, and the largest (each batch
// is twice the one before).
const (
	gidFirstBatch = 16
	gidMaxBatch   = 256
)

// readGIDs reads the GID table of a port: port is the port directory,
// gids its gids/ directory. With need non-nil it reads in index order and
// stops after the batch in which every key of need was seen.
func readGIDs(port, gids attrFS, need map[GIDKey]bool) ([]GID, error) {
	names, err := gids.list(".")
	if err != nil {
		return nil, fmt.Errorf("gids: %w", err)
	}
	if len(names) > maxGIDEntries {
		return nil, fmt.Errorf("gids: %d entries, more than %d", len(names), maxGIDEntries)
	}
	type entry struct {
		name string
		idx  uint32
	}
	es := make([]entry, len(names))
	for i, n := range names {
		idx, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("gids/%s: not a GID index", n)
		}
		es[i] = entry{n, uint32(idx)}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.idx, b.idx) })
	names = names[:0]
	for _, e := range es {
		names = append(names, e.name)
	}
	// Most entries are empty (rxe has 1,024, mlx5 256 per port): read
	// every gids/<i> first, several at a time, and read the attributes
	// (and the entry again) only for the ones in use.
	var table []GID
	missing := len(need)
	batch := len(names)
	if need != nil {
		batch = gidFirstBatch
	}
	for start := 0; start < len(names) && (need == nil || missing > 0); {
		end := min(start+batch, len(names))
		empty := preread(gids, names[start:end])
		for i := start; i < end; i++ {
			if empty[i-start] {
				continue
			}
			g, ok, err := readGID(port, gids, es[i].idx)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			table = append(table, g)
			if k := (GIDKey{g.IP(), g.Netdev}); g.Netdev != "" && need[k] {
				need[k] = false // seen: counted once
				missing--
			}
		}
		start, batch = end, min(2*batch, gidMaxBatch)
	}
	return table, nil
}

// gidReaders is how many gids/<i> files preread reads at a time.
const gidReaders = 4

// preread reads gids/<name> for every name, gidReaders at a time, and
// reports the ones that read as the zero GID (empty). An error is not
// "empty": readGID reads that entry again and reports it. The readers
// take the next name from a shared counter (no channel: a hand-off per
// entry costs a wake-up, under TCG a slow one).
func preread(gids attrFS, names []string) []bool {
	empty := make([]bool, len(names))
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(gidReaders, len(names)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				raw, err := readRawGID(gids, names[i])
				empty[i] = err == nil && raw == ([16]byte{})
			}
		})
	}
	wg.Wait()
	return empty
}

// readGID reads entry i; ok is false for an empty entry.
//
// The kernel (drivers/infiniband/core/sysfs.c) prints an empty or invalid
// entry as the zero GID in gids/<i> (show_port_gid), and fails the read of
// gid_attrs/ndevs/<i> and gid_attrs/types/<i> with EINVAL
// (_show_port_gid_attr: "-EINVAL is returned for user space compatibility
// reasons"); ndevs/<i> of a valid entry without a netdev (IB; siw before
// 6.12, whose config_non_roce_gid_cache sets none) fails with EINVAL too
// (print_ndev). Observed on 6.1 and 6.12: see testdata/README.md. EINVAL
// there means "none", as does a missing file (kernels without types).
func readGID(port, gids attrFS, i uint32) (GID, bool, error) {
	is := strconv.FormatUint(uint64(i), 10)
	for range gidAttempts {
		raw, err := readRawGID(gids, is)
		if err != nil {
			return GID{}, false, err
		}
		if raw == ([16]byte{}) {
			return GID{}, false, nil
		}
		g := GID{Index: i, Raw: raw}
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
	}
	return GID{}, false, fmt.Errorf("gids/%s: changed during %d reads", is, gidAttempts)
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
