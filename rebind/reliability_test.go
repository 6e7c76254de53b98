package rebind_test

// Reliability tests (issue 5): crashes at every fault point, journal
// corruption, flapping devices, concurrent admin changes, hostile config
// files and file modes. They run against the fake kernel; see RELIABILITY.md
// for what each one tried and how to reproduce it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

const (
	rxeGUID = 0x80dd69fffe0d1e0b
	portal6 = iqn + "/tpgt_1/[2001:db8::1]:3260"
	nqnC    = "nqn.2024-01.lab:c"
)

// shape is one crash-test topology.
type shape struct {
	name    string
	subs    int  // subsystems linked to nvmet port 1 (0: no port)
	portals bool // two LIO portals (IPv4 and IPv6) with iser=1
}

// newShapeWorld builds a listening target of the given shape.
func newShapeWorld(t *testing.T, s shape) *world {
	t.Helper()
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth0", "2001:db8::1")
	k.AddDevice("rxe0", rxeGUID, "veth0")
	if s.subs > 0 {
		var nqns []string
		for i := range s.subs {
			nqns = append(nqns, fmt.Sprintf("nqn.2024-01.lab:s%02d", i))
		}
		k.LinkedPort("1", "192.0.2.1", "4420", nqns...)
	}
	if s.portals {
		k.ISERPortal(iqn, "tpgt_1", "192.0.2.1:3260")
		k.ISERPortal(iqn, "tpgt_1", "[2001:db8::1]:3260")
	}
	return &world{t: t, k: k, clk: newClock(), state: t.TempDir(), cfg: rebind.DefaultConfig()}
}

// fullLinks returns port 1's links (names and targets) in creation order.
func (w *world) fullLinks() []configfs.Link {
	w.t.Helper()
	p, err := w.k.FS().Port("1")
	if err != nil {
		return nil
	}
	must(w.t, p.Err)
	return p.Links
}

// crashAt returns an engine fault hook that stops at its n-th call (0-based)
// and records every point it sees.
func crashAt(n int, seen *[]string) func(string) bool {
	i := 0
	return func(p string) bool {
		if seen != nil {
			*seen = append(*seen, p)
		}
		i++
		return i-1 == n
	}
}

// crash runs one reconcile of a fresh engine that must stop at fault call n.
func (w *world) crash(n int) {
	w.t.Helper()
	w.fault = crashAt(n, nil)
	_, err := w.engine().Reconcile(context.Background())
	w.fault = nil
	if !errors.Is(err, rebind.ErrCrashed) {
		w.t.Fatalf("fault call %d: reconcile returned %v, want ErrCrashed", n, err)
	}
}

// points runs one reconcile of a fresh engine and returns the fault points
// it passed, in order (nothing is stopped).
func (w *world) points() []string {
	w.t.Helper()
	var seen []string
	w.fault = crashAt(-1, &seen)
	w.reconcile(w.engine())
	w.fault = nil
	return seen
}

// assertHealed checks that port 1 has exactly the links it had before (same
// names, targets and order, none lost, none duplicated), every listener
// listens, the journal is empty, and one more reconcile writes nothing.
func (w *world) assertHealed(s shape, before []configfs.Link) {
	w.t.Helper()
	if s.subs > 0 {
		got := w.fullLinks()
		if diff := cmp.Diff(before, got); diff != "" {
			w.t.Errorf("port 1 links (-want +got):\n%s", diff)
		}
		names, nqns := map[string]bool{}, map[string]bool{}
		for _, l := range got {
			if names[l.Name] || nqns[l.NQN] {
				w.t.Errorf("duplicate link %+v in %+v", l, got)
			}
			names[l.Name], nqns[l.NQN] = true, true
		}
		if !w.k.Listening("nvmet_rdma", "1") {
			w.t.Errorf("port 1 not listening: %s", w.k)
		}
	}
	if s.portals {
		for _, id := range []string{portal, portal6} {
			if !w.k.Listening("ib_isert", id) {
				w.t.Errorf("portal %s not listening: %s", id, w.k)
			}
			p, err := w.k.FS().Portal(id)
			if err != nil || !p.ISER {
				w.t.Errorf("portal %s: iser=%v err=%v", id, p.ISER, err)
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(w.state, "journal"))
	must(w.t, err)
	if len(ents) != 0 {
		var n []string
		for _, e := range ents {
			n = append(n, e.Name())
		}
		w.t.Errorf("journal not empty: %q", n)
	}
	w.k.ResetLog()
	w.reconcile(w.engine())
	if log := w.k.LogStrings(); len(log) != 0 {
		w.t.Errorf("writes on a healed target: %q", log)
	}
}

var crashShapes = []shape{
	{name: "nvmet-1-subsystem", subs: 1},
	{name: "nvmet-8-subsystems", subs: 8},
	{name: "lio-2-portals", portals: true},
	{name: "nvmet-3-and-lio", subs: 3, portals: true},
}

// TestCrashAnywhere crashes a rebind at every fault point it passes (found
// by a recording run, so new points are covered automatically) and restarts
// a fresh engine on the same state dir; then it crashes the recovery too at
// every point the recovery passes, and restarts once more.
func TestCrashAnywhere(t *testing.T) {
	t.Parallel()
	for _, s := range crashShapes {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			setup := func(t *testing.T) (*world, []configfs.Link) {
				w := newShapeWorld(t, s)
				before := w.fullLinks()
				w.reconcile(w.engine())
				w.reset()
				return w, before
			}
			w, _ := setup(t)
			pts := w.points()
			heals := 0
			want := 0
			if s.subs > 0 {
				heals++
				want += 2 * s.subs // unlinks, relinks
			}
			if s.portals {
				heals += 2
				want += 2 * 2 // iser 0, iser 1 of each portal
			}
			want += 2 * min(heals, 2) // journal batches (the first heal's, then the rest's): before and after each
			if len(pts) != want {
				t.Fatalf("fault points %q: %d, want %d", pts, len(pts), want)
			}
			t.Logf("%d fault points: %q", len(pts), pts)
			doubles := 0
			for i, p := range pts {
				t.Run(fmt.Sprintf("%02d-%s", i, p), func(t *testing.T) {
					w, before := setup(t)
					w.crash(i)
					// The recovery, recording the points it passes.
					rec := w.points()
					w.assertHealed(s, before)

					// Crash the recovery at each of its points (every one,
					// or first, middle and last for shapes with more than 10 points).
					for j, q := range rec {
						if len(pts) > 10 && j != 0 && j != len(rec)/2 && j != len(rec)-1 {
							continue
						}
						t.Run(fmt.Sprintf("then-%02d-%s", j, q), func(t *testing.T) {
							w, before := setup(t)
							w.crash(i)
							w.crash(j)
							w.reconcile(w.engine())
							w.assertHealed(s, before)
						})
						doubles++
					}
				})
			}
			t.Logf("%d single crashes, %d double crashes", len(pts), doubles)
		})
	}
}

// --- journal corruption ---

func intentJSON(t *testing.T, in rebind.Intent) string {
	t.Helper()
	in.Version = 1
	b, err := json.Marshal(in)
	must(t, err)
	return string(b)
}

// journalFileFor returns the file name the journal uses for a key (by
// writing an entry and looking), leaving the journal empty.
func journalFileFor(t *testing.T, j *state.Store, k rebind.Kind, id string) string {
	t.Helper()
	in := rebind.Intent{Kind: k, ID: id, Address: "192.0.2.1:4420", Links: []configfs.Link{{Name: nqnA, NQN: nqnA}}, ISER: k == rebind.KindLIO}
	must(t, j.Put(in))
	files := journalFiles(t, j.JournalDir())
	if len(files) != 1 {
		t.Fatalf("journal files %q", files)
	}
	must(t, j.Delete(rebind.Key{Kind: k, ID: id}))
	return files[0]
}

// TestJournalCorruptionVariants: leftovers and lies in the journal never
// make things worse: no write to an unrelated port, no link the port did
// not have, and corruption is reported.
func TestJournalCorruptionVariants(t *testing.T) {
	t.Parallel()
	linksOf := func(id string, nqns ...string) []configfs.Link {
		var ls []configfs.Link
		for _, n := range nqns {
			ls = append(ls, configfs.Link{Name: n, NQN: n})
		}
		return ls
	}
	tests := []struct {
		name       string
		dead       bool // reset the device before the engine starts
		prepare    func(t *testing.T, w *world, j *state.Store)
		reported   bool // Snapshot().JournalErrs must not be empty
		reconciles int
	}{
		{
			name: "tmp file from a crash before rename", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				// A never-committed intent claiming a link port 1 never had.
				must(t, writeFile(filepath.Join(j.JournalDir(), ".tmp-4242"), intentJSON(t, rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: linksOf("1", nqnA, nqnB, nqnC)})))
			},
		},
		{
			name: "tmp directory from a crash before rename", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				must(t, os.MkdirAll(filepath.Join(j.JournalDir(), ".tmp-77", "x"), 0o700))
			},
		},
		{
			name: "wrong file name for the content, target healthy",
			prepare: func(t *testing.T, w *world, j *state.Store) {
				f := journalFileFor(t, j, rebind.KindNvmet, "2")
				must(t, writeFile(f, intentJSON(t, rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: linksOf("1", nqnA, nqnB, nqnC)})))
			},
			reported: true,
		},
		{
			name: "wrong file name for the content, target dead", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				f := journalFileFor(t, j, rebind.KindNvmet, "2")
				must(t, writeFile(f, intentJSON(t, rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: linksOf("1", nqnA, nqnB, nqnC)})))
			},
			reported: true,
		},
		{
			name: "directory where the entry file should be", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				f := journalFileFor(t, j, rebind.KindNvmet, "1")
				must(t, os.MkdirAll(filepath.Join(f, "inner"), 0o700))
			},
			reported: true,
		},
		{
			name: "entry for a port the admin deleted", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				must(t, j.Put(rebind.Intent{Kind: rebind.KindNvmet, ID: "9", Address: "192.0.2.1:4429", Links: linksOf("9", nqnA, nqnC)}))
				must(t, j.Put(rebind.Intent{Kind: rebind.KindLIO, ID: iqn + "/tpgt_1/192.0.2.1:3299", Address: "192.0.2.1:3299", ISER: true}))
			},
		},
		{
			name: "entry whose address differs (port re-created), dead", dead: true,
			prepare: func(t *testing.T, w *world, j *state.Store) {
				must(t, j.Put(rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.9:4420", Links: linksOf("1", nqnA, nqnB, nqnC)}))
			},
			reconciles: 2, // the first drops the entry, the second rebinds
		},
		{
			name: "entry whose address differs (port re-created), healthy",
			prepare: func(t *testing.T, w *world, j *state.Store) {
				must(t, j.Put(rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4499", Links: linksOf("1", nqnA, nqnB, nqnC)}))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.k.AddSubsystem(nqnC) // exists, linked nowhere
			// An unrelated, healthy port that must never be written.
			w.k.LinkedPort("2", "192.0.2.1", "4421", nqnA)
			j, err := state.Open(w.state)
			must(t, err)
			tt.prepare(t, w, j)
			if tt.dead {
				w.reset()
				// Port 2 was on the same device: it is dead too, which is
				// fine — but it must be rebound from configfs alone.
			}
			e := w.engine()
			n := max(tt.reconciles, 1)
			for range n {
				w.reconcile(e)
			}
			for _, l := range w.k.LogStrings() {
				if strings.Contains(l, nqnC) || strings.Contains(l, "ports/9") || strings.Contains(l, "3299") {
					t.Errorf("the journal made things worse: %s", l)
				}
				if !tt.dead && strings.Contains(l, "ports/2/") {
					t.Errorf("wrote to an unrelated healthy port: %s", l)
				}
			}
			if !tt.dead {
				if log := w.k.LogStrings(); len(log) != 0 {
					t.Errorf("writes on a healthy target: %q", log)
				}
			}
			if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
				t.Errorf("port 1 links (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{nqnA}, w.links("2")); diff != "" {
				t.Errorf("port 2 links (-want +got):\n%s", diff)
			}
			if _, err := os.Lstat(filepath.Join(w.k.Root, "nvmet/ports/9")); err == nil {
				t.Error("port 9 was created")
			}
			for _, id := range []string{"1", "2"} {
				if !w.k.Listening("nvmet_rdma", id) {
					t.Errorf("port %s not listening: %s", id, w.k)
				}
			}
			if !w.k.Listening("ib_isert", portal) {
				t.Errorf("portal not listening: %s", w.k)
			}
			snap := e.Snapshot()
			if tt.reported && len(snap.JournalErrs) == 0 {
				t.Error("corruption not reported in Snapshot().JournalErrs")
			}
			t.Logf("JournalErrs: %v", snap.JournalErrs)
			if m, bad := j.Load(); len(m) != 0 || len(bad) != 0 {
				t.Errorf("journal after recovery: %v %v", m, bad)
			}
			for _, f := range journalFiles(t, j.JournalDir()) {
				t.Errorf("journal entry left: %s", f)
			}
			if ents, _ := os.ReadDir(j.JournalDir()); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == ".tmp-4242" }) {
				t.Error("uncommitted .tmp- file not cleaned up")
			}
		})
	}
}

func TestJournalDirIsAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	must(t, writeFile(filepath.Join(dir, "journal"), "not a directory"))
	if _, err := state.Open(dir); err == nil {
		t.Error("OpenJournal accepted a regular file as the journal directory")
	}
}

// --- flapping ---

// interleaveChecker verifies the write log: for every port, an unlink starts
// a rebind that must relink what it unlinked before the port is unlinked
// again; for every portal, iser 0 must be followed by iser 1 before the next
// iser 0.
type interleaveChecker struct {
	pending  map[string]map[string]bool // port → unlinked links not yet back
	relinked map[string]bool            // port → a relink happened in this rebind
	iserOff  map[string]bool
	rebinds  int
}

func newInterleaveChecker() *interleaveChecker {
	return &interleaveChecker{pending: map[string]map[string]bool{}, relinked: map[string]bool{}, iserOff: map[string]bool{}}
}

func (c *interleaveChecker) check(t *testing.T, log []configfstest.Write) {
	t.Helper()
	for i, w := range log {
		parts := strings.Split(w.Path, "/")
		switch {
		case len(parts) == 5 && parts[0] == "nvmet" && parts[1] == "ports" && parts[3] == "subsystems":
			port, link := parts[2], parts[4]
			if c.pending[port] == nil {
				c.pending[port] = map[string]bool{}
			}
			switch w.Op {
			case "remove":
				if w.Err != nil {
					continue
				}
				if c.relinked[port] {
					t.Errorf("write %d %s: port %s unlinked again before its rebind finished (pending %v)", i, w, port, c.pending[port])
				}
				if len(c.pending[port]) == 0 {
					c.rebinds++
				}
				if c.pending[port][link] {
					t.Errorf("write %d %s: %s unlinked twice without a relink", i, w, link)
				}
				c.pending[port][link] = true
			case "symlink":
				if w.Err != nil {
					continue
				}
				delete(c.pending[port], link)
				c.relinked[port] = len(c.pending[port]) > 0
			}
		case w.Op == "write" && strings.HasSuffix(w.Path, "/iser"):
			id := w.Path
			switch {
			case w.Value == "0" && w.Err == nil:
				if c.iserOff[id] {
					t.Errorf("write %d %s: iser 0 twice without iser 1", i, w)
				}
				c.iserOff[id] = true
				c.rebinds++
			case w.Value == "1" && w.Err == nil:
				c.iserOff[id] = false
			}
		}
	}
}

func (c *interleaveChecker) idle(t *testing.T) {
	t.Helper()
	for p, m := range c.pending {
		if len(m) > 0 {
			t.Errorf("port %s: rebind never finished, links %v not back", p, m)
		}
	}
	for id, off := range c.iserOff {
		if off {
			t.Errorf("%s: left at iser 0", id)
		}
	}
}

// TestFlapping removes and re-adds the RDMA device 100 times in 60 s of
// fake time (a flap every 600 ms), reconciling in between.
func TestFlapping(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	for i := range 100 {
		w.k.RemoveDevice("rxe0")
		w.reconcile(e)
		w.clk.advance(300 * time.Millisecond)
		w.k.AddDevice("rxe0", rxeGUID, "veth0")
		w.reconcile(e)
		w.clk.advance(300 * time.Millisecond)
		if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
			t.Fatalf("flap %d: not healed: %s", i, w.k)
		}
	}
	c := newInterleaveChecker()
	c.check(t, w.k.Log())
	c.idle(t)
	st := e.Snapshot().Stats
	t.Logf("100 flaps: %d reconciles, rebinds %v, %d writes", st.Reconciles, st.Rebinds, len(w.k.Log()))
	if diff := cmp.Diff([5]uint64{rebind.ResultOK: 200}, st.Rebinds); diff != "" {
		t.Errorf("rebinds by result (-want +got):\n%s", diff)
	}
	if c.rebinds != 200 {
		t.Errorf("%d rebinds in the write log, want 200", c.rebinds)
	}
	if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if m, bad := mustJournal(t, w.state).Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("journal left: %v %v", m, bad)
	}
}

func mustJournal(t *testing.T, dir string) *state.Store {
	t.Helper()
	j, err := state.Open(dir)
	must(t, err)
	return j
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting fds: %v", err)
	}
	return len(ents)
}

// TestFlappingRunLoop flaps the device 100 times under the real Run loop,
// with a pool of goroutines poking concurrently and another calling
// Reconcile directly. Hooks inside the engine's reads and writes detect two
// reconciles running at once; the write log shows whether a port's rebinds
// interleave; goroutines and fds are counted before and after.
func TestFlappingRunLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts fds in /proc/self/fd")
	}
	w := newWorld(t)
	j := mustJournal(t, w.state)

	var inside, overlaps, probes atomic.Int64
	probe := func() {
		probes.Add(1)
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		for range 10 {
			runtime.Gosched()
		}
		inside.Add(-1)
	}
	w.k.ReadDirHook = func(string) { probe() }
	fault := func(string) bool { probe(); return false }

	e := rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Store: j, Config: w.cfg, Fault: fault})

	runtime.GC()
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)

	ctx, cancel := context.WithCancel(context.Background())
	beats := make(chan struct{}, 1)
	beat := func() {
		select {
		case beats <- struct{}{}:
		default:
		}
	}
	runErr := make(chan error, 1)
	go func() { runErr <- e.Run(ctx, beat) }()

	kick := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var pokes, directErrs atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range kick {
				for range 4 {
					e.Poke()
					pokes.Add(1)
					runtime.Gosched()
				}
			}
		})
	}
	direct := make(chan struct{}, 1)
	wg.Go(func() {
		for range direct {
			if _, err := e.Reconcile(ctx); err != nil && ctx.Err() == nil {
				directErrs.Add(1)
			}
		}
	})
	kickAll := func() {
		for range 8 {
			kick <- struct{}{}
		}
		select {
		case direct <- struct{}{}:
		default:
		}
	}
	waitHealed := func(i int) {
		deadline := time.NewTimer(10 * time.Second)
		defer deadline.Stop()
		for !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
			select {
			case <-beats:
			case <-deadline.C:
				t.Fatalf("flap %d: not healed within 10 s: %s", i, w.k)
			}
			e.Poke()
		}
	}
	waitHealed(-1)
	var gPeak int
	for i := range 100 {
		w.k.RemoveDevice("rxe0")
		kickAll()
		w.k.AddDevice("rxe0", rxeGUID, "veth0")
		kickAll()
		waitHealed(i)
		gPeak = max(gPeak, runtime.NumGoroutine())
	}
	close(kick)
	close(direct)
	wg.Wait()
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
	runtime.GC()
	g1, fd1 := runtime.NumGoroutine(), openFDs(t)

	st := e.Snapshot().Stats
	t.Logf("100 flaps under Run: %d pokes, %d reconciles, rebinds %v, %d writes, %d probes, %d overlaps",
		pokes.Load(), st.Reconciles, st.Rebinds, len(w.k.Log()), probes.Load(), overlaps.Load())
	t.Logf("goroutines before %d, peak %d, after %d; open fds before %d, after %d", g0, gPeak, g1, fd0, fd1)
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two reconciles ran at once", n)
	}
	if n := directErrs.Load(); n != 0 {
		t.Errorf("%d direct reconciles failed", n)
	}
	c := newInterleaveChecker()
	c.check(t, w.k.Log())
	c.idle(t)
	if c.rebinds < 200 {
		t.Errorf("%d rebinds in the write log for 100 flaps of 2 listeners, want ≥ 200", c.rebinds)
	}
	if g1-g0 > 5 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if fd1-fd0 > 5 {
		t.Errorf("open fds grew from %d to %d", fd0, fd1)
	}
	if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if m, bad := j.Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("journal left: %v %v", m, bad)
	}
}

// --- concurrent admin changes ---

// rereadHook returns a ReadDirHook that runs f once, on the n-th read of
// port 1's subsystems directory (1-based) after arm is called.
type rereadHook struct {
	armed atomic.Bool
	n     atomic.Int64
	at    int64
	f     func()
	fired atomic.Bool
}

func (h *rereadHook) hook(root string) func(string) {
	dir := filepath.Join(root, "nvmet/ports/1/subsystems")
	return func(d string) {
		if !h.armed.Load() || filepath.Clean(d) != dir {
			return
		}
		if h.n.Add(1) == h.at && h.fired.CompareAndSwap(false, true) {
			h.f()
		}
	}
}

// TestAdminChangesDuringRebind: another tool changes configfs at the moment
// the engine re-reads port 1 before writing (the second read of its
// subsystems directory in a reconcile: the first is the observation).
func TestAdminChangesDuringRebind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(t *testing.T, w *world, admin *configfs.FS)
		check  func(t *testing.T, w *world)
	}{
		{
			name: "admin unlinks a subsystem",
			change: func(t *testing.T, w *world, admin *configfs.FS) {
				must(t, admin.Unlink("1", configfs.Link{Name: nqnB, NQN: nqnB}))
			},
			check: func(t *testing.T, w *world) {
				if diff := cmp.Diff([]string{nqnA}, w.links("1")); diff != "" {
					t.Errorf("port 1 links (-want +got):\n%s", diff)
				}
				for _, l := range w.k.LogStrings() {
					if strings.Contains(l, nqnB) {
						t.Errorf("undid the admin's unlink: %s", l)
					}
				}
				if !w.k.Listening("ib_isert", portal) {
					t.Errorf("portal not healed: %s", w.k)
				}
			},
		},
		{
			name: "admin removes the portal",
			change: func(t *testing.T, w *world, admin *configfs.FS) {
				must(t, w.k.RemovePortal(portal))
			},
			check: func(t *testing.T, w *world) {
				if _, err := os.Lstat(filepath.Join(w.k.Root, "target/iscsi", iqn, "tpgt_1/np/192.0.2.1:3260")); err == nil {
					t.Error("the removed portal is back")
				}
				for _, l := range w.k.LogStrings() {
					if strings.Contains(l, "iser") {
						t.Errorf("wrote to the removed portal: %s", l)
					}
				}
				if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
					t.Errorf("port 1 links (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "admin sets iser=0",
			change: func(t *testing.T, w *world, admin *configfs.FS) {
				must(t, admin.SetISER(portal, false))
			},
			check: func(t *testing.T, w *world) {
				p, err := w.k.FS().Portal(portal)
				must(t, err)
				if p.ISER || w.k.Listening("ib_isert", portal) {
					t.Errorf("the admin's iser=0 was undone: iser=%v, %s", p.ISER, w.k)
				}
				for _, l := range w.k.LogStrings() {
					if strings.Contains(l, "iser") {
						t.Errorf("wrote iser after the admin set it to 0: %s", l)
					}
				}
				if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
					t.Errorf("port 1 links (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "admin adds a subsystem link",
			change: func(t *testing.T, w *world, admin *configfs.FS) {
				must(t, admin.Relink("1", configfs.Link{Name: nqnC, NQN: nqnC}))
			},
			check: func(t *testing.T, w *world) {
				if diff := cmp.Diff([]string{nqnA, nqnB, nqnC}, w.links("1")); diff != "" {
					t.Errorf("port 1 links (-want +got):\n%s", diff)
				}
				if !w.k.Listening("ib_isert", portal) {
					t.Errorf("portal not healed: %s", w.k)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.k.AddSubsystem(nqnC)
			admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
			e := w.engine()
			w.reconcile(e)
			w.reset()
			h := &rereadHook{at: 2, f: func() { tt.change(t, w, admin) }}
			w.k.ReadDirHook = h.hook(w.k.Root)
			h.armed.Store(true)
			w.reconcile(e)
			if !h.fired.Load() {
				t.Fatal("the hook never fired: the engine did not re-read the port before writing")
			}
			// The rest converges within a few reconciles (a listener whose
			// admin change made the rebind moot may be retried after backoff).
			for range 3 {
				w.clk.advance(10 * time.Second)
				w.reconcile(e)
			}
			if !w.k.Listening("nvmet_rdma", "1") {
				t.Errorf("port 1 not healed: %s", w.k)
			}
			tt.check(t, w)
			if m, bad := mustJournal(t, w.state).Load(); len(m) != 0 || len(bad) != 0 {
				t.Errorf("journal left: %v %v", m, bad)
			}
		})
	}
}

// TestAdminChangesDuringOutage: while the device is gone the admin adds a
// subsystem link (and removes another); the engine keeps both decisions and
// heals the port when the device is back.
func TestAdminChangesDuringOutage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.k.AddSubsystem(nqnC)
	admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
	e := w.engine()
	w.reconcile(e)
	w.k.RemoveDevice("rxe0")
	w.reconcile(e)
	must(t, admin.Relink("1", configfs.Link{Name: nqnC, NQN: nqnC}))
	w.clk.advance(time.Second)
	w.reconcile(e)
	must(t, admin.Unlink("1", configfs.Link{Name: nqnA, NQN: nqnA}))
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes during the outage: %q", log)
	}
	w.k.AddDevice("rxe0", rxeGUID, "veth0")
	w.reconcile(e)
	if diff := cmp.Diff([]string{nqnB, nqnC}, w.links("1")); diff != "" {
		t.Errorf("port 1 links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Errorf("not healed: %s", w.k)
	}
	for _, l := range w.k.LogStrings() {
		if strings.Contains(l, "symlink") && strings.Contains(l, nqnA) {
			t.Errorf("relinked what the admin unlinked: %s", l)
		}
	}
}

// TestAdminLinksDuringRelink: the admin links a new subsystem between the
// engine's unlinks and its relinks (the port is disabled at that moment, so
// the admin's link enables it); the engine still puts back its own links and
// keeps the admin's.
func TestAdminLinksDuringRelink(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.k.AddSubsystem(nqnC)
	e := w.engine()
	w.reconcile(e)
	w.reset()
	var once sync.Once
	w.fault = func(p string) bool {
		if p == "after-unlink-1" {
			once.Do(func() {
				admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
				must(t, admin.Relink("1", configfs.Link{Name: nqnC, NQN: nqnC}))
			})
		}
		return false
	}
	e = w.engine()
	w.reconcile(e)
	w.fault = nil
	if diff := cmp.Diff([]string{nqnC, nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("port 1 links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Errorf("not healed: %s", w.k)
	}
	if m, bad := mustJournal(t, w.state).Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("journal left: %v %v", m, bad)
	}
}

// --- malformed config files (beyond config_test.go) ---

func TestConfigHostile(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1<<19)
	tests := []struct {
		name string
		text string
		want string // "" = must parse to the defaults
	}{
		{name: "empty file", text: ""},
		{name: "only comments and blank lines", text: "# nothing\n\n   \n"},
		{name: "BOM then defaults", text: "\ufeff# config\n"},
		{name: "duplicate key", text: "[policy]\npin_device = true\npin_device = false\n", want: "line 3"},
		{name: "duplicate table", text: "[policy]\npin_device = true\n[policy]\ngive_up_after = \"1m\"\n", want: "line 3"},
		{name: "array where a table is expected", text: "policy = [1, 2]\n", want: "policy"},
		{name: "string where a table is expected", text: "policy = \"x\"\n", want: "policy"},
		{name: "table where an array of tables is expected", text: "[watch]\nsubnet = \"192.0.2.0/24\"\n", want: "watch"},
		{name: "very long string value", text: "[policy]\nresync_interval = \"" + long + "\"\n", want: "is not a duration"},
		{name: "very long key", text: "[policy]\n" + long + " = 1\n", want: "unknown key"},
		{name: "very long subnet", text: "[[watch]]\nsubnet = \"" + long + "\"\n", want: "is not a subnet"},
		{name: "NUL byte", text: "[policy]\npin_device = true\x00\n", want: "line 2"},
		{name: "invalid UTF-8", text: "[policy]\nnvmet_config = \"\xff\xfe\"\n", want: "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse("c.toml", []byte(tt.text))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if diff := cmp.Diff(rebind.DefaultConfig(), got); diff != "" {
					t.Errorf("config (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %.300v, want it to contain %q", err, tt.want)
			}
			if err != nil && len(err.Error()) > 4096 {
				t.Errorf("error message of %d bytes: the input is echoed unbounded", len(err.Error()))
			}
		})
	}
}

// --- security ---

func TestJournalModes(t *testing.T) {
	t.Parallel()
	sd := filepath.Join(t.TempDir(), "sd")
	must(t, os.Mkdir(sd, 0o755))
	must(t, os.Chmod(sd, 0o755)) // whatever the umask
	j, err := state.Open(sd)
	must(t, err)
	must(t, j.Put(rebind.Intent{Kind: rebind.KindNvmet, ID: "1", Address: "192.0.2.1:4420", Links: []configfs.Link{{Name: nqnA, NQN: nqnA}}}))
	must(t, j.Put(rebind.Intent{Kind: rebind.KindLIO, ID: portal, Address: "192.0.2.1:3260", ISER: true}))
	// The existing state dir keeps its mode; the journal dir it creates is 0700.
	for path, want := range map[string]os.FileMode{sd: 0o755, j.JournalDir(): 0o700} {
		st, err := os.Stat(path)
		must(t, err)
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	files := journalFiles(t, j.JournalDir())
	if len(files) != 2 {
		t.Fatalf("journal files %q", files)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		must(t, err)
		if got := st.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, got)
		}
	}
	// An existing dir others can write is refused, never chmod-ed.
	for path, mode := range map[string]os.FileMode{j.JournalDir(): 0o777, sd: 0o775} {
		must(t, os.Chmod(path, mode))
		if _, err := state.Open(sd); err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), "-writable") {
			t.Errorf("%s mode %v: reopen: %v, want it refused", path, mode, err)
		}
		st, err := os.Stat(path)
		must(t, err)
		if got := st.Mode().Perm(); got != mode {
			t.Errorf("%s after reopen: mode %v, want %v kept", path, got, mode)
		}
		must(t, os.Chmod(path, 0o700))
	}
}

func TestLoadConfigSymlinkToWritable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "world.toml")
	must(t, os.WriteFile(target, []byte("[policy]\npin_device = true\n"), 0o600))
	link := filepath.Join(dir, "config.toml")
	must(t, os.Symlink(target, link))
	for _, mode := range []os.FileMode{0o666, 0o646, 0o620} {
		must(t, os.Chmod(target, mode))
		if _, err := config.Load(link); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("symlink to a %v file: err = %v", mode, err)
		}
	}
	// A symlink to a safe file is fine.
	must(t, os.Chmod(target, 0o644))
	c, err := config.Load(link)
	must(t, err)
	if !c.PinDevice {
		t.Errorf("config through a symlink not read: %+v", c)
	}
	// A chain of symlinks ending at a writable file is refused too.
	link2 := filepath.Join(dir, "chain.toml")
	must(t, os.Symlink(link, link2))
	must(t, os.Chmod(target, 0o666))
	if _, err := config.Load(link2); err == nil {
		t.Error("chain of symlinks to a world-writable file accepted")
	}
}
