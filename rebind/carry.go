package rebind

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// An observation is the loop's baseline updated by what its inputs
// (inputs.go) changed, or made fresh. When configfs reads as the
// baseline's (the configfs model's Generation has not moved) and so does
// every input but those whose change shows only in the verdicts (the
// kernel's tables: declared so), the observation takes the baseline's
// objects; if a table changed (an event: a reset, an address, a listener),
// the endpoints the tables' delta touches are judged again over those
// objects (the RDMA tables' delta, rdma.Index.Since, and the TCP sockets
// that came or went), and the links of a port whose listener came or went
// are read or forgotten as a fresh read would. Anything else — configfs moved, another input changed, no
// baseline — and it is made fresh. TestEngineEqualsTheExhaustiveRound
// holds both to the exhaustive round.

// Generational is a Tree that can tell that nothing it answers changed
// (watch.Model): Generation returns the same token (ok) for two calls
// only if every read between them answered as a read now would.
type Generational interface {
	Generation() (uint64, bool)
}

// fromBaseline makes o — its inputs read, and tok when tokOK — the
// baseline b's objects, with b's verdicts or, when a table changed, its
// own (judged again), and reports whether it did. false: o's tables are
// indexed and the caller reads configfs whole.
func (o *Observed) fromBaseline(b *Baseline, tokOK bool, tree Tree, declared map[string]bool) bool {
	if !tokOK || b == nil || !b.obs.stable || b.obs.tok != o.tok {
		o.index = rdma.NewIndex(o.Devices, o.Addrs, o.Listeners)
		return false
	}
	same, judgeAgain := true, false
	for _, in := range inputs {
		if !in.same(o, &b.obs) {
			same = same && in.verdictsOnly
			judgeAgain = true
		}
	}
	if !same {
		o.index = rdma.NewIndex(o.Devices, o.Addrs, o.Listeners)
		return false
	}
	// Made in a copy: a failed judgeAgain leaves o with none of b's
	// objects, maps or verdicts (the caller then reads configfs into o's
	// own), only the index it built.
	c := *o
	c.carry(&b.obs)
	if judgeAgain && !c.judgeAgain(&b.obs, tree, declared) {
		o.index = c.index
		return false
	}
	*o = c
	o.settle(tree.(Generational))
	return true
}

// judgeAgain judges again, over o's own tables, every endpoint of o (the
// baseline b's objects, carried) whose inputs changed — the tables' delta
// (rdma.Index.Since) touches its address:port or the device its listener
// was on, or a TCP socket on it came or went — in a list of its own; the
// others keep b's verdict, which judging them again would give. A port
// whose listener came or went has its links read (linksNeeded) or
// forgotten, in copies of the ports and LinksUnread. false when links
// cannot be read: o must be read fresh.
func (o *Observed) judgeAgain(b *Observed, tree Tree, declared map[string]bool) bool {
	o.index = rdma.NewIndex(o.Devices, o.Addrs, o.Listeners)
	d := o.index.Since(b.Devices, b.Addrs, b.Listeners)
	tcp := changedSockets(b.TCP, o.TCP)
	o.eps.list = slices.Clone(o.eps.list)
	owned := false // o.Ports and o.LinksUnread are copies
	for i := range o.eps.list {
		e := &o.eps.list[i]
		was := e.v
		entry := was.State == StateListening || was.State == StateStranded
		if !d.Touches(e.ep.Owner(), e.ep.Addr) && !(entry && d.DeviceChanged(was.EntryDev)) && !tcp[e.ep.Addr] {
			continue
		}
		e.v = o.judge(e.ep)
		if e.ep.Kind == KindLIO || (was.State == StateListening) == (e.v.State == StateListening) {
			continue
		}
		for pi := e.first; pi >= 0; pi = o.eps.nextPort[pi] {
			p := o.Ports[pi]
			need := linksNeeded(p, o.portAddr[pi], true, e.v, o.Journal, declared)
			if p.Err != nil || need == !o.LinksUnread[p.ID] {
				continue
			}
			if !owned {
				o.Ports, o.LinksUnread, owned = slices.Clone(o.Ports), maps.Clone(o.LinksUnread), true
			}
			if need {
				links, err := tree.Links(p.ID)
				if err != nil {
					return false
				}
				o.Ports[pi].Links = links
				delete(o.LinksUnread, p.ID)
			} else {
				o.Ports[pi].Links = nil
				o.LinksUnread[p.ID] = true
			}
		}
	}
	return true
}

// settle marks o stable when the tree's generation has not moved since
// o's token was taken: nothing changed while o read it.
func (o *Observed) settle(g Generational) {
	after, ok := g.Generation()
	o.stable = ok && after == o.tok
}

// unchanged tells whether configfs still answers what o read: the tree's
// generation has not moved since o's token, and nothing moved while o
// read it. A precondition that only repeats o's reading then holds
// (journalBatch); never in the exhaustive round, which reads each one.
func (o *Observed) unchanged(t Tree) bool {
	g, ok := t.(Generational)
	if !ok || !o.stable {
		return false
	}
	now, ok := g.Generation()
	return ok && now == o.tok
}

// carry takes b's configfs objects and verdicts (an observation of the
// same configfs): shared, never written.
func (o *Observed) carry(b *Observed) {
	o.Ports, o.portAddr, o.LinksUnread = b.Ports, b.portAddr, b.LinksUnread
	o.Portals, o.PortalsErr, o.Subsystems = b.Portals, b.PortalsErr, b.Subsystems
	o.eps, o.judged, o.shared, o.stable = b.eps, true, true, true
}

// changedSockets is the set of address:ports in one of two sorted lists
// of TCP sockets and not the other.
func changedSockets(a, b []netip.AddrPort) map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case j >= len(b) || (i < len(a) && a[i].Compare(b[j]) < 0):
			out[a[i]] = true
			i++
		default:
			out[b[j]] = true
			j++
		}
	}
	return out
}
