package rebind

import (
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// An observation either reads the same as the loop's baseline — every
// input (inputs.go) as the baseline read it, and a configfs model whose
// Generation has not moved since the baseline was read — and then
// carries the baseline's objects and verdicts, since judging them again
// would give the same; or it is made fresh. There is no third way: the
// selection (select.go) finds what a fresh one changed.
// TestEngineEqualsTheExhaustiveRound holds the carry to a fresh
// observation.

// Generational is a Tree that can tell that nothing it answers changed
// (watch.Model): Generation returns the same token (ok) for two calls
// only if every read between them answered as a read now would.
type Generational interface {
	Generation() (uint64, bool)
}

// fromBaseline makes o — its inputs read, and tok when tokOK — the
// baseline b's observation when nothing it reads changed since b was
// read, and reports whether it did. Otherwise o's tables are indexed and
// the caller reads configfs whole.
func (o *Observed) fromBaseline(b *Baseline, tokOK bool, tree Tree) bool {
	if tokOK && b != nil && b.obs.stable && b.obs.tok == o.tok && sameInputs(o, &b.obs) {
		o.carry(&b.obs)
		o.settle(tree.(Generational))
		return true
	}
	o.index = rdma.NewIndex(o.Devices, o.Addrs, o.Listeners)
	return false
}

// settle marks o stable when the tree's generation has not moved since
// o's token was taken: nothing changed while o read it.
func (o *Observed) settle(g Generational) {
	after, ok := g.Generation()
	o.stable = ok && after == o.tok
}

// carry takes b's configfs objects and verdicts (an observation of the
// same inputs and configfs): shared, never written.
func (o *Observed) carry(b *Observed) {
	o.Ports, o.portAddr, o.LinksUnread = b.Ports, b.portAddr, b.LinksUnread
	o.Portals, o.PortalsErr, o.Subsystems = b.Portals, b.PortalsErr, b.Subsystems
	o.eps, o.judged, o.shared, o.stable = b.eps, true, true, true
}

// sameInputs tells whether o read the same as b of every input but
// configfs (inputs.go).
func sameInputs(o, b *Observed) bool {
	for _, in := range inputs {
		if !in.same(o, b) {
			return false
		}
	}
	return true
}
