package rdma

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recording is what the e2e scenario gid-table printed on one kernel
// (testdata/sysfs-gid-<kernel>.txt, see testdata/README.md).
type recording struct {
	gids    map[string][]GID // "<dev>/<port>" → the non-zero entries
	netdevs map[string]Addr  // netdev → its Ifindex and HWAddr
}

func readRecording(t *testing.T, file string) recording {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := recording{gids: map[string][]GID{}, netdevs: map[string]Addr{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		switch {
		case len(w) == 7 && w[0] == "gid":
			idx, err := strconv.ParseUint(w[3], 10, 32)
			if err != nil {
				t.Fatalf("%s: %q: %v", file, sc.Text(), err)
			}
			raw, err := parseGID16(w[4])
			if err != nil {
				t.Fatalf("%s: %q: %v", file, sc.Text(), err)
			}
			g := GID{Index: uint32(idx), Raw: raw}
			if w[5] != "-" {
				g.Netdev = w[5]
			}
			if w[6] != "-" {
				g.Type = strings.ReplaceAll(w[6], "_", " ")
			}
			k := w[1] + "/" + w[2]
			rec.gids[k] = append(rec.gids[k], g)
		case len(w) == 6 && w[0] == "netdev":
			ifindex, err := strconv.Atoi(w[3])
			if err != nil {
				t.Fatalf("%s: %q: %v", file, sc.Text(), err)
			}
			hw, err := net.ParseMAC(w[5])
			if err != nil {
				t.Fatalf("%s: %q: %v", file, sc.Text(), err)
			}
			rec.netdevs[w[1]] = Addr{Ifindex: ifindex, Netdev: w[1], HWAddr: hw}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRecordedGIDTables reads the GID tables of the sysfs trees recorded on
// the real 6.1 and 6.12 kernels the way Live does, and checks
// Carriers.Of against where the kernel bound nvmet ports in the same
// scenario.
func TestRecordedGIDTables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kernel     string
		siwGIDNdev string // the netdev of siw0's GID entry 0
	}{
		// siw has no netdev on its GID entry before 6.12
		// (config_non_roce_gid_cache sets one for iWARP since): the
		// read of ndevs/0 fails with EINVAL.
		{kernel: "6.1", siwGIDNdev: ""},
		{kernel: "6.12", siwGIDNdev: "veth2"},
	}
	for _, tt := range tests {
		t.Run(tt.kernel, func(t *testing.T) {
			t.Parallel()
			rec := readRecording(t, filepath.Join("testdata", "sysfs-gid-"+tt.kernel+".txt"))
			root := filepath.Join("testdata", "sysfs-gid-"+tt.kernel)
			// The devices as RDMA netlink lists them (in registration
			// order), one port each.
			ents, err := os.ReadDir(filepath.Join(root, "class/infiniband"))
			if err != nil {
				t.Fatal(err)
			}
			var devs []Device
			for i, e := range ents {
				proto := "roce" // RDMA_NLDEV_ATTR_DEV_PROTOCOL of rxe
				if strings.HasPrefix(e.Name(), "siw") {
					proto = "iw"
				}
				devs = append(devs, Device{Index: uint32(i), Name: e.Name(), Protocol: proto, Ports: []Port{{Index: 1}}})
			}
			var names []string
			for i := range devs {
				names = append(names, devs[i].Name)
				for j := range devs[i].Ports {
					p := &devs[i].Ports[j]
					gids, err := ReadSysfsGIDs(root, devs[i].Name, p.Index)
					if err != nil {
						t.Fatal(err)
					}
					k := devs[i].Name + "/" + strconv.FormatUint(uint64(p.Index), 10)
					if diff := cmp.Diff(rec.gids[k], gids); diff != "" {
						t.Errorf("ReadSysfsGIDs(%s) (-recorded +got):\n%s", k, diff)
					}
					p.GIDs, p.GIDsKnown = gids, true
				}
			}
			if diff := cmp.Diff([]string{"rxe0", "siw0"}, names); diff != "" {
				t.Fatalf("devices (-want +got):\n%s", diff)
			}
			// rxe supports RoCE v2 only: one entry per IP.
			for _, g := range devs[0].Ports[0].GIDs {
				if g.Type != "RoCE v2" || g.Netdev == "" {
					t.Errorf("rxe0 entry %+v: want RoCE v2 with a netdev", g)
				}
			}
			siw := devs[1].Ports[0]
			if len(siw.GIDs) != 1 || siw.GIDs[0].Netdev != tt.siwGIDNdev {
				t.Errorf("siw0 port 1: GIDs %+v; want one entry on %q", siw.GIDs, tt.siwGIDNdev)
			}
			if want := rec.netdevs["veth2"].HWAddr; string(siw.GIDs[0].Raw[:6]) != string(want) || [10]byte(siw.GIDs[0].Raw[6:]) != [10]byte{} {
				t.Errorf("siw0 GID %x: want veth2's MAC %x and zeros", siw.GIDs[0].Raw, want)
			}

			c := IndexCarriers(devs)
			// What the kernel did with nvmet ports on these addresses.
			for _, b := range []struct {
				netdev, ip, dev string // dev "": the link was refused (ENODEV)
			}{
				{"veth0.100", "192.0.2.1", "rxe0"},
				{"mv0", "198.51.100.1", "rxe0"},
				{"veth0", "2001:db8::1", "rxe0"},
				{"veth2", "203.0.113.1", "siw0"},
				{"veth2.200", "203.0.113.2", "siw0"},
				{"mv2", "203.0.113.3", ""},
			} {
				a := rec.netdevs[b.netdev]
				if a.Netdev == "" {
					t.Fatalf("netdev %s not recorded", b.netdev)
				}
				a.IP = netip.MustParseAddr(b.ip)
				dev, port, how, ok := c.Of(a)
				if b.dev == "" {
					if ok {
						t.Errorf("Of(%s on %s) = %s/%d %s, want nothing (the kernel refused it)", b.ip, b.netdev, dev.Name, port, how)
					}
					continue
				}
				if dev.Name != b.dev || port != 1 || how != "gid" || !ok {
					t.Errorf("Of(%s on %s) = %s/%d %q %v, want %s/1 gid", b.ip, b.netdev, dev.Name, port, how, ok, b.dev)
				}
			}
		})
	}
}
