package rdmatest_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

var (
	port1    = netip.MustParseAddrPort("192.0.2.1:4420")
	wildcard = netip.MustParseAddrPort("0.0.0.0:4430")
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// cmids is the LISTEN table as "<dev> <port> <owner> <src> <dst>".
func cmids(t *testing.T, k *rdmatest.Kernel) []string {
	t.Helper()
	devs, err := k.Devices()
	must(t, err)
	ids, err := k.CMIDs(devs)
	must(t, err)
	var out []string
	for _, c := range ids {
		dst := "-"
		if c.Dst.IsValid() {
			dst = c.Dst.String()
		}
		if !c.Listening() {
			t.Errorf("%+v is not LISTEN", c)
		}
		out = append(out, fmt.Sprintf("%s %d %s %s %s", c.DevName, c.Port, c.KernName, c.Src, dst))
	}
	return out
}

func TestBindWhereTheGIDTableSaysAndRefuse(t *testing.T) {
	k := rdmatest.New()
	if err := k.Bind("nvmet_rdma", "1", port1); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("no netdev holds the address: %v", err)
	}
	k.AddNetdev("veth0")
	k.AddUpper("veth0.100", "veth0")
	k.AddAddr("veth0.100", "192.0.2.1")
	if err := k.Bind("nvmet_rdma", "1", port1); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("no device carries the address: %v", err)
	}
	k.HoldGIDs = true
	k.AddDevice("rxe0", 0x11, "veth0")
	if err := k.Bind("nvmet_rdma", "1", port1); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("GID table held empty: %v", err)
	}
	devs, err := k.Devices()
	must(t, err)
	if len(devs) != 1 || len(devs[0].Ports[0].GIDs) != 0 || !devs[0].Ports[0].GIDsKnown {
		t.Fatalf("held GID table: %+v", devs)
	}
	k.FillGIDs("rxe0")
	must(t, k.Bind("nvmet_rdma", "1", port1)) // through the VLAN above veth0
	if dev, ok := k.Bound("nvmet_rdma", "1"); !ok || dev != "rxe0" {
		t.Fatalf("bound on %q %v, want rxe0", dev, ok)
	}
	devs, err = k.Devices()
	must(t, err)
	want := []rdma.GID{{Index: 0, Raw: netip.MustParseAddr("192.0.2.1").As16(), Netdev: "veth0.100", Type: "RoCE v2"}}
	if diff := cmp.Diff(want, devs[0].Ports[0].GIDs); diff != "" {
		t.Errorf("GID table (-want +got):\n%s", diff)
	}
	k.Unbind("nvmet_rdma", "1")
	k.Unbind("nvmet_rdma", "1") // already gone: no error, no panic
	if _, ok := k.Bound("nvmet_rdma", "1"); ok {
		t.Error("Unbind left the listener")
	}
}

func TestRemovalMovesAndWildcards(t *testing.T) {
	k := rdmatest.New()
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth2", "192.0.2.9")
	k.AddDevice("rxe0", 0x11, "veth0")
	must(t, k.Bind("nvmet_rdma", "1", port1))
	must(t, k.Bind("nvmet_rdma", "3", wildcard))
	want := []string{
		"rxe0 1 nvmet_rdma 192.0.2.1:4420 0.0.0.0:0",
		"rxe0 0 nvmet_rdma 0.0.0.0:4430 -",
	}
	if diff := cmp.Diff(want, cmids(t, k)); diff != "" {
		t.Fatalf("cm_id table (-want +got):\n%s", diff)
	}
	// Removing the address leaves the listener; moving it strands it.
	k.DelAddr("veth0", "192.0.2.1")
	if _, ok := k.Bound("nvmet_rdma", "1"); !ok {
		t.Fatal("address removal killed the listener")
	}
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe1", 0x22, "veth2") // a wildcard child appears on it
	k.MoveAddr("veth0", "veth2", "192.0.2.1")
	if dev, _ := k.Bound("nvmet_rdma", "1"); dev != "rxe0" {
		t.Fatalf("moved address: listener on %q, want rxe0 (stranded)", dev)
	}
	want = []string{
		"rxe0 1 nvmet_rdma 192.0.2.1:4420 0.0.0.0:0",
		"rxe0 0 nvmet_rdma 0.0.0.0:4430 -",
		"rxe1 0 nvmet_rdma 0.0.0.0:4430 -",
	}
	if diff := cmp.Diff(want, cmids(t, k)); diff != "" {
		t.Fatalf("cm_id table (-want +got):\n%s", diff)
	}
	// Removal destroys the listeners bound to the device, not wildcards;
	// adding it back re-creates nothing, under a new index.
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	if _, ok := k.Bound("nvmet_rdma", "1"); ok {
		t.Fatal("listener survived its device")
	}
	if _, ok := k.Bound("nvmet_rdma", "3"); !ok {
		t.Fatal("device removal killed a wildcard listener")
	}
	devs, err := k.Devices()
	must(t, err)
	if got := []uint32{devs[0].Index, devs[1].Index}; got[0] != 1 || got[1] != 2 {
		t.Errorf("indices %v, want [1 2] (never reused)", got)
	}
	want = []string{"rxe1 0 nvmet_rdma 0.0.0.0:4430 -", "rxe0 0 nvmet_rdma 0.0.0.0:4430 -"}
	if diff := cmp.Diff(want, cmids(t, k)); diff != "" {
		t.Errorf("cm_id table (-want +got):\n%s", diff)
	}
	must(t, k.Bind("ib_isert", "192.0.2.1:3260", netip.MustParseAddrPort("192.0.2.1:3260")))
	k.KillListener("ib_isert", "192.0.2.1:3260")
	if _, ok := k.Bound("ib_isert", "192.0.2.1:3260"); ok {
		t.Error("KillListener left the listener")
	}
	// Deleting a netdev takes its addresses and devices.
	k.DelNetdev("veth2")
	if devs, _ := k.Devices(); len(devs) != 1 || devs[0].Name != "rxe0" {
		t.Errorf("after DelNetdev veth2: %+v", devs)
	}
	if addrs, _ := k.Addrs(); len(addrs) != 0 {
		t.Errorf("after DelNetdev veth2: addresses %+v", addrs)
	}
}

func TestCMIDCallsAndErr(t *testing.T) {
	k := rdmatest.New()
	if _, err := k.CMIDs(nil); err != nil {
		t.Fatal(err)
	}
	k.CMIDsErr = rdma.ErrUnsupported
	if _, err := k.CMIDs(nil); !errors.Is(err, rdma.ErrUnsupported) {
		t.Errorf("CMIDsErr: %v", err)
	}
	if n := k.CMIDCalls(); n != 2 {
		t.Errorf("CMIDCalls = %d, want 2", n)
	}
}
