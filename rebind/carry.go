package rebind

import (
	"maps"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// An observation that reads the same as the loop's baseline — the same
// kernel tables, journal, saved configs and configfs root, and a configfs
// model whose Generation has not moved since the baseline was read —
// carries the baseline's objects and verdicts (observe): judging them
// again would give the same. TestCarriedObservationIsAFreshOne holds it
// to that.

// Generational is a Tree that can tell that nothing it answers changed
// (watch.Model): Generation returns the same token (ok) for two calls
// only if every read between them answered as a read now would.
type Generational interface {
	Generation() (uint64, bool)
}

// carry takes b's configfs objects and verdicts (an observation of the
// same kernel tables, journal, saved configs and configfs): shared,
// never written.
func (o *Observed) carry(b *Observed) {
	o.Ports, o.portAddr, o.LinksUnread = b.Ports, b.portAddr, b.LinksUnread
	o.Portals, o.PortalsErr, o.Subsystems = b.Portals, b.PortalsErr, b.Subsystems
	o.eps, o.judged, o.shared, o.stable = b.eps, true, true, true
}

// sameListeners tells whether two cm_id tables hold the same LISTEN
// entries, in order, as judge reads them (device, port, address, owner):
// the identifiers of host connections (a target's queues come and go) and
// the restrack numbers do not decide a verdict.
func sameListeners(a, b []rdma.CMID) bool {
	next := func(s []rdma.CMID, i int) int {
		for i < len(s) && !s[i].Listening() {
			i++
		}
		return i
	}
	i, j := next(a, 0), next(b, 0)
	for ; i < len(a) && j < len(b); i, j = next(a, i+1), next(b, j+1) {
		x, y := a[i], b[j]
		if x.DevIndex != y.DevIndex || x.DevName != y.DevName || x.Port != y.Port || x.Src != y.Src || x.KernName != y.KernName {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

// sameReading tells whether o read the same as b of everything but
// configfs: the kernel tables, their errors, the journal, the saved
// configs and the configfs root's sight — so that, configfs unchanged,
// every verdict and object of b is o's.
func sameReading(o, b *Observed) bool {
	return sameErr(o.DevicesErr, b.DevicesErr) && sameErr(o.AddrsErr, b.AddrsErr) && sameErr(o.ListenersErr, b.ListenersErr) &&
		sameErr(o.TCPErr, b.TCPErr) && o.Configfs.same(b.Configfs) &&
		slices.EqualFunc(o.Devices, b.Devices, rdma.Device.Equal) && slices.EqualFunc(o.Addrs, b.Addrs, rdma.Addr.Equal) &&
		sameListeners(o.Listeners, b.Listeners) && slices.Equal(o.TCP, b.TCP) &&
		slices.EqualFunc(o.JournalErrs, b.JournalErrs, sameErr) && maps.EqualFunc(o.Journal, b.Journal, Intent.equal) &&
		slices.EqualFunc(o.Declared, b.Declared, Declared.equal)
}
