package rebind

import (
	"iter"
	"maps"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"
)

// Memory is what the engine remembers between rounds. Only the loop
// changes it, and only through the pure functions of this file (Learn,
// restarted, forced): each returns a new Memory and never writes into the
// maps of the one it was given, so a published snapshot may hold them.
type Memory struct {
	DeadSince map[Endpoint]time.Time     // first round that saw the endpoint dead or stranded (deadSince)
	NextTry   map[Endpoint]time.Time     // backoff: no attempt before this
	Backoff   map[Endpoint]time.Duration // the last backoff step
	// AliveOn is the RDMA device index (+1) the listener was last seen
	// alive on. Indices are never reused: while that same device is still
	// registered, a vanished listener means the device is being removed
	// right now, and a rebind would race the removal.
	AliveOn map[Endpoint]uint32
	Pins    map[Key]uint64 // node GUID the object's listener was last alive on
	// Forced objects were asked for by `nvmet-rebind rebind`: give-up,
	// graces and backoff do not hold their endpoint back, once.
	Forced map[Key]bool
	// Settled are the saved configs' declarations seen in place during
	// the boot window: boot completion never makes one again (an admin's
	// unlink or iser=0 after it is respected). Kept across reloads.
	Settled map[Settled]bool
}

// NewMemory returns an empty memory.
func NewMemory() Memory {
	return Memory{DeadSince: map[Endpoint]time.Time{}, NextTry: map[Endpoint]time.Time{}, Backoff: map[Endpoint]time.Duration{},
		AliveOn: map[Endpoint]uint32{}, Pins: map[Key]uint64{}, Forced: map[Key]bool{}, Settled: map[Settled]bool{}}
}

func (m Memory) clone() Memory {
	return Memory{DeadSince: maps.Clone(m.DeadSince), NextTry: maps.Clone(m.NextTry), Backoff: maps.Clone(m.Backoff),
		AliveOn: maps.Clone(m.AliveOn), Pins: maps.Clone(m.Pins), Forced: maps.Clone(m.Forced), Settled: maps.Clone(m.Settled)}
}

// Backoff bounds for refused or unverified binds.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

// deadSince is the one place dead-since is decided: when the endpoint was
// first seen down (dead or stranded), now for the first round that sees
// it; zero while it is not down. Plan shows and gates by it, Learn keeps it.
func deadSince(mem Memory, ep Endpoint, st State, now time.Time) time.Time {
	if !st.down() {
		return time.Time{}
	}
	if t, ok := mem.DeadSince[ep]; ok {
		return t
	}
	return now
}

// nextBackoff is the one place backoff is decided: after a heal that did
// not come back, the next attempt waits the next step (doubling from
// backoffMin to backoffMax); a heal that did clears it.
func nextBackoff(last time.Duration, r Result) (time.Duration, bool) {
	if r == ResultOK || r == ResultNone {
		return 0, false
	}
	return backoff.Next(last, backoffMin, backoffMax), true
}

// Learn is memory's update from what a round's plan concluded about
// every endpoint: dead-since, the device last alive on, pins; a listener
// back clears its backoff and manual rebind. It is pure: mem is not
// modified; the new memory is returned with whether pins changed. A map
// that does not change is shared with mem, not copied: at thousands of
// endpoints a steady round changes nothing and copies nothing.
func Learn(mem Memory, eps iter.Seq[EndpointState], items []Item, now time.Time) (Memory, bool) {
	out := mem
	var w written
	pinsChanged := false
	alive := 0 // entries of AliveOn that are endpoints of eps
	for e := range eps {
		for _, s := range e.Settled {
			if !out.Settled[s] {
				cow(&w.settled, &out.Settled)[s] = true
			}
		}
		if t := deadSince(mem, e.Endpoint, e.State, now); !t.IsZero() {
			if old, ok := out.DeadSince[e.Endpoint]; !ok || !old.Equal(t) {
				cow(&w.deadSince, &out.DeadSince)[e.Endpoint] = t
			}
		} else if _, ok := out.DeadSince[e.Endpoint]; ok {
			delete(cow(&w.deadSince, &out.DeadSince), e.Endpoint)
		}
		if e.State != StateListening {
			if _, ok := out.AliveOn[e.Endpoint]; ok {
				alive++
			}
			continue
		}
		if out.AliveOn[e.Endpoint] != e.DevIndex+1 {
			cow(&w.aliveOn, &out.AliveOn)[e.Endpoint] = e.DevIndex + 1
		}
		alive++
		if _, ok := out.NextTry[e.Endpoint]; ok {
			delete(cow(&w.nextTry, &out.NextTry), e.Endpoint)
		}
		if _, ok := out.Backoff[e.Endpoint]; ok {
			delete(cow(&w.backoff, &out.Backoff), e.Endpoint)
		}
		for _, k := range e.Keys {
			if out.Forced[k] {
				delete(cow(&w.forced, &out.Forced), k)
			}
			if e.GUID != 0 && out.Pins[k] != e.GUID {
				cow(&w.pins, &out.Pins)[k] = e.GUID
				pinsChanged = true
			}
		}
	}
	if alive < len(out.AliveOn) { // some endpoint is gone: forget where it was alive
		present := make(map[Endpoint]bool, len(out.AliveOn))
		for e := range eps {
			present[e.Endpoint] = true
		}
		for ep := range out.AliveOn {
			if !present[ep] {
				delete(cow(&w.aliveOn, &out.AliveOn), ep)
			}
		}
	}
	pinned := 0 // items with a pin (one item per object)
	for _, it := range items {
		if _, ok := out.Pins[it.Key]; ok {
			pinned++
		}
	}
	if len(out.Forced) > 0 || pinned < len(out.Pins) { // some object is gone: forget its pin
		keys := make(map[Key]bool, len(items))
		for _, it := range items {
			keys[it.Key] = true
		}
		for k := range out.Forced {
			if !keys[k] {
				delete(cow(&w.forced, &out.Forced), k)
			}
		}
		for k := range out.Pins {
			if !keys[k] {
				delete(cow(&w.pins, &out.Pins), k)
				pinsChanged = true
			}
		}
	}
	return out, pinsChanged
}

// written records which of a Memory's maps a pure update has copied.
type written struct{ deadSince, nextTry, backoff, aliveOn, pins, forced, settled bool }

// cow returns *m for writing: the first write copies it (the map of the
// memory given to a pure update is never written).
func cow[K comparable, V any](done *bool, m *map[K]V) map[K]V {
	if !*done {
		*m, *done = maps.Clone(*m), true
		if *m == nil {
			*m = map[K]V{}
		}
	}
	return *m
}

// learnOutcomes is memory's update from the outcomes of the heals applied
// in a round (backoff; a manual rebind is used once), before the round
// plans its verification: the plan then shows when each failed heal is
// tried again. Pure, like Learn.
func learnOutcomes(mem Memory, outcomes []Outcome, now time.Time) Memory {
	if len(outcomes) == 0 {
		return mem
	}
	out := mem
	var w written // only the maps written are copied, as in Learn
	for _, o := range outcomes {
		for _, k := range o.Keys {
			if out.Forced[k] {
				delete(cow(&w.forced, &out.Forced), k)
			}
		}
		d, wait := nextBackoff(out.Backoff[o.Endpoint], o.Result)
		if !wait {
			if _, ok := out.Backoff[o.Endpoint]; ok {
				delete(cow(&w.backoff, &out.Backoff), o.Endpoint)
			}
			if _, ok := out.NextTry[o.Endpoint]; ok {
				delete(cow(&w.nextTry, &out.NextTry), o.Endpoint)
			}
			continue
		}
		cow(&w.backoff, &out.Backoff)[o.Endpoint] = d
		cow(&w.nextTry, &out.NextTry)[o.Endpoint] = now.Add(d)
	}
	return out
}

// restarted is memory after a reload (an admin's request to try again):
// give-up windows, backoffs and graces start over.
func (m Memory) restarted() Memory {
	out := m.clone()
	clear(out.DeadSince)
	clear(out.NextTry)
	clear(out.Backoff)
	return out
}

// forced is memory after a manual rebind of k, whose endpoint is ep (zero
// when k has no usable address): its next heal is not held back.
func (m Memory) forced(k Key, ep Endpoint) Memory {
	out := m.clone()
	out.Forced[k] = true
	if ep.Addr.IsValid() {
		delete(out.DeadSince, ep)
		delete(out.NextTry, ep)
		delete(out.Backoff, ep)
	}
	return out
}
