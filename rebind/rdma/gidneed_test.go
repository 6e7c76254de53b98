package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded/boundedtest"

	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func keysOf(t *testing.T, n GIDNeeds, d Device) []string {
	t.Helper()
	keys, ok := n.Of(d, d.Ports[0])
	if !ok {
		return nil
	}
	out := []string{}
	for k := range keys {
		out = append(out, k.IP.String()+"@"+k.Netdev)
	}
	slices.Sort(out)
	return out
}

func TestRoCENeeds(t *testing.T) {
	t.Parallel()
	rxe0 := Device{Index: 0, Name: "rxe0", Protocol: "roce", Ports: []Port{{Index: 1, NetdevIndex: 3, Netdev: "veth0"}}}
	rxe1 := Device{Index: 1, Name: "rxe1", Protocol: "roce", Ports: []Port{{Index: 1, NetdevIndex: 7, Netdev: "veth2"}}}
	siw0 := Device{Index: 2, Name: "siw0", Protocol: "iw", Ports: []Port{{Index: 1, NetdevIndex: 9, Netdev: "veth4"}}}
	noNetdev := Device{Index: 3, Name: "rxe9", Protocol: "roce", Ports: []Port{{Index: 1}}}
	devs := []Device{rxe0, rxe1, siw0, noNetdev}
	links := []Netdev{
		{Index: 1, Name: "lo", Loopback: true},
		{Index: 2, Name: "eth0"},                                             // a physical NIC, no RDMA: never an upper
		{Index: 3, Name: "veth0", Kind: "veth", Parent: 6},                   // rxe0's netdev; its IFLA_LINK is its peer
		{Index: 4, Name: "veth0.100", Kind: "vlan", Parent: 3},               // upper of veth0
		{Index: 5, Name: "mv0", Kind: "macvlan", Parent: 4},                  // upper of the VLAN: recursively
		{Index: 6, Name: "veth1", Kind: "veth", Parent: 3},                   // the peer: not an upper
		{Index: 7, Name: "veth2", Kind: "veth", Master: 8},                   // rxe1's netdev, a bond slave
		{Index: 8, Name: "bond0", Kind: "bond"},                              // upper of veth2 (IFLA_MASTER)
		{Index: 9, Name: "veth4", Kind: "veth"},                              // siw0's
		{Index: 10, Name: "hsr0", Kind: "hsr"},                               // no relation rtnetlink shows: maybe an upper of anything
		{Index: 11, Name: "dummy0", Kind: "dummy"},                           // a leaf
		{Index: 12, Name: "mvx", Kind: "macvlan", Parent: 3, ParentNS: true}, // its lower is in another namespace
	}
	addr := func(ifindex int, name, ip string) Addr {
		return Addr{Ifindex: ifindex, Netdev: name, IP: netip.MustParseAddr(ip), HWAddr: []byte{2, 0, 0, 0, 0, byte(ifindex)}}
	}
	addrs := []Addr{
		addr(1, "lo", "127.0.0.1"), addr(1, "lo", "::1"),
		addr(2, "eth0", "10.0.0.1"),
		addr(3, "veth0", "2001:db8::1"), addr(3, "veth0", "fe80::1"),
		addr(4, "veth0.100", "192.0.2.1"),
		addr(5, "mv0", "198.51.100.1"),
		addr(6, "veth1", "fe80::6"),
		addr(7, "veth2", "203.0.113.1"),
		addr(8, "bond0", "192.0.2.5"),
		addr(9, "veth4", "203.0.113.9"),
		addr(10, "hsr0", "192.0.2.10"),
		addr(11, "dummy0", "192.0.2.11"),
		addr(12, "mvx", "192.0.2.12"),
	}
	n := RoCENeeds(devs, links, addrs)
	if diff := cmp.Diff([]string{"192.0.2.10@hsr0", "192.0.2.12@mvx", "192.0.2.1@veth0.100", "198.51.100.1@mv0", "2001:db8::1@veth0", "fe80::1@veth0"}, keysOf(t, n, rxe0)); diff != "" {
		t.Errorf("rxe0 keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"192.0.2.10@hsr0", "192.0.2.12@mvx", "192.0.2.5@bond0", "203.0.113.1@veth2"}, keysOf(t, n, rxe1)); diff != "" {
		t.Errorf("rxe1 keys (-want +got):\n%s", diff)
	}
	for _, d := range []Device{siw0, noNetdev} {
		if k, ok := n.Of(d, d.Ports[0]); ok {
			t.Errorf("%s: keys %v; want its table read whole", d.Name, k)
		}
	}
	// An IPoIB address is looked up by the GID in its hardware address:
	// every table is read whole.
	ib := append(slices.Clone(addrs), Addr{Ifindex: 13, Netdev: "ib0", IP: netip.MustParseAddr("192.0.2.20"), HWAddr: make([]byte, 20)})
	if k, ok := RoCENeeds(devs, links, ib).Of(rxe0, rxe0.Ports[0]); ok {
		t.Errorf("with an IPoIB address: keys %v; want the table read whole", k)
	}
}

// rxeTable is a fake rxe port of 1,024 entries with used ones at the
// indices given (IPv4 192.0.2.<i+1> on ndev).
func rxeTable(ndev string, used ...int) *fakeAttrs {
	f := &fakeAttrs{files: map[string]string{}, errs: map[string]error{}, reads: map[string]int{}}
	for i := range 1024 {
		f.files["gids/"+strconv.Itoa(i)] = strings.TrimSpace(zeroGID)
	}
	for _, i := range used {
		ip := netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i%250+1)).As16()
		var parts []string
		for j := 0; j < 16; j += 2 {
			parts = append(parts, fmt.Sprintf("%02x%02x", ip[j], ip[j+1]))
		}
		f.files["gids/"+strconv.Itoa(i)] = strings.Join(parts, ":")
		f.files["gid_attrs/ndevs/"+strconv.Itoa(i)] = ndev
		f.files["gid_attrs/types/"+strconv.Itoa(i)] = "RoCE v2"
	}
	return f
}

func key(ip, nd string) GIDKey { return GIDKey{netip.MustParseAddr(ip), nd} }

func gidReads(f *fakeAttrs) int {
	n := 0
	for p, c := range f.reads {
		if strings.HasPrefix(p, "gids/") {
			n += c
		}
	}
	return n
}

// rxeTableOf is rxeTable with n entries instead of 1,024.
func rxeTableOf(n int, ndev string, used ...int) *fakeAttrs {
	f := rxeTable(ndev, used...)
	for i := n; i < 1024; i++ {
		delete(f.files, "gids/"+strconv.Itoa(i))
	}
	return f
}

func TestReadGIDsNeeded(t *testing.T) {
	t.Parallel()
	full := func(f *fakeAttrs) []GID {
		g, err := readGIDs(f, subdir{f, "gids"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tests := []struct {
		name      string
		table     func() *fakeAttrs
		need      []GIDKey
		want      []GID // nil: the whole table (what a full read returns)
		maxReads  int   // of gids/<i> files, missing ones included
		minReads  int
		wholeRead bool // every entry of the table read
	}{
		// rxe with an IPv4 address: the default GID (link-local) and the
		// IPv4 one, at 0 and 1 (seen on 6.1, 6.12, 6.18, 7.3.4): each
		// read and read again after its attributes, nothing after them.
		{name: "every key at the start: those entries only", table: func() *fakeAttrs { return rxeTable("veth0", 0, 1) },
			need: []GIDKey{key("192.0.2.1", "veth0"), key("192.0.2.2", "veth0")}, maxReads: 2 * 2, minReads: 2 * 2},
		{name: "empty entries before the last key are read", table: func() *fakeAttrs { return rxeTable("veth0", 0, 5) },
			need: []GIDKey{key("192.0.2.6", "veth0")}, maxReads: 6 + 2, minReads: 6 + 2},
		{name: "nothing needed: nothing read", table: func() *fakeAttrs { return rxeTable("veth0", 0, 1) },
			need: []GIDKey{}, want: []GID(nil), maxReads: 0},
		{name: "a key after the first entries: batches", table: func() *fakeAttrs { return rxeTable("veth0", 0, 20) },
			need: []GIDKey{key("192.0.2.21", "veth0")}, maxReads: gidFirstBatch + gidFirstBatch + 2, minReads: 21},
		{name: "a key after a hole", table: func() *fakeAttrs { return rxeTable("veth0", 0, 1, 700) },
			need: []GIDKey{key("192.0.2.201", "veth0")}, maxReads: 1024, minReads: 701},
		{name: "a key not in the table: read whole", table: func() *fakeAttrs { return rxeTable("veth0", 0, 5, 1000) },
			need: []GIDKey{key("192.0.2.77", "veth0")}, wholeRead: true,
			// 1,024 entries, the used ones again, gids/1024 … (missing:
			// each reader may have one such read in flight when the end
			// is found) and gids/1023 again (the end, not the directory gone).
			maxReads: 1024 + 3 + gidReaders + 1},
		{name: "same IP on another netdev is not the key", table: func() *fakeAttrs { return rxeTable("veth0", 0, 3) },
			need: []GIDKey{key("192.0.2.1", "veth0.100")}, wholeRead: true, maxReads: 1024 + 2 + gidReaders + 1},
		// A table shorter than a batch (mlx5 has 256 entries, other
		// drivers fewer): its end is the first missing gids/<i>.
		{name: "a short table ends at its first missing entry", table: func() *fakeAttrs { return rxeTableOf(8, "veth0", 0, 2) },
			need: []GIDKey{key("192.0.2.77", "veth0")}, wholeRead: true, maxReads: 8 + 2 + 1 + 1},
		{name: "a table that ends in a batch", table: func() *fakeAttrs { return rxeTableOf(40, "veth0", 0, 30) },
			// the readers stop at the end: at most one missing read each
			need: []GIDKey{key("192.0.2.77", "veth0")}, wholeRead: true, maxReads: 40 + 2 + gidReaders + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := tt.table()
			need := map[GIDKey]bool{}
			for _, k := range tt.need {
				need[k] = true
			}
			got, err := readGIDs(f, subdir{f, "gids"}, need)
			if err != nil {
				t.Fatal(err)
			}
			if f.lists != 0 {
				t.Errorf("gids/ listed %d times; want it probed by index", f.lists)
			}
			all := full(tt.table())
			want := tt.want
			if want == nil && tt.maxReads > 0 {
				// The entries read are a prefix of the table: every
				// needed key is among them.
				want = all[:len(got)]
				if tt.wholeRead {
					want = all
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("readGIDs (-want +got):\n%s", diff)
			}
			for k := range need {
				if !slices.ContainsFunc(got, func(g GID) bool { return g.IP() == k.IP && g.Netdev == k.Netdev }) &&
					slices.ContainsFunc(all, func(g GID) bool { return g.IP() == k.IP && g.Netdev == k.Netdev }) {
					t.Errorf("key %v is in the table but was not read", k)
				}
			}
			if r := gidReads(f); r > tt.maxReads || r < tt.minReads {
				t.Errorf("%d reads of gids/<i>, want %d to %d", r, tt.minReads, tt.maxReads)
			}
			if tt.wholeRead {
				for i := range len(all) {
					if f.reads["gids/"+strconv.Itoa(int(all[i].Index))] == 0 {
						t.Errorf("gids/%d not read: want the whole table", all[i].Index)
					}
				}
			}
		})
	}
}

// TestReadGIDsNeededGone: a table whose entries vanish while it is read
// (the device deleted) is an error, not a table that ended early; an
// entry that cannot be read is reported as in a whole read.
func TestReadGIDsNeededGone(t *testing.T) {
	t.Parallel()
	need := func() map[GIDKey]bool { return map[GIDKey]bool{key("192.0.2.77", "veth0"): true} }
	t.Run("gone in the first entries", func(t *testing.T) {
		t.Parallel()
		f := rxeTableOf(3, "veth0", 0, 1)
		// The end at 3, but gids/2 no longer reads: the directory went.
		f.seq = map[string][]string{"gids/2": {strings.TrimSpace(zeroGID), gone}}
		g, err := readGIDs(f, subdir{f, "gids"}, need())
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("readGIDs = %v, %v; want an error wrapping ErrNotExist", g, err)
		}
	})
	t.Run("gone in a batch", func(t *testing.T) {
		t.Parallel()
		f := rxeTableOf(100, "veth0", 0, 1)
		f.seq = map[string][]string{"gids/99": {strings.TrimSpace(zeroGID), gone}}
		g, err := readGIDs(f, subdir{f, "gids"}, need())
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("readGIDs = %v, %v; want an error wrapping ErrNotExist", g, err)
		}
	})
	t.Run("an entry not readable", func(t *testing.T) {
		t.Parallel()
		f := rxeTable("veth0", 0, 1)
		f.errs["gids/40"] = syscall.EIO
		g, err := readGIDs(f, subdir{f, "gids"}, need())
		if err == nil || !strings.Contains(err.Error(), "gids/40") || !errors.Is(err, syscall.EIO) {
			t.Fatalf("readGIDs = %v, %v; want the error of gids/40", g, err)
		}
	})
	t.Run("no entry 0: read as listed", func(t *testing.T) {
		t.Parallel()
		f := rxeTable("veth0", 3)
		delete(f.files, "gids/0")
		g, err := readGIDs(f, subdir{f, "gids"}, need())
		if err != nil {
			t.Fatal(err)
		}
		if f.lists != 1 || len(g) != 1 || g[0].Index != 3 {
			t.Errorf("readGIDs = %v after %d lists; want gids/3, from the listing", g, f.lists)
		}
	})
}

// TestReadSysfsGIDsNeededTree: on a sysfs tree (the attributes read
// through their directories), the needed entries read give what the whole
// read gives for them, errors named as in a whole read.
func TestReadSysfsGIDsNeededTree(t *testing.T) {
	t.Parallel()
	const port = "class/infiniband/rxe0/ports/1/"
	files := map[string]string{}
	for i := range 64 {
		files[port+"gids/"+strconv.Itoa(i)] = zeroGID
	}
	files[port+"gids/0"] = "fe80:0000:0000:0000:0000:00ff:fe00:0001\n"
	files[port+"gid_attrs/ndevs/0"] = "veth0\n"
	files[port+"gid_attrs/types/0"] = "RoCE v2\n"
	files[port+"gids/1"] = "0000:0000:0000:0000:0000:ffff:c000:0201\n"
	files[port+"gid_attrs/ndevs/1"] = "veth0\n"
	files[port+"gid_attrs/types/1"] = "RoCE v2\n"
	root := sysfsTree(t, files, nil)
	whole, err := ReadSysfsGIDs(root, "rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []map[GIDKey]bool{
		{key("192.0.2.1", "veth0"): true},
		{key("192.0.2.1", "veth0"): true, key("fe80::ff:fe00:1", "veth0"): true},
		{key("192.0.2.9", "veth0"): true}, // not there: read whole, to the end at 64
	} {
		got, err := ReadSysfsGIDsNeeded(root, "rxe0", 1, need)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(whole[:len(got)], got); diff != "" || len(got) == 0 {
			t.Errorf("need %v (-whole +needed):\n%s", need, diff)
		}
		for k := range need {
			if need[k] != true {
				t.Errorf("need %v changed by the read", need)
			}
		}
	}
	// An attribute that is not a regular file is named as a whole read names it.
	if err := os.Remove(filepath.Join(root, port, "gid_attrs/types/1")); err != nil {
		t.Fatal(err)
	}
	boundedtest.FIFO(t, filepath.Join(root, port, "gid_attrs/types/1"))
	_, errWhole := ReadSysfsGIDs(root, "rxe0", 1)
	_, errNeeded := ReadSysfsGIDsNeeded(root, "rxe0", 1, map[GIDKey]bool{key("192.0.2.1", "veth0"): true})
	for _, err := range []error{errWhole, errNeeded} {
		if err == nil || !strings.Contains(err.Error(), "gid_attrs/types/1: not a regular file") || !errors.Is(err, bounded.ErrNotRegular) {
			t.Errorf("err %v; want gid_attrs/types/1 named, not a regular file", err)
		}
	}
}

// eui64 is the IPv6 link-local address the kernel derives from a MAC (and
// rxe's default GID).
func eui64(mac []byte) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15] = mac[0]^2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}

// TestRecordedGIDTablesNeeded: on the tables recorded on the real 6.1 and
// 6.12 kernels, reading only the entries RoCENeeds names (as Live does)
// gives every lookup the answer the whole tables give.
func TestRecordedGIDTablesNeeded(t *testing.T) {
	t.Parallel()
	for _, kernel := range []string{"6.1", "6.12"} {
		t.Run(kernel, func(t *testing.T) {
			t.Parallel()
			rec := readRecording(t, filepath.Join("testdata", "sysfs-gid-"+kernel+".txt"))
			root := filepath.Join("testdata", "sysfs-gid-"+kernel)
			nd := func(name, kind, parent string) Netdev {
				n := Netdev{Index: rec.netdevs[name].Ifindex, Name: name, Kind: kind}
				if parent != "" {
					n.Parent = rec.netdevs[parent].Ifindex
				}
				return n
			}
			// The set-up of tests/guest/scenarios/16-gid-table.sh.
			links := []Netdev{{Index: 1, Name: "lo", Loopback: true},
				nd("veth0", "veth", ""), nd("veth0.100", "vlan", "veth0"), nd("mv0", "macvlan", "veth0"),
				nd("veth2", "veth", ""), nd("veth2.200", "vlan", "veth2"), nd("mv2", "macvlan", "veth2")}
			var addrs []Addr
			on := func(netdev string, ips ...string) {
				a := rec.netdevs[netdev]
				if a.Netdev == "" {
					t.Fatalf("netdev %s not recorded", netdev)
				}
				ips = append(ips, eui64(a.HWAddr).String())
				for _, ip := range ips {
					a.IP = netip.MustParseAddr(ip)
					addrs = append(addrs, a)
				}
			}
			on("veth0", "2001:db8::1")
			on("veth0.100", "192.0.2.1")
			on("mv0", "198.51.100.1")
			on("veth2", "203.0.113.1")
			on("veth2.200", "203.0.113.2")
			on("mv2", "203.0.113.3")
			addrs = append(addrs, Addr{Ifindex: 1, Netdev: "lo", IP: netip.MustParseAddr("127.0.0.1")})
			devs := []Device{
				{Index: 0, Name: "rxe0", Protocol: "roce", Ports: []Port{{Index: 1, NetdevIndex: uint32(rec.netdevs["veth0"].Ifindex), Netdev: "veth0"}}},
				{Index: 1, Name: "siw0", Protocol: "iw", Ports: []Port{{Index: 1, NetdevIndex: uint32(rec.netdevs["veth2"].Ifindex), Netdev: "veth2"}}},
			}
			needs := RoCENeeds(devs, links, addrs)
			if _, ok := needs.Of(devs[0], devs[0].Ports[0]); !ok {
				t.Fatal("rxe0: no keys; want the VLAN's, the macvlan's and veth0's addresses")
			}
			fullDevs, partDevs := slices.Clone(devs), slices.Clone(devs)
			for i := range devs {
				fullDevs[i].Ports, partDevs[i].Ports = slices.Clone(devs[i].Ports), slices.Clone(devs[i].Ports)
				full, err := ReadSysfsGIDs(root, devs[i].Name, 1)
				if err != nil {
					t.Fatal(err)
				}
				fullDevs[i].Ports[0].GIDs, fullDevs[i].Ports[0].GIDsKnown = full, true
				part := full
				if keys, ok := needs.Of(devs[i], devs[i].Ports[0]); ok {
					if part, err = ReadSysfsGIDsNeeded(root, devs[i].Name, 1, keys); err != nil {
						t.Fatal(err)
					}
				}
				partDevs[i].Ports[0].GIDs, partDevs[i].Ports[0].GIDsKnown = part, true
			}
			cf, cp := IndexCarriers(fullDevs), IndexCarriers(partDevs)
			for _, a := range addrs {
				d1, p1, h1, ok1 := cf.Of(a)
				d2, p2, h2, ok2 := cp.Of(a)
				if d1.Name != d2.Name || p1 != p2 || h1 != h2 || ok1 != ok2 {
					t.Errorf("Of(%s on %s): whole tables %s/%d %q %v, needed entries %s/%d %q %v", a.IP, a.Netdev, d1.Name, p1, h1, ok1, d2.Name, p2, h2, ok2)
				}
			}
		})
	}
}
