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
	var journalPuts, deletes []Step
	// runs: each port's unlinks and links, made into steps once their
	// number is known (a port may hold thousands of subsystems).
	var runs []linkRuns
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
		// Without a journal entry it is the links present (a port's links
		// are distinct), and none of them is missing.
		want, missing := present, []configfs.Link(nil)
		if hd.intent != nil {
			want, missing = journaledWant(hd.intent.Links, present, obs.Subsystems)
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
		if len(want) > 0 || len(declaredMissing) > 0 {
			expected = true
		}
		switch st {
		case StateDead, StateStranded:
			all := slices.Concat(want, declaredMissing)
			if len(all) == 0 {
				break
			}
			run := linkRuns{key: k, link: all}
			if len(present) > 0 {
				in := Intent{Kind: KindNvmet, ID: port.ID, Address: g.ep.Addr.String(), Links: all}
				journalPuts = append(journalPuts, journalPort(in, slices.Clone(present)))
				run.unlink = present
			}
			runs = append(runs, run)
			if len(present) > 0 || hd.intent != nil {
				deletes = append(deletes, forget(k))
			}
			switch {
			case len(present) > 0 && hd.intent == nil:
				h.Action = ActRebindPort
			case hd.intent != nil:
				h.Action = max(h.Action, ActCompletePort)
				h.Reason = fmt.Sprintf("%d subsystem link(s) to restore from the journal", len(missing))
			default:
				boot = true
			}
		case StateListening, StateUnknown:
			// Alive (or unknown: never unlink then): link what the journal
			// or a saved config says is missing, forget a done journal.
			runs = append(runs, linkRuns{key: k, link: slices.Concat(missing, declaredMissing)})
			if hd.intent != nil {
				deletes = append(deletes, forget(k))
				if len(missing) > 0 {
					h.Action = max(h.Action, ActCompletePort)
					h.Reason = fmt.Sprintf("%d subsystem link(s) to restore from the journal", len(missing))
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
	h.Steps = portSteps(journalPuts, runs, deletes)
	if len(h.Steps) == 0 {
		h.Action = ActNone
	}
	return expected, h
}

// linkRuns are one port's links to remove and to make.
type linkRuns struct {
	key          Key
	unlink, link []configfs.Link
}

// portSteps orders a heal's steps: the journal entries, every port's
// unlinks, every port's links, the journal deletes; one allocation.
func portSteps(puts []Step, runs []linkRuns, deletes []Step) []Step {
	n := len(puts) + len(deletes)
	for _, r := range runs {
		n += len(r.unlink) + len(r.link)
	}
	if n == 0 {
		return nil
	}
	steps := make([]Step, 0, n)
	steps = append(steps, puts...)
	for _, r := range runs {
		for _, l := range r.unlink {
			steps = append(steps, unlink(r.key, l))
		}
	}
	for _, r := range runs {
		for _, l := range r.link {
			steps = append(steps, link(r.key, l))
		}
	}
	return append(steps, deletes...)
}

// journaledWant is what a port with a journal entry wants: the journal's
// links first, in their order (those whose subsystem exists, or present),
// then the links present that it lacks; and which of them are missing
// from present. (Sets, not scans: a port may hold thousands.)
func journaledWant(journaled, present []configfs.Link, subsystems map[string]bool) (want, missing []configfs.Link) {
	isPresent := make(map[configfs.Link]bool, len(present))
	for _, l := range present {
		isPresent[l] = true
	}
	wanted := make(map[configfs.Link]bool, len(journaled)+len(present))
	for _, l := range journaled {
		if (subsystems[l.NQN] || isPresent[l]) && !wanted[l] {
			want, wanted[l] = append(want, l), true
			if !isPresent[l] {
				missing = append(missing, l)
			}
		}
	}
	for _, l := range present {
		if !wanted[l] {
			want, wanted[l] = append(want, l), true
		}
	}
	return want, missing
}
