package rebind

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// An observation that reads the same as the loop's baseline — the same
// kernel tables, journal, saved configs and configfs root, and a configfs
// model whose Generation has not moved since the baseline was read —
// carries the baseline's objects and verdicts (observe): judging them
// again would give the same. When only the kernel's tables changed (a
// device reset, an address, a listener: an event), it carries the objects
// and judges again only the endpoints whose inputs changed (rejudge).
// TestCarriedObservationIsAFreshOne holds both to a fresh observation.

// Generational is a Tree that can tell that nothing it answers changed
// (watch.Model): Generation returns the same token (ok) for two calls
// only if every read between them answered as a read now would.
type Generational interface {
	Generation() (uint64, bool)
}

// Changer is a Generational tree that can also name what may have
// changed since a token (watch.Model.Changes): the ports whose Links and
// the portals (by ID) whose Portal may answer differently; every other
// answer is what it was. ok is false when it cannot tell.
type Changer interface {
	Changes(since uint64) (ports, portals []string, ok bool)
}

// edited returns b's ports and portals as a read now gives them, when the
// tree (a Changer) names the only objects that may have changed since b
// was read — a heal's own writes, an admin's link or iser: those are read
// again and, where they differ, replaced in copies (b's are never
// written). false when the tree cannot tell, or when a named object moved
// in a way that changes the endpoints' objects (a portal added, gone or
// unreadable, a port's links unreadable): the caller reads everything.
func edited(t Tree, b *Observed) ([]configfs.Port, []configfs.Portal, bool) {
	c, ok := t.(Changer)
	if !ok {
		return nil, nil, false
	}
	ids, pids, ok := c.Changes(b.tok)
	if !ok {
		return nil, nil, false
	}
	ports, portals := b.Ports, b.Portals
	ownPorts, ownPortals := false, false // copies of b's, written
	for _, id := range ids {
		i := portIndex(b.Ports, id)
		if i < 0 {
			return nil, nil, false // not a port b read
		}
		if ports[i].Err != nil || b.LinksUnread[id] {
			continue // links not read: a fresh read would not read them either (rejudge reads those it must)
		}
		links, err := t.Links(id)
		if err != nil {
			return nil, nil, false
		}
		if !slices.Equal(links, ports[i].Links) {
			if !ownPorts {
				ports, ownPorts = slices.Clone(ports), true
			}
			ports[i].Links = links
		}
	}
	for _, id := range pids {
		iqn, tpg, np, err := configfs.ParsePortalID(id)
		if err != nil {
			return nil, nil, false
		}
		i, found := slices.BinarySearchFunc(b.Portals, configfs.Portal{IQN: iqn, TPG: tpg, NP: np}, configfs.ComparePortals)
		if !found {
			return nil, nil, false // a portal b did not have
		}
		p, err := t.Portal(id)
		if was := portals[i]; err != nil || p.Err != nil || was.Err != nil || p.Addr != was.Addr {
			return nil, nil, false
		}
		if p.ISER != portals[i].ISER {
			if !ownPortals {
				portals, ownPortals = slices.Clone(portals), true
			}
			portals[i].ISER = p.ISER
		}
	}
	return ports, portals, true
}

// fromBaseline makes o — its kernel tables, journal and saved configs
// read, and tok when tokOK — the baseline b's observation where only
// what the baseline can answer changed: carried whole (the same tables;
// configfs unmoved, or moved only where the tree names: edited), or with
// the endpoints the tables' delta touches judged again (rejudge). o's
// tables are indexed in into unless it is carried whole. false: o reads
// configfs whole.
func (o *Observed) fromBaseline(b *Baseline, tokOK bool, tree Tree, into *rdma.Index, declared map[string]bool) bool {
	carry := tokOK && b != nil && b.obs.stable && sameInputs(o, &b.obs)
	var ports []configfs.Port
	var portals []configfs.Portal
	switch {
	case carry && b.obs.tok == o.tok:
		ports, portals = b.obs.Ports, b.obs.Portals
	case carry:
		ports, portals, carry = edited(tree, &b.obs)
	}
	if carry && sameTables(o, &b.obs) {
		// Nothing that decides a verdict changed since the baseline was
		// read, nor an object but those edited: judging them again would
		// give the same.
		o.carry(&b.obs)
		o.Ports, o.Portals = ports, portals
		o.settle(tree.(Generational))
		return true
	}
	into.Reindex(o.Devices, o.Addrs, o.Listeners)
	o.index = into
	if carry && o.rejudge(&b.obs, ports, portals, tree, declared) {
		o.settle(tree.(Generational))
		return true
	}
	return false
}

// settle marks o stable when the tree's generation has not moved since
// o's token was taken: nothing changed while o read it.
func (o *Observed) settle(g Generational) {
	after, ok := g.Generation()
	o.stable = ok && after == o.tok
}

// portIndex is port id's index in ports (configfs.FS.Ports' order:
// ComparePortIDs), -1 when it is not there.
func portIndex(ports []configfs.Port, id string) int {
	if i, ok := slices.BinarySearchFunc(ports, id, func(p configfs.Port, id string) int { return configfs.ComparePortIDs(p.ID, id) }); ok {
		return i
	}
	// Names that are not numbers do not order with numbers transitively
	// (nvmet's are numbers; a bad name is listed with its error).
	return slices.IndexFunc(ports, func(p configfs.Port) bool { return p.ID == id })
}

// carry takes b's configfs objects and verdicts (an observation of the
// same kernel tables, journal, saved configs and configfs): shared,
// never written.
func (o *Observed) carry(b *Observed) {
	o.Ports, o.portAddr, o.LinksUnread = b.Ports, b.portAddr, b.LinksUnread
	o.Portals, o.PortalsErr, o.Subsystems = b.Portals, b.PortalsErr, b.Subsystems
	o.eps, o.judged, o.shared, o.stable = b.eps, true, true, true
}

// sameInputs tells whether o read the same as b of everything a verdict
// or an object reads but the kernel's tables: their errors, the journal,
// the saved configs and the configfs root's sight.
func sameInputs(o, b *Observed) bool {
	return sameErr(o.DevicesErr, b.DevicesErr) && sameErr(o.AddrsErr, b.AddrsErr) && sameErr(o.ListenersErr, b.ListenersErr) &&
		sameErr(o.TCPErr, b.TCPErr) && o.Configfs.same(b.Configfs) &&
		slices.EqualFunc(o.JournalErrs, b.JournalErrs, sameErr) && maps.EqualFunc(o.Journal, b.Journal, Intent.equal) &&
		slices.EqualFunc(o.Declared, b.Declared, Declared.equal)
}

// sameTables tells whether o read the same kernel tables as b, as judge
// reads them.
func sameTables(o, b *Observed) bool {
	return slices.EqualFunc(o.Devices, b.Devices, rdma.Device.Equal) && slices.EqualFunc(o.Addrs, b.Addrs, rdma.Addr.Equal) &&
		rdma.SameListeners(o.Listeners, b.Listeners) && slices.Equal(o.TCP, b.TCP)
}

// rejudge makes o the baseline b's objects with the verdicts of o's own
// kernel tables (indexed in o.index), when b read the same configfs,
// journal and saved configs (sameInputs, the model's Generation unmoved):
// an endpoint whose inputs did not change — the delta of the RDMA tables
// (rdma.Index.Since) does not touch it, no TCP socket of its address:port
// came or went — keeps b's verdict, for judging it again would give the
// same; the others are judged again. A device reset of one device of
// thousands of listeners judges that device's endpoints only. A port
// whose verdict now needs its links (linksNeeded) reads them from tree;
// one that no longer does forgets them, as a fresh observation would.
// The verdicts judged again are patched over b's list (endpointIndex:
// nothing of b is copied for them), until they are many.
// false (o unchanged) when links cannot be read: the caller reads
// everything.
func (o *Observed) rejudge(b *Observed, ports []configfs.Port, portals []configfs.Portal, tree Tree, declared map[string]bool) bool {
	d := o.index.Since(b.Devices, b.Addrs, b.Listeners)
	tcp := changedSockets(b.TCP, o.TCP)
	patch := maps.Clone(b.eps.patch)
	if patch == nil {
		patch = map[int32]Verdict{}
	}
	unread := b.LinksUnread
	owned := false // ports and unread are copies of b's
	for i := range b.eps.list {
		e := &b.eps.list[i] // its endpoint and objects; its verdict is b's verdictAt
		was := b.eps.verdictAt(int32(i))
		entry := was.State == StateListening || was.State == StateStranded
		if !d.Touches(e.ep.Owner(), e.ep.Addr) && !(entry && d.DeviceChanged(was.EntryDev)) && !tcp[e.ep.Addr] {
			continue
		}
		v := o.judge(e.ep)
		if v == e.v {
			delete(patch, int32(i))
		} else {
			patch[int32(i)] = v
		}
		if (was.State == StateListening) == (v.State == StateListening) || e.ep.Kind == KindLIO {
			continue
		}
		for pi := e.first; pi >= 0; pi = b.eps.nextPort[pi] {
			p := ports[pi]
			need := linksNeeded(p, b.portAddr[pi], true, v, o.Journal, declared)
			if need == !unread[p.ID] || p.Err != nil {
				continue
			}
			if !owned {
				ports, unread, owned = slices.Clone(ports), maps.Clone(unread), true
			}
			if need {
				links, err := tree.Links(p.ID)
				if err != nil {
					return false
				}
				ports[pi].Links = links
				delete(unread, p.ID)
			} else {
				ports[pi].Links = nil
				unread[p.ID] = true
			}
		}
	}
	o.carry(b)
	o.eps.patch = patch
	if len(patch) > maxPatch(len(b.eps.list)) {
		// Patched too much to be worth sharing: a list of its own.
		o.eps.list, o.eps.patch = slices.Clone(b.eps.list), nil
		for i, v := range patch {
			o.eps.list[i].v = v
		}
	}
	o.Ports, o.Portals, o.LinksUnread = ports, portals, unread
	return true
}

// maxPatch is how many entries an overlay holds over the n of the base
// it shares before it takes one of its own: the verdicts an observation
// patches over its baseline's list (rejudge), the decisions a plan makes
// over its baseline's (decisions). A variable for the tests of both
// regimes.
var maxPatch = func(n int) int { return n/16 + 64 }

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
