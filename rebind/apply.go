package rebind

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// ErrCrashed is returned when a test fault point stopped a rebind the way a
// crash would: no further write, no cleanup.
var ErrCrashed = errors.New("stopped at a fault point")

// apply is the only code that writes configfs and the journal. It executes
// the heals in order, each step after its precondition (Step.Pre, checked
// by pass) and decides nothing: what to write is the plan's. Journal
// entries are written in two batches: the first heal's alone (its first
// write waits for nothing else), then those of every other heal at once
// (one directory sync, not one per endpoint); the journal entries of the
// heals done are removed in one batch at the end. It returns the heals
// written, for verification; an error only for ctx or a fault point.
// obs is what the heals were planned from.
func (e *Engine) apply(ctx context.Context, heals []Heal, obs *Observed) (_ []pending, err error) {
	defer func() {
		if !errors.Is(err, ErrCrashed) {
			e.durable()
		}
	}()
	start, j0 := time.Now(), e.stats.JournalTime
	var batches time.Duration // in journalBatch: the preconditions and the journal writes
	pre := map[int]putResult{}
	journaled := 0 // heals [0, journaled) are journaled
	var done []pending
	var deletes []Key
	var dropped []Heal
	for i, h := range heals {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if i >= journaled {
			end := len(heals)
			if i == 0 {
				end = 1
			}
			if e.fault("before-journal") {
				return done, ErrCrashed
			}
			t := time.Now()
			asRead := !e.opt.Exhaustive && obs.unchanged(e.opt.Tree)
			if err := e.journalBatch(heals[i:end], i, pre, asRead); err != nil {
				return done, err
			}
			batches += time.Since(t)
			journaled = end
		}
		p := pending{heal: h, start: e.opt.Now(), wall: time.Now()}
		var del []Key
		var tm healTimes
		del, p.err = e.execute(h, pre[i], &tm)
		if errors.Is(p.err, ErrCrashed) {
			return done, p.err
		}
		e.logHeal(h, start, p.wall, tm, batches, e.stats.JournalTime-j0)
		deletes = append(deletes, del...)
		if h.Action == ActDropJournal {
			dropped = append(dropped, h)
			continue
		}
		done = append(done, p)
	}
	if len(deletes) > 0 {
		t := time.Now()
		err := e.opt.Store.DeleteAll(deletes)
		e.stats.JournalTime += time.Since(t)
		if err != nil {
			e.log.Warn("journal entries not removed; the next round finds their work done", "keys", keysString(deletes), "err", err)
		}
		for _, h := range dropped {
			if err != nil {
				e.log.Warn("journal entry not dropped", "keys", fmt.Sprint(h.Keys), "err", err)
			} else {
				e.log.Info("journal entry dropped", "listener", keysString(h.Keys), "reason", h.Reason)
			}
		}
	}
	return done, nil
}

// pending is a heal written and waiting for verification.
type pending struct {
	heal  Heal
	start time.Time // engine clock
	wall  time.Time // for the latency
	err   error
}

// putResult is what the round's journal batch did for one heal.
type putResult struct {
	put  []Key        // journaled by this round, in this heal's order
	skip map[Key]bool // objects the admin removed or set to 0 before the batch
	err  error        // a precondition that stops the heal (or the batch failed)
	// first: the heal is the first of its batch, so nothing was written
	// between its preconditions and its first write (no re-check).
	first bool
}

// journalBatch writes the journal entries of heals (the round's heals
// from index first) in one batch, each after its precondition (a failed
// one stops that heal, or skips that object). asRead: configfs answers
// what the plan read (Observed.unchanged), so a portal's iser, which the
// plan took from that reading, is not read again (256 sharers: 256 reads
// before the first write). It records what it did in out by the round's
// heal index; an error only for a fault point.
func (e *Engine) journalBatch(heals []Heal, first int, out map[int]putResult, asRead bool) error {
	var ins []Intent
	var from []int
	for n, h := range heals {
		i := first + n
		r := putResult{skip: map[Key]bool{}, first: n == 0}
		var mine []Intent
		for _, s := range h.Steps {
			if s.Op != OpJournalPut {
				continue
			}
			ok, err := passWrite, error(nil)
			if !asRead || s.Pre.Check != CheckISER {
				ok, err = e.pass(s)
			}
			if err != nil {
				r.err, mine = err, nil
				break
			}
			if ok != passWrite {
				r.skip[s.Key] = true
				continue
			}
			in := *s.Intent
			in.Started = e.opt.Now()
			mine = append(mine, in)
		}
		for _, in := range mine {
			r.put = append(r.put, Key{in.Kind, in.ID})
			ins = append(ins, in)
			from = append(from, i)
		}
		out[i] = r
	}
	if len(ins) == 0 {
		return nil
	}
	t := time.Now()
	err := e.opt.Store.PutAll(ins)
	e.stats.JournalTime += time.Since(t)
	if err != nil {
		for _, i := range from {
			r := out[i]
			r.put, r.err = nil, err
			out[i] = r
		}
		return nil
	}
	if e.fault("after-journal") {
		return ErrCrashed
	}
	return nil
}

// durable makes the journal entries written so far durable (Store.Sync;
// state's "Visible, then durable"): after a heal's binding write, and at
// the end of apply. A failure is logged: the entries are still where a
// restarted daemon reads them, and the next journal write syncs them
// first.
func (e *Engine) durable() {
	if e.opt.Store == nil || e.opt.DryRun {
		return
	}
	t := time.Now()
	err := e.opt.Store.Sync()
	e.stats.JournalTime += time.Since(t)
	if err != nil {
		e.log.Warn("journal entries not durable yet; the next journal write syncs them", "err", err)
	}
}

// passing is what a precondition says of its step now.
type passing int

const (
	passWrite passing = iota // it holds: write
	passDone                 // the write is done already: go on
	passSkip                 // the object is not to be touched (gone, or changed by the admin)
)

// pass checks the precondition of s against configfs now; an error stops
// the heal. Link checks are made by the kernel in the write itself.
func (e *Engine) pass(s Step) (passing, error) {
	switch s.Pre.Check {
	case CheckLinksAre:
		links, err := e.opt.Tree.Links(s.Key.ID)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return passSkip, nil
		case err != nil:
			return passSkip, fmt.Errorf("%s: re-read: %w", s.Key, err)
		case !slices.Equal(links, s.Pre.Links):
			return passSkip, fmt.Errorf("%s: its links changed since the plan; planning again", s.Key)
		}
	case CheckISER:
		p, err := e.opt.Tree.Portal(s.Key.ID)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return passSkip, nil
		case err != nil:
			return passSkip, fmt.Errorf("%s: re-read: %w", s.Key, err)
		case p.ISER != s.Pre.ISER && s.Pre.ISER:
			return passSkip, nil // the admin set iser=0 meanwhile
		case p.ISER != s.Pre.ISER:
			return passDone, nil // iser already reads 1
		}
	}
	return passWrite, nil
}

// execute performs one heal's writes in order; its journal entries were
// written by the round's batch (pre). A write error stops the heal; the
// journal keeps what is left to do for the next round. It returns the
// journal entries to remove once the heal is done.
func (e *Engine) execute(h Heal, pre putResult, tm *healTimes) ([]Key, error) {
	if pre.err != nil {
		return nil, pre.err
	}
	skip := maps.Clone(pre.skip)
	// When earlier heals of the round ran since the batch, the ports
	// journaled for this one are checked again before the first write (an
	// admin's change meanwhile stops the heal, and its fresh entries go).
	for _, s := range h.Steps {
		if pre.first || s.Op != OpJournalPut || s.Key.Kind != KindNvmet || !slices.Contains(pre.put, s.Key) {
			continue
		}
		ok, err := e.pass(s)
		if err == nil && ok == passWrite {
			continue
		}
		if derr := e.opt.Store.DeleteAll(pre.put); derr != nil {
			e.log.Warn("journal entries not removed", "keys", keysString(pre.put), "err", derr)
		}
		return nil, err // nil: the admin removed the port, nothing to do
	}
	offs := 0
	for _, s := range h.Steps {
		if s.Op == OpSetISER && !s.On {
			offs++
		}
	}
	tm.last = time.Now() // the first write's start
	synced := false      // the round's journal entries made durable (after the binding write)
	var deletes []Key
	var failed []error // links refused one by one
	var nUnlink, nLink, nOff, nOn int
	runEnd := 0 // the steps before it were written by a run of iser writes
	for i, s := range h.Steps {
		if i < runEnd || skip[s.Key] && s.Op != OpJournalDelete {
			continue
		}
		if !synced && !tm.firstOn.IsZero() {
			// The listener is back: now the journal's fsyncs, which
			// the writes before it did not wait for.
			e.durable()
			synced = true
		}
		switch s.Op {
		case OpJournalPut:
			// Written by the round's batch.
		case OpJournalDelete:
			deletes = append(deletes, s.Key)
		case OpUnlink:
			// A run of the port's unlinks is one call (one open of its
			// directory); each is counted, checked and fault-pointed as
			// it is made.
			run, first := linkRun(h.Steps, i)
			if !first {
				continue // made with the run's first
			}
			var stop error
			err := e.opt.Tree.UnlinkAll(s.Key.ID, run, func(_ int, err error) bool {
				took := tm.lap()
				e.stats.WriteTime += took
				e.stats.Writes++
				tm.wrote(false, took)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					stop = err
					return false
				}
				if e.faultN("after-unlink-", nUnlink) {
					stop = ErrCrashed
					return false
				}
				nUnlink++
				return true
			})
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // the port is gone (the admin's): its links are not made either
			case err == nil:
				err = stop
			}
			if err != nil {
				return nil, err
			}
		case OpLink:
			// A run of the port's links is one call (one open of its
			// directory), as its unlinks are; each is counted, judged
			// and fault-pointed as it is made.
			run, first := linkRun(h.Steps, i)
			if !first {
				continue // made with the run's first
			}
			var stop error
			err := e.opt.Tree.RelinkAll(s.Key.ID, run, func(j int, err error) bool {
				took := tm.lap()
				e.stats.WriteTime += took
				e.stats.Writes++
				tm.wrote(true, took)
				switch {
				case err == nil, errors.Is(err, fs.ErrExist):
				case errors.Is(err, fs.ErrNotExist):
					e.log.Info("port or subsystem gone, not relinked", "listener", s.Key.String(), "nqn", run[j].NQN)
					return true
				case refused(err):
					stop = err // the port cannot bind (its first link): the journal keeps the links
					return false
				default:
					// One link the kernel will not take: every other link
					// is still made, and the journal, kept, retries this one.
					failed = append(failed, err)
					return true
				}
				if e.faultN("after-relink-", nLink) {
					stop = ErrCrashed
					return false
				}
				nLink++
				return true
			})
			switch {
			case errors.Is(err, fs.ErrNotExist):
				e.log.Info("port gone, not relinked", "listener", s.Key.String())
				continue
			case err == nil:
				err = stop
			}
			if err != nil {
				return nil, err
			}
		case OpSetISER:
			if s.On && nOn > 0 {
				// After the first iser=1 (the listener is made), the
				// rest of the run go side by side.
				runEnd = i + 1
				for runEnd < len(h.Steps) && h.Steps[runEnd].Op == OpSetISER && h.Steps[runEnd].On {
					runEnd++
				}
				n, err := e.attachISERs(h.Steps[i:runEnd], skip, tm)
				nOn += n
				tm.last = time.Now() // the writes side by side timed themselves
				if err != nil {
					return nil, err
				}
				continue
			}
			// A run of zeros is one call (one open of the configfs root),
			// each judged, counted and fault-pointed as it is made; the
			// first iser=1, which makes the listener, goes alone. The
			// precondition (CheckISER) is read on the file written.
			runEnd = i + 1
			for !s.On && runEnd < len(h.Steps) && h.Steps[runEnd].Op == OpSetISER && !h.Steps[runEnd].On {
				runEnd++
			}
			run := make([]Step, 0, runEnd-i)
			ids := make([]string, 0, runEnd-i)
			for _, r := range h.Steps[i:runEnd] {
				if !skip[r.Key] {
					run, ids = append(run, r), append(ids, r.Key.ID)
				}
			}
			var stop error
			err := e.opt.Tree.SwapISERs(ids, s.On, func(j int, was bool, err error) bool {
				r := run[j]
				wrote, err := e.swapped(r, was, err, tm.lap(), skip, tm)
				switch {
				case err != nil:
					stop = err
					return false
				case !wrote:
					return true
				case !r.On:
					nOff++
					if nOff == 1 && e.fault("after-iser-0") || nOff > 1 && nOff == offs && e.fault("after-all-iser-0") {
						stop = ErrCrashed
						return false
					}
				default:
					nOn++
					if nOn == 1 && e.fault("after-iser-1") {
						stop = ErrCrashed
						return false
					}
				}
				return true
			})
			if err == nil {
				err = stop
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return deletes, nil
}

// attachISERs writes iser=1 to a run of sharers, each to its portal,
// Options.ISERWriters at a time, each judged as one written alone
// (swapped); the first error ends the run once the writes under way end.
// It returns how many it wrote.
//
// The run follows the first iser=1, which made the listener: each write
// only attaches its TPG to it (the kernel's np_lock guards the shared
// listener's count), and waits for the modprobe the kernel spawns
// (DefaultISERWriters). The zeros before stay one at a time: side by side
// they delayed the first LISTEN of 256 sharers by 1.5–3× on 7.3.4 and
// 6.1 (BENCHMARKS.md).
func (e *Engine) attachISERs(run []Step, skip map[Key]bool, tm *healTimes) (int, error) {
	n := e.opt.ISERWriters
	if n <= 0 {
		n = DefaultISERWriters
	}
	var (
		mu    sync.Mutex
		wrote int
		first error
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, n)
	for _, s := range run {
		mu.Lock()
		stop, skipped := first != nil, skip[s.Key]
		mu.Unlock()
		if stop {
			break
		}
		if skipped {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			t := time.Now()
			was, err := e.swapOne(s)
			took := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			ok, err := e.swapped(s, was, err, took, skip, tm)
			if err != nil && first == nil {
				first = err
			}
			if ok {
				wrote++
			}
		}()
	}
	wg.Wait()
	return wrote, first
}

// swapOne is Tree.SwapISERs of s's portal alone: what it read, or the
// error (its own or the run's).
func (e *Engine) swapOne(s Step) (was bool, err error) {
	rerr := e.opt.Tree.SwapISERs([]string{s.Key.ID}, s.On, func(_ int, w bool, werr error) bool {
		was, err = w, werr
		return true
	})
	if rerr != nil {
		return false, rerr
	}
	return was, err
}

// swapped judges an iser write (Tree.SwapISERs, its precondition read on
// the file written) and counts it: true when it wrote, the error when it
// was refused. A portal gone, or set to 0 by the admin meanwhile, is
// marked in skip (its later steps are not made); one already at 1 is
// left as it is.
func (e *Engine) swapped(s Step, was bool, err error, took time.Duration, skip map[Key]bool, tm *healTimes) (bool, error) {
	e.stats.WriteTime += took
	switch {
	case errors.Is(err, fs.ErrNotExist):
		skip[s.Key] = true // the portal is gone
		return false, nil
	case err != nil:
		e.stats.Writes++
		return false, err
	case was == s.On && !s.On:
		skip[s.Key] = true // the admin set iser=0 meanwhile
		return false, nil
	case was == s.On:
		return false, nil // iser already reads 1
	}
	e.stats.Writes++
	tm.wrote(s.On, took)
	return true, nil
}

// linkRun is the run of steps, from i, of step i's op on step i's port:
// their links, and whether i is the run's first (the others are made
// with it).
func linkRun(steps []Step, i int) ([]configfs.Link, bool) {
	s := steps[i]
	if i > 0 && steps[i-1].Op == s.Op && steps[i-1].Key == s.Key {
		return nil, false
	}
	var run []configfs.Link
	for _, r := range steps[i:] {
		if r.Op != s.Op || r.Key != s.Key {
			break
		}
		run = append(run, r.Link)
	}
	return run, true
}

func (e *Engine) fault(point string) bool {
	return e.opt.Fault != nil && e.opt.Fault(point)
}

// faultN is fault at the point prefix+n (the nth link of a run), named
// only under a fault hook: a heal of 1,000 links formats no 1,000 names.
func (e *Engine) faultN(prefix string, n int) bool {
	return e.opt.Fault != nil && e.opt.Fault(prefix+strconv.Itoa(n))
}

// refused reports a bind the kernel refused because the address or device
// is not ready: retried with backoff.
func refused(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENODEV)
}
