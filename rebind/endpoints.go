package rebind

import "github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"

// endpointIndex is the observation's index from endpoints to what a plan
// reads of them: the verdict, judged once, and the objects on the endpoint
// (each kind's in configfs order, chained through next). A plan of a few
// endpoints reads only theirs.
type endpointIndex struct {
	at   map[epKey]int32
	list []endpointEntry
	// nextPort[i] is the port after Ports[i] on its endpoint (-1: none);
	// nextPortal likewise for Portals.
	nextPort, nextPortal []int32
}

type endpointEntry struct {
	ep          Endpoint
	v           Verdict
	first, last int32 // the endpoint's first and last object (ports or portals by its kind); -1: none
}

// get returns entry i.
func (x *endpointIndex) get(i int32) *endpointEntry { return &x.list[i] }

// entry returns ep's entry, judging it the first time it is asked for.
func (o *Observed) entry(ep Endpoint) *endpointEntry {
	if o.shared {
		if i, ok := o.eps.at[ep.key()]; ok {
			return o.eps.get(i)
		}
		return &endpointEntry{ep: ep, v: o.judge(ep), first: -1, last: -1}
	}
	return &o.eps.list[o.entryAt(ep)]
}

// entryAt is entry's index in the list.
func (o *Observed) entryAt(ep Endpoint) int32 {
	k := ep.key()
	if i, ok := o.eps.at[k]; ok {
		return i
	}
	i := int32(len(o.eps.list))
	o.eps.at[k] = i
	o.eps.list = append(o.eps.list, endpointEntry{ep: ep, v: o.judge(ep), first: -1, last: -1})
	return i
}

// judge is the endpoint's verdict from this observation's kernel tables
// (indexed here when a carried observation was not).
func (o *Observed) judge(ep Endpoint) Verdict {
	if o.index == nil {
		o.index = rdma.NewIndex(o.Devices, o.Addrs, o.Listeners)
	}
	if ep.Kind == KindTCP {
		return judgeTCP(ep, o.TCPErr == nil, o.TCP, o.index)
	}
	return judge(ep, o.ListenersErr == nil, o.index)
}

// verdict is the endpoint's verdict in this observation.
func (o *Observed) verdict(ep Endpoint) Verdict { return o.entry(ep).v }

// lookup returns the entry of k, if the observation has it.
func (o *Observed) lookup(k epKey) (*endpointEntry, bool) {
	i, ok := o.eps.at[k]
	if !ok {
		return nil, false
	}
	return o.eps.get(i), true
}

// addObject chains object i (a port, or a portal) to its endpoint.
func (o *Observed) addObject(ep Endpoint, i int) { o.chain(o.entryAt(ep), i) }

// chain adds object i to the entry at ei.
func (o *Observed) chain(ei int32, i int) {
	e := &o.eps.list[ei]
	next := o.eps.nextPort
	if e.ep.Kind == KindLIO {
		next = o.eps.nextPortal
	}
	next[i] = -1
	if e.last < 0 {
		e.first = int32(i)
	} else {
		next[e.last] = int32(i)
	}
	e.last = int32(i)
}

// objects calls f with the index of each of e's objects, in configfs order.
func (o *Observed) objects(e *endpointEntry, f func(i int)) {
	next := o.eps.nextPort
	if e.ep.Kind == KindLIO {
		next = o.eps.nextPortal
	}
	for i := e.first; i >= 0; i = next[i] {
		f(int(i))
	}
}
