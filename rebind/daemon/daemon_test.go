package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

const (
	nqn    = "nqn.2024-01.lab:a"
	iqn    = "iqn.2024-01.lab:t"
	portal = iqn + "/tpgt_1/192.0.2.1:3260"
)

// readOnlyStore fails the test on any write: what observers use.
type readOnlyStore struct {
	*state.Store
	t      *testing.T
	writes atomic.Int64
}

func (s *readOnlyStore) Put(rebind.Intent) error {
	s.writes.Add(1)
	return errors.New("observer wrote an intent")
}
func (s *readOnlyStore) Delete(rebind.Key) error {
	s.writes.Add(1)
	return errors.New("observer deleted an intent")
}
func (s *readOnlyStore) SavePins(map[rebind.Key]uint64) error {
	s.writes.Add(1)
	return errors.New("observer saved pins")
}

// fakeDaemon is the daemon's engine, loop and control socket over the fake
// kernel (a real state directory and socket).
type fakeDaemon struct {
	k    *fakeKernel
	d    *daemon
	sock string
	dir  string
	stop func()
}

func startFake(t *testing.T) *fakeDaemon {
	t.Helper()
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 0x11, "veth0")
	k.AddSubsystem(nqn)
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	admin := configfs.NewWithOps(k.Root, k.Admin())
	if err := admin.Relink("1", configfs.Link{Name: nqn, NQN: nqn}); err != nil {
		t.Fatal(err)
	}
	if err := admin.SetISER(portal, true); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: st, Config: rebind.DefaultConfig(), Logger: log})
	d := &daemon{log: log, env: &Env{Config: rebind.DefaultConfig(), Engine: eng, Store: st}}
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := control.Listen(sock, d.handler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Serve(ctx) }()
	go func() { defer wg.Done(); eng.Run(ctx, nil) }()
	f := &fakeDaemon{k: k, d: d, sock: sock, dir: dir, stop: func() { cancel(); wg.Wait() }}
	t.Cleanup(f.stop)
	return f
}

func (f *fakeDaemon) listening() bool {
	return f.k.Listening("nvmet_rdma", "1") && f.k.Listening("ib_isert", portal)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// status, check, plan and metrics scrapes hammer a daemon while it
// rebinds: every rebind succeeds, and no observer writes (their store
// fails any write; the state dir changes only through the loop).
func TestObserversWhileRebinding(t *testing.T) {
	f := startFake(t)
	waitFor(t, "the first reconcile", func() bool { return f.d.env.Engine.Snapshot().Stats.Reconciles > 0 })
	ro := &readOnlyStore{Store: state.OpenReadOnly(f.dir), t: t}
	observer := rebind.New(rebind.Options{Tree: f.k.FS(), Kernel: f.k, Store: ro, Config: rebind.DefaultConfig(), DryRun: true})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(f.d.env.Engine, nil))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls atomic.Int64
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				switch i {
				case 0: // status and check through the socket
					var r status.StatusReport
					if err := control.Call(ctx, f.sock, control.Request{Cmd: "status"}, &r); err != nil && ctx.Err() == nil {
						t.Errorf("status: %v", err)
						return
					}
					status.Check(r)
				case 1: // status without the daemon (read-only)
					if _, err := observer.Look(); err != nil {
						t.Errorf("direct status: %v", err)
						return
					}
				case 2: // plan
					if _, _, err := observer.PlanAll(); err != nil {
						t.Errorf("plan: %v", err)
						return
					}
				case 3: // a metrics scrape
					if _, err := reg.Gather(); err != nil {
						t.Errorf("metrics: %v", err)
						return
					}
				}
				calls.Add(1)
			}
		}()
	}
	const resets = 30
	for i := range resets {
		f.k.RemoveDevice("rxe0")
		f.k.AddDevice("rxe0", 0x11, "veth0")
		f.d.env.Engine.Poke()
		// Healed and verified (two listeners a reset).
		waitFor(t, "the heal", func() bool {
			return f.listening() && f.d.env.Engine.Snapshot().Stats.Rebinds["ok"] >= uint64(2*(i+1))
		})
	}
	cancel()
	wg.Wait()
	snap := f.d.env.Engine.Snapshot()
	if ok := snap.Stats.Rebinds["ok"]; ok != 2*resets {
		t.Errorf("%d rebinds verified for %d resets of two listeners: %v", ok, resets, snap.Stats.Rebinds)
	}
	for _, r := range []string{"error", "unverified", "refused"} {
		if n := snap.Stats.Rebinds[r]; n != 0 {
			t.Errorf("%d rebinds %s: %v", n, r, snap.Stats.Rebinds)
		}
	}
	if n := ro.writes.Load(); n != 0 {
		t.Errorf("observers tried %d writes", n)
	}
	if m, bad := state.OpenReadOnly(f.dir).Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("journal left: %v %v", m, bad)
	}
	t.Logf("%d observer calls during %d resets", calls.Load(), resets)
}

// A refused manual rebind through the socket is retried by the loop's
// backoff (50 ms doubling), not at the next resync (30 s).
func TestRefusedManualRebindIsRetriedByTheLoop(t *testing.T) {
	f := startFake(t)
	waitFor(t, "the first reconcile", func() bool { return f.d.env.Engine.Snapshot().Stats.Reconciles > 0 })
	// A reset no event reports; the kernel refuses port 1's bind for now.
	var refuse atomic.Bool
	refuse.Store(true)
	f.k.Fault = func(_ int, w configfstest.Write) error {
		if w.Op == "symlink" && refuse.Load() {
			return syscall.EADDRNOTAVAIL
		}
		return nil
	}
	f.k.RemoveDevice("rxe0")
	f.k.AddDevice("rxe0", 0x11, "veth0")
	var ls status.ListenerStatus
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := control.Call(ctx, f.sock, control.Request{Cmd: "rebind", ID: "1"}, &ls); err != nil {
		t.Fatal(err)
	}
	if ls.Listening == nil || *ls.Listening || ls.LastResult == "ok" || ls.RetryAt == nil {
		t.Fatalf("rebind answered %+v while the kernel refuses the bind", ls)
	}
	// The kernel accepts now, with no event: only the loop's retry sees it.
	start := time.Now()
	refuse.Store(false)
	waitFor(t, "the retry", func() bool { return f.k.Listening("nvmet_rdma", "1") })
	if d := time.Since(start); d > time.Second {
		t.Errorf("healed %v after the kernel accepted, want the loop's backoff (≤ 1 s)", d)
	}
	t.Logf("retried and healed %v after the kernel accepted", time.Since(start).Round(time.Millisecond))
}

// fakeKernel is the tests' fake kernel: the configfs tree
// (configfstest.Fake) binding its listeners through the RDMA side
// (rdmatest.Kernel, also the engine's rebind.Kernel).
type fakeKernel struct {
	*configfstest.Fake
	*rdmatest.Kernel
}

func newFakeKernel(tb interface{ TempDir() string }) *fakeKernel {
	r := rdmatest.New()
	return &fakeKernel{configfstest.New(tb, r), r}
}

func (k *fakeKernel) String() string { return k.Fake.String() + " | " + k.Kernel.String() }
