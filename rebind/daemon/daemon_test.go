package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

func (s *readOnlyStore) PutAll([]rebind.Intent) error {
	s.writes.Add(1)
	return errors.New("observer wrote an intent")
}
func (s *readOnlyStore) DeleteAll([]rebind.Key) error {
	s.writes.Add(1)
	return errors.New("observer deleted an intent")
}
func (s *readOnlyStore) SavePins(map[rebind.Key]uint64) error {
	s.writes.Add(1)
	return errors.New("observer saved pins")
}
func (s *readOnlyStore) SaveSettled(map[rebind.Settled]bool) error {
	s.writes.Add(1)
	return errors.New("observer saved what is settled")
}

// fakeDaemon is the daemon's engine, loop and control socket over the fake
// kernel (a real state directory and socket).
type fakeDaemon struct {
	k    *rdmatest.System
	d    *daemon
	sock string
	dir  string
	stop func()
}

func startFake(t *testing.T) *fakeDaemon {
	t.Helper()
	k := rdmatest.NewTargetPair(t, nqn, iqn)
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
			return f.listening() && f.d.env.Engine.Snapshot().Stats.Rebinds[rebind.ResultOK] >= uint64(2*(i+1))
		})
	}
	cancel()
	wg.Wait()
	snap := f.d.env.Engine.Snapshot()
	if ok := snap.Stats.Rebinds[rebind.ResultOK]; ok != 2*resets {
		t.Errorf("%d rebinds verified for %d resets of two listeners: %v", ok, resets, snap.Stats.Rebinds)
	}
	for _, r := range []rebind.Result{rebind.ResultError, rebind.ResultUnverified, rebind.ResultRefused} {
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

// The metrics textfile: written after rounds and, with no round, at least
// every resync interval (the interval timer is the test's: it fires when
// the test says, never by itself); a heal shows in it; a reload that moves
// or clears the path removes the file the daemon stops writing; the flag
// overrides the config; a write that fails is logged once, and its
// recovery once.
func TestMetricsTextfile(t *testing.T) {
	f := startFake(t)
	eng := f.d.env.Engine
	waitFor(t, "the first reconcile", func() bool { return eng.Snapshot().Stats.Reconciles > 0 })
	dir := t.TempDir()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	setConfig := func(path string, resync time.Duration) {
		cfg := rebind.DefaultConfig()
		cfg.MetricsTextfile, cfg.ResyncInterval = path, resync
		eng.SetConfig(cfg)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return string(b)
	}
	inode := func(path string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return 0
		}
		return st.Ino
	}
	start := func(flag string) (chan struct{}, *fakeTimer, func()) {
		rounds, interval := make(chan struct{}, 1), newFakeTimer()
		w := &textfileWriter{eng: eng, log: log, flag: flag, tf: metrics.NewTextfile(metrics.NewCollector(eng, nil)),
			rounds: rounds, interval: interval}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := w.Run(ctx); err != nil {
				t.Errorf("%v: %v", w, err)
			}
		}()
		return rounds, interval, func() { cancel(); <-done }
	}
	poke := func(rounds chan struct{}) {
		select {
		case rounds <- struct{}{}:
		default:
		}
	}

	a, b := filepath.Join(dir, "a.prom"), filepath.Join(dir, "b.prom")
	// A long resync: the loop does not reconcile by itself during the test.
	setConfig(a, time.Hour)
	rounds, interval, stop := start("")
	poke(rounds)
	waitFor(t, "the textfile after a round", func() bool {
		return strings.Contains(read(a), `nvmet_rebind_listeners{kind="nvmet",state="alive"} 1`)
	})

	// A heal, then a round: the file says so.
	f.k.RemoveDevice("rxe0")
	f.k.AddDevice("rxe0", 0x11, "veth0")
	eng.Poke()
	waitFor(t, "the heal", func() bool { return f.listening() && eng.Snapshot().Stats.Rebinds[rebind.ResultOK] >= 2 })
	poke(rounds)
	waitFor(t, "the heal in the textfile", func() bool {
		return strings.Contains(read(a), `nvmet_rebind_rebinds_total{result="ok"} 2`)
	})

	// No round: rewritten at the resync interval anyway. The writer reads
	// the interval from the config at each write, so a new one takes
	// effect after the next round (a reload always runs one).
	setConfig(a, 42*time.Minute)
	n := eng.Snapshot().Stats.Reconciles
	eng.Poke()
	waitFor(t, "a round", func() bool { return eng.Snapshot().Stats.Reconciles > n })
	poke(rounds)
	// The interval is armed after the write: that round's write is done.
	waitFor(t, "the config's interval armed", func() bool {
		r := interval.armedWith()
		return len(r) > 0 && r[len(r)-1] == 42*time.Minute
	})
	ino, n, armed := inode(a), eng.Snapshot().Stats.Reconciles, len(interval.armedWith())
	interval.fire(t)
	waitFor(t, "a rewrite with no round", func() bool { return inode(a) != ino && inode(a) != 0 })
	if got := eng.Snapshot().Stats.Reconciles; got != n {
		t.Fatalf("%d rounds ran meanwhile: the rewrite need not be the interval's", got-n)
	}
	waitFor(t, "the interval armed again", func() bool { return len(interval.armedWith()) > armed })
	setConfig(a, time.Hour)

	// A reload moves the file: the old one goes.
	setConfig(b, time.Hour)
	poke(rounds)
	waitFor(t, "the moved textfile", func() bool { return read(b) != "" })
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old textfile %s left behind: %v", a, err)
	}

	// A directory that is not there: logged once, not fatal; then it
	// appears, and the recovery is logged.
	missing := filepath.Join(dir, "later", "m.prom")
	setConfig(missing, time.Hour)
	for range 3 {
		poke(rounds)
		eng.Poke()
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "the error", func() bool { return strings.Contains(logs.String(), "metrics textfile not written") })
	if _, err := os.Stat(b); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("textfile %s left behind after the path changed: %v", b, err)
	}
	if err := os.Mkdir(filepath.Dir(missing), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the textfile in the new directory", func() bool {
		eng.Poke() // a new round, so the writer does not skip the poke
		poke(rounds)
		time.Sleep(5 * time.Millisecond)
		return read(missing) != ""
	})
	waitFor(t, "the recovery log", func() bool { return strings.Contains(logs.String(), "metrics textfile written again") })
	if n := strings.Count(logs.String(), "metrics textfile not written"); n != 1 {
		t.Errorf("the failing write was logged %d times, want once:\n%s", n, logs.String())
	}

	// Cleared by a reload: the file goes.
	setConfig("", time.Hour)
	poke(rounds)
	waitFor(t, "the cleared textfile removed", func() bool {
		_, err := os.Stat(missing)
		return errors.Is(err, os.ErrNotExist)
	})
	stop()

	// The flag wins over the config.
	flag := filepath.Join(dir, "flag.prom")
	setConfig(a, time.Hour)
	rounds, _, stop = start(flag)
	defer stop()
	poke(rounds)
	waitFor(t, "the flag's textfile", func() bool { return read(flag) != "" })
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the config's textfile %s was written despite the flag: %v", a, err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
