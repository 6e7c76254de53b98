package configfstest_test

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
)

// binder is a Binder that records its calls: every listener binds to
// "dev0" unless refuse names an errno for its address.
type binder struct {
	refuse map[netip.AddrPort]error
	alive  map[string]string // owner/id → device
	calls  []string
}

func newBinder() *binder {
	return &binder{refuse: map[netip.AddrPort]error{}, alive: map[string]string{}}
}

func (b *binder) Bind(owner, id string, addr netip.AddrPort) error {
	b.calls = append(b.calls, fmt.Sprintf("bind %s %s %s", owner, id, addr))
	if err := b.refuse[addr]; err != nil {
		return err
	}
	b.alive[owner+"/"+id] = "dev0"
	return nil
}

func (b *binder) Unbind(owner, id string) {
	b.calls = append(b.calls, "unbind "+owner+" "+id)
	delete(b.alive, owner+"/"+id)
}

func (b *binder) Bound(owner, id string) (string, bool) {
	dev, ok := b.alive[owner+"/"+id]
	return dev, ok
}

// kill is a device removal as the RDMA side sees it.
func (b *binder) kill(owner, id string) { delete(b.alive, owner+"/"+id) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnableOnFirstLinkDisableOnLast(t *testing.T) {
	b := newBinder()
	k := configfstest.New(t, b)
	k.AddSubsystem("nqn.a")
	k.AddSubsystem("nqn.b")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPort("2", "tcp", "ipv4", "192.0.2.1", "4420")
	f := k.FS()
	a, bb := configfs.Link{Name: "nqn.a", NQN: "nqn.a"}, configfs.Link{Name: "nqn.b", NQN: "nqn.b"}
	must(t, f.Relink("1", a))
	must(t, f.Relink("1", bb))
	must(t, f.Relink("2", a)) // tcp: a TCP socket, bound through the same binder
	if !k.Listening(configfstest.NVMET, "1") || k.ListeningOn(configfstest.NVMET, "1") != "dev0" {
		t.Fatal("first link did not enable port 1")
	}
	if err := k.WriteAttr(filepath.Join(k.Root, "nvmet/ports/1/addr_traddr"), "192.0.2.2"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("addr_traddr on an enabled port: %v", err)
	}
	must(t, f.Unlink("1", a))
	if !k.Listening(configfstest.NVMET, "1") {
		t.Fatal("unlinking one of two links disabled the port")
	}
	must(t, f.Unlink("1", bb))
	if k.Listening(configfstest.NVMET, "1") {
		t.Fatal("unlinking the last link left the listener")
	}
	must(t, k.WriteAttr(filepath.Join(k.Root, "nvmet/ports/1/addr_traddr"), "192.0.2.2"))
	if diff := cmp.Diff([]string{"bind nvmet_rdma 1 192.0.2.1:4420", "bind nvmet_tcp 2 192.0.2.1:4420", "unbind nvmet_rdma 1"}, b.calls); diff != "" {
		t.Errorf("binder calls (-want +got):\n%s", diff)
	}
}

func TestRefusedBindLeavesNothing(t *testing.T) {
	b := newBinder()
	k := configfstest.New(t, b)
	k.AddSubsystem("nqn.a")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPortal("iqn.2024-01.lab:t", "tpgt_1", "192.0.2.1:3260")
	b.refuse[netip.MustParseAddrPort("192.0.2.1:4420")] = syscall.EADDRNOTAVAIL
	b.refuse[netip.MustParseAddrPort("192.0.2.1:3260")] = syscall.ENODEV
	f := k.FS()
	if err := f.Relink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("refused link: %v", err)
	}
	if p, err := f.Port("1"); err != nil || len(p.Links) != 0 {
		t.Fatalf("refused link left %v (%v)", p.Links, err)
	}
	const portal = "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"
	if err := f.SetISER(portal, true); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("refused iser=1: %v", err)
	}
	if p, err := f.Portal(portal); err != nil || p.ISER {
		t.Fatalf("refused iser=1 reads %v (%v)", p.ISER, err)
	}
	if k.Listening(configfstest.NVMET, "1") || k.Listening(configfstest.ISER, portal) {
		t.Fatal("a refused bind listens")
	}
}

func TestTwoPortsOnOneAddress(t *testing.T) {
	b := newBinder()
	k := configfstest.New(t, b)
	k.AddSubsystem("nqn.a")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPort("2", "rdma", "ipv4", "192.0.2.1", "4420")
	f := k.FS()
	l := configfs.Link{Name: "nqn.a", NQN: "nqn.a"}
	must(t, f.Relink("1", l))
	if err := f.Relink("2", l); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second port on 192.0.2.1:4420: %v", err)
	}
	// Once port 1's listener is dead, the address is free.
	b.kill(configfstest.NVMET, "1")
	must(t, f.Relink("2", l))
}

// One np per address:port shared by every portal with iser=1 on it: a
// dead np is re-attached to, and goes only with its last sharer.
func TestSharedNP(t *testing.T) {
	b := newBinder()
	k := configfstest.New(t, b)
	pa, pb := "iqn.2024-01.lab:a/tpgt_1/192.0.2.1:3260", "iqn.2024-01.lab:b/tpgt_1/192.0.2.1:3260"
	k.AddPortal("iqn.2024-01.lab:a", "tpgt_1", "192.0.2.1:3260")
	k.AddPortal("iqn.2024-01.lab:b", "tpgt_1", "192.0.2.1:3260")
	f := k.FS()
	must(t, f.SetISER(pa, true))
	must(t, f.SetISER(pb, true))
	b.kill(configfstest.ISER, "192.0.2.1:3260")
	if k.Listening(configfstest.ISER, pa) || k.Listening(configfstest.ISER, pb) {
		t.Fatal("a dead np listens")
	}
	must(t, f.SetISER(pa, false))
	must(t, f.SetISER(pa, true)) // re-attaches to the dead np
	if k.Listening(configfstest.ISER, pa) {
		t.Fatal("toggling one sharer made a new np")
	}
	must(t, f.SetISER(pa, false))
	must(t, k.RemovePortal(pb)) // the last sharer goes: so does the np
	must(t, f.SetISER(pa, true))
	if !k.Listening(configfstest.ISER, pa) {
		t.Fatalf("a new np after every sharer left does not listen: %s", k)
	}
	want := []string{
		"bind ib_isert 192.0.2.1:3260 192.0.2.1:3260",
		"unbind ib_isert 192.0.2.1:3260",
		"bind ib_isert 192.0.2.1:3260 192.0.2.1:3260",
	}
	if diff := cmp.Diff(want, b.calls); diff != "" {
		t.Errorf("binder calls (-want +got):\n%s", diff)
	}
	if err := f.SetISER(pa, true); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("iser=1 twice: %v", err)
	}
	if err := k.WriteAttr(filepath.Join(k.Root, "target/iscsi/iqn.2024-01.lab:a/tpgt_1/np/192.0.2.1:3260/iser"), "2"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("iser=2: %v", err)
	}
}

func TestLogFaultAdminAndOrder(t *testing.T) {
	b := newBinder()
	k := configfstest.New(t, b)
	for _, n := range []string{"nqn.z", "nqn.a", "nqn.m"} {
		k.AddSubsystem(n)
	}
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	admin := configfs.NewWithOps(k.Root, k.Admin())
	must(t, admin.Relink("1", configfs.Link{Name: "nqn.z", NQN: "nqn.z"}))
	k.Fault = func(n int, w configfstest.Write) error {
		if n == 1 {
			return configfstest.ErrInjected
		}
		return nil
	}
	f := k.FS()
	must(t, f.Relink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}))
	if err := f.Relink("1", configfs.Link{Name: "nqn.m", NQN: "nqn.m"}); !errors.Is(err, configfstest.ErrInjected) {
		t.Fatalf("fault: %v", err)
	}
	if diff := cmp.Diff([]string{"symlink nvmet/ports/1/subsystems/nqn.a nqn.a"}, k.LogStrings()); diff != "" {
		t.Errorf("log: only the code's performed writes (-want +got):\n%s", diff)
	}
	if got, _ := f.Subsystems(); !slices.Equal(got, []string{"nqn.z", "nqn.a", "nqn.m"}) {
		t.Errorf("subsystems not in creation order: %v", got)
	}
	p, err := f.Port("1")
	must(t, err)
	if diff := cmp.Diff([]configfs.Link{{Name: "nqn.z", NQN: "nqn.z"}, {Name: "nqn.a", NQN: "nqn.a"}}, p.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	var hooked []string
	k.ReadDirHook = func(dir string) { hooked = append(hooked, filepath.Base(dir)) }
	if _, err := f.Links("1"); err != nil || !slices.Equal(hooked, []string{"subsystems"}) {
		t.Errorf("ReadDirHook saw %v (%v)", hooked, err)
	}
	k.ResetLog()
	if len(k.Log()) != 0 {
		t.Error("ResetLog kept writes")
	}
}
