package kernel

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sysfsTree builds a sysfs fixture under a temp dir: files (relative path →
// contents) and symlinks (relative path → relative target).
func sysfsTree(t *testing.T, files, links map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// realSysfs mirrors the layout of a 6.1 sysfs with rxe0 on veth0 and siw0 on
// veth2: class entries are relative symlinks into devices/.
func realSysfs() (files, links map[string]string) {
	rxe := "devices/virtual/infiniband/rxe0/"
	siw := "devices/virtual/infiniband/siw0/"
	files = map[string]string{
		rxe + "node_guid":                   "80dd:69ff:fe0d:1e0b\n",
		rxe + "node_type":                   "1: CA\n",
		rxe + "ports/1/state":               "4: ACTIVE\n",
		rxe + "ports/1/phys_state":          "5: LinkUp\n",
		rxe + "ports/1/link_layer":          "Ethernet\n",
		rxe + "ports/1/gid_attrs/ndevs/0":   "",
		rxe + "ports/1/gid_attrs/ndevs/2":   "veth0\n",
		rxe + "ports/1/gid_attrs/ndevs/10":  "wrong0\n", // "10" < "2" as strings
		siw + "node_guid":                   "a421:0cff:fe81:d762\n",
		siw + "node_type":                   "4: RNIC\n",
		siw + "ports/1/state":               "1: DOWN\n",
		siw + "ports/1/phys_state":          "3: Disabled\n",
		siw + "ports/1/link_layer":          "Ethernet\n",
		siw + "ports/1/gid_attrs/ndevs/0":   "veth2\n",
		"devices/virtual/net/veth0/ifindex": "4\n",
	}
	links = map[string]string{
		"class/infiniband/rxe0": "../../devices/virtual/infiniband/rxe0",
		"class/infiniband/siw0": "../../devices/virtual/infiniband/siw0",
		"class/net/veth0":       "../../devices/virtual/net/veth0",
	}
	return files, links
}

func TestReadSysfsDevices(t *testing.T) {
	t.Parallel()
	files, links := realSysfs()
	root := sysfsTree(t, files, links)
	got, err := ReadSysfsDevices(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "rxe0", NodeGUID: 0x80dd69fffe0d1e0b, NodeType: 1, Protocol: "roce",
			Ports: []Port{{Index: 1, State: PortActive, PhysState: 5, NetdevIndex: 4, Netdev: "veth0"}}},
		// veth2 has no class/net entry: NetdevIndex stays 0.
		{Name: "siw0", NodeGUID: 0xa4210cfffe81d762, NodeType: 4, Protocol: "iw",
			Ports: []Port{{Index: 1, State: 1, PhysState: 3, Netdev: "veth2"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadSysfsDevices (-want +got):\n%s", diff)
	}
}

func TestReadSysfsDevicesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		files      map[string]string
		links      map[string]string
		wantErr    error // nil: any error
		wantNoErr  bool
		wantLength int
	}{
		{name: "no class directory", files: map[string]string{"class/net/lo/ifindex": "1"}, wantErr: fs.ErrNotExist},
		{name: "empty class directory", files: map[string]string{"class/infiniband/": ""}, wantNoErr: true},
		{name: "symlink out of the root",
			links: map[string]string{"class/infiniband/evil": "../../../../../../etc"}},
		{name: "netdev link out of the root",
			files: map[string]string{"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0": "eth0"},
			links: map[string]string{"class/net/eth0": "../../../../../../../sys/class/net/lo"}},
		{name: "bad guid", files: map[string]string{"class/infiniband/rxe0/node_guid": "xyz"}},
		{name: "bad state", files: map[string]string{"class/infiniband/rxe0/ports/1/state": "ACTIVE"}},
		{name: "bad port dir", files: map[string]string{"class/infiniband/rxe0/ports/one/state": "4: ACTIVE"}},
		{name: "netdev name with dots", files: map[string]string{"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0": ".."}},
		{name: "oversized attribute", files: map[string]string{"class/infiniband/rxe0/node_guid": string(make([]byte, 5000))}},
		{name: "device without ports or guid", files: map[string]string{"class/infiniband/rxe0/uevent": ""}, wantNoErr: true, wantLength: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := sysfsTree(t, tt.files, tt.links)
			got, err := ReadSysfsDevices(root)
			if tt.wantNoErr {
				if err != nil {
					t.Fatalf("ReadSysfsDevices: %v", err)
				}
				if len(got) != tt.wantLength {
					t.Errorf("ReadSysfsDevices = %+v, want %d devices", got, tt.wantLength)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadSysfsDevices = %+v, want an error", got)
			}
			t.Logf("error: %v", err)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("ReadSysfsDevices: err %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestParseGUID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{
		"80dd:69ff:fe0d:1e0b": 0x80dd69fffe0d1e0b,
		"0000:0000:0000:0001": 1,
	} {
		got, err := parseGUID(in)
		if err != nil || got != want {
			t.Errorf("parseGUID(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "80dd:69ff:fe0d", "80dd:69ff:fe0d:1e0b:0000", "80dd:69ff:fe0d:1e0", "+0dd:69ff:fe0d:1e0b", "80dd:69ff:fe0d:1e0g"} {
		if _, err := parseGUID(in); err == nil {
			t.Errorf("parseGUID(%q): no error", in)
		}
	}
}
