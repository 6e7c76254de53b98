package rebind

import (
	"context"
	"log/slog"
	"time"
)

// healTimes is the clock of a heal's writes made one after the other:
// each is timed from the end of the one before (last), with one clock
// read a write (lap). Where the clock is not the vDSO's (6.1 under TCG
// runs on the HPET: 2.6-3.4 us a read, measured quiet) three reads a write
// were a part of 256 zeros' time.
//
// For the debug line: when the heal's first write ended, and its first
// write that can bind a listener (a link, iser=1); until that binding
// write, the time in the writes, and the binding write's own.
type healTimes struct {
	last           time.Time // the end of the last write, or the start of the writes
	first, firstOn time.Time
	writes, bind   time.Duration // bind: the binding write's own
	nWrites        int
}

// lap is the time of a write that just ended, from the end of the one
// before: its end is the next one's start.
func (t *healTimes) lap() time.Duration {
	now := time.Now()
	took := now.Sub(t.last)
	t.last = now
	return took
}

// wrote counts a write that ended at last (lap). The writes made side by
// side (attachISERs) all come after the binding write: they count nothing
// here, and never read last.
func (t *healTimes) wrote(on bool, took time.Duration) {
	if !t.firstOn.IsZero() {
		return
	}
	if t.first.IsZero() {
		t.first = t.last
	}
	t.writes += took
	t.nWrites++
	if on {
		t.firstOn, t.bind = t.last, took
	}
}

// logHeal tells where a heal's time went (debug): from the start of
// apply to the heal's start, its first write and its first binding write
// (ended), and the heal's end; the journal batches so far (their
// preconditions included) and the journal writes in them.
func (e *Engine) logHeal(h Heal, start, began time.Time, tm healTimes, batches, journal time.Duration) {
	if !e.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start)
	}
	e.log.Debug("heal", "endpoint", h.Endpoint.String(), "action", h.Action.String(), "steps", len(h.Steps),
		"began", began.Sub(start), "first_write", since(tm.first), "first_bind", since(tm.firstOn), "ended", time.Since(start),
		"journal_batches", batches, "journal_writes", journal,
		"writes_to_bind", tm.nWrites, "in_writes", tm.writes, "bind_write", tm.bind)
}
