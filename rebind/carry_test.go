package rebind

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

// An observation that carries the baseline's verdicts and objects (the
// kernel tables, journal, saved configs and configfs model all unchanged),
// or its objects and the verdicts of the endpoints whose inputs did not
// change (only the kernel's tables changed: rejudge), also across the
// configfs changes the model names (a heal's writes, an admin's link or
// iser: edited), is the observation
// a fresh read would make: the same objects, links read where a fresh
// read reads them, the same verdict for every endpoint. Random worlds on the fakes and the inotify
// model, changed between rounds — or not, so that the carry happens.
func TestCarriedObservationIsAFreshOne(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 12
	}
	carried, fresh := 0, 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 21))
		k := rdmatest.NewSystem(t)
		k.AddAddr("veth0", "192.0.2.1")
		k.AddAddr("veth0", "192.0.2.2")
		k.AddAddr("veth1", "198.51.100.1")
		k.AddDevice("rxe0", 1, "veth0")
		k.AddDevice("rxe1", 2, "veth1")
		ips := []string{"192.0.2.1", "192.0.2.2", "198.51.100.1", "203.0.113.1"}
		rdmaPorts := map[string]netip.AddrPort{} // the RDMA ports' addresses
		for i := range 6 {
			ip := ips[r.IntN(len(ips))]
			id := fmt.Sprint(i + 1)
			switch r.IntN(3) {
			case 0:
				k.AddPort(id, "tcp", "ipv4", ip, "4420")
				k.AdminLink(id, "nqn.a") // refused while ip is on no netdev
			case 1:
				k.AddPort(id, "rdma", "ipv4", ip, fmt.Sprint(4420+i))
				rdmaPorts[id] = netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(4420+i))
				k.AddSubsystem("nqn.a")
				k.AdminLink(id, "nqn.a")
			default:
				k.ISERPortal(fmt.Sprintf("iqn.2024-01.lab:t%d", i), "tpgt_1", ips[r.IntN(3)]+":3260") // an address that is up
			}
		}
		m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// Half the engines only plan (DryRun): dead listeners stay dead
		// for the kernel to change under them.
		e := New(Options{Tree: m, Kernel: k, Store: newMemStore(), Config: DefaultConfig(), DryRun: seed%2 == 1})
		for round := range 12 {
			if _, err := e.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			switch r.IntN(14) { // a seventh of the rounds change nothing
			case 0:
				k.RemoveDevice("rxe0")
				k.AddDevice("rxe0", 1, "veth0")
			case 1:
				ip := ips[r.IntN(len(ips))]
				if r.IntN(2) == 0 {
					k.AddAddr("veth1", ip)
				} else {
					k.DelAddr("veth0", ip)
				}
			case 2:
				admin := configfs.NewWithOps(k.Root, k.Admin())
				id := fmt.Sprint(1 + r.IntN(6))
				admin.Unlink(id, configfs.Link{Name: "nqn.a", NQN: "nqn.a"})
			case 3:
				k.KillListener("nvmet_rdma", fmt.Sprint(1+r.IntN(6)))
			case 4:
				admin := configfs.NewWithOps(k.Root, k.Admin())
				if ps, err := admin.Portals(); err == nil && len(ps) > 0 {
					admin.SetISER(ps[r.IntN(len(ps))].ID(), r.IntN(2) == 0)
				}
			case 6: // a device without listeners (its addresses' ports dead) resets
				k.RemoveDevice("rxe1")
				k.AddDevice("rxe1", 2, "veth1")
			case 7: // an address back where it was: a stranded listener alive again
				ip := ips[r.IntN(3)]
				k.AddAddr("veth0", ip)
				k.DelAddr("veth1", ip)
			case 8: // a TCP listener gone (configfs unchanged)
				k.KillListener("nvmet_tcp", fmt.Sprint(1+r.IntN(6)))
			case 9: // an RDMA listener back without a configfs write
				for id, ap := range rdmaPorts {
					k.Bind("nvmet_rdma", id, ap)
					break
				}
			case 10: // a portal added (the np directory of a target that has one)
				iqn, np := fmt.Sprintf("iqn.2024-01.lab:t%d", r.IntN(6)), fmt.Sprintf("%s:%d", ips[r.IntN(3)], 3260+round+1)
				k.AddPortal(iqn, "tpgt_1", np)
				configfs.NewWithOps(k.Root, k.Admin()).SetISER(iqn+"/tpgt_1/"+np, true) // refused where the address is down
			case 11: // a portal removed
				admin := configfs.NewWithOps(k.Root, k.Admin())
				if ps, err := admin.Portals(); err == nil && len(ps) > 0 {
					k.RemovePortal(ps[r.IntN(len(ps))].ID())
				}
			case 5:
				id := fmt.Sprint(1 + r.IntN(6))
				e.opt.Store.PutAll([]Intent{{Kind: KindNvmet, ID: id, Address: "192.0.2.1:4420", Links: []configfs.Link{{Name: "nqn.a", NQN: "nqn.a"}}}})
			}
			got, err := e.observe(e.cfg, e.base, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := e.observe(e.cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.shared {
				carried++
			} else {
				fresh++
			}
			where := fmt.Sprintf("seed %d round %d (carried %v): %s", seed, round, got.shared, k)
			if !reflect.DeepEqual(got.Ports, want.Ports) || !reflect.DeepEqual(got.Portals, want.Portals) ||
				!reflect.DeepEqual(got.LinksUnread, want.LinksUnread) || !reflect.DeepEqual(got.Subsystems, want.Subsystems) {
				t.Fatalf("%s: objects differ\n got %+v %+v\nwant %+v %+v", where, got.Ports, got.Portals, want.Ports, want.Portals)
			}
			if len(got.eps.list) != len(want.eps.list) {
				t.Fatalf("%s: %d endpoints, want %d", where, len(got.eps.list), len(want.eps.list))
			}
			for _, w := range want.eps.list {
				if v := got.verdict(w.ep); v != w.v {
					t.Fatalf("%s: %s: verdict %+v, want %+v", where, w.ep, v, w.v)
				}
			}
		}
		m.Close()
	}
	if carried == 0 || fresh == 0 {
		t.Fatalf("%d observations carried, %d fresh: the test does not test both", carried, fresh)
	}
	t.Logf("%d observations carried, %d fresh", carried, fresh)
}

// memStore is an in-memory journal (Store) for the package's own tests.
type memStore struct {
	intents map[Key]Intent
	pins    map[Key]uint64
	settled map[Settled]bool
}

func newMemStore() *memStore { return &memStore{intents: map[Key]Intent{}, pins: map[Key]uint64{}} }

func (s *memStore) PutAll(ins []Intent) error {
	for _, in := range ins {
		s.intents[Key{in.Kind, in.ID}] = in
	}
	return nil
}

func (s *memStore) DeleteAll(ks []Key) error {
	for _, k := range ks {
		delete(s.intents, k)
	}
	return nil
}

func (s *memStore) Sync() error { return nil }

func (s *memStore) Load() (map[Key]Intent, []error) { return maps.Clone(s.intents), nil }

func (s *memStore) Pins() (map[Key]uint64, error) { return maps.Clone(s.pins), nil }

func (s *memStore) SavePins(p map[Key]uint64) error {
	s.pins = maps.Clone(p)
	return nil
}

func (s *memStore) Settled() (map[Settled]bool, error) { return maps.Clone(s.settled), nil }

func (s *memStore) SaveSettled(m map[Settled]bool) error {
	s.settled = maps.Clone(m)
	return nil
}

// guidKernel is a Kernel whose device of one name reports the node GUID
// asked for (a GUID changed in place: nothing else of the tables does).
type guidKernel struct {
	*rdmatest.System
	name string
	guid uint64
}

func (k *guidKernel) Devices() ([]rdma.Device, error) {
	ds, err := k.System.Devices()
	for i := range ds {
		if ds[i].Name == k.name {
			ds[i].NodeGUID = k.guid
		}
	}
	return ds, err
}

// A device whose identity changed under a stranded listener (its node
// GUID; the listener entries and the address's carrier, another device,
// unchanged) is judged again: the verdict names the new GUID, as a fresh
// observation's does.
func TestJudgedAgainWhenTheEntrysDeviceChanged(t *testing.T) {
	s := rdmatest.NewSystem(t)
	s.AddAddr("veth0", "192.0.2.1")
	s.AddDevice("rxe0", 1, "veth0")
	s.AddDevice("rxe1", 2, "veth1")
	s.LinkedPort("1", "192.0.2.1", "4420", "nqn.a")
	s.AddAddr("veth1", "192.0.2.1")
	s.DelAddr("veth0", "192.0.2.1") // stranded on rxe0
	k := &guidKernel{System: s, name: "rxe0", guid: 0x100}
	m, err := watch.New(s.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e := New(Options{Tree: m, Kernel: k, Store: newMemStore(), Config: DefaultConfig(), DryRun: true})
	for range 2 {
		if _, err := e.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ep := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.1:4420")}
	if v := e.base.obs.verdict(ep); v.State != StateStranded || v.EntryGUID != 0x100 {
		t.Fatalf("before: verdict %+v, want stranded on GUID 0x100", v)
	}
	k.guid = 0x200
	got, err := e.observe(e.cfg, e.base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.shared || &got.eps.list[0] == &e.base.obs.eps.list[0] {
		t.Fatal("want the baseline's objects judged again in a list of their own")
	}
	if v := got.verdict(ep); v.State != StateStranded || v.EntryGUID != 0x200 {
		t.Fatalf("verdict %+v, want stranded on GUID 0x200", v)
	}
}

// linksFail is the configfs model with Links failing while fail is set.
type linksFail struct {
	*watch.Model
	fail bool
}

func (t *linksFail) Links(id string) ([]configfs.Link, error) {
	if t.fail {
		return nil, errors.New("links unreadable")
	}
	return t.Model.Links(id)
}

// An event whose verdicts need a port's links that cannot be read makes
// the observation fresh, and leaves the baseline it started from as it
// was: nothing of the baseline's is written by the fresh read.
func TestJudgeAgainThatFailsLeavesTheBaseline(t *testing.T) {
	s := rdmatest.NewSystem(t)
	s.AddAddr("veth0", "192.0.2.1")
	s.AddDevice("rxe0", 1, "veth0")
	s.LinkedPort("1", "192.0.2.1", "4420", "nqn.a")
	m, err := watch.New(s.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tree := &linksFail{Model: m}
	e := New(Options{Tree: tree, Kernel: s, Store: newMemStore(), Config: DefaultConfig(), DryRun: true})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !e.base.obs.LinksUnread["1"] {
		t.Fatal("a live port's links were read")
	}
	unread, subs := maps.Clone(e.base.obs.LinksUnread), maps.Clone(e.base.obs.Subsystems)
	s.KillListener("nvmet_rdma", "1") // its links are needed now
	tree.fail = true
	got, err := e.observe(e.cfg, e.base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.shared {
		t.Fatal("the baseline's objects taken although the links could not be read")
	}
	if !maps.Equal(e.base.obs.LinksUnread, unread) || !maps.Equal(e.base.obs.Subsystems, subs) {
		t.Fatalf("the baseline was written: links unread %v (was %v), subsystems %v (was %v)", e.base.obs.LinksUnread, unread, e.base.obs.Subsystems, subs)
	}
	if got.Ports[0].Err == nil {
		t.Fatal("the fresh read does not say the links were unreadable")
	}
}

// The round's debug line names each input's read, in the inputs' order.
func TestReadTimesNameEveryInput(t *testing.T) {
	took := make(readTimes, len(inputs))
	for i := range took {
		took[i] = time.Duration(i+1) * time.Millisecond
	}
	got := took.LogValue().String()
	want := "rdma=1ms tcp=2ms journal=3ms saved_configs=4ms configfs_root=5ms"
	if got != want {
		t.Errorf("reads %q, want %q", got, want)
	}
}
