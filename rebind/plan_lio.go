package rebind

import (
	"fmt"
	"slices"
)

// planPortals plans a LIO iSER endpoint: every portal with the address:port.
// The kernel keeps one iSER listener per address:port for all of them, so a
// dead one is re-created only when every sharer goes to 0 before any goes
// back to 1 (KERNEL.md).
func planPortals(g *group, st State) (bool, Heal) {
	var h Heal
	var on, off, boot, journaled []holder // iser=1; journaled at 0; declared at 0
	for _, hd := range g.holders {
		switch {
		case hd.portal.ISER:
			on = append(on, hd)
		case hd.intent != nil:
			off = append(off, hd)
		case hd.boot != nil:
			boot = append(boot, hd)
		}
		if hd.intent != nil {
			journaled = append(journaled, hd)
		}
	}
	expected := len(on)+len(off)+len(boot) > 0
	key := func(hd holder) Key { return hd.key }
	var steps []Step
	switch st {
	case StateDead, StateStranded:
		if !expected {
			break
		}
		steps = make([]Step, 0, 2*len(on)+2*len(g.holders)) // puts and zeros, ones and forgets
		for _, hd := range on {
			if hd.intent == nil {
				in := Intent{Kind: KindLIO, ID: hd.portal.ID(), Address: g.ep.Addr.String(), ISER: true}
				steps = append(steps, journalPortal(in))
			}
		}
		for _, hd := range on {
			steps = append(steps, setISER(key(hd), false))
		}
		for _, hd := range g.holders { // configfs order
			if sharing(hd) {
				steps = append(steps, setISER(key(hd), true))
			}
		}
		for _, hd := range g.holders {
			if hd.portal.ISER || hd.intent != nil {
				steps = append(steps, forget(key(hd)))
			}
		}
		switch {
		case len(on) > 0:
			h.Action = ActToggleISER
			if len(g.holders) > 1 {
				h.Reason = fmt.Sprintf("%d portals share the iSER listener: all go to 0, then all back to 1", len(on)+len(off)+len(boot))
			}
		case len(off) > 0:
			h.Action, h.Reason = ActCompleteISER, fmt.Sprintf("iser=1 to restore from the journal on %d portal(s)", len(off))
		default:
			h.Action, h.Reason = ActCompleteBoot, fmt.Sprintf("iser=1 declared in %s missing (refused at boot?)", boot[0].boot.Source)
		}
	case StateListening, StateUnknown:
		for _, hd := range slices.Concat(off, boot) {
			steps = append(steps, setISER(key(hd), true))
		}
		for _, hd := range journaled {
			steps = append(steps, forget(key(hd)))
		}
		switch {
		case len(off) > 0:
			h.Action, h.Reason = ActCompleteISER, fmt.Sprintf("iser=1 to restore from the journal on %d portal(s)", len(off))
		case len(boot) > 0:
			h.Action, h.Reason = ActCompleteBoot, fmt.Sprintf("iser=1 declared in %s missing (refused at boot?)", boot[0].boot.Source)
		case len(journaled) > 0:
			h.Action, h.Reason = ActDropJournal, "iser is back to 1"
		}
	}
	h.Steps = steps
	return expected, h
}
