package rebind_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// The fake kernel must model what the engine depends on, or the tests
// below prove nothing: one shared iSER np per address:port that a toggle of
// one sharer re-attaches to while dead, and listeners bound to a device.
func TestFakeModelsSharedNPAndStrandedListeners(t *testing.T) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	admin := configfs.NewWithOps(k.Root, k.Admin())
	a := k.ISERPortal("iqn.2024-01.lab:a", "tpgt_1", "192.0.2.1:3260")
	b := k.ISERPortal("iqn.2024-01.lab:b", "tpgt_1", "192.0.2.1:3260")
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 1, "veth0")
	must(t, admin.SetISER(a, false))
	must(t, admin.SetISER(a, true))
	if k.Listening("ib_isert", a) {
		t.Fatal("toggling one sharer of a dead np healed it: the fake does not model the shared np")
	}
	must(t, admin.SetISER(b, false))
	must(t, admin.SetISER(b, true))
	if k.Listening("ib_isert", a) {
		t.Fatal("toggling the sharers one after the other healed the np")
	}
	must(t, admin.SetISER(a, false))
	must(t, admin.SetISER(b, false))
	must(t, admin.SetISER(a, true))
	must(t, admin.SetISER(b, true))
	if !k.Listening("ib_isert", a) || !k.Listening("ib_isert", b) {
		t.Fatalf("all to 0 then all to 1 did not heal: %s", k)
	}
	// A moved address leaves the listener on its device.
	k.AddAddr("veth2", "192.0.2.9")
	k.AddDevice("rxe1", 2, "veth2")
	k.MoveAddr("veth0", "veth2", "192.0.2.1")
	if got := k.ListeningOn("ib_isert", a); got != "rxe0" {
		t.Fatalf("after the move the listener is on %q, want rxe0 (stranded)", got)
	}
}

func gidTable(netdev string, ips ...string) []rdma.GID {
	var g []rdma.GID
	for i, ip := range ips {
		g = append(g, rdma.GID{Index: uint32(i), Raw: mustAddr(ip).As16(), Netdev: netdev, Type: "RoCE v2"})
	}
	return g
}

func listen(owner, dev string, idx uint32, ap string) rdma.CMID {
	return rdma.CMID{DevIndex: idx, DevName: dev, Port: 1, State: rdma.CMStateListen, PS: 0x106, KernName: owner, Src: mustAddrPort(ap)}
}

// Plan over realistic observations, whole results compared, with memory.
func TestPlanEndpoints(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const (
		pA = "iqn.2024-01.lab:a/tpgt_1/192.0.2.1:3260"
		pB = "iqn.2024-01.lab:b/tpgt_1/192.0.2.1:3260"
		pC = "iqn.2024-01.lab:c/tpgt_1/192.0.2.1:3260"
	)
	portal := func(id string, iser bool) configfs.Portal {
		iqn, tpg, np, err := configfs.ParsePortalID(id)
		must(t, err)
		ap, err := configfs.ParseNP(np)
		must(t, err)
		return configfs.Portal{IQN: iqn, TPG: tpg, NP: np, Addr: ap, ISER: iser}
	}
	lA := configfs.Link{Name: nqnA, NQN: nqnA}
	lB := configfs.Link{Name: nqnB, NQN: nqnB}
	port1 := configfs.Port{ID: "1", Trtype: "rdma", Adrfam: "ipv4", Traddr: "192.0.2.1", Trsvcid: "4420", Links: []configfs.Link{lA, lB}}
	// rxe0 (index 3 after two resets) on veth0, the address on VLAN veth0.100.
	rxe0 := rdma.Device{Index: 3, Name: "rxe0", NodeGUID: 0x11, Protocol: "roce", Ports: []rdma.Port{{Index: 1, NetdevIndex: 4, Netdev: "veth0", GIDsKnown: true,
		GIDs: gidTable("veth0.100", "192.0.2.1")}}}
	rxe1 := rdma.Device{Index: 4, Name: "rxe1", NodeGUID: 0x22, Protocol: "roce", Ports: []rdma.Port{{Index: 1, NetdevIndex: 6, Netdev: "veth2", GIDsKnown: true}}}
	addrs := []rdma.Addr{{Ifindex: 9, Netdev: "veth0.100", IP: mustAddr("192.0.2.1")}}
	epL := rebind.Endpoint{Kind: rebind.KindLIO, Addr: mustAddrPort("192.0.2.1:3260")}
	epN := rebind.Endpoint{Kind: rebind.KindNvmet, Addr: mustAddrPort("192.0.2.1:4420")}
	journal := func(k rebind.Key) rebind.Intent {
		return rebind.Intent{Kind: k.Kind, ID: k.ID, Address: "192.0.2.1:3260", ISER: true}
	}
	key := func(id string) rebind.Key { return rebind.Key{Kind: rebind.KindLIO, ID: id} }
	iser := func(id string, on bool) rebind.Step {
		return rebind.Step{Op: rebind.OpSetISER, Key: key(id), On: on, Pre: rebind.Pre{Check: rebind.CheckISER, ISER: !on}}
	}
	put := func(id string) rebind.Step {
		return rebind.Step{Op: rebind.OpJournalPut, Key: key(id), Intent: new(journal(key(id))), Pre: rebind.Pre{Check: rebind.CheckISER, ISER: true}}
	}
	del := func(id string) rebind.Step { return rebind.Step{Op: rebind.OpJournalDelete, Key: key(id)} }
	nkey := rebind.Key{Kind: rebind.KindNvmet, ID: "1"}
	unlinkPre, linkPre := rebind.Pre{Check: rebind.CheckLinkPresent}, rebind.Pre{Check: rebind.CheckLinkable}
	// The rebind of port 1 (links a, b): journal, unlink both, relink in order.
	rebindPort1 := []rebind.Step{
		{Op: rebind.OpJournalPut, Key: nkey, Intent: &rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: []configfs.Link{lA, lB}},
			Pre: rebind.Pre{Check: rebind.CheckLinksAre, Links: []configfs.Link{lA, lB}}},
		{Op: rebind.OpUnlink, Key: nkey, Link: lA, Pre: unlinkPre},
		{Op: rebind.OpUnlink, Key: nkey, Link: lB, Pre: unlinkPre},
		{Op: rebind.OpLink, Key: nkey, Link: lA, Pre: linkPre},
		{Op: rebind.OpLink, Key: nkey, Link: lB, Pre: linkPre},
		{Op: rebind.OpJournalDelete, Key: nkey},
	}

	tests := []struct {
		name  string
		obs   func(*rebind.Observed)
		mem   func(*rebind.Memory)
		cfg   func(*rebind.Config)
		heals []rebind.Heal
		state map[string]rebind.State // by object id
	}{
		{
			name: "shared portal dead: all sharers to 0, then all to 1; a TCP-only portal untouched",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, true), portal(pB, true), portal(pC, false)}
			},
			heals: []rebind.Heal{{Endpoint: epL, Action: rebind.ActToggleISER, Reason: "2 portals share the iSER listener: all go to 0, then all back to 1",
				Keys:  []rebind.Key{key(pA), key(pB)},
				Steps: []rebind.Step{put(pA), put(pB), iser(pA, false), iser(pB, false), iser(pA, true), iser(pB, true), del(pA), del(pB)}}},
			state: map[string]rebind.State{pA: rebind.StateDead, pB: rebind.StateDead, pC: rebind.StateNone},
		},
		{
			name: "crash between the zeros and the ones: every journaled sharer back to 1, the admin's 0 stays",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, false), portal(pB, false), portal(pC, false)}
				o.Journal = map[rebind.Key]rebind.Intent{key(pA): journal(key(pA)), key(pB): journal(key(pB))}
			},
			heals: []rebind.Heal{{Endpoint: epL, Action: rebind.ActCompleteISER, Reason: "iser=1 to restore from the journal on 2 portal(s)",
				Keys:  []rebind.Key{key(pA), key(pB)},
				Steps: []rebind.Step{iser(pA, true), iser(pB, true), del(pA), del(pB)}}},
			state: map[string]rebind.State{pA: rebind.StateDead, pB: rebind.StateDead, pC: rebind.StateNone},
		},
		{
			name: "crash after one zero: the other sharer still holds the dead np, so it goes to 0 first",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, false), portal(pB, true)}
				o.Journal = map[rebind.Key]rebind.Intent{key(pA): journal(key(pA)), key(pB): journal(key(pB))}
			},
			heals: []rebind.Heal{{Endpoint: epL, Action: rebind.ActToggleISER, Reason: "2 portals share the iSER listener: all go to 0, then all back to 1",
				Keys:  []rebind.Key{key(pB), key(pA)},
				Steps: []rebind.Step{iser(pB, false), iser(pA, true), iser(pB, true), del(pA), del(pB)}}},
			state: map[string]rebind.State{pA: rebind.StateDead, pB: rebind.StateDead},
		},
		{
			name: "crash after the first one: the listener is alive, the rest re-attach",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, true), portal(pB, false)}
				o.Journal = map[rebind.Key]rebind.Intent{key(pA): journal(key(pA)), key(pB): journal(key(pB))}
				o.Listeners = []rdma.CMID{listen("ib_isert", "rxe0", 3, "192.0.2.1:3260")}
			},
			heals: []rebind.Heal{{Endpoint: epL, Action: rebind.ActCompleteISER, Reason: "iser=1 to restore from the journal on 1 portal(s)",
				Keys:  []rebind.Key{key(pB), key(pA)},
				Steps: []rebind.Step{iser(pB, true), del(pA), del(pB)}}},
			state: map[string]rebind.State{pA: rebind.StateListening, pB: rebind.StateListening},
		},
		{
			name: "VLAN: the GID table says rxe0 carries the address of veth0.100; the nvmet port is rebound",
			obs: func(o *rebind.Observed) {
				o.Ports = []configfs.Port{port1}
			},
			heals: []rebind.Heal{{Endpoint: epN, Action: rebind.ActRebindPort, Reason: "listener dead", Keys: []rebind.Key{nkey},
				Steps: rebindPort1}},
			state: map[string]rebind.State{"1": rebind.StateDead},
		},
		{
			name: "GID table not filled yet: wait, and look again shortly after the event",
			obs: func(o *rebind.Observed) {
				o.Ports = []configfs.Port{port1}
				o.Devices[0].Ports[0].GIDs = nil
				o.EventAt = now.Add(-120 * time.Millisecond)
			},
			state: map[string]rebind.State{"1": rebind.StateDead},
		},
		{
			name: "stranded: LISTEN on rxe1, the address is carried by rxe0; within the repair grace nothing",
			obs: func(o *rebind.Observed) {
				o.Ports = []configfs.Port{port1}
				o.Listeners = []rdma.CMID{listen("nvmet_rdma", "rxe1", 4, "192.0.2.1:4420")}
			},
			mem:   func(m *rebind.Memory) { m.DeadSince[epN] = now.Add(-2 * time.Second) },
			state: map[string]rebind.State{"1": rebind.StateStranded},
		},
		{
			name: "stranded past the grace: rebound",
			obs: func(o *rebind.Observed) {
				o.Ports = []configfs.Port{port1}
				o.Listeners = []rdma.CMID{listen("nvmet_rdma", "rxe1", 4, "192.0.2.1:4420")}
			},
			mem: func(m *rebind.Memory) { m.DeadSince[epN] = now.Add(-6 * time.Second) },
			heals: []rebind.Heal{{Endpoint: epN, Action: rebind.ActRebindPort, Reason: "stranded: listening on rxe1, but 192.0.2.1 is carried by rxe0 port 1 now; hosts cannot connect", Keys: []rebind.Key{nkey},
				Steps: rebindPort1}},
			state: map[string]rebind.State{"1": rebind.StateStranded},
		},
		{
			name: "stranded with pin_device: reported, left alone",
			obs: func(o *rebind.Observed) {
				o.Ports = []configfs.Port{port1}
				o.Listeners = []rdma.CMID{listen("nvmet_rdma", "rxe1", 4, "192.0.2.1:4420")}
			},
			mem:   func(m *rebind.Memory) { m.DeadSince[epN] = now.Add(-time.Minute) },
			cfg:   func(c *rebind.Config) { c.PinDevice = true },
			state: map[string]rebind.State{"1": rebind.StateStranded},
		},
		{
			name: "dead past give-up: nothing",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, true), portal(pB, true)}
			},
			mem:   func(m *rebind.Memory) { m.DeadSince[epL] = now.Add(-11 * time.Minute) },
			cfg:   func(c *rebind.Config) { c.GiveUpAfter = 10 * time.Minute },
			state: map[string]rebind.State{pA: rebind.StateDead, pB: rebind.StateDead},
		},
		{
			name: "backoff pending: nothing; a manual rebind (forced) goes through it",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, true)}
			},
			mem: func(m *rebind.Memory) {
				m.NextTry[epL] = now.Add(time.Second)
				m.Forced[key(pA)] = true
			},
			heals: []rebind.Heal{{Endpoint: epL, Action: rebind.ActToggleISER, Reason: "listener dead (iser reads 1)", Keys: []rebind.Key{key(pA)},
				Steps: []rebind.Step{put(pA), iser(pA, false), iser(pA, true), del(pA)}}},
			state: map[string]rebind.State{pA: rebind.StateDead},
		},
		{
			name: "removal in progress: the device it lived on is still registered",
			obs: func(o *rebind.Observed) {
				o.Portals = []configfs.Portal{portal(pA, true)}
			},
			mem:   func(m *rebind.Memory) { m.AliveOn[epL] = 3 + 1 },
			state: map[string]rebind.State{pA: rebind.StateDead},
		},
		{
			name: "boot: a declared link missing on a port with no links, listener absent",
			obs: func(o *rebind.Observed) {
				p := port1
				p.Links = nil
				o.Ports = []configfs.Port{p}
				o.Declared = []rebind.Declared{{Source: "/etc/nvmet/config.json", Kind: rebind.KindNvmet, ID: "1", Addr: mustAddrPort("192.0.2.1:4420"), NQNs: []string{nqnA}}}
				o.BootUntil = now.Add(time.Minute)
			},
			heals: []rebind.Heal{{Endpoint: epN, Action: rebind.ActCompleteBoot, Reason: "1 link(s) declared in /etc/nvmet/config.json missing (refused at boot?)", Keys: []rebind.Key{nkey},
				Steps: []rebind.Step{{Op: rebind.OpLink, Key: nkey, Link: lA, Pre: linkPre}}}},
			state: map[string]rebind.State{"1": rebind.StateDead},
		},
		{
			name: "boot window over: not enabled, nothing",
			obs: func(o *rebind.Observed) {
				p := port1
				p.Links = nil
				o.Ports = []configfs.Port{p}
				o.Declared = []rebind.Declared{{Source: "/etc/nvmet/config.json", Kind: rebind.KindNvmet, ID: "1", Addr: mustAddrPort("192.0.2.1:4420"), NQNs: []string{nqnA}}}
				o.BootUntil = now.Add(-time.Minute)
			},
			state: map[string]rebind.State{"1": rebind.StateNone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := rebind.Observed{Devices: []rdma.Device{rxe0, rxe1}, Addrs: addrs, Now: now, Subsystems: map[string]bool{nqnA: true, nqnB: true}}
			obs.Devices[0].Ports = append([]rdma.Port(nil), rxe0.Ports...)
			tt.obs(&obs)
			mem := rebind.NewMemory()
			if tt.mem != nil {
				tt.mem(&mem)
			}
			cfg := rebind.DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			pl := rebind.Plan(obs, mem, cfg)
			if diff := cmp.Diff(tt.heals, pl.Heals, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.AddrPort{}, netip.Addr{})); diff != "" {
				t.Errorf("heals (-want +got):\n%s", diff)
			}
			got := map[string]rebind.State{}
			for _, it := range pl.Items {
				got[it.ID] = it.State
			}
			if diff := cmp.Diff(tt.state, got); diff != "" {
				t.Errorf("states (-want +got):\n%s\nitems: %+v", diff, pl.Items)
			}
			for _, it := range pl.Items {
				if it.State == rebind.StateStranded && !strings.HasPrefix(it.Reason, "stranded") {
					t.Errorf("%s: stranded, reason %q", it.Key, it.Reason)
				}
			}
		})
	}
}

// The GID-table wait looks again shortly after the event, then stops.
func TestPlanRechecksAfterEvent(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obs := rebind.Observed{
		Ports:      []configfs.Port{{ID: "1", Trtype: "rdma", Adrfam: "ipv4", Traddr: "192.0.2.1", Trsvcid: "4420", Links: []configfs.Link{{Name: nqnA, NQN: nqnA}}}},
		Devices:    []rdma.Device{{Index: 1, Name: "rxe0", Ports: []rdma.Port{{Index: 1, Netdev: "veth0", GIDsKnown: true}}}},
		Addrs:      []rdma.Addr{{Ifindex: 9, Netdev: "veth0.100", IP: mustAddr("192.0.2.1")}},
		Subsystems: map[string]bool{nqnA: true},
		Now:        now, EventAt: now.Add(-120 * time.Millisecond),
	}
	it := rebind.Plan(obs, rebind.NewMemory(), rebind.DefaultConfig()).Items[0]
	if want := obs.EventAt.Add(200 * time.Millisecond); !it.RetryAt.Equal(want) {
		t.Errorf("retry at %v, want %v (reason %q)", it.RetryAt, want, it.Reason)
	}
	if !strings.Contains(it.Reason, "waiting for an RDMA device to carry 192.0.2.1 on veth0.100") {
		t.Errorf("reason %q", it.Reason)
	}
	obs.EventAt = now.Add(-10 * time.Second)
	if it := rebind.Plan(obs, rebind.NewMemory(), rebind.DefaultConfig()).Items[0]; !it.RetryAt.IsZero() {
		t.Errorf("still rechecking 10 s after the event: %v", it.RetryAt)
	}
}

// sharedWorld: rxe0 on veth0, 192.0.2.1 on veth0 and n targets, each with
// tpgt_1/np/192.0.2.1:3260 iser=1, plus a target on its own :3261.
func sharedWorld(t testing.TB, n int) (*fakeKernel, []string, string) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 0x11, "veth0")
	var ids []string
	for i := range n {
		ids = append(ids, k.ISERPortal(fmt.Sprintf("iqn.2024-01.lab:vol-%04d", i), "tpgt_1", "192.0.2.1:3260"))
	}
	own := k.ISERPortal("iqn.2024-01.lab:own", "tpgt_1", "192.0.2.1:3261")
	return k, ids, own
}

func sharedEngine(t testing.TB, k *fakeKernel, clk *clock, fault func(string) bool, dir string) *rebind.Engine {
	j, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig(), Now: clk.now, Fault: fault})
}

func TestSharedPortalHealsAsOneUnit(t *testing.T) {
	for _, n := range []int{2, 3, 1024} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			k, ids, own := sharedWorld(t, n)
			clk := newClock()
			e := sharedEngine(t, k, clk, nil, t.TempDir())
			if _, err := e.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			k.RemoveDevice("rxe0")
			k.AddDevice("rxe0", 0x11, "veth0")
			k.ResetLog()
			items, err := e.Reconcile(context.Background())
			must(t, err)
			for _, id := range append(ids, own) {
				if !k.Listening("ib_isert", id) {
					t.Fatalf("%s not listening after one round: %s", id, item(items, id).Reason)
				}
			}
			// All zeros before any one; each sharer written exactly twice.
			log := k.LogStrings()
			if len(log) != 2*(n+1) {
				t.Fatalf("%d writes, want %d: %q", len(log), 2*(n+1), log)
			}
			firstOne := -1
			lastZero := -1
			for i, w := range log {
				if strings.Contains(w, ":3260/iser 1") && firstOne < 0 {
					firstOne = i
				}
				if strings.Contains(w, ":3260/iser 0") {
					lastZero = i
				}
			}
			if lastZero > firstOne {
				t.Errorf("a sharer went back to 1 before every sharer was at 0: %q", log)
			}
			if it := item(items, ids[0]); it.Sharers != n || it.State != rebind.StateListening {
				t.Errorf("status of %s: sharers %d state %v", ids[0], it.Sharers, it.State)
			}
		})
	}
}

func TestSharedPortalAdminChangesDuringOutage(t *testing.T) {
	k, ids, _ := sharedWorld(t, 3)
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	k.RemoveDevice("rxe0")
	admin := configfs.NewWithOps(k.Root, k.Admin())
	must(t, admin.SetISER(ids[0], false)) // the admin's 0
	must(t, k.RemovePortal(ids[1]))       // the admin's rmdir
	k.AddDevice("rxe0", 0x11, "veth0")
	_, err := e.Reconcile(context.Background())
	must(t, err)
	if !k.Listening("ib_isert", ids[2]) {
		t.Fatalf("the remaining sharer is not listening: %s", k)
	}
	p, err := k.FS().Portal(ids[0])
	must(t, err)
	if p.ISER {
		t.Error("the admin's iser=0 was undone")
	}
	if _, err := k.FS().Portal(ids[1]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the removed np is back: %v", err)
	}
}

// The admin sets a sharer's iser to 0 in the middle of the heal, after
// the first sharer's 0 and before that sharer's: the heal reads it on the
// file it writes, leaves it at 0 and brings the other sharers back to 1.
func TestSharedPortalAdminZeroDuringTheHeal(t *testing.T) {
	k, ids, _ := sharedWorld(t, 3)
	clk := newClock()
	admin := configfs.NewWithOps(k.Root, k.Admin())
	once := false
	e := sharedEngine(t, k, clk, func(p string) bool {
		if p == "after-iser-0" && !once {
			once = true
			must(t, admin.SetISER(ids[2], false))
		}
		return false
	}, t.TempDir())
	must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	k.ResetLog()
	_, err := e.Reconcile(context.Background())
	must(t, err)
	for _, id := range ids[:2] {
		if p, _ := k.FS().Portal(id); !p.ISER || !k.Listening("ib_isert", id) {
			t.Errorf("%s: iser=%v listening=%v after the heal", id, p.ISER, k.Listening("ib_isert", id))
		}
	}
	if p, _ := k.FS().Portal(ids[2]); p.ISER {
		t.Errorf("the admin's iser=0, written during the heal, was undone: %q", k.LogStrings())
	}
}

// The admin's iser=0, written after the round read configfs and before its
// journal batch, is not journaled: a crash right after the batch leaves it
// at 0 after the restart. Through the inotify model the batch takes the
// plan's reading of iser as it is only while the model's generation has
// not moved (Observed.unchanged); the admin's write moves it, so the
// portal is read again. Without the model every precondition is read.
func TestSharedPortalAdminZeroBeforeTheJournal(t *testing.T) {
	for _, model := range []bool{false, true} {
		t.Run(fmt.Sprintf("model=%v", model), func(t *testing.T) {
			k, ids, _ := sharedWorld(t, 3)
			clk := newClock()
			dir := t.TempDir()
			var tree rebind.Tree = k.FS()
			if model {
				m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				tree = m
			}
			j, err := state.Open(dir)
			must(t, err)
			admin := configfs.NewWithOps(k.Root, k.Admin())
			crashed := false
			e := rebind.New(rebind.Options{Tree: tree, Kernel: k, Store: j, Config: rebind.DefaultConfig(), Now: clk.now,
				Fault: func(p string) bool {
					switch p {
					case "before-journal":
						must(t, admin.SetISER(ids[2], false))
					case "after-journal":
						crashed = true
						return true
					}
					return false
				}})
			_, err = e.Reconcile(context.Background())
			must(t, err)
			k.RemoveDevice("rxe0")
			k.AddDevice("rxe0", 0x11, "veth0")
			if _, err := e.Reconcile(context.Background()); !errors.Is(err, rebind.ErrCrashed) || !crashed {
				t.Fatalf("no crash after the journal batch: %v", err)
			}
			_, err = sharedEngine(t, k, clk, nil, dir).Reconcile(context.Background())
			must(t, err)
			if p, _ := k.FS().Portal(ids[2]); p.ISER {
				t.Errorf("the admin's iser=0, written before the journal batch, was undone after the restart: %q", k.LogStrings())
			}
			for _, id := range ids[:2] {
				if p, _ := k.FS().Portal(id); !p.ISER || !k.Listening("ib_isert", id) {
					t.Errorf("%s: iser=%v listening=%v after the restart", id, p.ISER, k.Listening("ib_isert", id))
				}
			}
		})
	}
}

// Through the inotify model, when nothing in configfs moved since the round
// read it, the journal batch of a shared portal's heal reads nothing: the
// plan's reading of each sharer's iser is the precondition (256 sharers:
// 256 reads saved before the first write).
func TestSharedPortalJournalTakesThePlansReading(t *testing.T) {
	k, ids, _ := sharedWorld(t, 8)
	m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	j, err := state.Open(t.TempDir())
	must(t, err)
	var before watch.Stats
	var reads []uint64 // by journal batch
	e := rebind.New(rebind.Options{Tree: m, Kernel: k, Store: j, Config: rebind.DefaultConfig(), Now: newClock().now,
		Fault: func(p string) bool {
			switch p {
			case "before-journal":
				before = m.Stats()
			case "after-journal":
				after := m.Stats()
				reads = append(reads, after.Reads+after.Hits+after.MemoHits-before.Reads-before.Hits-before.MemoHits)
			}
			return false
		}})
	_, err = e.Reconcile(context.Background())
	must(t, err)
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	_, err = e.Reconcile(context.Background())
	must(t, err)
	// The first batch is the first heal's alone (the shared portal's or
	// the one of its own); the second follows the first heal's writes, so
	// its portal is read again.
	if len(reads) != 2 || reads[0] != 0 || reads[1] == 0 {
		t.Errorf("reads of configfs by journal batch: %v; want [0 >0] (none while nothing moved since the plan)", reads)
	}
	for _, id := range ids {
		if p, _ := k.FS().Portal(id); !p.ISER || !k.Listening("ib_isert", id) {
			t.Errorf("%s: iser=%v listening=%v after the heal", id, p.ISER, k.Listening("ib_isert", id))
		}
	}
}

// A crash at every point of a shared heal: a restarted engine ends with
// every sharer at 1 and a listener; the admin's 0 stays 0.
func TestSharedPortalCrashAnywhere(t *testing.T) {
	points := []string{"after-journal", "after-iser-0", "after-all-iser-0", "after-iser-1"}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			k, ids, _ := sharedWorld(t, 3)
			clk := newClock()
			dir := t.TempDir()
			admin := configfs.NewWithOps(k.Root, k.Admin())
			must(t, admin.SetISER(ids[2], false)) // the admin's, before the outage
			crashed := false
			e := sharedEngine(t, k, clk, func(p string) bool {
				if p == point {
					crashed = true
				}
				return p == point
			}, dir)
			_, err := e.Reconcile(context.Background())
			must(t, err)
			k.RemoveDevice("rxe0")
			k.AddDevice("rxe0", 0x11, "veth0")
			if _, err := e.Reconcile(context.Background()); !errors.Is(err, rebind.ErrCrashed) || !crashed {
				t.Fatalf("no crash at %s: %v", point, err)
			}
			e2 := sharedEngine(t, k, clk, nil, dir)
			_, err = e2.Reconcile(context.Background())
			must(t, err)
			for _, id := range ids[:2] {
				if !k.Listening("ib_isert", id) {
					t.Errorf("%s not listening after the restart: %s", id, k)
				}
				if p, _ := k.FS().Portal(id); !p.ISER {
					t.Errorf("%s reads iser=0 after the restart", id)
				}
			}
			if p, _ := k.FS().Portal(ids[2]); p.ISER {
				t.Error("the admin's iser=0 was undone")
			}
			if files := journalFiles(t, dir+"/journal"); len(files) != 0 {
				t.Errorf("journal left: %q", files)
			}
		})
	}
}

func TestVLANAndMacvlanAddressesHeal(t *testing.T) {
	k := newFakeKernel(t)
	k.AddNetdev("veth0")
	k.AddUpper("veth0.100", "veth0")
	k.AddUpper("mv0", "veth0")
	k.AddAddr("veth0.100", "192.0.2.1")
	k.AddAddr("mv0", "198.51.100.1")
	k.AddDevice("rxe0", 0x11, "veth0")
	k.LinkedPort("1", "192.0.2.1", "4420", nqnA)
	k.LinkedPort("2", "198.51.100.1", "4420", nqnA)
	k.ISERPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	items, err := e.Reconcile(context.Background())
	must(t, err)
	if it := item(items, "1"); it.Carrier != "rxe0" || it.Netdev != "veth0.100" || it.State != rebind.StateListening {
		t.Fatalf("port 1 before the reset: %+v", it)
	}
	k.HoldGIDs = true
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	e.Poke()
	items, err = e.Reconcile(context.Background())
	must(t, err)
	if it := item(items, "1"); it.RetryAt.IsZero() || !strings.Contains(it.Reason, "waiting for an RDMA device to carry") {
		t.Fatalf("port 1 with an empty GID table: %+v", it)
	}
	k.FillGIDs("rxe0")
	clk.advance(100 * time.Millisecond)
	_, err = e.Reconcile(context.Background())
	must(t, err)
	for _, id := range []string{"1", "2"} {
		if !k.Listening("nvmet_rdma", id) {
			t.Errorf("port %s not healed: %s", id, k)
		}
	}
	if !k.Listening("ib_isert", iqn+"/tpgt_1/192.0.2.1:3260") {
		t.Errorf("portal not healed: %s", k)
	}
}

// strandedWorld: rxe0 on veth0 with 192.0.2.3, rxe1 on veth2; nvmet port
// 1 on 192.0.2.3:4420 and two targets sharing the iSER portal
// 192.0.2.3:3260 (returned), all listening on rxe0.
func strandedWorld(t *testing.T) (k *fakeKernel, p, p2 string) {
	t.Helper()
	k = newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.3")
	k.AddAddr("veth2", "192.0.2.9")
	k.AddDevice("rxe0", 0x11, "veth0")
	k.AddDevice("rxe1", 0x22, "veth2")
	k.LinkedPort("1", "192.0.2.3", "4420", nqnA)
	p = k.ISERPortal(iqn, "tpgt_1", "192.0.2.3:3260")
	p2 = k.ISERPortal(iqn+"-2", "tpgt_1", "192.0.2.3:3260")
	return k, p, p2
}

func TestStrandedListenerIsRebound(t *testing.T) {
	for _, pin := range []bool{false, true} {
		t.Run(fmt.Sprintf("pin_device=%v", pin), func(t *testing.T) {
			k, p, p2 := strandedWorld(t)
			clk := newClock()
			j, err := state.Open(t.TempDir())
			must(t, err)
			cfg := rebind.DefaultConfig()
			cfg.PinDevice = pin
			e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: cfg, Now: clk.now})
			_, err = e.Reconcile(context.Background())
			must(t, err)
			k.MoveAddr("veth0", "veth2", "192.0.2.3")
			k.ResetLog()
			items, err := e.Reconcile(context.Background())
			must(t, err)
			if it := item(items, "1"); it.State != rebind.StateStranded || it.Device != "rxe0" || it.Carrier != "rxe1" || *it.Listening() {
				t.Fatalf("port 1 after the move: %+v", it)
			}
			if len(k.Log()) != 0 {
				t.Fatalf("wrote within the repair grace: %q", k.LogStrings())
			}
			if v := status.Check(status.Report(rebind.Snapshot{Items: items, At: clk.now()}, "daemon")); v.Health != status.Warning {
				t.Errorf("check says %v for a listener stranded within the repair grace: %s", v.Health, v.StatusLine())
			}
			clk.advance(6 * time.Second)
			if v := status.Check(status.Report(rebind.Snapshot{Items: items, At: clk.now()}, "daemon")); v.Health != status.Critical {
				t.Errorf("check says %v for a listener stranded past the repair grace: %s", v.Health, v.StatusLine())
			}
			_, err = e.Reconcile(context.Background())
			must(t, err)
			want := "rxe1"
			if pin {
				want = "rxe0"
			}
			if got := k.ListeningOn("nvmet_rdma", "1"); got != want {
				t.Errorf("port 1 listens on %q, want %q", got, want)
			}
			for _, id := range []string{p, p2} { // the shared iSER listener, both sharers
				if got := k.ListeningOn("ib_isert", id); got != want {
					t.Errorf("portal %s listens on %q, want %q", id, got, want)
				}
				if pt, err := k.FS().Portal(id); err != nil || !pt.ISER {
					t.Errorf("portal %s: iser=%v, %v after the heal", id, pt.ISER, err)
				}
			}
			if !pin {
				// And back: stranded again on rxe1, rebound to rxe0.
				k.MoveAddr("veth2", "veth0", "192.0.2.3")
				_, err = e.Reconcile(context.Background())
				must(t, err)
				clk.advance(6 * time.Second)
				_, err = e.Reconcile(context.Background())
				must(t, err)
				if got := k.ListeningOn("nvmet_rdma", "1"); got != "rxe0" {
					t.Errorf("after the move back, port 1 listens on %q", got)
				}
			}
		})
	}
}

// A manual rebind goes through graces and backoff.
func TestRetryForcesStrandedHeal(t *testing.T) {
	k, _, _ := strandedWorld(t)
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	_, err := e.Reconcile(context.Background())
	must(t, err)
	k.MoveAddr("veth0", "veth2", "192.0.2.3")
	_, err = e.Reconcile(context.Background())
	must(t, err)
	e.Retry(rebind.Key{Kind: rebind.KindNvmet, ID: "1"})
	_, err = e.Reconcile(context.Background())
	must(t, err)
	if got := k.ListeningOn("nvmet_rdma", "1"); got != "rxe1" {
		t.Errorf("manual rebind: listens on %q", got)
	}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// `nvmet-rebind plan` prints exactly the steps Apply executes: the
// described steps of a planned heal are the writes the fake then logs.
func TestPlanDescribesWhatApplyWrites(t *testing.T) {
	k, ids, _ := sharedWorld(t, 2)
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	_, err := e.Reconcile(context.Background())
	must(t, err)
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	pl, _, err := e.PlanAll()
	must(t, err)
	var described []string
	for _, h := range pl.Heals {
		for _, s := range h.Steps {
			described = append(described, s.Describe("/cfg"))
		}
	}
	want := []string{
		"journal lio portal " + ids[0] + "    (if the portal exists and iser reads 1)",
		"journal lio portal " + ids[1] + "    (if the portal exists and iser reads 1)",
		"echo 0 > /cfg/target/iscsi/iqn.2024-01.lab:vol-0000/tpgt_1/np/192.0.2.1:3260/iser    (if the portal exists and iser reads 1)",
		"echo 0 > /cfg/target/iscsi/iqn.2024-01.lab:vol-0001/tpgt_1/np/192.0.2.1:3260/iser    (if the portal exists and iser reads 1)",
		"echo 1 > /cfg/target/iscsi/iqn.2024-01.lab:vol-0000/tpgt_1/np/192.0.2.1:3260/iser    (if the portal exists and iser reads 0)",
		"echo 1 > /cfg/target/iscsi/iqn.2024-01.lab:vol-0001/tpgt_1/np/192.0.2.1:3260/iser    (if the portal exists and iser reads 0)",
		"forget the journal entry of lio portal " + ids[0],
		"forget the journal entry of lio portal " + ids[1],
		"journal lio portal iqn.2024-01.lab:own/tpgt_1/192.0.2.1:3261    (if the portal exists and iser reads 1)",
		"echo 0 > /cfg/target/iscsi/iqn.2024-01.lab:own/tpgt_1/np/192.0.2.1:3261/iser    (if the portal exists and iser reads 1)",
		"echo 1 > /cfg/target/iscsi/iqn.2024-01.lab:own/tpgt_1/np/192.0.2.1:3261/iser    (if the portal exists and iser reads 0)",
		"forget the journal entry of lio portal iqn.2024-01.lab:own/tpgt_1/192.0.2.1:3261",
	}
	if diff := cmp.Diff(want, described); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	k.ResetLog()
	_, err = e.Reconcile(context.Background())
	must(t, err)
	writes := k.LogStrings()
	wantWrites := []string{}
	for _, d := range described {
		if v, ok := strings.CutPrefix(d, "echo "); ok {
			val, path, _ := strings.Cut(v, " > /cfg/")
			path, _, _ = strings.Cut(path, "    ")
			wantWrites = append(wantWrites, "write "+path+" "+val)
		}
	}
	if diff := cmp.Diff(wantWrites, writes); diff != "" {
		t.Errorf("writes differ from the plan (-plan +applied):\n%s", diff)
	}
}

// An address moved under a listener while the GID cache lags behind it:
// the round on the address event sees the address on a netdev whose
// device has no GID entry for it yet, and takes the listener as alive.
// No event says when the entry comes, so that round asks to look again
// (the re-checks after an event); the look after the entry came sees the
// listener stranded and, past the repair grace, it is rebound. Address
// move on 6.12 (make test): the round ran before the GID moved and the
// stranding went unseen until the periodic resync.
func TestStrandedSeenWhenTheGIDComesAfterTheEvent(t *testing.T) {
	k, _, _ := strandedWorld(t)
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	k.Kernel.HoldAddrGIDs = true
	k.MoveAddr("veth0", "veth2", "192.0.2.3")
	e.Poke()
	items, err := e.Reconcile(context.Background())
	must(t, err)
	if it := item(items, "1"); it.State != rebind.StateListening {
		t.Fatalf("before the GID entry: port 1 is %v (%s), want listening (nothing better to bind)", it.State, it.Reason)
	}
	next := e.Snapshot().Next
	if next.IsZero() || next.After(clk.now().Add(5*time.Second)) {
		t.Fatalf("after the address event, the next look is %v (now %v): the GID entry that comes later is never looked for (port 1: %v, %q, carrier %q)", next, clk.now(), item(items, "1").State, item(items, "1").Reason, item(items, "1").Carrier)
	}
	k.Kernel.FillAddrGIDs("192.0.2.3")
	for i := 0; i < 20 && k.ListeningOn("nvmet_rdma", "1") != "rxe1"; i++ {
		next := e.Snapshot().Next
		if next.IsZero() {
			t.Fatalf("look %d: no next look, port 1 still on %q: %+v", i, k.ListeningOn("nvmet_rdma", "1"), item(e.Snapshot().Items, "1"))
		}
		if next.After(clk.now()) {
			clk.advance(next.Sub(clk.now()))
		}
		must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	}
	if got := k.ListeningOn("nvmet_rdma", "1"); got != "rxe1" {
		t.Fatalf("port 1 listens on %q, want rxe1 (where 192.0.2.3 is now)", got)
	}
}
