package rebind

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// EndpointState is what a plan concluded about one endpoint, for Learn.
type EndpointState struct {
	Endpoint
	Keys     []Key // the objects holding its listener
	State    State
	Expected bool
	DevIndex uint32 // RDMA device of the LISTEN entry (listening or stranded)
	GUID     uint64 // node GUID of that device
	// Held: its heal is held back by something only a change of the
	// inputs ends, never the clock (its address on no netdev, pin_device,
	// given up).
	Held bool
	// Settled are what saved configs declare for its objects that this
	// observation shows in place (a link, iser=1): once seen, a later
	// absence is the admin's doing, and boot completion leaves it.
	Settled []Settled
}

// Settled is one declared link (NQN) of an nvmet port, or the iser=1 of a
// LIO portal (NQN empty), seen in place during the boot window.
type Settled struct {
	Key Key
	NQN string
}

// Planned is the result of Plan.
type Planned struct {
	Items []Item // one per configfs object (status), in configfs order
	Heals []Heal // what apply executes, in order
	// decided is every managed endpoint's decision: for the loop, its own
	// map, decided in place round after round (a selection replaces the
	// decisions of the endpoints it selects and keeps the others).
	decided map[epKey]*decision
	carried bool // nothing was decided: every decision is the baseline's
	fresh   bool // every decision is this plan's own (it selected all)
	// wake is the queue of wake-ups this plan wrote (for the loop, its
	// own): the endpoints decided again every round, and when.
	wake *wakeups
}

// endpoints is the state of every managed endpoint, what Learn
// remembers: its decision's (in no order).
func (p *Planned) endpoints() iter.Seq[EndpointState] {
	return func(yield func(EndpointState) bool) {
		for _, d := range p.decided {
			if !yield(d.es) {
				return
			}
		}
	}
}

// decision is what a plan decided for one endpoint. It is never changed
// once made, so a later plan carries it as it is.
type decision struct {
	es    EndpointState
	items []Item // its objects', in configfs order
	// timed: decided again every round (wakeups), by itself at wakeAt
	// (zero: no time of its own).
	timed  bool
	wakeAt time.Time
}

// holder is one configfs object behind an endpoint.
type holder struct {
	key    Key
	port   *configfs.Port   // nvmet: the observation's
	portal *configfs.Portal // lio: the observation's
	intent *Intent
	boot   *Declared // declared by a saved config and missing (window open)
}

// group is an endpoint with its holders, in configfs order.
type group struct {
	ep      Endpoint
	holders []holder
}

// Plan decides, for every endpoint, whether and how to heal it, and the
// status of every configfs object. It is pure: same input, same output.
func Plan(obs Observed, mem Memory, cfg Config) Planned {
	return plan(obs, mem, cfg, All())
}

// plan decides the endpoints sel selects (carrying the decisions of the
// others from sel's baseline, which it does not change) and assembles the
// status of every object.
func plan(obs Observed, mem Memory, cfg Config, sel Selection) Planned {
	obs = prepared(obs)
	var ds map[epKey]*decision
	wq := newWakeups()
	if !sel.all && sel.prev != nil {
		ds, wq = maps.Clone(sel.prev.decided), sel.prev.wake.clone()
	}
	p := decide(&obs, mem, cfg, sel, ds, wq)
	assemble(&p, &obs, cfg, sel)
	return p
}

// decide plans the endpoints sel selects: their heals and decisions,
// written into ds in place — the decisions of sel's baseline, whose other
// endpoints keep theirs; a plan of every endpoint starts ds afresh (nil: a
// new map) — and their wake-ups into wq (the baseline's queue). Heals
// come in endpoint order, then the journal entries of objects gone.
func decide(obs *Observed, mem Memory, cfg Config, sel Selection, ds map[epKey]*decision, wq *wakeups) Planned {
	declared := declaredNow(obs)
	// The endpoints to decide, each with its objects from the index.
	var entries []*endpointEntry
	if sel.all || sel.prev == nil {
		for i := range obs.eps.list {
			entries = append(entries, obs.eps.get(int32(i)))
		}
	} else {
		for k := range sel.decides() {
			if e, ok := obs.lookup(k); ok {
				entries = append(entries, e)
			}
		}
	}
	groups := make([]group, 0, len(entries))
	holders := 0
	var slab []holder // every group's holders, each group's contiguous
	if len(entries) > 64 {
		n := len(obs.Ports) + len(obs.Portals)
		if !sel.all && sel.prev != nil {
			n = 0 // a selection's objects, not every object's room
			for _, e := range entries {
				obs.objects(e, func(int) { n++ })
			}
		}
		slab = make([]holder, 0, n)
	}
	for _, e := range entries {
		g := group{ep: e.ep}
		start := len(slab)
		slab = holdersOf(obs, e, cfg, mem, declared, slab)
		g.holders = slab[start:len(slab):len(slab)]
		if len(g.holders) > 0 {
			groups = append(groups, g)
			holders += len(g.holders)
		}
	}
	p := Planned{decided: ds, wake: wq}
	switch {
	case sel.all || sel.prev == nil:
		if p.decided == nil {
			p.decided = make(map[epKey]*decision, len(groups))
		}
		clear(p.decided)
		wq.clear()
		p.fresh = true
	default:
		redo := sel.decides()
		p.carried = len(groups) == 0 && len(redo) == 0
		for ep := range redo {
			delete(p.decided, ep)
			wq.forget(ep)
		}
	}
	slices.SortFunc(groups, func(a, b group) int { return compareEndpoints(a.ep, b.ep) })
	// The decisions and their status items, in one allocation each.
	dslab, items := make([]decision, len(groups)), make([]Item, holders)
	for i := range groups {
		g, d := &groups[i], &dslab[i]
		d.items, items = items[:len(g.holders):len(g.holders)], items[len(g.holders):]
		h := planEndpoint(d, g, obs, mem, cfg)
		p.decided[g.ep.key()] = d
		if d.timed {
			wq.add(g.ep.key(), d.wakeAt)
		}
		if h.Action != ActNone {
			p.Heals = append(p.Heals, h)
		}
	}
	p.Heals = append(p.Heals, dropGone(obs)...)
	return p
}

// declaredNow is what the saved configs declare, by object, while the
// boot window is open (else nothing).
func declaredNow(obs *Observed) map[Key]*Declared {
	declared := map[Key]*Declared{}
	if obs.windowOpen() {
		for i := range obs.Declared {
			d := &obs.Declared[i]
			declared[Key{d.Kind, d.ID}] = d
		}
	}
	return declared
}

// holdersOf appends to slab the managed objects on e's endpoint, in
// configfs order, each with its journal entry and what a saved config
// still declares for it.
func holdersOf(obs *Observed, e *endpointEntry, cfg Config, mem Memory, declared map[Key]*Declared, slab []holder) []holder {
	obs.objects(e, func(i int) {
		var hd holder
		if e.ep.Kind.ports() {
			if _, ok := managedPort(obs, i, cfg); !ok {
				return
			}
			hd = holder{key: Key{KindNvmet, obs.Ports[i].ID}, port: &obs.Ports[i]}
		} else {
			if _, ok := managedPortal(obs.Portals[i], cfg); !ok {
				return
			}
			hd = holder{key: Key{KindLIO, obs.Portals[i].ID()}, portal: &obs.Portals[i]}
		}
		if in, ok := obs.Journal[hd.key]; ok {
			hd.intent = &in
		}
		if d := declared[hd.key]; d != nil && d.Addr == e.ep.Addr {
			hd.boot = unsettled(d, hd.key, mem)
		}
		slab = append(slab, hd)
	})
	return slab
}

// expected tells whether the plan expects a listener on ep in obs: some
// object there holds one (planPorts, planPortals); declared is
// declaredNow(obs). verify reads it.
func expected(obs *Observed, mem Memory, cfg Config, declared map[Key]*Declared, ep Endpoint) bool {
	e, ok := obs.lookup(ep.key())
	if !ok {
		return false
	}
	g := group{ep: ep, holders: holdersOf(obs, e, cfg, mem, declared, nil)}
	if len(g.holders) == 0 {
		return false
	}
	if ep.Kind.ports() {
		exp, _ := planPorts(&g, e.v.State, obs)
		return exp
	}
	exp, _ := planPortals(&g, e.v.State)
	return exp
}

// unsettled is what d declares for k that was never seen in place (nil:
// nothing): what boot completion may still make. A declared link or
// iser=1 seen once and gone later was removed by the admin.
func unsettled(d *Declared, k Key, mem Memory) *Declared {
	if len(mem.Settled) == 0 {
		return d
	}
	if d.Kind == KindLIO {
		if mem.Settled[Settled{k, ""}] {
			return nil
		}
		return d
	}
	var nqns []string
	for _, n := range d.NQNs {
		if !mem.Settled[Settled{k, n}] {
			nqns = append(nqns, n)
		}
	}
	if len(nqns) == len(d.NQNs) {
		return d
	}
	if len(nqns) == 0 {
		return nil
	}
	out := *d
	out.NQNs = nqns
	return &out
}

// settled are the declarations of hd (hd.boot: those not yet settled)
// that the observation shows in place.
func settled(hd holder) []Settled {
	if hd.boot == nil {
		return nil
	}
	if hd.portal != nil {
		if hd.portal.ISER {
			return []Settled{{hd.key, ""}}
		}
		return nil
	}
	linked := make(map[string]bool, len(hd.port.Links))
	for _, l := range hd.port.Links {
		linked[l.NQN] = true
	}
	var out []Settled
	for _, n := range hd.boot.NQNs {
		if linked[n] {
			out = append(out, Settled{hd.key, n})
		}
	}
	return out
}

// dropGone forgets the journal entries whose object is gone: the admin
// removed it.
func dropGone(obs *Observed) []Heal {
	if len(obs.Journal) == 0 {
		return nil
	}
	seen := make(map[Key]bool, len(obs.Journal))
	for _, p := range obs.Ports {
		seen[Key{KindNvmet, p.ID}] = true
	}
	for _, p := range obs.Portals {
		seen[Key{KindLIO, p.ID()}] = true
	}
	var gone []Key
	for k := range obs.Journal {
		if !seen[k] && !(k.Kind == KindLIO && obs.PortalsErr != nil) {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, compareKeys)
	var hs []Heal
	for _, k := range gone {
		hs = append(hs, Heal{Action: ActDropJournal, Keys: []Key{k},
			Reason: k.String() + " was removed by the admin during the outage; forgetting its journal entry",
			Steps:  []Step{forget(k)}})
	}
	return hs
}

// managedPort returns the endpoint of Ports[i] when the engine manages it:
// a readable RDMA port with a specific, watched address.
func managedPort(obs *Observed, i int, cfg Config) (Endpoint, bool) {
	ep, ok := obs.portEndpoint(i)
	if !ok || obs.Ports[i].Err != nil || !obs.Ports[i].Adrfam.IP() || ep.Addr.Addr().IsUnspecified() {
		return Endpoint{}, false
	}
	return ep, watched(cfg, ep.Addr.Addr())
}

// managedPortal is managedPort for a LIO portal.
func managedPortal(p configfs.Portal, cfg Config) (Endpoint, bool) {
	if p.Err != nil || p.Addr.Addr().IsUnspecified() {
		return Endpoint{}, false
	}
	return Endpoint{KindLIO, p.Addr}, watched(cfg, p.Addr.Addr())
}

// planEndpoint decides one endpoint from its verdict into d (whose items
// has room for its holders): its state, the status of its holders, and its
// heal.
func planEndpoint(d *decision, g *group, obs *Observed, mem Memory, cfg Config) Heal {
	ep := g.ep
	v := obs.verdict(ep)
	var h Heal
	var expected bool
	if ep.Kind.ports() {
		expected, h = planPorts(g, v.State, obs)
	} else {
		expected, h = planPortals(g, v.State)
	}
	h.Endpoint = ep
	h.Keys = stepKeys(h.Steps)
	es := EndpointState{Endpoint: ep, State: v.State, Expected: expected}
	if !expected && v.State != StateListening {
		es.State = StateNone
	}
	if v.State == StateListening || v.State == StateStranded {
		es.DevIndex, es.GUID = v.EntryDev, v.EntryGUID
	}
	keys := make([]Key, len(g.holders))
	for i, hd := range g.holders {
		keys[i] = hd.key
		if sharing(hd) {
			es.Keys = append(es.Keys, hd.key)
		}
		es.Settled = append(es.Settled, settled(hd)...)
	}
	reason := stateReason(ep, es.State, v, obs)
	var retryAt time.Time
	gaveUp := false
	if h.Action.heals() {
		if h.Reason != "" {
			reason = h.Reason + "; " + reason
		}
		if w := gate(ep, keys, v, obs, mem, cfg); w != nil {
			reason += "; " + w.why
			retryAt, gaveUp = w.until, w.gaveUp
			es.Held = w.clockFree && w.until.IsZero()
			h = Heal{}
		}
	}
	if h.Action != ActNone && h.Reason == "" {
		h.Reason = reason
	}
	d.es, d.wakeAt = es, retryAt
	d.timed = h.Action != ActNone || !retryAt.IsZero() || es.State.down() && !es.Held
	if t := settleLook(ep, v, obs); !t.IsZero() && (d.wakeAt.IsZero() || t.Before(d.wakeAt)) {
		d.timed, d.wakeAt = true, t
	}
	shared := ""
	if len(es.Keys) > 1 && ep.Kind == KindLIO {
		shared = fmt.Sprintf(" (iSER listener shared by %d portals)", len(es.Keys))
	}
	for i, hd := range g.holders {
		it := located(hd.key, ep, v.Carrier)
		it.Managed = true
		it.State, it.Sharers, it.Action, it.RetryAt = es.State, len(es.Keys), h.Action, retryAt
		it.Reason, it.GaveUp, it.Expected = reason, gaveUp, expected
		it.DeadSince = deadSince(mem, ep, es.State, obs.Now)
		switch es.State {
		case StateListening:
			if v.EntryName != "" {
				it.Device = v.EntryName
			}
		case StateStranded:
			it.Device = v.EntryName
		}
		it.Reason += shared
		if hd.intent != nil || hd.boot != nil {
			d.timed = true
		}
		if hd.boot != nil && hd.boot.Kind == KindNvmet {
			var absent []string
			for _, n := range hd.boot.NQNs {
				if !obs.Subsystems[n] {
					absent = append(absent, n)
				}
			}
			if len(absent) > 0 {
				it.Reason += fmt.Sprintf("; subsystem(s) %s declared in %s do not exist", strings.Join(absent, ", "), hd.boot.Source)
			}
		}
		if ep.Kind == KindLIO && !sharing(hd) {
			// A plain iSCSI/TCP portal on the address: no iSER listener of its own.
			it.Managed, it.Expected, it.State, it.DeadSince = false, false, StateNone, time.Time{}
			it.Reason = "iser is 0: no iSER listener configured"
			if v.State == StateListening {
				it.Reason += " (the address's iSER listener belongs to other portals)"
			}
		}
		d.items[i] = it
	}
	if slices.ContainsFunc(keys, func(k Key) bool { return mem.Forced[k] }) {
		d.timed = true
	}
	if _, ok := mem.NextTry[ep]; ok {
		d.timed = true
	}
	if _, ok := mem.Backoff[ep]; ok {
		d.timed = true
	}
	return h
}

// stateReason renders the endpoint's state for status.
func stateReason(ep Endpoint, st State, v Verdict, obs *Observed) string {
	switch st {
	case StateNone:
		if ep.Kind.ports() {
			return "not enabled: no subsystem linked"
		}
		return "iser is 0: no iSER listener configured"
	case StateUnknown:
		if ep.Kind == KindTCP {
			return unknownReason(obs.TCPErr)
		}
		return obs.unknown
	case StateListening:
		return "listening"
	case StateDead:
		switch {
		case ep.Kind == KindLIO:
			return "listener dead (iser reads 1)"
		case ep.Kind == KindTCP && !v.Carrier.Held:
			return "not listening: " + ep.Addr.Addr().String() + " is on no netdev (the kernel refuses the link until it is)"
		case ep.Kind == KindTCP:
			return "not listening (no TCP socket in LISTEN on " + ep.Addr.String() + ")"
		}
		return "listener dead"
	case StateStranded:
		return fmt.Sprintf("stranded: listening on %s, but %s is carried by %s port %d now; hosts cannot connect", v.EntryName, ep.Addr.Addr(), v.Carrier.Dev, v.Carrier.Port)
	}
	return ""
}

// located is an object's status as its address tells it.
func located(k Key, ep Endpoint, c Carried) Item {
	it := Item{Key: k, Endpoint: ep, Address: ep.Addr.Addr(), Service: ep.Addr.Port(), Netdev: c.Netdev}
	if c.HasDev {
		it.Carrier, it.CarrierPort, it.Device, it.GUID = c.Dev, c.Port, c.Dev, c.GUID
	}
	return it
}

// sharing says whether a holder holds the endpoint's listener: every nvmet
// port, and a LIO portal with iser=1 (or at 0 by a journaled heal, or
// declared by a saved config). A plain iSCSI/TCP portal on the same
// address:port does not.
func sharing(hd holder) bool {
	return hd.port != nil || hd.portal.ISER || hd.intent != nil || hd.boot != nil
}
