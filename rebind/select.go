package rebind

import (
	"maps"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Selection is the set of endpoints a round decides; every other managed
// endpoint keeps the decision of the baseline (the last round's plan),
// which a plan of it now would make again. Planning a selection and
// planning every endpoint are the same function (plan) on different sets.
type Selection struct {
	all   bool
	prev  *Planned // the baseline's decisions
	dirty map[epKey]bool
	// same: the observation holds exactly the baseline's objects (in its
	// order) and verdicts, so a plan that decides nothing again has the
	// baseline's status (Plan is pure).
	same bool
}

// All selects every endpoint (a first round, a reload).
func All() Selection { return Selection{all: true} }

// decides is the set of endpoints a selection that is not of all decides:
// those selected, and those the clock decides (wakeups: every round).
func (s Selection) decides() map[epKey]bool {
	out := make(map[epKey]bool, len(s.dirty)+len(s.prev.wake.keys()))
	for k := range s.dirty {
		out[k] = true
	}
	for k := range s.prev.wake.keys() {
		out[k] = true
	}
	return out
}

// Size is the number of endpoints the selection decides, -1 for all.
func (s Selection) Size() int {
	if s.all || s.prev == nil {
		return -1
	}
	n := len(s.dirty)
	for k := range s.prev.wake.keys() {
		if !s.dirty[k] {
			n++
		}
	}
	return n
}

// Baseline is what the next round's selection compares with: the last
// round's observation (what select reads of it) and plan.
type Baseline struct {
	obs Observed
	pl  *Planned
}

// baseline keeps of obs what Select reads, and the kernel's tables that
// the next observation compares its own with (sameReading) — not their
// index (megabytes at thousands of listeners).
func baseline(obs Observed, pl Planned) *Baseline {
	obs.index = nil
	return &Baseline{obs: obs, pl: &pl}
}

// Select returns the endpoints a round must decide, from what changed
// since base: the endpoints of every configfs object created, removed or
// changed (both its old and its new endpoint), every endpoint whose
// verdict changed (device, address, listener, GID table), those named by
// the journal or a manual rebind. An input every endpoint reads (an
// unreadable table, the saved configs) selects all, and so does no
// baseline. The endpoints the clock decides (wakeups: a heal due or held
// by a timer, a backoff, a journal entry, a saved config's declaration
// while the boot window is open) are decided every round
// (Selection.decides).
func Select(obs *Observed, mem Memory, base *Baseline) Selection {
	if base == nil || base.pl == nil {
		return All()
	}
	b := &base.obs
	if !sameErr(obs.PortalsErr, b.PortalsErr) {
		return All()
	}
	for _, in := range inputs {
		if in.everyEndpoint(obs, b) {
			return All()
		}
	}
	dirty := map[epKey]bool{}
	changed := false // some object, verdict or request differs from the baseline's
	markPort := func(o *Observed, i int) {
		changed = true
		if ep, ok := o.portEndpoint(i); ok {
			dirty[ep.key()] = true
		}
	}
	markPortal := func(p configfs.Portal) {
		changed = true
		if p.Err == nil {
			dirty[Endpoint{KindLIO, p.Addr}.key()] = true
		}
	}
	if !obs.shared { // else the baseline's objects (carry.go), links read only where a verdict changed
		pair(obs.Ports, b.Ports, func(p configfs.Port) string { return p.ID }, func(x, y configfs.Port) bool { return x.ID == y.ID }, func(i, j int) {
			switch {
			case j < 0:
				markPort(obs, i)
			case i < 0:
				markPort(b, j)
			case !samePort(obs.Ports[i], b.Ports[j]):
				markPort(obs, i)
				markPort(b, j)
			}
		})
		pair(obs.Portals, b.Portals, configfs.Portal.ID, func(x, y configfs.Portal) bool {
			return x.IQN == y.IQN && x.TPG == y.TPG && x.NP == y.NP
		}, func(i, j int) {
			switch {
			case j < 0:
				markPortal(obs.Portals[i])
			case i < 0:
				markPortal(b.Portals[j])
			case !samePortal(obs.Portals[i], b.Portals[j]):
				markPortal(obs.Portals[i])
				markPortal(b.Portals[j])
			}
		})
	}
	for _, i := range changedVerdicts(&obs.eps, &b.eps) {
		dirty[obs.eps.list[i].ep.key()], changed = true, true
	}
	if len(obs.Journal)+len(mem.Forced) > 0 {
		named := func(k Key) bool {
			_, j := obs.Journal[k]
			return j || mem.Forced[k]
		}
		for i, p := range obs.Ports {
			if named(Key{KindNvmet, p.ID}) {
				markPort(obs, i)
			}
		}
		for _, p := range obs.Portals {
			if named(Key{KindLIO, p.ID()}) {
				markPortal(p)
			}
		}
	}
	return Selection{prev: base.pl, dirty: dirty, same: !changed && len(b.eps.list) == len(obs.eps.list)}
}

// changedVerdicts lists the entries of x whose endpoint is not in y or
// whose verdict there differs.
func changedVerdicts(x, y *endpointIndex) []int32 {
	var out []int32
	for i := range x.list {
		// The same objects in the same order index the same endpoints in
		// the same order: compare side by side, else by key.
		ep := x.list[i].ep
		j, ok := int32(i), i < len(y.list) && y.list[i].ep == ep
		if !ok {
			j, ok = y.at[ep.key()]
		}
		if !ok || x.list[i].v != y.list[j].v {
			out = append(out, int32(i))
		}
	}
	return out
}

// pair calls f with the index in a and in b of each object of either, by
// id (-1: not in that list). Lists in the same order (configfs lists the
// same objects the same way) are walked side by side.
func pair[T any](a, b []T, id func(T) string, sameID func(x, y T) bool, f func(i, j int)) {
	if len(a) == len(b) && slices.EqualFunc(a, b, sameID) {
		for i := range a {
			f(i, i)
		}
		return
	}
	at := make(map[string]int, len(b))
	for j, y := range b {
		at[id(y)] = j
	}
	for i, x := range a {
		j, ok := at[id(x)]
		if !ok {
			f(i, -1)
			continue
		}
		delete(at, id(x))
		f(i, j)
	}
	for _, j := range slices.Sorted(maps.Values(at)) {
		f(-1, j)
	}
}

// samePort reports whether a plan reads the same of two readings of a port.
func samePort(x, y configfs.Port) bool {
	return x.Err == nil && y.Err == nil && x.ID == y.ID && x.Trtype == y.Trtype && x.Adrfam == y.Adrfam &&
		x.Traddr == y.Traddr && x.Trsvcid == y.Trsvcid && slices.Equal(x.Links, y.Links)
}

// samePortal reports whether a plan reads the same of two readings of a
// portal.
func samePortal(x, y configfs.Portal) bool {
	return x.Err == nil && y.Err == nil && x.IQN == y.IQN && x.TPG == y.TPG && x.NP == y.NP && x.Addr == y.Addr && x.ISER == y.ISER
}

// sameErr reports whether a and b are both nil or say the same.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}
