package kernel

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// maxAttrSize bounds every sysfs attribute read (sysfs attributes are one page).
const maxAttrSize = 4096

// ReadSysfsDevices reads the RDMA devices under <sysfsRoot>/class/infiniband
// and the netdevs of their ports. Sysfs has no device index: Index is 0 and
// Name identifies the device. Protocol is derived from node_type and the
// ports' link_layer. Paths are resolved inside sysfsRoot (os.Root): an entry
// whose symlinks lead out of it is an error. Without the class directory
// (ib_core not loaded) the error wraps fs.ErrNotExist.
func ReadSysfsDevices(sysfsRoot string) ([]Device, error) {
	root, err := os.OpenRoot(sysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("sysfs %s: %w", sysfsRoot, err)
	}
	defer root.Close()
	s := sysfs{root: root}

	const class = "class/infiniband"
	names, err := s.list(class)
	if err != nil {
		return nil, fmt.Errorf("sysfs %s: %w", class, err)
	}
	var devs []Device
	for _, name := range names {
		dir := path.Join(class, name)
		d, err := s.device(dir)
		if _, serr := s.root.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			continue // unregistered while we read it
		}
		if err != nil {
			return nil, fmt.Errorf("sysfs rdma device %q: %w", name, err)
		}
		d.Name = name
		devs = append(devs, d)
	}
	return devs, nil
}

type sysfs struct{ root *os.Root }

// list returns the entry names of directory dir.
func (s sysfs) list(dir string) ([]string, error) {
	f, err := s.root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	for _, n := range names {
		if !validName(n) {
			return nil, fmt.Errorf("entry %q: invalid name", n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// read returns the trimmed contents of attribute file p.
func (s sysfs) read(p string) (string, error) {
	f, err := s.root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxAttrSize {
		return "", fmt.Errorf("%s: larger than %d bytes", p, maxAttrSize)
	}
	return strings.TrimSpace(string(b)), nil
}

// readOptional is read with absence mapped to "".
func (s sysfs) readOptional(p string) (string, error) {
	v, err := s.read(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return v, err
}

// device reads the device directory dir.
func (s sysfs) device(dir string) (Device, error) {
	var d Device
	guid, err := s.readOptional(path.Join(dir, "node_guid"))
	if err != nil {
		return Device{}, err
	}
	if guid != "" {
		if d.NodeGUID, err = parseGUID(guid); err != nil {
			return Device{}, fmt.Errorf("node_guid: %w", err)
		}
	}
	nt, err := s.readOptional(path.Join(dir, "node_type"))
	if err != nil {
		return Device{}, err
	}
	if nt != "" {
		if d.NodeType, err = parseNumbered(nt); err != nil {
			return Device{}, fmt.Errorf("node_type: %w", err)
		}
	}

	ports, err := s.list(path.Join(dir, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Device{}, fmt.Errorf("ports: %w", err)
	}
	linkLayer := ""
	for _, pn := range ports {
		idx, err := strconv.ParseUint(pn, 10, 32)
		if err != nil {
			return Device{}, fmt.Errorf("port %q: not a port number", pn)
		}
		p, ll, err := s.port(path.Join(dir, "ports", pn))
		if err != nil {
			return Device{}, fmt.Errorf("port %d: %w", idx, err)
		}
		p.Index = uint32(idx)
		if linkLayer == "" {
			linkLayer = ll
		}
		d.Ports = append(d.Ports, p)
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return cmp.Compare(a.Index, b.Index) })

	// What RDMA_NLDEV_ATTR_DEV_PROTOCOL reports, from what sysfs has.
	switch {
	case d.NodeType == 4: // RDMA_NODE_RNIC
		d.Protocol = "iw"
	case linkLayer == "Ethernet":
		d.Protocol = "roce"
	case linkLayer == "InfiniBand":
		d.Protocol = "ib"
	}
	return d, nil
}

// port reads <dir> = .../ports/<n>; it returns the port and its link_layer.
func (s sysfs) port(dir string) (Port, string, error) {
	var p Port
	for _, a := range []struct {
		file string
		dst  *uint8
	}{{"state", &p.State}, {"phys_state", &p.PhysState}} {
		v, err := s.readOptional(path.Join(dir, a.file))
		if err != nil {
			return Port{}, "", err
		}
		if v == "" {
			continue
		}
		if *a.dst, err = parseNumbered(v); err != nil {
			return Port{}, "", fmt.Errorf("%s: %w", a.file, err)
		}
	}
	ll, err := s.readOptional(path.Join(dir, "link_layer"))
	if err != nil {
		return Port{}, "", err
	}
	if p.Netdev, err = s.netdev(path.Join(dir, "gid_attrs/ndevs")); err != nil {
		return Port{}, "", err
	}
	if p.Netdev != "" {
		// Absent on a netdev that is gone already, or a sysfs of another netns.
		ifindex, err := s.readOptional(path.Join("class/net", p.Netdev, "ifindex"))
		if err != nil {
			return Port{}, "", fmt.Errorf("netdev %s: %w", p.Netdev, err)
		}
		if ifindex != "" {
			n, err := strconv.ParseUint(ifindex, 10, 32)
			if err != nil {
				return Port{}, "", fmt.Errorf("netdev %s: ifindex %q: %w", p.Netdev, ifindex, err)
			}
			p.NetdevIndex = uint32(n)
		}
	}
	return p, ll, nil
}

// netdev returns the first netdev named in dir = .../gid_attrs/ndevs/<i>, in
// GID index order. Unused GID slots read as EINVAL (or empty): skipped.
func (s sysfs) netdev(dir string) (string, error) {
	slots, err := s.list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("gid_attrs/ndevs: %w", err)
	}
	idx := make([]uint64, 0, len(slots))
	for _, sl := range slots {
		if n, err := strconv.ParseUint(sl, 10, 32); err == nil {
			idx = append(idx, n)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		v, err := s.read(path.Join(dir, strconv.FormatUint(i, 10)))
		switch {
		case err == nil && v == "":
		case err == nil:
			if !validName(v) {
				return "", fmt.Errorf("gid_attrs/ndevs/%d: invalid netdev name %q", i, v)
			}
			return v, nil
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EAGAIN),
			errors.Is(err, fs.ErrNotExist):
			// An unused or just-invalidated GID entry.
		default:
			return "", fmt.Errorf("gid_attrs/ndevs/%d: %w", i, err)
		}
	}
	return "", nil
}

// parseGUID parses a GUID as sysfs prints it: "80dd:69ff:fe0d:1e0b".
func parseGUID(s string) (uint64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return 0, fmt.Errorf("%q: want four groups of four hex digits", s)
	}
	var g uint64
	for _, p := range parts {
		if len(p) != 4 {
			return 0, fmt.Errorf("%q: want four groups of four hex digits", s)
		}
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", s, err)
		}
		g = g<<16 | v
	}
	return g, nil
}

// parseNumbered parses "4: ACTIVE" (or a bare "4") into 4.
func parseNumbered(s string) (uint8, error) {
	num, _, _ := strings.Cut(s, ":")
	v, err := strconv.ParseUint(strings.TrimSpace(num), 10, 8)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return uint8(v), nil
}
