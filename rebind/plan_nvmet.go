package rebind

import (
	"fmt"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// planPorts plans an nvmet endpoint (normally one port). It returns whether
// a listener is expected and the heal (Action none when nothing is due).
func planPorts(g *group, st State, obs *Observed) (bool, Heal) {
	var h Heal
	expected := false
	var journalPuts, unlinks, links, deletes []Step
	boot := false
	for _, hd := range g.holders {
		port := hd.port
		k := hd.key
		present := port.Links
		if obs.LinksUnread[port.ID] {
			expected = true
			continue // alive when read: nothing to plan
		}
		if hd.intent != nil && hd.intent.Address != g.ep.Addr.String() {
			// The admin re-created the port with another address meanwhile.
			h.Reason = fmt.Sprintf("journal is for %s, the port now has %s: the admin changed it", hd.intent.Address, g.ep.Addr)
			deletes = append(deletes, forget(k))
			hd.intent = nil
		}
		// want: the journal's links first (in their order), then links
		// present that it lacks, then those a saved config declares.
		// (Sets, not scans: a port may hold thousands of subsystems.)
		isPresent := make(map[configfs.Link]bool, len(present))
		for _, l := range present {
			isPresent[l] = true
		}
		var want []configfs.Link
		wanted := map[configfs.Link]bool{}
		if hd.intent != nil {
			for _, l := range hd.intent.Links {
				if (obs.Subsystems[l.NQN] || isPresent[l]) && !wanted[l] {
					want, wanted[l] = append(want, l), true
				}
			}
		}
		for _, l := range present {
			if !wanted[l] {
				want, wanted[l] = append(want, l), true
			}
		}
		var declaredMissing []configfs.Link
		if hd.boot != nil {
			wantedNQN := make(map[string]bool, len(want))
			for _, w := range want {
				wantedNQN[w.NQN] = true
			}
			for _, n := range hd.boot.NQNs {
				if obs.Subsystems[n] && !wantedNQN[n] {
					declaredMissing = append(declaredMissing, configfs.Link{Name: n, NQN: n})
				}
			}
		}
		missing := func(ls []configfs.Link) []configfs.Link {
			var m []configfs.Link
			for _, l := range ls {
				if !isPresent[l] {
					m = append(m, l)
				}
			}
			return m
		}
		if len(want) > 0 || len(declaredMissing) > 0 {
			expected = true
		}
		switch st {
		case StateDead, StateStranded:
			all := append(slices.Clone(want), declaredMissing...)
			if len(all) == 0 {
				break
			}
			if len(present) > 0 {
				in := Intent{Kind: KindNvmet, ID: port.ID, Address: g.ep.Addr.String(), Links: all}
				journalPuts = append(journalPuts, journalPort(in, slices.Clone(present)))
				unlinks = slices.Grow(unlinks, len(present)) // a port may hold thousands
				for _, l := range present {
					unlinks = append(unlinks, unlink(k, l))
				}
			}
			links = slices.Grow(links, len(all))
			for _, l := range all {
				links = append(links, link(k, l))
			}
			if len(present) > 0 || hd.intent != nil {
				deletes = append(deletes, forget(k))
			}
			switch {
			case len(present) > 0 && hd.intent == nil:
				h.Action = ActRebindPort
			case hd.intent != nil:
				h.Action = max(h.Action, ActCompletePort)
				h.Reason = fmt.Sprintf("%d subsystem link(s) to restore from the journal", len(missing(want)))
			default:
				boot = true
			}
		case StateListening, StateUnknown:
			// Alive (or unknown: never unlink then): link what the journal
			// or a saved config says is missing, forget a done journal.
			for _, l := range append(missing(want), declaredMissing...) {
				links = append(links, link(k, l))
			}
			if hd.intent != nil {
				deletes = append(deletes, forget(k))
				if m := missing(want); len(m) > 0 {
					h.Action = max(h.Action, ActCompletePort)
					h.Reason = fmt.Sprintf("%d subsystem link(s) to restore from the journal", len(m))
				} else if h.Action == ActNone {
					h.Action, h.Reason = ActDropJournal, "every journaled link is back"
				}
			} else if len(declaredMissing) > 0 {
				boot = true
			}
		}
		if len(declaredMissing) > 0 && boot {
			h.Reason = fmt.Sprintf("%d link(s) declared in %s missing (refused at boot?)", len(declaredMissing), hd.boot.Source)
		}
	}
	if boot && h.Action == ActNone {
		h.Action = ActCompleteBoot
	}
	if h.Action == ActNone && len(deletes) > 0 {
		h.Action = ActDropJournal
	}
	h.Steps = slices.Concat(journalPuts, unlinks, links, deletes)
	if len(h.Steps) == 0 {
		h.Action = ActNone
	}
	return expected, h
}
