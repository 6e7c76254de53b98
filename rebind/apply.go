package rebind

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrCrashed is returned when a test fault point stopped a rebind the way a
// crash would: no further write, no cleanup.
var ErrCrashed = errors.New("stopped at a fault point")

// apply is the only code that writes configfs and the journal. It executes
// the heals, each step after its precondition (Step.Pre, checked by pass)
// and decides nothing: what to write is the plan's. The heals run in two
// lanes at once, nvmet's (RDMA and TCP ports) and LIO's, each in plan
// order: the kernel binds a port and a portal apart (nvmet's configfs and
// the target core's), so a portal's heal does not wait for the writes of
// every port before it — one port and one portal on a device that came
// back are healed together, as a script doing both would. Journal entries
// are written in two batches: the first heal of each lane (their first
// writes wait for nothing else), then, once those heals are done, those
// of every other heal at once (one directory sync, not one per endpoint),
// before any of them writes; the journal entries
// of the heals done are removed in one batch at the end. A fault point
// stops both lanes before their next step, as a crash would. It returns
// the heals written, in plan order, for verification; an error only for
// ctx or a fault point.
func (e *Engine) apply(ctx context.Context, heals []Heal) ([]pending, error) {
	lanes := healLanes(heals)
	pre := make([]putResult, len(heals))
	var first, rest []int // heal indexes of the two journal batches
	for _, l := range lanes {
		if len(l) > 0 {
			first, rest = append(first, l[0]), append(rest, l[1:]...)
		}
	}
	if err := e.journalBatch(heals, first, true, pre); err != nil {
		return nil, err
	}
	type result struct {
		p    pending
		del  []Key
		done bool // executed (not stopped by ctx or a crash first)
	}
	results := make([]result, len(heals))
	var stop atomic.Bool // a fault point stopped the round: no further step in either lane
	var crashed, cancelled atomic.Bool
	restJournaled := make(chan struct{})
	// Under a fault hook, unless asked otherwise, the second batch is
	// written first and the lanes run one after the other: the crash tests
	// enumerate the fault points in one order.
	serial := e.opt.Fault != nil && !e.opt.FaultLanesAtOnce
	if serial {
		if err := e.journalBatch(heals, rest, false, pre); err != nil {
			return nil, err
		}
		rest = nil
		close(restJournaled)
	}
	var wg sync.WaitGroup
	var firsts sync.WaitGroup // each lane's first heal done (or the lane stopped)
	run := func(lane []int) {
		first := true
		defer func() {
			if first {
				firsts.Done()
			}
		}()
		for n, i := range lane {
			if n == 1 {
				first = false
				firsts.Done()
				<-restJournaled
			}
			if ctx.Err() != nil {
				cancelled.Store(true)
				return
			}
			if stop.Load() {
				return
			}
			p := pending{heal: heals[i], start: e.opt.Now(), wall: time.Now()}
			var del []Key
			del, p.err = e.execute(heals[i], pre[i], &stop)
			if errors.Is(p.err, ErrCrashed) {
				stop.Store(true)
				crashed.Store(true)
				return
			}
			results[i] = result{p: p, del: del, done: true}
		}
	}
	var mine []int // the lane this goroutine runs: the last that has heals (nvmet's when both do)
	for j := len(lanes) - 1; j >= 0; j-- {
		if len(lanes[j]) == 0 {
			continue
		}
		firsts.Add(1)
		switch {
		case serial:
			run(lanes[j]) // LIO's, then nvmet's
		case mine == nil && j == 0, mine == nil && len(lanes[0]) == 0:
			mine = lanes[j]
		default:
			wg.Go(func() { run(lanes[j]) })
		}
	}
	if !serial {
		// The rest's batch once the first heals are done: nothing of it
		// competes with their first writes (the event's first).
		wg.Go(func() {
			firsts.Wait()
			if len(rest) > 0 && !stop.Load() {
				if err := e.journalBatch(heals, rest, false, pre); err != nil {
					stop.Store(true)
					crashed.Store(true)
				}
			}
			close(restJournaled)
		})
		if mine != nil {
			run(mine)
		}
	}
	wg.Wait()
	if crashed.Load() {
		return nil, ErrCrashed
	}
	var done []pending
	var deletes []Key
	var dropped []Heal
	for i, r := range results {
		if !r.done {
			continue
		}
		deletes = append(deletes, r.del...)
		if heals[i].Action == ActDropJournal {
			dropped = append(dropped, heals[i])
			continue
		}
		done = append(done, r.p)
	}
	if len(deletes) > 0 {
		t := time.Now()
		err := e.opt.Store.DeleteAll(deletes)
		e.count(func(s *Stats) { s.JournalTime += time.Since(t) })
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
	if cancelled.Load() {
		return done, ctx.Err()
	}
	return done, nil
}

// healLanes splits the heals (their indexes, in plan order) into the
// lanes apply runs at once: nvmet's ports (RDMA and TCP), and LIO's
// portals. A journal entry dropped goes with its object's kind.
func healLanes(heals []Heal) [2][]int {
	var lanes [2][]int
	for i, h := range heals {
		l := 0
		if h.Endpoint.Kind == KindLIO || h.Action == ActDropJournal && len(h.Keys) > 0 && h.Keys[0].Kind == KindLIO {
			l = 1
		}
		lanes[l] = append(lanes[l], i)
	}
	return lanes
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
	// first: the heal is the first of its lane, journaled in the round's
	// first batch, so nothing of the round wrote its objects between its
	// preconditions and its first write (no re-check).
	first bool
}

// journalBatch writes the journal entries of the heals at idx (indexes
// into heals) in one batch, each after its precondition (a failed one
// stops that heal, or skips that object). first: the round's first batch,
// whose heals are each the first of their lane (nothing of the round
// writes their objects between the check and their first write). It
// records what it did in out by heal index; an error only for a fault
// point.
func (e *Engine) journalBatch(heals []Heal, idx []int, first bool, out []putResult) error {
	var ins []Intent
	var from []int
	for _, i := range idx {
		h := heals[i]
		r := putResult{skip: map[Key]bool{}, first: first}
		var mine []Intent
		for _, s := range h.Steps {
			if s.Op != OpJournalPut {
				continue
			}
			ok, err := e.pass(s)
			if err != nil {
				r.err, mine = err, nil
				break
			}
			if ok != passWrite {
				r.skip[s.Key] = true
				continue
			}
			in := s.Intent
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
	e.count(func(s *Stats) { s.JournalTime += time.Since(t) })
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
// journal keeps what is left to do for the next round; stop (a fault
// point in the other lane) stops it before its next step, as a crash
// would (ErrCrashed). It returns the journal entries to remove once the
// heal is done.
func (e *Engine) execute(h Heal, pre putResult, stop *atomic.Bool) ([]Key, error) {
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
	var deletes []Key
	var failed []error // links refused one by one
	var nUnlink, nLink, nOff, nOn int
	for _, s := range h.Steps {
		if stop.Load() {
			return nil, ErrCrashed
		}
		if skip[s.Key] && s.Op != OpJournalDelete {
			continue
		}
		switch s.Op {
		case OpJournalPut:
			// Written by the round's batch.
		case OpJournalDelete:
			deletes = append(deletes, s.Key)
		case OpUnlink:
			if err := e.write(func() error { return e.opt.Tree.Unlink(s.Key.ID, s.Link) }); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			if e.fault(fmt.Sprintf("after-unlink-%d", nUnlink)) {
				return nil, ErrCrashed
			}
			nUnlink++
		case OpLink:
			err := e.write(func() error { return e.opt.Tree.Relink(s.Key.ID, s.Link) })
			switch {
			case err == nil, errors.Is(err, fs.ErrExist):
			case errors.Is(err, fs.ErrNotExist):
				e.log.Info("port or subsystem gone, not relinked", "listener", s.Key.String(), "nqn", s.Link.NQN)
				continue
			case refused(err):
				return nil, err // the port cannot bind (its first link): the journal keeps the links
			default:
				// One link the kernel will not take: every other link
				// is still made, and the journal, kept, retries this one.
				failed = append(failed, err)
				continue
			}
			if e.fault(fmt.Sprintf("after-relink-%d", nLink)) {
				return nil, ErrCrashed
			}
			nLink++
		case OpSetISER:
			ok, err := e.pass(s)
			if err != nil {
				return nil, err
			}
			if ok == passSkip {
				skip[s.Key] = true
				continue
			}
			if ok == passDone {
				continue
			}
			if err := e.write(func() error { return e.opt.Tree.SetISER(s.Key.ID, s.On) }); err != nil {
				return nil, err
			}
			if !s.On {
				nOff++
				if nOff == 1 && e.fault("after-iser-0") || nOff > 1 && nOff == offs && e.fault("after-all-iser-0") {
					return nil, ErrCrashed
				}
			} else {
				nOn++
				if nOn == 1 && e.fault("after-iser-1") {
					return nil, ErrCrashed
				}
			}
		}
	}
	if len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return deletes, nil
}

// write makes one configfs write, counting it and the time spent in it
// (the kernel's: each write binds or unbinds a listener).
func (e *Engine) write(w func() error) error {
	t := time.Now()
	err := w()
	e.count(func(s *Stats) { s.WriteTime += time.Since(t); s.Writes++ })
	return err
}

// count updates the round's statistics from either lane of apply.
func (e *Engine) count(f func(*Stats)) {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	f(&e.stats)
}

// fault asks the test hook whether to stop at point; the lanes ask it one
// at a time.
func (e *Engine) fault(point string) bool {
	if e.opt.Fault == nil {
		return false
	}
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.opt.Fault(point)
}

// refused reports a bind the kernel refused because the address or device
// is not ready: retried with backoff.
func refused(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENODEV)
}
