package rebind_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// TestEngineEqualsTheExhaustiveRound drives two copies of one random
// world, one reconciled by the engine as it runs in the daemon and one by
// the exhaustive round (Options.Exhaustive: a fresh observation, every
// endpoint decided, a full learn), through the same steps, and after
// every round compares what each published (status items, the time it
// asked to look again, its memory, results and sight), and what each
// wrote: configfs writes in order, journal puts and deletes in order. The
// worlds: configfs read through the inotify model with admin edits
// (links, iser, portals and ports added and removed), RDMA devices reset,
// removed and added back, addresses added, removed and moved between
// netdevs, listeners killed and re-made behind configfs's back, TCP
// listeners gone, event storms, the clock (graces, backoff, give-up, the
// boot window), manual rebinds, the journal on disk, nvmetcli's saved
// config and its edits, config swaps, an admin's iser=0 between a round's
// reading and its journal batch, refused configfs writes and crashes
// at the engine's fault points followed by a restart on the same state
// directory. Observers read the snapshot and plan beside the loop (-race).
//
// Whatever shortcut the normal round takes (what it carries from the last
// round, the endpoints it selects, the links it does not read, the memory
// it does not learn again), it must be invisible here.
func TestEngineEqualsTheExhaustiveRound(t *testing.T) {
	seeds, steps := 48, 40
	if testing.Short() {
		seeds, steps = 16, 30
	}
	// What the worlds exercised, summed over the seeds: a test of nothing
	// would pass too.
	var seen struct {
		sync.Mutex
		writes, puts, crashes, heals int
	}
	t.Cleanup(func() {
		t.Logf("over %d seeds: %d configfs writes, %d journal writes, %d heals verified, %d crashes", seeds, seen.writes, seen.puts, seen.heals, seen.crashes)
		if seen.writes < seeds || seen.puts < seeds || seen.crashes < seeds/8 || seen.heals < seeds {
			t.Errorf("the worlds exercised too little to compare")
		}
	})
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			normal, exhaustive := newTwin(t, seed, false), newTwin(t, seed, true)
			ops := rand.New(rand.NewPCG(uint64(seed), 77))
			for step := range steps {
				op := ops.IntN(opCount)
				arg := ops.Uint64()
				var what string
				for _, w := range []*twin{normal, exhaustive} {
					what = w.do(op, arg)
				}
				en, ee := normal.round(), exhaustive.round()
				if fmt.Sprint(en) != fmt.Sprint(ee) {
					t.Fatalf("step %d (%s): normal round: %v; exhaustive round: %v", step, what, en, ee)
				}
				writes, puts := len(normal.k.LogStrings())-normal.writes, len(normal.store.log)
				if d := diffTwins(normal, exhaustive); d != "" {
					t.Fatalf("step %d (%s): the normal round and the exhaustive one differ:\n%s\nworld: %s", step, what, d, normal.k)
				}
				seen.Lock()
				seen.writes, seen.puts = seen.writes+writes, seen.puts+puts
				seen.heals += int(normal.e.Snapshot().Stats.Rebinds[rebind.ResultOK]) - normal.healed
				normal.healed = int(normal.e.Snapshot().Stats.Rebinds[rebind.ResultOK])
				if en != nil {
					seen.crashes++
				}
				seen.Unlock()
				if en != nil { // crashed at a fault point: the daemon restarts
					normal.restart()
					exhaustive.restart()
				}
			}
		})
	}
}

// twin is one copy of a differential world and its engine.
type twin struct {
	t          *testing.T
	exhaustive bool
	k          *fakeKernel
	m          *watch.Model
	clk        *syncClock
	dir        string // the state directory
	saved      string // nvmetcli's saved config
	cfg        rebind.Config
	store      *loggedStore
	e          *rebind.Engine
	faultAt    int // the fault point call that crashes (0: none)
	faults     int
	// atJournal runs at the next journal batch ("before-journal"): an
	// admin's write after the round read configfs.
	atJournal func()
	writes    int // the configfs write log's length at the last round
	healed    int // heals verified by the engine, before this round
	readers   sync.WaitGroup
	stop      chan struct{}
}

var twinIPs = []string{"192.0.2.1", "192.0.2.2", "198.51.100.1", "198.51.100.2", "203.0.113.1"}

// newTwin builds the world of seed: two RDMA devices on veth0 and veth1,
// addresses on them (one address on no netdev yet), RDMA and TCP ports,
// iSER portals (some sharing an address:port), a wildcard port, and a
// saved config that declares links of some ports.
func newTwin(t *testing.T, seed int, exhaustive bool) *twin {
	r := rand.New(rand.NewPCG(uint64(seed), 21))
	w := &twin{t: t, exhaustive: exhaustive, k: newFakeKernel(t), clk: &syncClock{t: newClock().t}, dir: t.TempDir(), cfg: rebind.DefaultConfig()}
	k := w.k
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth0", "192.0.2.2")
	k.AddAddr("veth1", "198.51.100.1")
	k.AddDevice("rxe0", 0x1111, "veth0")
	k.AddDevice("rxe1", 0x2222, "veth1")
	k.AddSubsystem(nqnA)
	k.AddSubsystem(nqnB)
	var declared []string
	n := 4 + r.IntN(6)
	for i := range n {
		id := fmt.Sprint(i + 1)
		ip := twinIPs[r.IntN(len(twinIPs))]
		switch r.IntN(5) {
		case 0, 1:
			k.AddPort(id, "rdma", "ipv4", ip, fmt.Sprint(4420+i%3))
			adminLink(k, id, nqnA) // refused where ip is on no RDMA device, or is another port's
			if r.IntN(2) == 0 {
				adminLink(k, id, nqnB)
			}
			if r.IntN(2) == 0 {
				declared = append(declared, fmt.Sprintf(`{"portid": %s, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": %q, "trsvcid": "%d"}, "subsystems": [%q, %q]}`, id, ip, 4420+i%3, nqnA, nqnB))
			}
		case 2:
			k.AddPort(id, "tcp", "ipv4", ip, "4420")
			adminLink(k, id, nqnA)
			if r.IntN(2) == 0 {
				declared = append(declared, fmt.Sprintf(`{"portid": %s, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": %q, "trsvcid": "4420"}, "subsystems": [%q]}`, id, ip, nqnA))
			}
		case 3:
			np := twinIPs[r.IntN(3)] + ":3260" // few address:ports: sharers
			k.AddPortal(fmt.Sprintf("%s%d", iqn, i), "tpgt_1", np)
			configfs.NewWithOps(k.Root, k.Admin()).SetISER(fmt.Sprintf("%s%d/tpgt_1/%s", iqn, i, np), true)
		default:
			k.LinkedPort(id, "0.0.0.0", fmt.Sprint(4430+i), nqnA)
		}
	}
	w.saved = filepath.Join(w.dir, "nvmet.json")
	w.writeSaved(declared)
	w.cfg.NvmetConfig = w.saved
	w.cfg.GiveUpAfter = 10 * time.Minute
	w.cfg.PinDevice = seed%2 == 1
	w.start()
	return w
}

// writeSaved writes nvmetcli's saved config declaring ports.
func (w *twin) writeSaved(ports []string) {
	b := fmt.Sprintf(`{"hosts": [], "subsystems": [{"nqn": %q}, {"nqn": %q}], "ports": [%s]}`, nqnA, nqnB, strings.Join(ports, ", "))
	must(w.t, os.WriteFile(w.saved, []byte(b), 0o600))
}

// start is the daemon's start: the configfs model, the journal opened and
// cleaned, a new engine; observers read beside its rounds.
func (w *twin) start() {
	m, err := watch.New(w.k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
	must(w.t, err)
	w.m = m
	w.t.Cleanup(func() { m.Close() })
	j, err := state.Open(filepath.Join(w.dir, "state"))
	must(w.t, err)
	moved, err := j.Clean()
	must(w.t, err)
	if w.store == nil {
		w.store = &loggedStore{}
	}
	w.store.Store = j
	w.faults, w.healed = 0, 0
	// ISERWriters 1: a refused "n-th write from now" must be the same
	// write in both engines (side by side, the order of a run is not).
	w.e = rebind.New(rebind.Options{Tree: m, Kernel: w.k, Store: w.store, Config: w.cfg, Now: w.clk.now, Declared: saved.Load,
		Quarantined: moved, Exhaustive: w.exhaustive, ISERWriters: 1, Fault: func(point string) bool {
			if f := w.atJournal; point == "before-journal" && f != nil {
				w.atJournal = nil
				f()
			}
			w.faults++
			return w.faults == w.faultAt
		}})
	w.stop = make(chan struct{})
	w.readers.Add(1)
	go func(e *rebind.Engine, stop chan struct{}) { // status and metrics, beside the loop
		defer w.readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = e.Snapshot()
			if _, err := e.Look(); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}(w.e, w.stop)
	w.t.Cleanup(w.halt)
}

func (w *twin) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.readers.Wait()
}

// restart is a crash's aftermath: a new process on the same configfs,
// kernel and state directory.
func (w *twin) restart() {
	w.halt()
	w.m.Close()
	w.faultAt = 0
	w.start()
}

func (w *twin) round() error {
	_, err := w.e.Reconcile(context.Background())
	return err
}

const opCount = 27

// do applies step op (arg: its randomness) to the world, and says what
// it did.
func (w *twin) do(op int, arg uint64) string {
	k, r := w.k, rand.New(rand.NewPCG(arg, 5))
	admin := configfs.NewWithOps(k.Root, k.Admin())
	ip := twinIPs[r.IntN(len(twinIPs))]
	port := fmt.Sprint(1 + r.IntN(9))
	switch op {
	case 0:
		w.reset("rxe0", 0x1111, "veth0")
		return "rxe0 resets"
	case 1:
		w.reset("rxe1", 0x2222, "veth1")
		return "rxe1 resets"
	case 2:
		k.AddAddr([]string{"veth0", "veth1"}[r.IntN(2)], ip)
		return "address " + ip + " added"
	case 3:
		k.DelAddr("veth0", ip)
		k.DelAddr("veth1", ip)
		return "address " + ip + " removed"
	case 4:
		k.MoveAddr("veth0", "veth1", ip)
		return "address " + ip + " moved to veth1"
	case 5:
		admin.Unlink(port, configfs.Link{Name: nqnA, NQN: nqnA})
		return "admin unlinks port " + port
	case 6:
		adminLink(k, port, nqnB)
		return "admin links port " + port
	case 7:
		k.KillListener("nvmet_rdma", port)
		return "port " + port + "'s RDMA listener killed"
	case 8:
		k.KillListener("nvmet_tcp", port)
		return "port " + port + "'s TCP listener gone"
	case 9:
		if ps, err := admin.Portals(); err == nil && len(ps) > 0 {
			p := ps[r.IntN(len(ps))]
			on := r.IntN(2) == 0
			admin.SetISER(p.ID(), on)
			return fmt.Sprintf("admin sets iser=%v on %s", on, p.ID())
		}
	case 10:
		np := twinIPs[r.IntN(3)] + ":3260"
		id := fmt.Sprintf("%s%d/tpgt_1/%s", iqn, r.IntN(4), np)
		k.AddPortal(fmt.Sprintf("%s%d", iqn, r.IntN(4)), "tpgt_1", np)
		admin.SetISER(id, true)
		return "portal added " + id
	case 11:
		if ps, err := admin.Portals(); err == nil && len(ps) > 0 {
			id := ps[r.IntN(len(ps))].ID()
			k.RemovePortal(id)
			return "portal removed " + id
		}
	case 12:
		k.RemoveDevice("rxe1")
		return "rxe1 removed"
	case 13:
		if !slices.ContainsFunc(must2(k.Devices()), func(d rdma.Device) bool { return d.Name == "rxe1" }) {
			k.AddDevice("rxe1", 0x2222, "veth1")
		}
		return "rxe1 back"
	case 14:
		d := time.Duration(r.IntN(3000)) * time.Millisecond
		w.clk.advance(d)
		return "the clock moves " + d.String()
	case 15:
		w.clk.advance(11 * time.Minute)
		return "the clock moves 11m (give-up, boot window)"
	case 16:
		w.e.Poke()
		return "an event"
	case 17: // a manual rebind of an RDMA port that exists (one held by a pin or the give-up timer is what it is for)
		if ps, err := admin.Ports(); err == nil {
			ps = slices.DeleteFunc(ps, func(p configfs.Port) bool { return p.Trtype != configfs.TransportRDMA })
			if len(ps) > 0 {
				port = ps[r.IntN(len(ps))].ID
			}
		}
		w.e.Retry(rebind.Key{Kind: rebind.KindNvmet, ID: port})
		return "manual rebind of port " + port
	case 18:
		cfg := w.cfg
		switch r.IntN(4) {
		case 0:
			cfg.Watch = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		case 1:
			cfg.PinDevice = !cfg.PinDevice
		case 2:
			cfg.GiveUpAfter = time.Duration(r.IntN(3)) * time.Minute
		default:
			cfg.Watch = nil
		}
		w.cfg = cfg
		w.e.SetConfig(cfg)
		return fmt.Sprintf("config swapped: %+v", cfg)
	case 19:
		n := 1 + r.IntN(4)
		w.faultAt = w.faults + n
		return fmt.Sprintf("a crash at the %d. fault point from now", n)
	case 20:
		for range 3 + r.IntN(5) { // a storm: resets and pokes
			w.reset("rxe0", 0x1111, "veth0")
			w.e.Poke()
		}
		return "an event storm on rxe0"
	case 21:
		n, calls := 1+r.IntN(3), 0
		k.Fault = func(_ int, wr configfstest.Write) error {
			if calls++; calls != n {
				return nil
			}
			return fmt.Errorf("%s %s: %w", wr.Op, wr.Path, errors.ErrUnsupported)
		}
		return fmt.Sprintf("configfs write %d from now is refused", n)
	case 22:
		k.RemovePort(port)
		return "admin removes port " + port
	case 25:
		id := fmt.Sprint(10 + r.IntN(2))
		if r.IntN(2) == 0 {
			k.AddPort(id, "fc", "fc", "nn-0x1000:pn-0x2000", "none")
			return "admin creates FC port " + id
		}
		k.RemovePort(id)
		return "admin removes port " + id
	case 26:
		pick := r.IntN(1 << 20)
		w.atJournal = func() {
			ps, err := admin.Portals()
			if err != nil {
				return
			}
			ps = slices.DeleteFunc(ps, func(p configfs.Portal) bool { return !p.ISER })
			if len(ps) > 0 {
				admin.SetISER(ps[pick%len(ps)].ID(), false)
			}
		}
		return "the admin sets iser=0 on a portal at the next journal batch"
	case 24:
		w.reset("rxe0", 0x3333, "veth0")
		return "rxe0 replaced by a card of another node GUID"
	case 23: // the saved config now declares another link of a port (one that exists, at its address, half the time)
		svc := "4420"
		if ps, err := admin.Ports(); err == nil && r.IntN(2) == 0 {
			ps = slices.DeleteFunc(ps, func(p configfs.Port) bool { return p.Trtype != configfs.TransportRDMA })
			if len(ps) > 0 {
				p := ps[r.IntN(len(ps))]
				port, ip, svc = p.ID, p.Traddr, p.Trsvcid
			}
		}
		w.writeSaved([]string{fmt.Sprintf(`{"portid": %s, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": %q, "trsvcid": %q}, "subsystems": [%q]}`, port, ip, svc, nqnB)})
		if r.IntN(2) == 0 {
			return "saved config edited"
		}
		w.e.SetConfig(w.cfg) // a reload
		return "saved config edited and reloaded"
	}
	return "nothing"
}

// adminLink is an admin's ln -s, refused or not.
func adminLink(k *fakeKernel, id, nqn string) {
	configfs.NewWithOps(k.Root, k.Admin()).Relink(id, configfs.Link{Name: nqn, NQN: nqn})
}

func (w *twin) reset(dev string, guid uint64, netdev string) {
	w.k.RemoveDevice(dev)
	w.k.AddDevice(dev, guid, netdev)
}

// diffTwins compares what the two engines published and wrote since the
// last round.
func diffTwins(a, b *twin) string {
	var out []string
	sa, sb := a.e.Snapshot(), b.e.Snapshot()
	cmpStr := func(what string, x, y string) {
		x, y = strings.ReplaceAll(x, a.k.Root, "<root>"), strings.ReplaceAll(y, b.k.Root, "<root>")
		if x != y {
			out = append(out, fmt.Sprintf("%s:\n  normal:     %s\n  exhaustive: %s", what, x, y))
		}
	}
	if len(sa.Items) != len(sb.Items) {
		cmpStr("items", fmt.Sprint(sa.Items), fmt.Sprint(sb.Items))
	} else {
		for i := range sa.Items {
			cmpStr("item "+sa.Items[i].ID, fmt.Sprintf("%+v", sa.Items[i]), fmt.Sprintf("%+v", sb.Items[i]))
		}
	}
	cmpStr("next look", fmt.Sprint(sa.Next), fmt.Sprint(sb.Next))
	cmpStr("memory", fmt.Sprintf("%+v", sa.Memory), fmt.Sprintf("%+v", sb.Memory))
	cmpStr("results", results(sa), results(sb))
	cmpStr("sight", fmt.Sprintf("%+v", sa.Sight), fmt.Sprintf("%+v", sb.Sight))
	cmpStr("journal errors", fmt.Sprint(sa.JournalErrs), fmt.Sprint(sb.JournalErrs))
	cmpStr("configfs writes", strings.Join(a.newWrites(), "\n    "), strings.Join(b.newWrites(), "\n    "))
	cmpStr("journal writes", strings.Join(a.store.take(), "\n    "), strings.Join(b.store.take(), "\n    "))
	cmpStr("journal on disk", a.journal(), b.journal())
	return strings.Join(out, "\n")
}

// results renders a snapshot's outcomes (each object's history) without
// their wall-clock latency.
func results(s rebind.Snapshot) string {
	var out []string
	for k, h := range s.History {
		for i, o := range h {
			out = append(out, fmt.Sprintf("%s #%d: %s %s %v", k, i, o.Action, o.Result, o.Err))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// newWrites are the engine's configfs writes since the last call.
func (w *twin) newWrites() []string {
	log := w.k.LogStrings()
	n := w.writes
	w.writes = len(log)
	return log[n:]
}

// journal is what the journal holds now.
func (w *twin) journal() string {
	in, bad := state.OpenReadOnly(filepath.Join(w.dir, "state")).Load()
	var out []string
	for k, v := range in {
		out = append(out, fmt.Sprintf("%s=%+v", k, v))
	}
	slices.Sort(out)
	return fmt.Sprint(out, bad)
}

// loggedStore is the journal with a log of its writes.
type loggedStore struct {
	*state.Store
	mu  sync.Mutex
	log []string
}

func (s *loggedStore) PutAll(ins []rebind.Intent) error {
	err := s.Store.PutAll(ins)
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("put %+v: %v", ins, err))
	s.mu.Unlock()
	return err
}

func (s *loggedStore) DeleteAll(ks []rebind.Key) error {
	err := s.Store.DeleteAll(ks)
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("delete %v: %v", ks, err))
	s.mu.Unlock()
	return err
}

func (s *loggedStore) Sync() error {
	err := s.Store.Sync()
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("sync: %v", err))
	s.mu.Unlock()
	return err
}

func (s *loggedStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log
	s.log = nil
	return l
}

// syncClock is the fake clock, read by the observers beside the loop.
type syncClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *syncClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *syncClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
