package rebind

import (
	"context"
	"maps"
	"slices"
	"time"
)

// Stats are counters for metrics and status, kept by the rounds.
type Stats struct {
	Reconciles uint64
	// Unchanged counts the rounds that had nothing to decide: nothing
	// they read had changed, and nothing waited on the clock.
	Unchanged      uint64
	Rebinds        [ResultUnverified + 1]uint64 // by Result
	LastLatency    time.Duration
	PendingRetries int
	// ReconcileTime is the time spent in rounds (observe, plan, act,
	// verify); WriteTime the part of it in configfs writes (the
	// kernel's: each write binds or unbinds a listener), over Writes; a
	// heal's writes one after the other are each timed from the end of
	// the one before.
	ReconcileTime, WriteTime time.Duration
	Writes                   uint64
	// JournalTime is the time spent writing, syncing and removing intent
	// journal entries.
	JournalTime time.Duration
}

// Snapshot is what a round published: the engine's state for status,
// metrics and the control socket. It is never changed once published.
type Snapshot struct {
	Items        []Item
	At           time.Time
	Stats        Stats
	ListenersErr error
	JournalErrs  []error
	// Sight is what the round could see and what it could not (configfs,
	// the kernel's tables, unreadable objects).
	Sight Sight
	// Completion is what boot completion of the saved config's objects
	// found in the round (Options.Completer).
	Completion Completion
	// Next is when the round asked to be followed by another (nextLook);
	// zero: at the next event or resync.
	Next time.Time
	// Config and Memory are the round's, for a plan made outside the loop
	// (Look): memory is only ever replaced, never written in place.
	Config Config
	Memory Memory
	// History is each object's last HistoryLen outcomes, oldest first
	// (`status <id>`; Last is the newest). Kept in memory only: it starts
	// empty with the daemon, and a one-shot command has its own round's.
	History map[Key][]Outcome
}

// Last is the last outcome of object k's heals, if it had one.
func (s Snapshot) Last(k Key) (Outcome, bool) {
	h := s.History[k]
	if len(h) == 0 {
		return Outcome{}, false
	}
	return h[len(h)-1], true
}

// HistoryLen bounds Snapshot.History: the outcomes kept per object.
const HistoryLen = 8

// publish ends a round: the snapshot observers read until the next one.
func (e *Engine) publish(obs *Observed, pl *Planned, outcomes []Outcome, next time.Time) {
	history := e.snap.Load().History
	if len(outcomes) > 0 {
		history = withHistory(history, outcomes)
		for _, o := range outcomes {
			e.stats.Rebinds[o.Result]++
			if o.Result == ResultOK {
				e.stats.LastLatency = o.Latency
			}
		}
	}
	e.stats.PendingRetries = len(e.mem.NextTry)
	e.stats.Reconciles++
	e.snap.Store(&Snapshot{Items: pl.Items, History: history, At: e.opt.Now(), Stats: e.stats,
		ListenersErr: obs.ListenersErr, JournalErrs: obs.JournalErrs, Sight: obs.sight(e.cfg), Next: next, Config: e.cfg, Memory: e.mem, Completion: e.completion})
}

// withHistory returns h with outcomes appended to the history of each
// object they wrote, keeping the last HistoryLen of each; h, which a
// published snapshot holds, is not written.
func withHistory(h map[Key][]Outcome, outcomes []Outcome) map[Key][]Outcome {
	out := make(map[Key][]Outcome, len(h)+1)
	maps.Copy(out, h)
	for _, o := range outcomes {
		for _, k := range o.Keys {
			old := out[k]
			old = old[max(0, len(old)-(HistoryLen-1)):]
			out[k] = append(slices.Clone(old), o) // a new array: old may be published
		}
	}
	return out
}

// Snapshot returns what the last round published. Its slices and maps are
// shared: read them, never write them.
func (e *Engine) Snapshot() Snapshot { return *e.snap.Load() }

// Observe reads configfs, the journal and the kernel, and changes nothing.
func (e *Engine) Observe() (Observed, error) {
	return e.observe(e.snap.Load().Config, nil, nil)
}

// PlanAll observes and plans every endpoint with the last round's memory,
// writing nothing; it may run beside the loop.
func (e *Engine) PlanAll() (Planned, Observed, error) {
	s := e.snap.Load()
	obs, err := e.observe(s.Config, nil, nil)
	if err != nil {
		return Planned{}, obs, err
	}
	return Plan(obs, s.Memory, s.Config), obs, nil
}

// PlanNow is PlanAll's status items.
func (e *Engine) PlanNow() ([]Item, Observed, error) {
	p, obs, err := e.PlanAll()
	return p.Items, obs, err
}

// Look observes and plans now, writing nothing, and returns that with the
// last round's results and counters: what `status` shows.
func (e *Engine) Look() (Snapshot, error) {
	items, obs, err := e.PlanNow()
	if err != nil {
		return Snapshot{}, err
	}
	snap := e.Snapshot()
	snap.Items, snap.At, snap.ListenersErr, snap.JournalErrs = items, obs.Now, obs.ListenersErr, slices.Clone(obs.JournalErrs)
	snap.Sight = obs.sight(snap.Config)
	if snap.Stats.Reconciles == 0 {
		// No round ran (a one-shot command, or a daemon before its
		// first): nothing saw when a listener went down, and the plan's
		// "first seen now" would put a stranded one within its grace at
		// every look.
		for i := range snap.Items {
			snap.Items[i].DeadSince = time.Time{}
		}
		snap.Completion = e.PlanCompletion(context.Background())
	}
	return snap, nil
}

// PlanCompletion is what boot completion of objects would do now, writing
// nothing (Completion.Planned: the writes; Missing: what is due or waits).
func (e *Engine) PlanCompletion(ctx context.Context) Completion {
	if e.opt.Completer == nil {
		return Completion{}
	}
	e.run.Lock() // the completer is the loop's: one call at a time
	defer e.run.Unlock()
	now := e.opt.Now()
	return e.opt.Completer.Complete(ctx, CompletionInput{Config: e.snap.Load().Config, Reload: true,
		Open: now.Before(e.bootUntil), DryRun: true, Now: now})
}
