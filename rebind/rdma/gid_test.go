package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000\n"

// raw16 returns the 16 bytes of an IPv6 (or IPv4-mapped) address.
func raw16(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// gidSysfs mirrors a sysfs with three devices: rxe0 (RoCE on veth0, with a
// VLAN, a macvlan and IPv6 above it; v1 and v2 entries as mlx5 has them,
// empty entries in between), siw0 (iWARP, 6.1: no netdev on the entry) and
// mlx5_0 (InfiniBand, two ports).
func gidSysfs() (files, links map[string]string) {
	rxe := "devices/virtual/infiniband/rxe0/ports/1/"
	siw := "devices/virtual/infiniband/siw0/ports/1/"
	ib := "devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0/ports/"
	files = map[string]string{}
	entry := func(port string, i int, gid, ndev, typ string) {
		files[fmt.Sprintf("%sgids/%d", port, i)] = gid + "\n"
		if ndev != "" {
			files[fmt.Sprintf("%sgid_attrs/ndevs/%d", port, i)] = ndev + "\n"
		}
		if typ != "" {
			files[fmt.Sprintf("%sgid_attrs/types/%d", port, i)] = typ + "\n"
		}
	}
	entry(rxe, 0, "fe80:0000:0000:0000:e8b0:e5ff:fede:8e8a", "veth0", "IB/RoCE v1")
	entry(rxe, 1, "fe80:0000:0000:0000:e8b0:e5ff:fede:8e8a", "veth0", "RoCE v2")
	entry(rxe, 2, strings.TrimSpace(zeroGID), "", "")
	entry(rxe, 3, "0000:0000:0000:0000:0000:ffff:c000:0201", "veth0.100", "IB/RoCE v1")
	entry(rxe, 4, "0000:0000:0000:0000:0000:ffff:c000:0201", "veth0.100", "RoCE v2")
	entry(rxe, 5, strings.TrimSpace(zeroGID), "", "")
	entry(rxe, 6, "0000:0000:0000:0000:0000:ffff:c633:6401", "mv0", "IB/RoCE v1")
	entry(rxe, 7, "0000:0000:0000:0000:0000:ffff:c633:6401", "mv0", "RoCE v2")
	entry(rxe, 8, strings.TrimSpace(zeroGID), "", "")
	entry(rxe, 9, strings.TrimSpace(zeroGID), "", "")
	entry(rxe, 10, "2001:0db8:0000:0000:0000:0000:0000:0001", "veth0", "RoCE v2")
	entry(rxe, 11, strings.TrimSpace(zeroGID), "", "")
	entry(rxe, 12, "2001:0db8:0000:0000:0000:0000:0000:0001", "veth0", "IB/RoCE v1")
	entry(siw, 0, "9a05:f248:9ce7:0000:0000:0000:0000:0000", "", "IB/RoCE v1")
	entry(ib+"1/", 0, "fe80:0000:0000:0000:0c42:a103:0055:0001", "", "IB/RoCE v1")
	entry(ib+"1/", 1, strings.TrimSpace(zeroGID), "", "")
	entry(ib+"2/", 0, "fe80:0000:0000:0000:0c42:a103:0055:0002", "", "IB/RoCE v1")
	links = map[string]string{
		"class/infiniband/rxe0":   "../../devices/virtual/infiniband/rxe0",
		"class/infiniband/siw0":   "../../devices/virtual/infiniband/siw0",
		"class/infiniband/mlx5_0": "../../devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0",
	}
	return files, links
}

func TestReadSysfsGIDs(t *testing.T) {
	t.Parallel()
	files, links := gidSysfs()
	root := sysfsTree(t, files, links)
	tests := []struct {
		dev  string
		port uint32
		want []GID
	}{
		{"rxe0", 1, []GID{
			{Index: 0, Raw: raw16("fe80::e8b0:e5ff:fede:8e8a"), Netdev: "veth0", Type: "IB/RoCE v1"},
			{Index: 1, Raw: raw16("fe80::e8b0:e5ff:fede:8e8a"), Netdev: "veth0", Type: "RoCE v2"},
			{Index: 3, Raw: raw16("::ffff:192.0.2.1"), Netdev: "veth0.100", Type: "IB/RoCE v1"},
			{Index: 4, Raw: raw16("::ffff:192.0.2.1"), Netdev: "veth0.100", Type: "RoCE v2"},
			{Index: 6, Raw: raw16("::ffff:198.51.100.1"), Netdev: "mv0", Type: "IB/RoCE v1"},
			{Index: 7, Raw: raw16("::ffff:198.51.100.1"), Netdev: "mv0", Type: "RoCE v2"},
			{Index: 10, Raw: raw16("2001:db8::1"), Netdev: "veth0", Type: "RoCE v2"},
			{Index: 12, Raw: raw16("2001:db8::1"), Netdev: "veth0", Type: "IB/RoCE v1"},
		}},
		{"siw0", 1, []GID{
			{Index: 0, Raw: [16]byte{0x9a, 0x05, 0xf2, 0x48, 0x9c, 0xe7}, Type: "IB/RoCE v1"},
		}},
		{"mlx5_0", 1, []GID{{Index: 0, Raw: raw16("fe80::c42:a103:55:1"), Type: "IB/RoCE v1"}}},
		{"mlx5_0", 2, []GID{{Index: 0, Raw: raw16("fe80::c42:a103:55:2"), Type: "IB/RoCE v1"}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.dev, tt.port), func(t *testing.T) {
			t.Parallel()
			got, err := ReadSysfsGIDs(root, tt.dev, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadSysfsGIDs(%s, %d) (-want +got):\n%s", tt.dev, tt.port, diff)
			}
		})
	}
}

func TestGIDIP(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::1"},
		{"fe80::e8b0:e5ff:fede:8e8a", "fe80::e8b0:e5ff:fede:8e8a"},
	} {
		if got := (GID{Raw: raw16(tt.raw)}).IP(); got != netip.MustParseAddr(tt.want) {
			t.Errorf("GID %s: IP() = %v, want %s", tt.raw, got, tt.want)
		}
	}
}

func TestReadSysfsGIDsErrors(t *testing.T) {
	t.Parallel()
	const port = "class/infiniband/rxe0/ports/1/"
	tests := []struct {
		name    string
		files   map[string]string
		links   map[string]string
		dev     string
		wantErr error  // nil: any error
		wantIn  string // in the message: the file at fault
	}{
		{name: "no class directory", files: map[string]string{"class/net/lo/ifindex": "1"}, wantErr: fs.ErrNotExist},
		{name: "no such device", files: map[string]string{"class/infiniband/siw0/ports/1/gids/0": zeroGID}, wantErr: fs.ErrNotExist},
		{name: "no such port", files: map[string]string{"class/infiniband/rxe0/ports/2/gids/0": zeroGID}, wantErr: fs.ErrNotExist},
		{name: "no gids directory", files: map[string]string{port + "state": "4: ACTIVE"}, wantErr: fs.ErrNotExist, wantIn: "gids"},
		{name: "device name with a slash", dev: "../rxe0", wantIn: `"../rxe0"`},
		{name: "device link out of the root",
			links: map[string]string{"class/infiniband/rxe0": "../../../../../../../sys/class/infiniband/rxe0"}, wantIn: "class/infiniband/rxe0"},
		{name: "gid link out of the root",
			files: map[string]string{port + "gids/0": zeroGID},
			links: map[string]string{port + "gids/3": "../../../../../../../../etc/hostname"}, wantIn: "gids/3"},
		{name: "gid link out of the port",
			files: map[string]string{port + "gids/0": zeroGID, "devices/x": "fe80:0000:0000:0000:0000:0000:0000:0001"},
			links: map[string]string{port + "gids/3": "../../../../../devices/x"}, wantIn: "gids/3"},
		{name: "oversized gid", files: map[string]string{port + "gids/7": strings.Repeat("0", 5000)}, wantIn: "gids/7"},
		{name: "garbage gid", files: map[string]string{port + "gids/5": "fe80::1\n"}, wantIn: "gids/5"},
		{name: "gid with a bad digit", files: map[string]string{port + "gids/5": "fe80:0000:0000:0000:0000:0000:0000:000g\n"}, wantIn: "gids/5"},
		{name: "gid with a sign", files: map[string]string{port + "gids/5": "fe80:0000:0000:0000:0000:0000:0000:+001\n"}, wantIn: "gids/5"},
		{name: "not an index", files: map[string]string{port + "gids/x1": zeroGID}, wantIn: "gids/x1"},
		{name: "an index not as the kernel prints it", files: map[string]string{port + "gids/07": zeroGID}, wantIn: "gids/07"},
		{name: "netdev name with dots",
			files: map[string]string{port + "gids/2": "fe80:0000:0000:0000:0000:0000:0000:0001", port + "gid_attrs/ndevs/2": "..\n"}, wantIn: "ndevs/2"},
		{name: "ndevs entry is a directory",
			files: map[string]string{port + "gids/2": "fe80:0000:0000:0000:0000:0000:0000:0001", port + "gid_attrs/ndevs/2/": ""}, wantIn: "ndevs/2"},
		{name: "oversized type",
			files: map[string]string{port + "gids/2": "fe80:0000:0000:0000:0000:0000:0000:0001", port + "gid_attrs/types/2": strings.Repeat("v", 4097)}, wantIn: "types/2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := sysfsTree(t, tt.files, tt.links)
			dev := tt.dev
			if dev == "" {
				dev = "rxe0"
			}
			got, err := ReadSysfsGIDs(root, dev, 1)
			if err == nil {
				t.Fatalf("ReadSysfsGIDs = %+v, want an error", got)
			}
			t.Logf("error: %v", err)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("ReadSysfsGIDs: err %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("ReadSysfsGIDs: err %q does not name %q", err, tt.wantIn)
			}
		})
	}
}

// fakeAttrs is a port directory whose attribute reads return what the
// real kernel returns, errnos included. reads counts the reads of each
// file; gids/<i> may change from one read to the next (seq).
type fakeAttrs struct {
	files map[string]string   // path → contents
	errs  map[string]error    // path → read error
	seq   map[string][]string // path → contents of the 1st, 2nd, … read (the last one repeats)
	reads map[string]int
	lists int // list calls
}

func (f *fakeAttrs) list(dir string) ([]string, error) {
	fakeAttrsMu.Lock()
	f.lists++
	fakeAttrsMu.Unlock()
	var names []string
	seen := map[string]bool{}
	errs := map[string]string{}
	for p := range f.errs {
		errs[p] = ""
	}
	for _, m := range []map[string]string{f.files, f.seqFirst(), errs} {
		for p := range m {
			if n, ok := strings.CutPrefix(p, dir+"/"); ok && !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	if names == nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	return names, nil
}

func (f *fakeAttrs) seqFirst() map[string]string {
	m := map[string]string{}
	for p, s := range f.seq {
		m[p] = s[0]
	}
	return m
}

var fakeAttrsMu sync.Mutex

// gone in fakeAttrs.seq: that read finds no such file (the device deleted).
const gone = "\x00gone"

func (f *fakeAttrs) read(p string) (string, error) {
	fakeAttrsMu.Lock()
	defer fakeAttrsMu.Unlock()
	n := f.reads[p]
	f.reads[p]++
	if err, ok := f.errs[p]; ok {
		return "", &fs.PathError{Op: "read", Path: p, Err: err}
	}
	if s, ok := f.seq[p]; ok {
		if v := s[min(n, len(s)-1)]; v != gone {
			return v, nil
		}
		return "", &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	if v, ok := f.files[p]; ok {
		return v, nil
	}
	return "", &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

// subdir is directory dir of an attrFS.
type subdir struct {
	attrFS
	dir string
}

func (s subdir) list(dir string) ([]string, error) { return s.attrFS.list(path.Join(s.dir, dir)) }
func (s subdir) read(p string) (string, error)     { return s.attrFS.read(path.Join(s.dir, p)) }

func TestReadGIDsKernelErrnos(t *testing.T) {
	t.Parallel()
	const (
		g1 = "0000:0000:0000:0000:0000:ffff:c000:0201"
		g2 = "0000:0000:0000:0000:0000:ffff:c633:6401"
		z  = "0000:0000:0000:0000:0000:0000:0000:0000"
	)
	tests := []struct {
		name    string
		fake    fakeAttrs
		want    []GID
		wantErr string
	}{
		{
			// What 6.1 and 6.12 return for an unused entry, and for
			// siw's entry on 6.1 (no netdev): EINVAL.
			name: "EINVAL means none",
			fake: fakeAttrs{
				files: map[string]string{"gids/0": "9a05:f248:9ce7:0000:0000:0000:0000:0000", "gid_attrs/types/0": "IB/RoCE v1", "gids/1": z},
				errs: map[string]error{"gid_attrs/ndevs/0": syscall.EINVAL,
					"gid_attrs/ndevs/1": syscall.EINVAL, "gid_attrs/types/1": syscall.EINVAL},
			},
			want: []GID{{Index: 0, Raw: [16]byte{0x9a, 0x05, 0xf2, 0x48, 0x9c, 0xe7}, Type: "IB/RoCE v1"}},
		},
		{
			name: "type unreadable",
			fake: fakeAttrs{
				files: map[string]string{"gids/0": g1, "gid_attrs/ndevs/0": "veth0.100"},
				errs:  map[string]error{"gid_attrs/types/0": syscall.EINVAL},
			},
			want: []GID{{Index: 0, Raw: raw16("::ffff:192.0.2.1"), Netdev: "veth0.100"}},
		},
		{
			name: "other errno is an error",
			fake: fakeAttrs{
				files: map[string]string{"gids/0": g1},
				errs:  map[string]error{"gid_attrs/ndevs/0": syscall.EIO},
			},
			wantErr: "gid_attrs/ndevs/0",
		},
		{
			name:    "gid read error",
			fake:    fakeAttrs{errs: map[string]error{"gids/4": syscall.EIO}, files: map[string]string{"gids/0": z}},
			wantErr: "gids/4",
		},
		{
			// Replaced between the GID read and its attributes: read again.
			name: "entry replaced while read",
			fake: fakeAttrs{
				seq:   map[string][]string{"gids/2": {g1, g2}},
				files: map[string]string{"gid_attrs/ndevs/2": "mv0", "gid_attrs/types/2": "RoCE v2"},
			},
			want: []GID{{Index: 2, Raw: raw16("::ffff:198.51.100.1"), Netdev: "mv0", Type: "RoCE v2"}},
		},
		{
			name: "entry deleted while read",
			fake: fakeAttrs{
				seq:  map[string][]string{"gids/2": {g1, z}},
				errs: map[string]error{"gid_attrs/ndevs/2": syscall.EINVAL, "gid_attrs/types/2": syscall.EINVAL},
			},
		},
		{
			name: "entry never stable",
			fake: fakeAttrs{
				seq:   map[string][]string{"gids/2": {g1, g2, g1, g2, g1, g2, g1, g2}},
				files: map[string]string{"gid_attrs/ndevs/2": "mv0"},
			},
			wantErr: "gids/2: changed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fake.reads = map[string]int{}
			got, err := readGIDs(&tt.fake, subdir{&tt.fake, "gids"}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readGIDs = %+v, %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readGIDs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseGID16(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][16]byte{
		"fe80:0000:0000:0000:e8b0:e5ff:fede:8e8a": raw16("fe80::e8b0:e5ff:fede:8e8a"),
		"0000:0000:0000:0000:0000:ffff:c000:0201": raw16("::ffff:192.0.2.1"),
		"FE80:0000:0000:0000:0000:0000:0000:0001": raw16("fe80::1"),
	} {
		got, err := parseGID16(in)
		if err != nil || got != want {
			t.Errorf("parseGID16(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fe80::1", "fe80:0000:0000:0000:e8b0:e5ff:fede", "fe80:0000:0000:0000:e8b0:e5ff:fede:8e8a:0000",
		"fe80:0000:0000:0000:e8b0:e5ff:fede:8e8", "fe80:0000:0000:0000:e8b0:e5ff:fede:8e8g", "-e80:0000:0000:0000:e8b0:e5ff:fede:8e8a",
		"fe80:0000:0000:0000:e8b0:e5ff:fede:8e8a\n"} {
		if _, err := parseGID16(in); err == nil {
			t.Errorf("parseGID16(%q): no error", in)
		}
	}
}

func BenchmarkReadSysfsGIDs(b *testing.B) {
	// An rxe port: 1024 entries, 6 of them used.
	files := map[string]string{}
	const port = "class/infiniband/rxe0/ports/1/"
	for i := range 1024 {
		files[fmt.Sprintf("%sgids/%d", port, i)] = zeroGID
	}
	for i := range 6 {
		files[fmt.Sprintf("%sgids/%d", port, i)] = fmt.Sprintf("0000:0000:0000:0000:0000:ffff:c000:02%02x\n", i+1)
		files[fmt.Sprintf("%sgid_attrs/ndevs/%d", port, i)] = "veth0.100\n"
		files[fmt.Sprintf("%sgid_attrs/types/%d", port, i)] = "RoCE v2\n"
	}
	root := b.TempDir()
	for p, v := range files {
		full := root + "/" + p
		if err := os.MkdirAll(full[:strings.LastIndex(full, "/")], 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		gids, err := ReadSysfsGIDs(root, "rxe0", 1)
		if err != nil || len(gids) != 6 {
			b.Fatalf("ReadSysfsGIDs = %d entries, %v", len(gids), err)
		}
	}
}
