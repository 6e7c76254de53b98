package rebind_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

const (
	nqnA = "nqn.2024-01.lab:a"
	nqnB = "nqn.2024-01.lab:b"
	iqn  = "iqn.2024-01.lab:t"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// world is a fake kernel with rxe0 on veth0 holding 192.0.2.1 and
// 2001:db8::1, an nvmet port 1 on 192.0.2.1:4420 with two subsystems, and
// a LIO portal 192.0.2.1:3260 with iser=1 — all listening.
type world struct {
	t     *testing.T
	k     *fakeKernel
	clk   *clock
	state string
	cfg   rebind.Config
	fault func(string) bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth0", "2001:db8::1")
	k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	k.LinkedPort("1", "192.0.2.1", "4420", nqnA, nqnB)
	k.ISERPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	w := &world{t: t, k: k, clk: newClock(), state: t.TempDir(), cfg: rebind.DefaultConfig()}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (w *world) engine() *rebind.Engine {
	w.t.Helper()
	// As the daemon does at start: open for writing, clean.
	j, err := state.Open(w.state)
	must(w.t, err)
	moved, err := j.Clean()
	must(w.t, err)
	return rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Store: j, Config: w.cfg, Now: w.clk.now, Fault: w.fault, Declared: saved.Load, Quarantined: moved})
}

func (w *world) reconcile(e *rebind.Engine) []rebind.Item {
	w.t.Helper()
	items, err := e.Reconcile(context.Background())
	must(w.t, err)
	return items
}

func (w *world) links(port string) []string {
	p, err := w.k.FS().Port(port)
	must(w.t, err)
	var s []string
	for _, l := range p.Links {
		s = append(s, l.NQN)
	}
	return s
}

const portal = iqn + "/tpgt_1/192.0.2.1:3260"

func (w *world) reset() {
	w.k.RemoveDevice("rxe0")
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
}

func item(items []rebind.Item, id string) rebind.Item {
	for _, it := range items {
		if it.ID == id {
			return it
		}
	}
	return rebind.Item{}
}

func TestHealthyIsUntouched(t *testing.T) {
	w := newWorld(t)
	w.k.AddPort("2", "tcp", "ipv4", "192.0.2.1", "4420")
	w.k.LinkedPort("3", "0.0.0.0", "4430", nqnA)
	w.k.TCPPort("4", "192.0.2.1", "4421", nqnA)
	e := w.engine()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes on a healthy target: %q", log)
	}
	want := map[string]string{"1": "listening", portal: "listening", "2": "not enabled: no subsystem linked", "4": "listening", "3": "wildcard address: the kernel re-listens on new devices by itself"}
	for id, r := range want {
		if got := item(items, id).Reason; got != r {
			t.Errorf("%s: reason %q, want %q", id, got, r)
		}
	}
	// A reset kills 1 and the portal; the wildcard port is the kernel's job.
	w.reset()
	w.reconcile(e)
	for _, l := range w.k.LogStrings() {
		if strings.Contains(l, "ports/3/") || strings.Contains(l, "ports/2/") {
			t.Errorf("wrote to an unmanaged port: %s", l)
		}
	}
}

func TestResetHeals(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.reset()
	if w.k.Listening("nvmet_rdma", "1") || w.k.Listening("ib_isert", portal) {
		t.Fatal("fake: reset left a listener")
	}
	items := w.reconcile(e)
	want := []string{
		"remove nvmet/ports/1/subsystems/" + nqnA,
		"remove nvmet/ports/1/subsystems/" + nqnB,
		"symlink nvmet/ports/1/subsystems/" + nqnA + " " + nqnA,
		"symlink nvmet/ports/1/subsystems/" + nqnB + " " + nqnB,
		"write target/iscsi/" + iqn + "/tpgt_1/np/192.0.2.1:3260/iser 0",
		"write target/iscsi/" + iqn + "/tpgt_1/np/192.0.2.1:3260/iser 1",
	}
	if diff := cmp.Diff(want, w.k.LogStrings()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Errorf("not healed: %s", w.k)
	}
	if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("link order (-want +got):\n%s", diff)
	}
	for _, id := range []string{"1", portal} {
		if it := item(items, id); it.Reason != "listening" || it.Listening() == nil || !*it.Listening() {
			t.Errorf("%s after heal: %+v", id, it)
		}
	}
	// A second reconcile writes nothing.
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("writes after heal: %q", log)
	}
}

func TestAddressEventAloneIsNoReason(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.k.DelAddr("veth0", "192.0.2.1")
	w.reconcile(e)
	w.k.AddAddr("veth0", "192.0.2.1")
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("writes after an address flap with live listeners: %q", log)
	}
}

func TestAddressLateRetriesThenHeals(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.k.DelNetdev("veth0") // IP and rxe0 gone
	items := w.reconcile(e)
	if it := item(items, "1"); it.Action != rebind.ActNone || !strings.Contains(it.Reason, "waiting for 192.0.2.1") {
		t.Errorf("port 1 while the address is gone: %+v", it)
	}
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes while nothing can bind: %q", log)
	}
	// The RDMA device comes back first, on a netdev without the address.
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes before the address is back: %q", log)
	}
	w.k.AddAddr("veth0", "192.0.2.1")
	w.reconcile(e)
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Errorf("not healed: %s", w.k)
	}
}

// A bind refused by the kernel keeps the journal and is retried with backoff.
func TestRefusedBindRetries(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.reset()
	// The first relink is refused as if the address vanished at that moment.
	w.refuseLinks(1)
	items := w.reconcile(e)
	it := item(items, "1")
	if it.RetryAt.IsZero() {
		t.Fatalf("no retry scheduled: %+v", it)
	}
	if got := w.links("1"); len(got) != 0 {
		t.Fatalf("links after the refused relink: %v", got)
	}
	// Before the backoff expires nothing is written.
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes during backoff: %q", log)
	}
	w.clk.advance(time.Second)
	w.reconcile(e)
	if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("port 1 not listening after the retry")
	}
}

// refuseLinks makes the kernel refuse the next n links (EADDRNOTAVAIL),
// as if the address vanished at that moment.
func (w *world) refuseLinks(n int) {
	w.k.Fault = func(_ int, wr configfstest.Write) error {
		if wr.Op == "symlink" && n > 0 {
			n--
			return &configfsErr{}
		}
		return nil
	}
}

type configfsErr struct{}

func (*configfsErr) Error() string { return "cannot assign requested address" }
func (*configfsErr) Unwrap() error { return errAddrNotAvail }

func TestAdminRemovalRespected(t *testing.T) {
	w := newWorld(t)
	w.k.LinkedPort("2", "192.0.2.1", "4421", nqnA)
	admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
	e := w.engine()
	w.reconcile(e)
	w.k.RemoveDevice("rxe0")
	w.reconcile(e) // sees them dead, cannot act
	must(t, admin.Unlink("1", configfs.Link{Name: nqnB, NQN: nqnB}))
	must(t, w.k.RemovePort("2"))
	must(t, admin.SetISER(portal, false))
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	w.reconcile(e)
	if diff := cmp.Diff([]string{nqnA}, w.links("1")); diff != "" {
		t.Errorf("port 1 links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("port 1 not healed")
	}
	if w.k.Listening("ib_isert", portal) {
		t.Error("portal with iser=0 was re-enabled")
	}
	for _, l := range w.k.LogStrings() {
		if strings.Contains(l, "iser") || strings.Contains(l, "ports/2") || strings.Contains(l, nqnB) {
			t.Errorf("undid an admin change: %s", l)
		}
	}
}

// TestAdminChangeAfterTheRoundsJournal: the round journals its first heal
// alone, then every other heal at once; an admin who unlinks a subsystem
// from (or removes) a port after that batch but before the port's heal
// starts is respected: that heal writes nothing, its fresh journal entry
// goes (a restart must not relink the admin's removal), and the next round
// heals the port with what is left.
func TestAdminChangeAfterTheRoundsJournal(t *testing.T) {
	for _, remove := range []bool{false, true} {
		t.Run(fmt.Sprintf("remove-port=%v", remove), func(t *testing.T) {
			w := newWorld(t)
			admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
			for _, id := range []string{"2", "3"} {
				w.k.LinkedPort(id, "192.0.2.1", "442"+id, nqnA, nqnB)
			}
			w.reconcile(w.engine())
			w.reset()
			heals, changed := 0, false
			w.fault = func(pt string) bool {
				// Heals run in configfs order: port 1 (journaled alone),
				// then port 2 and port 3 (journaled together before port
				// 2's heal). Port 3 changes during port 2's heal.
				if pt == "after-unlink-0" {
					if heals++; heals == 2 {
						changed = true
						if remove {
							must(t, w.k.RemovePort("3"))
						} else {
							must(t, admin.Unlink("3", configfs.Link{Name: nqnB, NQN: nqnB}))
						}
					}
				}
				return false
			}
			e := w.engine()
			w.k.ResetLog()
			e.Reconcile(context.Background())
			if !changed {
				t.Fatal("port 2's heal never unlinked")
			}
			for _, l := range w.k.LogStrings() {
				if strings.Contains(l, "ports/3") {
					t.Errorf("wrote port 3 after the admin changed it: %s", l)
				}
			}
			j, err := state.Open(w.state)
			must(t, err)
			if m, bad := j.Load(); len(m) != 0 || len(bad) != 0 {
				t.Errorf("journal after the round: %v %v, want empty", m, bad)
			}
			w.fault = nil
			w.reconcile(w.engine())
			if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("nvmet_rdma", "2") {
				t.Error("ports 1 and 2 not healed")
			}
			if remove {
				return
			}
			w.reconcile(e)
			if diff := cmp.Diff([]string{nqnA}, w.links("3")); diff != "" {
				t.Errorf("port 3 links (-want +got):\n%s", diff)
			}
			if !w.k.Listening("nvmet_rdma", "3") {
				t.Error("port 3 not healed by the next round")
			}
		})
	}
}

// TestUnchangedRoundSkipsThePlan: a round that observes exactly what the
// last one did, with nothing on a timer, keeps the last plan (counted in
// Stats.Unchanged; the package's tests check each such round against a
// plan made anyway). Anything a plan reads that changes — a listener gone
// without any device event, an admin's configfs write, a reload, a dead
// endpoint's timers — makes the round plan.
func TestUnchangedRoundSkipsThePlan(t *testing.T) {
	w := newWorld(t)
	// A second target sharing the iSER portal: one sharer going to 0
	// leaves the kernel's listener as it was (only configfs changes).
	const iqn2 = "iqn.2003-01.org.example:shared"
	const shared = iqn2 + "/tpgt_1/192.0.2.1:3260"
	w.k.ISERPortal(iqn2, "tpgt_1", "192.0.2.1:3260")
	admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
	e := w.engine()
	unchanged := func() uint64 { return e.Snapshot().Stats.Unchanged }
	w.reconcile(e)
	w.reconcile(e)
	w.reconcile(e)
	if got := unchanged(); got != 2 {
		t.Fatalf("healthy target, 3 rounds: %d skipped plans, want 2", got)
	}
	// An event that changed nothing the plan reads (a poke: udev, an
	// address elsewhere) does not make a healthy round plan.
	e.Poke()
	w.reconcile(e)
	if got := unchanged(); got != 3 {
		t.Fatalf("a poke on a healthy target: %d skipped plans, want 3", got)
	}
	// A listener destroyed without any device event: planned, held for
	// the removal grace (its device is still registered: a removal may be
	// in progress), then healed; the rounds in between plan too (a timer).
	w.k.KillListener("nvmet_rdma", "1")
	w.reconcile(e)
	w.reconcile(e)
	w.clk.advance(6 * time.Second)
	w.reconcile(e)
	if got := unchanged(); got != 3 {
		t.Errorf("a listener vanished, yet %d plans were skipped", got-3)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Fatal("the vanished listener was not healed")
	}
	w.reconcile(e) // the heal's own verification is not a steady plan
	w.reconcile(e)
	base := unchanged()
	// An admin's write that leaves the kernel as it was.
	must(t, admin.SetISER(portal, false))
	if !w.k.Listening("ib_isert", shared) {
		t.Fatal("the fake dropped a shared listener when one sharer went to 0")
	}
	items := w.reconcile(e)
	if unchanged() != base {
		t.Error("the admin set iser=0, yet the plan was skipped")
	}
	if it := item(items, portal); it.Expected {
		t.Errorf("portal at iser=0 still expected: %+v", it)
	}
	w.reconcile(e)
	base = unchanged()
	// A reload.
	e.SetConfig(w.cfg)
	w.reconcile(e)
	if unchanged() != base {
		t.Error("a reload, yet the plan was skipped")
	}
	// Dead endpoints waiting for their device: every round plans (their
	// timers: dead-since, give-up), and the device's return heals them.
	w.k.RemoveDevice("rxe0")
	w.reconcile(e)
	base = unchanged()
	w.reconcile(e)
	w.clk.advance(time.Minute)
	w.reconcile(e)
	if unchanged() != base {
		t.Error("a dead endpoint's round skipped its plan")
	}
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	w.reconcile(e)
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("not healed when the device came back")
	}
	w.reconcile(e)
	w.reconcile(e)
	// Dead endpoints whose address is on no netdev (a card gone for
	// days): held by nothing the clock ends, so once Learn has their
	// dead-since, their rounds keep the plan (for minutes here); the
	// address's return is a change, planned and healed.
	w.k.RemoveDevice("rxe0")
	w.k.DelAddr("veth0", "192.0.2.1")
	w.reconcile(e) // dead: Learn sets dead-since
	w.reconcile(e) // planned with it
	base = unchanged()
	w.reconcile(e)
	w.clk.advance(5 * time.Minute)
	w.reconcile(e)
	if got := unchanged() - base; got != 2 {
		t.Errorf("dead endpoints waiting for their address: %d of 2 rounds kept the plan", got)
	}
	w.k.AddAddr("veth0", "192.0.2.1")
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	base = unchanged()
	w.reconcile(e)
	if unchanged() != base {
		t.Error("the address came back, yet the plan was skipped")
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("not healed when the address and device came back")
	}
}

func TestGiveUp(t *testing.T) {
	w := newWorld(t)
	w.cfg.GiveUpAfter = 5 * time.Second
	e := w.engine()
	w.reconcile(e)
	w.k.RemoveDevice("rxe0")
	w.reconcile(e)
	w.clk.advance(10 * time.Second)
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes after giving up: %q", log)
	}
	if r := item(items, "1").Reason; !strings.Contains(r, "gave up") {
		t.Errorf("reason %q does not say it gave up", r)
	}
	for _, id := range []string{"1", portal} {
		if !item(items, id).GaveUp {
			t.Errorf("%s: GaveUp false after give_up_after (the metrics' listeners_given_up)", id)
		}
	}
	e.SetConfig(w.cfg) // reload: the admin asks to try again
	items = w.reconcile(e)
	for _, id := range []string{"1", portal} {
		if item(items, id).GaveUp {
			t.Errorf("%s: GaveUp still true after the reload", id)
		}
	}
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Errorf("not healed after reload: %s", w.k)
	}
}

func TestPinning(t *testing.T) {
	w := newWorld(t)
	w.cfg.PinDevice = true
	e := w.engine()
	w.reconcile(e) // learns GUID 80dd:…
	w.k.RemoveDevice("rxe0")
	w.k.AddDevice("rxe7", 0x1111, "veth0") // another adapter took the address
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("rebound onto a foreign device: %q", log)
	}
	if r := item(items, "1").Reason; !strings.Contains(r, "pinned") {
		t.Errorf("reason %q does not say pinned", r)
	}
	// Pins survive a restart.
	e2 := w.engine()
	w.reconcile(e2)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("restarted engine rebound onto a foreign device: %q", log)
	}
	w.k.RemoveDevice("rxe7")
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0") // the same adapter, renamed back
	w.reconcile(e2)
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("not healed on the pinned device")
	}
	// Without pinning, the other device is fine.
	w2 := newWorld(t)
	e3 := w2.engine()
	w2.reconcile(e3)
	w2.k.RemoveDevice("rxe0")
	w2.k.AddDevice("mlx5_bond_0", 0x2222, "veth0")
	w2.reconcile(e3)
	if !w2.k.Listening("nvmet_rdma", "1") {
		t.Error("not healed on a renamed device")
	}
}

func TestUnknownListenersNoWrites(t *testing.T) {
	w := newWorld(t)
	w.k.CMIDsErr = rdma.ErrUnsupported
	e := w.engine()
	w.reset()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes with listeners unknown: %q", log)
	}
	if it := item(items, "1"); it.Listening() != nil || !strings.Contains(it.Reason, "unknown") {
		t.Errorf("port 1: %+v", it)
	}
	// The same error again (a host without RDMA netlink): the same
	// inputs, the plan is kept; another error, or the table readable
	// again, is planned.
	unchanged := func() uint64 { return e.Snapshot().Stats.Unchanged }
	w.reconcile(e)
	w.reconcile(e)
	if got := unchanged(); got != 2 {
		t.Errorf("listeners unknown for the same reason, 3 rounds: %d kept the plan, want 2", got)
	}
	w.k.CMIDsErr = errors.New("netlink dump interrupted")
	items = w.reconcile(e)
	if got := unchanged(); got != 2 {
		t.Errorf("another error, yet the plan was kept (%d)", got)
	}
	if it := item(items, "1"); !strings.Contains(it.Reason, "interrupted") {
		t.Errorf("port 1 after another error: %+v", it)
	}
	w.k.CMIDsErr = nil
	w.reconcile(e)
	if got := unchanged(); got != 2 {
		t.Errorf("listeners readable again, yet the plan was kept (%d)", got)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("not healed once the listeners could be read")
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	w := newWorld(t)
	j, err := state.Open(w.state)
	must(t, err)
	e := rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Store: j, Config: w.cfg, Now: w.clk.now, DryRun: true})
	w.reset()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("dry run wrote: %q", log)
	}
	if item(items, "1").Action != rebind.ActRebindPort {
		t.Errorf("dry run plan: %+v", item(items, "1"))
	}
	// A dry run never runs its heals: asking for a retry would spin Run.
	if at := item(items, "1").RetryAt; !at.IsZero() {
		t.Errorf("dry run asks for a retry at %v", at)
	}
}

// Crash at every write point of a rebind; a fresh engine on the same state
// dir puts every link back and the listener listens.
func TestCrashAtEveryPoint(t *testing.T) {
	points := []string{"after-journal", "after-unlink-0", "after-unlink-1", "after-relink-0", "after-relink-1", "after-iser-0", "after-iser-1"}
	for _, p := range points {
		t.Run(p, func(t *testing.T) {
			w := newWorld(t)
			e := w.engine()
			w.reconcile(e)
			w.reset()
			w.fault = func(pt string) bool { return pt == p }
			crashed := w.engine()
			_, err := crashed.Reconcile(context.Background())
			if err == nil {
				t.Fatalf("fault point %s never reached", p)
			}
			w.fault = nil
			fresh := w.engine()
			w.reconcile(fresh)
			if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
				t.Errorf("links after restart (-want +got):\n%s", diff)
			}
			if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
				t.Errorf("not listening after restart: %s", w.k)
			}
			ents, _ := state.Open(w.state)
			if m, bad := ents.Load(); len(m) != 0 || len(bad) != 0 {
				t.Errorf("journal left: %v %v", m, bad)
			}
		})
	}
}

func TestRunLoopHealsOnPoke(t *testing.T) {
	w := newWorld(t)
	w.clk = nil
	j, err := state.Open(w.state)
	must(t, err)
	e := rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Store: j, Config: w.cfg})
	ctx, cancel := context.WithCancel(context.Background())
	beats := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, func() { beats <- struct{}{} }) }()
	<-beats
	w.reset()
	e.Poke()
	deadline := time.After(10 * time.Second)
	for !w.k.Listening("nvmet_rdma", "1") {
		select {
		case <-beats:
		case <-deadline:
			t.Fatal("run loop did not heal after a poke")
		}
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v", err)
	}
}

func TestJournalCorruptionIsReported(t *testing.T) {
	for name, content := range map[string]string{
		"empty":   "",
		"torn":    `{"version":1,"kind":"nvmet","id":"1","links":[{"na`,
		"garbage": "\x00\x01not json",
		"version": `{"version":9,"kind":"nvmet","id":"1","links":[{"name":"a","nqn":"a"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			j, err := state.Open(w.state)
			must(t, err)
			// Write a valid entry then clobber it.
			must(t, j.Put(rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: []configfs.Link{{Name: nqnA, NQN: nqnA}}}))
			files := journalFiles(t, j.JournalDir())
			must(t, writeFile(files[0], content))
			e := w.engine()
			w.reconcile(e)
			if log := w.k.LogStrings(); len(log) != 0 {
				t.Errorf("a corrupt journal caused writes: %q", log)
			}
			if snap := e.Snapshot(); len(snap.JournalErrs) == 0 {
				t.Error("corruption not reported")
			}
			if got := journalFiles(t, j.JournalDir()); len(got) != 0 {
				t.Errorf("corrupt entry not moved aside: %v", got)
			}
		})
	}
}

func TestPlanTable(t *testing.T) {
	devs := []rdma.Device{{Index: 0, Name: "rxe0", NodeGUID: 1, Ports: []rdma.Port{{Index: 1, NetdevIndex: 4, Netdev: "veth0"}}}}
	addrs := []rdma.Addr{{Ifindex: 4, Netdev: "veth0", IP: mustAddr("192.0.2.1")}, {Ifindex: 5, Netdev: "eth9", IP: mustAddr("198.51.100.1")}}
	port := func(id, tr, addr string, links ...string) configfs.Port {
		p := configfs.Port{ID: id, Trtype: configfs.Transport(tr), Adrfam: "ipv4", Traddr: addr, Trsvcid: "4420"}
		for _, l := range links {
			p.Links = append(p.Links, configfs.Link{Name: l, NQN: l})
		}
		return p
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		port   configfs.Port
		cfg    func(*rebind.Config)
		action rebind.Action
		reason string
	}{
		{"dead port rebinds", port("1", "rdma", "192.0.2.1", nqnA), nil, rebind.ActRebindPort, "listener dead"},
		{"tcp not listening relinks", port("1", "tcp", "192.0.2.1", nqnA), nil, rebind.ActRebindPort, "not listening (no TCP socket in LISTEN on 192.0.2.1:4420)"},
		{"tcp address missing waits", port("1", "tcp", "203.0.113.1", nqnA), nil, rebind.ActNone, "waiting for 203.0.113.1 to appear on a netdev"},
		{"tcp address without rdma is enough", port("1", "tcp", "198.51.100.1", nqnA), nil, rebind.ActRebindPort, "not listening"},
		{"fc untouched", port("1", "fc", "192.0.2.1", nqnA), nil, rebind.ActNone, `transport "fc" is neither rdma nor tcp`},
		{"wildcard untouched", port("1", "rdma", "0.0.0.0", nqnA), nil, rebind.ActNone, "wildcard address"},
		{"outside subnet", port("1", "rdma", "192.0.2.1", nqnA), func(c *rebind.Config) { c.Watch = []netipPrefix{mustPrefix("198.51.100.0/24")} }, rebind.ActNone, "outside the watched subnets"},
		{"inside subnet", port("1", "rdma", "192.0.2.1", nqnA), func(c *rebind.Config) { c.Watch = []netipPrefix{mustPrefix("192.0.2.0/24")} }, rebind.ActRebindPort, "listener dead"},
		{"no links", port("1", "rdma", "192.0.2.1"), nil, rebind.ActNone, "not enabled"},
		{"address without rdma", port("1", "rdma", "198.51.100.1", nqnA), nil, rebind.ActNone, "waiting for an RDMA device to carry 198.51.100.1 on eth9"},
		{"address missing", port("1", "rdma", "203.0.113.1", nqnA), nil, rebind.ActNone, "waiting for 203.0.113.1"},
		{"garbage traddr", port("1", "rdma", "not-an-ip", nqnA), nil, rebind.ActNone, "not touched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rebind.DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			obs := rebind.Observed{Ports: []configfs.Port{tt.port}, Devices: devs, Addrs: addrs, Now: now, Subsystems: map[string]bool{nqnA: true}}
			items := rebind.Plan(obs, rebind.NewMemory(), cfg).Items
			if len(items) != 1 {
				t.Fatalf("items: %+v", items)
			}
			if items[0].Action != tt.action || !strings.Contains(items[0].Reason, tt.reason) {
				t.Errorf("got %v %q, want %v %q", items[0].Action, items[0].Reason, tt.action, tt.reason)
			}
		})
	}
}

// While a device unregisters, its listeners are gone before the device
// leaves the device list. A rebind then would race the removal (and leave
// iser=0 / links missing until the device returns): the engine waits for
// the same device index to go away, for at most a grace period.
func TestNoRebindWhileTheSameDeviceIsStillRegistered(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e) // alive on rxe0, index 0
	w.k.KillListener("nvmet_rdma", "1")
	w.k.KillListener("ib_isert", "192.0.2.1:3260") // the listener of the portal's np
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("wrote while the device is being removed: %q", log)
	}
	if it := item(items, "1"); it.RetryAt.IsZero() || !strings.Contains(it.Reason, "removal is probably in progress") {
		t.Errorf("port 1: %+v", it)
	}
	// The device finishes unregistering and comes back: healed at once.
	w.reset()
	w.reconcile(e)
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Fatalf("not healed after the device came back: %s", w.k)
	}
	// A listener that died on a device that stays registered is rebound
	// after the grace period.
	w.k.KillListener("nvmet_rdma", "1")
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("wrote within the grace period: %q", log)
	}
	w.clk.advance(6 * time.Second)
	w.reconcile(e)
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Error("not rebound after the grace period")
	}
}

// One cm_id dump per observation, whatever the number of listeners and
// rebinds: the plan's, and one more that verifies every action of a round.
func TestOneCMIDDumpPerObservation(t *testing.T) {
	w := newWorld(t)
	w.k.LinkedPort("2", "192.0.2.1", "4421", nqnA)
	e := w.engine()
	w.reconcile(e)
	if n := w.k.CMIDCalls(); n != 1 {
		t.Errorf("healthy reconcile: %d cm_id dumps, want 1", n)
	}
	w.reset() // three listeners die
	w.reconcile(e)
	if n := w.k.CMIDCalls(); n != 3 {
		t.Errorf("after a reconcile with 3 rebinds: %d cm_id dumps in all, want 3 (1 + plan + verify)", n)
	}
}

// A heal whose backoff runs out while the round acts on another endpoint
// is due in the verification's plan, which nothing executes: the round
// must ask for the next one now, not leave it to the resync (found in the
// VM: 20 rxe flaps, the LIO portal healed only 30 s after the last).
func TestHealDueDuringTheRoundIsRetriedNow(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.reset()
	// Round 1: the port heals, the portal's iser=1 is refused: backoff.
	refuse := true
	w.k.Fault = func(n int, wr configfstest.Write) error {
		if refuse && wr.Op == "write" && strings.HasSuffix(wr.Path, "/iser") && wr.Value == "1" {
			return &configfsErr{}
		}
		return nil
	}
	items := w.reconcile(e)
	if it := item(items, portal); it.RetryAt.IsZero() {
		t.Fatalf("round 1: the refused portal has no retry: %+v", it)
	}
	refuse = false
	// Round 2, inside the portal's backoff: the device resets again, so the
	// port heals again; while it does, the portal's backoff runs out.
	w.reset()
	w.k.Fault = func(n int, wr configfstest.Write) error {
		if wr.Op == "symlink" {
			w.clk.advance(time.Second)
		}
		return nil
	}
	items = w.reconcile(e)
	w.k.Fault = nil
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Fatal("round 2: port 1 not healed")
	}
	it := item(items, portal)
	if it.Action == rebind.ActNone {
		t.Fatalf("round 2: the portal is not due in the round's last plan (the test no longer builds its case): %+v", it)
	}
	if next := e.Snapshot().Next; next.IsZero() || next.After(w.clk.now()) {
		t.Fatalf("round 2: the portal's heal is due but the round's next look is %v (now %v): nothing would run it before the resync", next, w.clk.now())
	}
	w.reconcile(e)
	if !w.k.Listening("ib_isert", portal) {
		t.Error("the portal is not healed by the round its retry asked for")
	}
}

// The admin removes the port between its journal entry and its first
// unlink: the heal stops there without an error (the port is gone: its
// links are not made either) and leaves no journal entry behind.
func TestPortRemovedBeforeItsUnlinks(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.k.RemoveDevice("rxe0")
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	removed := false
	w.fault = func(pt string) bool {
		if pt == "after-journal" && !removed {
			removed = true
			must(t, w.k.RemovePort("1"))
		}
		return false
	}
	e = w.engine()
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatalf("the heal of a port removed under it failed: %v", err)
	}
	if !removed {
		t.Fatal("the fault point after the journal was never reached")
	}
	if _, err := os.Stat(filepath.Join(w.k.Root, "nvmet/ports/1")); !os.IsNotExist(err) {
		t.Errorf("port 1 is back: %v", err)
	}
	if files := journalFiles(t, filepath.Join(w.state, "journal")); len(files) != 0 {
		t.Errorf("journal left: %q", files)
	}
}

// A look before any round (status or check without a daemon) has no
// memory of when a listener went down: it says nothing of it, rather
// than "now" at every look (which kept a stranded listener within its
// repair grace for ever). A round remembers when it first saw it.
func TestLookBeforeAnyRoundTellsNoDeadSince(t *testing.T) {
	w := newWorld(t)
	w.k.RemoveDevice("rxe0")
	e := w.engine()
	snap, err := e.Look()
	must(t, err)
	it := item(snap.Items, "1")
	if it.State != rebind.StateDead || !it.DeadSince.IsZero() {
		t.Fatalf("look before any round: port 1 %s, dead since %v; want dead, no time", it.State, it.DeadSince)
	}
	seen := w.clk.now()
	w.reconcile(e)
	w.clk.advance(3 * time.Second)
	snap, err = e.Look()
	must(t, err)
	if it := item(snap.Items, "1"); !it.DeadSince.Equal(seen) {
		t.Fatalf("look after a round: port 1 dead since %v, want %v (the round that saw it)", it.DeadSince, seen)
	}
}

// Settle, the trigger's one-shot reconcile without a daemon, follows its
// plan's next look: a bind refused once is retried after its backoff and
// heals, where one round would leave it to the next event. With until
// before the retry, it stops after one round, the work left.
func TestSettleFollowsTheNextLook(t *testing.T) {
	for _, follow := range []bool{true, false} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			w := newWorld(t)
			w.reconcile(w.engine())
			w.reset()
			w.refuseLinks(1)
			// A fresh engine on the real clock, as a trigger opens one.
			j, err := state.Open(w.state)
			must(t, err)
			e := rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Store: j, Config: w.cfg})
			until := time.Now().Add(10 * time.Second)
			if !follow {
				until = time.Now() // no retry fits
			}
			start := time.Now()
			items, err := e.Settle(context.Background(), until)
			must(t, err)
			healed := w.k.Listening("nvmet_rdma", "1") && len(w.links("1")) == 2
			switch {
			case follow && !healed:
				t.Fatalf("port 1 not healed by the retry after %v: %+v", time.Since(start), item(items, "1"))
			case follow && time.Since(start) > 5*time.Second:
				t.Errorf("took %v for a 50 ms backoff", time.Since(start))
			case !follow && healed:
				t.Fatal("port 1 healed with no time left to retry")
			case !follow && item(items, "1").RetryAt.IsZero():
				t.Errorf("no retry left for the next event: %+v", item(items, "1"))
			}
		})
	}
}
