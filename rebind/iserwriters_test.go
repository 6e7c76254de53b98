package rebind_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// sideBySide is a Tree whose iser writes each take a millisecond (as one
// waits for the modprobe the kernel spawns) and are counted while under
// way: the most at once, and a write of 1 begun before the first write
// of 1 ended.
type sideBySide struct {
	rebind.Tree
	now, most       atomic.Int32
	onBegun, onDone atomic.Int32
	early           atomic.Bool
}

func (s *sideBySide) SwapISERs(ids []string, on bool, done func(int, bool, error) bool) error {
	for i, id := range ids {
		stop := false
		err := s.swap(id, on, func(_ int, was bool, err error) bool {
			stop = !done(i, was, err)
			return !stop
		})
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// swap is one portal's write, counted and slowed.
func (s *sideBySide) swap(id string, on bool, done func(int, bool, error) bool) error {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	if on {
		if s.onBegun.Add(1) > 1 && s.onDone.Load() == 0 {
			s.early.Store(true)
		}
		defer s.onDone.Add(1)
	}
	time.Sleep(time.Millisecond)
	return s.Tree.SwapISERs([]string{id}, on, done)
}

// The sharers of a shared portal are written 1 side by side after the
// first iser=1 (Options.ISERWriters at a time; 1: one at a time): the
// first, which makes the listener, ends before any other begins; the 0s
// are written one at a time, in configfs order, all before any 1; every
// sharer ends at 1, listening.
func TestSharedPortalWritersSideBySide(t *testing.T) {
	for _, c := range []struct{ writers, most int32 }{{0, rebind.DefaultISERWriters}, {3, 3}, {1, 1}} {
		t.Run(fmt.Sprint(c.writers), func(t *testing.T) {
			k, ids, _ := sharedWorld(t, 64)
			j, err := state.Open(t.TempDir())
			must(t, err)
			tree := &sideBySide{Tree: k.FS()}
			e := rebind.New(rebind.Options{Tree: tree, Kernel: k, Store: j, Config: rebind.DefaultConfig(), Now: newClock().now, ISERWriters: int(c.writers)})
			must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
			k.RemoveDevice("rxe0")
			k.AddDevice("rxe0", 0x11, "veth0")
			k.ResetLog()
			tree.most.Store(0)
			must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
			for _, id := range ids {
				if p, _ := k.FS().Portal(id); !p.ISER || !k.Listening("ib_isert", id) {
					t.Fatalf("%s: iser=%v listening=%v after the heal", id, p.ISER, k.Listening("ib_isert", id))
				}
			}
			if got := tree.most.Load(); got != c.most {
				t.Errorf("%d iser writes at once at most, want %d", got, c.most)
			}
			if tree.early.Load() {
				t.Error("an iser=1 began before the first iser=1 (the one that makes the listener) ended")
			}
			log := k.LogStrings()
			last0, first1 := -1, len(log)
			var zeros []string
			for i, w := range log {
				if strings.HasSuffix(w, ":3260/iser 0") {
					last0 = i
					zeros = append(zeros, w)
				} else if strings.HasSuffix(w, ":3260/iser 1") && i < first1 {
					first1 = i
				}
			}
			if !slices.IsSorted(zeros) {
				t.Errorf("the 0s were not written one at a time in configfs order: %q", zeros)
			}
			if last0 > first1 || len(log) != 2*len(ids)+2 { // and the other portal's 0 and 1
				t.Errorf("%d writes, want %d; the last 0 at %d and the first 1 at %d", len(log), 2*len(ids)+2, last0, first1)
			}
		})
	}
}

// A write refused in the middle of the side-by-side run ends the heal
// with that error once the writes under way end; the journal keeps what
// is still at 0, and the next round brings every sharer back to 1.
func TestSharedPortalWriteRefusedSideBySide(t *testing.T) {
	k, ids, _ := sharedWorld(t, 32)
	clk := newClock()
	e := sharedEngine(t, k, clk, nil, t.TempDir())
	must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	victim := ids[len(ids)/2]
	refused := false
	k.Fault = func(_ int, w configfstest.Write) error {
		if !refused && strings.Contains(w.Path, strings.SplitN(victim, "/", 2)[0]+"/") && w.Value == "1" {
			refused = true
			return fmt.Errorf("write %s: %w", w.Path, errors.ErrUnsupported)
		}
		return nil
	}
	_, err := e.Reconcile(context.Background())
	must(t, err)
	if !refused {
		t.Fatal("the victim's iser=1 was never written")
	}
	if p, _ := k.FS().Portal(victim); p.ISER {
		t.Fatal("the refused write took")
	}
	k.Fault = nil
	for range 10 {
		clk.advance(time.Minute)
		must(t, func() error { _, err := e.Reconcile(context.Background()); return err }())
	}
	for _, id := range ids {
		if p, _ := k.FS().Portal(id); !p.ISER || !k.Listening("ib_isert", id) {
			t.Errorf("%s: iser=%v listening=%v after the retries", id, p.ISER, k.Listening("ib_isert", id))
		}
	}
}
