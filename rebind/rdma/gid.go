package rdma

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	gids, err := readGIDs(sysfs{root: pr}, sysfs{root: gr, dir: gdir})
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

// readGIDs reads the GID table of a port: port is the port directory,
// gids its gids/ directory.
func readGIDs(port, gids attrFS) ([]GID, error) {
	names, err := gids.list(".")
	if err != nil {
		return nil, fmt.Errorf("gids: %w", err)
	}
	if len(names) > maxGIDEntries {
		return nil, fmt.Errorf("gids: %d entries, more than %d", len(names), maxGIDEntries)
	}
	idxs := make([]uint32, len(names))
	for i, n := range names {
		idx, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("gids/%s: not a GID index", n)
		}
		idxs[i] = uint32(idx)
	}
	// Most entries are empty (rxe has 1,024, mlx5 256 per port): read
	// every gids/<i> first, several at a time, and read the attributes
	// (and the entry again) only for the ones in use.
	empty := preread(gids, names)
	var table []GID
	for i := range names {
		if empty[i] {
			continue
		}
		g, ok, err := readGID(port, gids, idxs[i])
		if err != nil {
			return nil, err
		}
		if ok {
			table = append(table, g)
		}
	}
	slices.SortFunc(table, func(a, b GID) int { return cmp.Compare(a.Index, b.Index) })
	return table, nil
}

// gidReaders is how many gids/<i> files preread reads at a time.
const gidReaders = 4

// preread reads gids/<name> for every name, gidReaders at a time, and
// reports the ones that read as the zero GID (empty). An error is not
// "empty": readGID reads that entry again and reports it.
func preread(gids attrFS, names []string) []bool {
	empty := make([]bool, len(names))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(gidReaders, len(names)) {
		wg.Go(func() {
			for i := range next {
				raw, err := readRawGID(gids, names[i])
				empty[i] = err == nil && raw == ([16]byte{})
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
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
