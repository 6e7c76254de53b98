package rebind

import (
	"fmt"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// assemble fills the status of every object, in configfs order (ports,
// portals, then what saved configs declare and configfs lacks): a managed
// object's from its endpoint's decision, any other's from the object alone (classify). When sel decided
// nothing and obs holds the baseline's objects and verdicts, that is the
// baseline's status (idle resyncs rebuild nothing).
func assemble(p *Planned, obs *Observed, cfg Config, sel Selection) {
	if sel.same && p.carried && len(sel.prev.Items) > 0 {
		p.Items = sel.prev.Items
		return
	}
	p.Items = make([]Item, 0, len(obs.Ports)+len(obs.Portals)+len(obs.Declared))
	var next map[epKey]int // the next holder of endpoints held by several objects
	take := func(ep Endpoint) {
		k := ep.key()
		d := p.decided[k]
		i := 0
		if len(d.items) > 1 {
			if next == nil {
				next = map[epKey]int{}
			}
			i = next[k]
			next[k] = i + 1
		}
		p.Items = append(p.Items, d.items[i])
		switch {
		case p.fresh && len(d.items) == 1:
			// The decision is this plan's own: its item lives in Items
			// from now on (one copy of every status item, not two).
			d.items = p.Items[len(p.Items)-1 : len(p.Items) : len(p.Items)]
		case p.fresh && i == 0:
			d.items = slices.Clone(d.items) // off the plan's slab, which is then free
		}
	}
	seen := make(map[Key]bool, len(obs.Declared))
	for i, port := range obs.Ports {
		if ep, ok := managedPort(obs, i, cfg); ok {
			take(ep)
		} else {
			p.Items = append(p.Items, classifyPort(obs, i, cfg))
		}
		if len(obs.Declared) > 0 {
			seen[Key{KindNvmet, port.ID}] = true
		}
	}
	for _, portal := range obs.Portals {
		if ep, ok := managedPortal(portal, cfg); ok {
			take(ep)
		} else {
			p.Items = append(p.Items, classifyPortal(portal, obs))
		}
		if len(obs.Declared) > 0 {
			seen[Key{KindLIO, portal.ID()}] = true
		}
	}
	// Saved configs naming objects configfs does not have: reported only.
	for _, d := range obs.Declared {
		k := Key{d.Kind, d.ID}
		if !seen[k] {
			seen[k] = true
			// Not said by the clock (the window's end would be an input
			// every round selects on): check says WARNING or CRITICAL.
			p.Items = append(p.Items, Item{Key: k, Address: d.Addr.Addr(), Service: d.Addr.Port(), Missing: true,
				Reason: fmt.Sprintf("declared in %s but not in configfs (boot completion makes it within the boot window, unless the admin removed it this boot)", d.Source)})
		}
	}
}

// classifyPort is the status of a port the engine does not manage.
func classifyPort(obs *Observed, i int, cfg Config) Item {
	port, a := obs.Ports[i], obs.portAddr[i]
	it := Item{Key: Key{KindNvmet, port.ID}}
	switch {
	case port.Err != nil:
		it.Reason = "not touched: " + port.Err.Error()
		return it
	case port.Trtype != configfs.TransportRDMA && port.Trtype != configfs.TransportTCP:
		it.Reason = fmt.Sprintf("transport %q is neither rdma nor tcp", port.Trtype)
		if a.err == nil {
			it.Address, it.Service = a.ap.Addr(), a.ap.Port()
		}
		return it
	case !port.Adrfam.IP():
		it.Reason = fmt.Sprintf("address family %q is not ipv4 or ipv6", port.Adrfam)
		return it
	case a.err != nil:
		it.Reason = "not touched: " + a.err.Error()
		return it
	}
	ep, _ := portEndpoint(port, a)
	return unmanaged(it.Key, ep, obs)
}

// classifyPortal is the status of a portal the engine does not manage.
func classifyPortal(portal configfs.Portal, obs *Observed) Item {
	k := Key{KindLIO, portal.ID()}
	if portal.Err != nil {
		return Item{Key: k, Reason: "not touched: " + portal.Err.Error()}
	}
	return unmanaged(k, Endpoint{KindLIO, portal.Addr}, obs)
}

// unmanaged is the status of an object with a usable address that is not
// the engine's: a wildcard, or outside the watched subnets. Its state is
// the kernel's verdict on the listener it has.
func unmanaged(k Key, ep Endpoint, obs *Observed) Item {
	v := obs.verdict(ep)
	if ep.Addr.Addr().IsUnspecified() {
		it := located(k, ep, v.Carrier)
		it.Reason = "wildcard address: the kernel re-listens on new devices by itself"
		it.State = v.State
		return it
	}
	it := located(k, ep, v.Carrier)
	it.Reason = "outside the watched subnets"
	it.State = v.State
	if v.State == StateListening || v.State == StateStranded {
		it.Device = v.EntryName
	}
	return it
}
