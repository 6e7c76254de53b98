// Package rebind is the engine of nvmet-rebind: it observes configfs and the
// kernel's RDMA state, plans with a pure function which kernel listeners
// (endpoints) need to be re-created and by which configfs writes, applies
// those steps with an intent journal, verifies the result in the kernel's
// cm_id table, and retries with backoff.
//
// What dies on a device reset is a kernel listener, an endpoint: (owner,
// address, port). Behind it are the configfs objects that hold it: one nvmet
// port, or every LIO TPG portal (of every target) with that address:port and
// iser=1, which share one kernel iSER listener. The engine heals endpoints.
//
// Desired state is configfs as the admin left it (rescanned every time)
// plus the intent journal. The kernel never removes links or clears iser on
// device removal, so any such change is the admin's and is never undone.
package rebind

import (
	"fmt"

	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/backoff"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Kind says which target code owns a listener.
type Kind string

// The two kinds of listener the engine heals.
const (
	KindNvmet Kind = "nvmet"
	KindLIO   Kind = "lio"
)

// owner is the RES_KERN_NAME of the kind's listeners.
func (k Kind) owner() string {
	if k == KindLIO {
		return "ib_isert"
	}
	return "nvmet_rdma"
}

// Key identifies a configfs object: an nvmet port id or a LIO portal id.
type Key struct {
	Kind Kind
	ID   string
}

func (k Key) String() string {
	if k.Kind == KindNvmet {
		return "nvmet port " + k.ID
	}
	return "lio portal " + k.ID
}

func compareKeys(a, b Key) int {
	if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
		return c
	}
	if a.Kind == KindNvmet {
		return configfs.ComparePortIDs(a.ID, b.ID)
	}
	return strings.Compare(a.ID, b.ID)
}

// Endpoint is one kernel listener: what rdma_cm binds, what a device
// removal destroys and what must be re-created.
type Endpoint struct {
	Kind Kind
	Addr netip.AddrPort
}

// Owner is the kernel module that owns the listener (RES_KERN_NAME).
func (e Endpoint) Owner() string { return e.Kind.owner() }

func (e Endpoint) String() string { return e.Owner() + " " + e.Addr.String() }

// compareEndpoints orders nvmet endpoints before LIO ones (configfs order
// of the objects), then by address.
func compareEndpoints(a, b Endpoint) int {
	if a.Kind != b.Kind {
		if a.Kind == KindNvmet {
			return -1
		}
		return 1
	}
	return a.Addr.Compare(b.Addr)
}

// State is what the kernel says of an endpoint's listener.
type State int

// States.
const (
	StateNone      State = iota // nothing is expected to listen
	StateListening              // LISTEN on the RDMA device that carries the address
	StateDead                   // no LISTEN entry
	StateStranded               // LISTEN on a device that no longer carries the address
	StateUnknown                // the cm_id table could not be read
)

func (s State) String() string {
	return [...]string{"", "listening", "dead", "stranded", "unknown"}[s]
}

// Action names what a heal does, for logs, status and metrics.
type Action int

// Actions.
const (
	ActNone Action = iota
	// ActRebindPort: journal the links, unlink every subsystem, relink
	// them in order (the port's listener is dead or stranded).
	ActRebindPort
	// ActCompletePort: link what the journal says is missing (a refused
	// relink, or a crash mid-rebind).
	ActCompletePort
	// ActToggleISER: journal every sharer, iser 0 on each, then 1 on each.
	ActToggleISER
	// ActCompleteISER: iser 1 on journaled sharers that read 0.
	ActCompleteISER
	// ActDropJournal: the journal entries have nothing left to do.
	ActDropJournal
	// ActCompleteBoot: link subsystems (or set iser) that a saved config
	// declares and the boot-time restore could not.
	ActCompleteBoot
)

func (a Action) String() string {
	return [...]string{"none", "rebind", "complete-relink", "toggle-iser", "complete-iser", "drop-journal", "complete-boot"}[a]
}

// Observed is everything one reconcile reads.
type Observed struct {
	// view is netIndex of this observation's kernel tables, built once by
	// Engine.Observe for its own use and kept for Plan (nil: Plan builds
	// it). The kernel fields must not change after it is set.
	view *netView

	Ports      []configfs.Port
	Subsystems map[string]bool // nvmet/subsystems/<nqn> exists
	// LinksUnread are the ports whose links were not read: their listener
	// was alive, and a live port's links are not needed to plan.
	LinksUnread map[string]bool
	Portals     []configfs.Portal
	PortalsErr  error // some portals could not be read: never forget their journal
	Devices     []rdma.Device
	DevicesErr  error
	Addrs       []rdma.Addr
	AddrsErr    error
	Listeners   []rdma.CMID
	// ListenersErr is set when the cm_id table could not be read: whether
	// anything listens is then unknown and no rebind is planned.
	ListenersErr error
	Journal      map[Key]Intent
	// Declared is what nvmetcli's/targetcli's saved configs declare;
	// BootUntil ends the window in which it is completed.
	Declared  []Declared
	BootUntil time.Time
	// EventAt is the last device or address event: the GID table fills a
	// moment after such an event, so a missing carrier is looked at again
	// shortly after it (recheck).
	EventAt time.Time
	Now     time.Time
}

// Memory is what the engine remembers between reconciles.
type Memory struct {
	DeadSince map[Endpoint]time.Time     // first reconcile that saw the endpoint dead or stranded
	NextTry   map[Endpoint]time.Time     // backoff: no attempt before this
	Backoff   map[Endpoint]time.Duration // the last backoff step
	// AliveOn is the RDMA device index (+1) the listener was last seen
	// alive on. Indices are never reused: while that same device is still
	// registered, a vanished listener means the device is being removed
	// right now, and a rebind would race the removal.
	AliveOn map[Endpoint]uint32
	Pins    map[Key]uint64 // node GUID the object's listener was last alive on
	// Forced objects were asked for by `nvmet-rebind rebind`: give-up,
	// graces and backoff do not hold their endpoint back, once.
	Forced map[Key]bool
}

// NewMemory returns an empty memory.
func NewMemory() Memory {
	return Memory{DeadSince: map[Endpoint]time.Time{}, NextTry: map[Endpoint]time.Time{}, Backoff: map[Endpoint]time.Duration{},
		AliveOn: map[Endpoint]uint32{}, Pins: map[Key]uint64{}, Forced: map[Key]bool{}}
}

// Grace periods and rechecks.
const (
	// removalGrace bounds the wait for a device whose listener vanished
	// to finish unregistering.
	removalGrace = 5 * time.Second
	// strandedGrace is how long the kernel's own repair (nvmet-rdma's
	// repair_work on ADDR_CHANGE: at once, then every 5 s) gets before a
	// stranded listener is rebound.
	strandedGrace = 5 * time.Second
)

// recheckAfter are the delays after a device or address event at which an
// endpoint that waits for its address to appear in a GID table is looked at
// again: the table fills a moment after the device or address appears, and
// no event says when.
var recheckAfter = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}

// Item is the status of one configfs object (nvmet port or LIO portal).
type Item struct {
	Key
	Endpoint Endpoint // zero when the object has no usable address
	Address  netip.Addr
	Service  uint16
	Managed  bool
	Reason   string
	State    State
	// Listening: the endpoint listens where its address is carried; nil
	// when unknown or when the object has no listener to judge.
	Listening   *bool
	Device      string // RDMA device of the LISTEN entry, else the carrier
	GUID        uint64 // node GUID of the carrier (or of Device)
	Netdev      string // netdev holding the address
	Carrier     string // RDMA device rdma_cm would bind the address to now
	CarrierPort uint32
	Sharers     int    // configfs objects holding the endpoint
	Action      Action // the action of the endpoint's heal this round
	Expected    bool   // a listener should exist: links, iser=1, journal
	DeadSince   time.Time
	RetryAt     time.Time
	// GaveUp: dead or stranded for more than give_up_after, so no longer
	// healed until a reload or a manual rebind.
	GaveUp bool
}

// Op is one kind of step.
type Op int

// Steps a heal is made of.
const (
	OpJournalPut    Op = iota // write Step.Intent to the journal (fsync'd)
	OpUnlink                  // remove port Key's link Step.Link
	OpLink                    // link Step.Link into port Key
	OpSetISER                 // write Step.On to portal Key's iser
	OpJournalDelete           // forget Key's journal entry
)

// Step is one write of a heal, with its precondition. Apply checks the
// precondition right before the write (configfs may have changed since the
// plan): when it does not hold, the step and every later step of the same
// object (but its journal delete) are skipped, or, for Abort, the heal
// stops there.
type Step struct {
	Op     Op
	Key    Key
	Link   configfs.Link // OpUnlink, OpLink
	On     bool          // OpSetISER
	Intent Intent        // OpJournalPut
	// LinksAre (journal put of a port): the port's links must be exactly
	// these, or the heal stops before its first write — the admin changed
	// the port since the plan, and the next round plans again.
	LinksAre []configfs.Link
}

// Precondition renders what Apply checks before the step.
func (s Step) Precondition() string {
	switch s.Op {
	case OpJournalPut:
		if s.Key.Kind == KindNvmet {
			return fmt.Sprintf("the port's links are still the %d planned, else stop", len(s.LinksAre))
		}
		return "the portal exists and iser reads 1"
	case OpUnlink:
		return "the link exists"
	case OpLink:
		return "the port and subsystem exist and the link does not"
	case OpSetISER:
		if s.On {
			return "the portal exists and iser reads 0"
		}
		return "the portal exists and iser reads 1"
	}
	return ""
}

// Heal is the plan for one endpoint: the ordered steps Apply executes.
type Heal struct {
	Endpoint Endpoint
	Action   Action
	Reason   string
	Keys     []Key // the objects written
	Steps    []Step
}

// EndpointState is what Plan concluded about one endpoint, for Learn.
type EndpointState struct {
	Endpoint
	Keys     []Key
	State    State
	Expected bool
	DevIndex uint32 // RDMA device of the LISTEN entry (listening or stranded)
	GUID     uint64 // node GUID of that device
	// Held: its heal is held back by something only a change of the
	// inputs ends, never the clock (its address on no netdev, pin_device,
	// given up): the same inputs plan the same later (timeless).
	Held bool
}

// Planned is the result of Plan.
type Planned struct {
	Items     []Item          // one per configfs object (status)
	Heals     []Heal          // what Apply executes, in order
	Endpoints []EndpointState // what Learn remembers
}

func ptr[T any](v T) *T { return &v }

// netView answers: which netdev holds an address, which RDMA port carries
// it, and which listeners the kernel has.
type netView struct {
	addrs    map[netip.Addr]rdma.Addr
	carriers rdma.Carriers
	devByIdx map[uint32]rdma.Device
	spans    map[lkey]span // address-bound LISTEN entries: backing[start:end]
	backing  []rdma.CMID
	wild     map[lkey]bool // wildcard children (no port)
	// unknown is the reason of every endpoint whose state is unknown (one
	// string for thousands of items).
	unknown string
}

// lkey indexes listeners by kernel owner and source address (the zone
// left out). It holds no pointer: the GC never scans the index, and it
// hashes as plain memory.
type lkey struct {
	ip    [16]byte
	port  uint16
	is4   bool
	owner uint8 // ownerCode
}

// ownerCode numbers the kernel owners an endpoint is looked up by; every
// other owner shares one code (never looked up).
func ownerCode(name string) uint8 {
	switch name {
	case "":
		return 0 // kernels without RES_KERN_NAME
	case "nvmet_rdma":
		return 1
	case "ib_isert":
		return 2
	}
	return 3
}

func listenKey(owner string, ap netip.AddrPort) lkey {
	a := ap.Addr()
	return lkey{ip: a.As16(), port: ap.Port(), is4: a.Is4(), owner: ownerCode(owner)}
}

func netIndex(obs Observed) netView {
	var v netView
	v.reindex(obs)
	return v
}

// reindex makes v the index of obs, reusing its storage: the engine
// indexes each of its observations into one of two views it keeps
// (thousands of listeners, addresses and GIDs make no garbage a round);
// what v answered before must no longer be used.
func (v *netView) reindex(obs Observed) {
	if v.addrs == nil {
		// Sized up front: at thousands of listeners, growing these maps
		// was most of a plan's garbage (BENCHMARKS.md).
		v.addrs = make(map[netip.Addr]rdma.Addr, len(obs.Addrs))
		v.devByIdx = make(map[uint32]rdma.Device, len(obs.Devices))
		v.spans = make(map[lkey]span, len(obs.Listeners))
		v.wild = map[lkey]bool{}
	} else {
		clear(v.addrs)
		clear(v.devByIdx)
		clear(v.spans)
		clear(v.wild)
	}
	v.carriers.Reindex(obs.Devices)
	v.unknown = ""
	if obs.ListenersErr != nil {
		v.unknown = "listener state unknown: " + obs.ListenersErr.Error()
	}
	// The bound listeners share one backing array, grouped by key in
	// table order: each key's entries are a span of it (one allocation
	// instead of one per listener, and one map).
	n := 0
	for _, c := range obs.Listeners {
		if !c.Listening() {
			continue
		}
		k := listenKey(c.KernName, c.Src)
		if c.Port == 0 {
			v.wild[k] = true
			continue
		}
		sp := v.spans[k]
		sp.end++ // a count, for now
		v.spans[k] = sp
		n++
	}
	at := 0
	for k, sp := range v.spans {
		v.spans[k] = span{at, at} // end is the fill cursor
		at += sp.end
	}
	clear(v.backing[:cap(v.backing)])
	if cap(v.backing) >= n {
		v.backing = v.backing[:n]
	} else {
		v.backing = make([]rdma.CMID, n)
	}
	for _, c := range obs.Listeners {
		if !c.Listening() || c.Port == 0 {
			continue
		}
		k := listenKey(c.KernName, c.Src)
		sp := v.spans[k]
		v.backing[sp.end] = c
		sp.end++
		v.spans[k] = sp
	}
	for _, a := range obs.Addrs {
		if _, dup := v.addrs[a.IP.Unmap()]; !dup {
			v.addrs[a.IP.Unmap()] = a
		}
	}
	for _, d := range obs.Devices {
		v.devByIdx[d.Index] = d
	}
}

// carrier is where an address is and which RDMA port would carry it.
type carrier struct {
	addr   rdma.Addr
	has    bool // some netdev holds the address
	dev    rdma.Device
	port   uint32
	how    string // "gid" or "netdev" (fallback without a GID table)
	hasDev bool
}

func (v netView) carrierOf(ip netip.Addr) carrier {
	a, ok := v.addrs[ip]
	if !ok {
		return carrier{}
	}
	c := carrier{addr: a, has: true}
	c.dev, c.port, c.how, c.hasDev = v.carriers.Of(a)
	return c
}

// span is a key's run of entries in netView.backing.
type span struct{ start, end int }

// bound returns the address-bound LISTEN entries of k (capacity-limited:
// appending never writes into another key's entries).
func (v netView) bound(k lkey) []rdma.CMID {
	sp, ok := v.spans[k]
	if !ok {
		return nil
	}
	return v.backing[sp.start:sp.end:sp.end]
}

// entries returns the LISTEN entries of the endpoint (a specific address).
func (v netView) entries(e Endpoint) []rdma.CMID {
	if es := v.bound(listenKey(e.Owner(), e.Addr)); len(es) > 0 {
		return es
	}
	return v.bound(listenKey("", e.Addr)) // kernels without RES_KERN_NAME
}

func watched(cfg Config, ip netip.Addr) bool {
	if len(cfg.Watch) == 0 {
		return true
	}
	for _, p := range cfg.Watch {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// holder is one configfs object behind an endpoint.
type holder struct {
	item   int // index into Items
	port   configfs.Port
	portal configfs.Portal
	intent *Intent
	boot   *Declared // declared by a saved config and missing (window open)
}

// group is an endpoint with its holders, in configfs order.
type group struct {
	ep      Endpoint
	holders []holder
}

// actionable is obs reduced to the objects whose endpoint may need an
// action: not listening where its address is carried (dead, stranded,
// unknown), or named by a journal entry, a saved config's declaration or
// a manual rebind (Memory.Forced); unreadable ones too. Endpoints are
// planned independently, so Plan of it decides the same heals for those
// endpoints as Plan of obs, at the cost of the few objects not alive
// (Reconcile acts on it first, and checks with the full plan when it
// finds nothing to do).
func actionable(obs Observed, mem Memory) Observed {
	var v netView
	if obs.view != nil {
		v = *obs.view
	} else {
		v = netIndex(obs)
		obs.view = &v
	}
	named := func(k Key) bool {
		if _, ok := obs.Journal[k]; ok {
			return true
		}
		return mem.Forced[k]
	}
	declared := make(map[Key]bool, len(obs.Declared))
	for _, d := range obs.Declared {
		declared[Key{d.Kind, d.ID}] = true
	}
	alive := func(ep Endpoint) bool {
		if ep.Addr.Addr().IsUnspecified() {
			return true // wildcard: the kernel's own
		}
		st, _ := judge(ep, obs, v, v.carrierOf(ep.Addr.Addr()))
		return st == StateListening
	}
	sub := obs
	sub.Ports = make([]configfs.Port, 0, 16)
	for _, p := range obs.Ports {
		k := Key{KindNvmet, p.ID}
		if obs.LinksUnread[p.ID] && !mem.Forced[k] {
			// Observe judged it listening with this view, and neither
			// journaled nor declared: alive.
			continue
		}
		ap, err := p.Addr()
		if p.Err != nil || err != nil || named(k) || declared[k] || !alive(Endpoint{KindNvmet, ap}) {
			sub.Ports = append(sub.Ports, p)
		}
	}
	sub.Portals = make([]configfs.Portal, 0, 16)
	for _, p := range obs.Portals {
		k := Key{KindLIO, p.ID()}
		if p.Err != nil || named(k) || declared[k] || !alive(Endpoint{KindLIO, p.Addr}) {
			sub.Portals = append(sub.Portals, p)
		}
	}
	return sub
}

// Plan decides, for every endpoint, whether and how to heal it, and the
// status of every configfs object. It is pure: same input, same output.
func Plan(obs Observed, mem Memory, cfg Config) Planned {
	var v netView
	if obs.view != nil {
		v = *obs.view
	} else {
		v = netIndex(obs)
	}
	n := len(obs.Ports) + len(obs.Portals)
	p := Planned{Items: make([]Item, 0, n+len(obs.Declared)), Endpoints: make([]EndpointState, 0, n)}
	groups := make(map[Endpoint]*group, n)
	order := make([]Endpoint, 0, n)
	join := func(h holder, ep Endpoint) {
		g := groups[ep]
		if g == nil {
			g = &group{ep: ep}
			groups[ep] = g
			order = append(order, ep)
		}
		g.holders = append(g.holders, h)
	}
	seen := make(map[Key]bool, n)
	declared := map[Key]*Declared{}
	if obs.Now.Before(obs.BootUntil) {
		for i := range obs.Declared {
			d := &obs.Declared[i]
			declared[Key{d.Kind, d.ID}] = d
		}
	}
	// add records an object's status and, when eligible, joins it to its
	// endpoint with its journal entry and saved-config declaration.
	add := func(it Item, ok bool, h holder) {
		seen[it.Key] = true
		p.Items = append(p.Items, it)
		if !ok {
			return
		}
		h.item = len(p.Items) - 1
		if in, ok := obs.Journal[it.Key]; ok {
			h.intent = &in
		}
		if d := declared[it.Key]; d != nil && d.Addr == it.Endpoint.Addr {
			h.boot = d
		}
		join(h, it.Endpoint)
	}
	for _, port := range obs.Ports {
		it, ok := classifyPort(port, obs, cfg, v)
		add(it, ok, holder{port: port})
	}
	for _, portal := range obs.Portals {
		it, ok := classifyPortal(portal, obs, cfg, v)
		add(it, ok, holder{portal: portal})
	}
	// Saved configs naming objects configfs does not have: reported only.
	for _, d := range obs.Declared {
		k := Key{d.Kind, d.ID}
		if !seen[k] {
			seen[k] = true
			p.Items = append(p.Items, Item{Key: k, Address: d.Addr.Addr(), Service: d.Addr.Port(),
				Reason: fmt.Sprintf("declared in %s but not in configfs: not created", d.Source)})
		}
	}
	slices.SortFunc(order, compareEndpoints)
	for _, ep := range order {
		planEndpoint(&p, groups[ep], obs, mem, cfg, v)
	}
	// Journal entries whose object is gone: the admin removed it.
	var gone []Key
	for k := range obs.Journal {
		if !seen[k] && !(k.Kind == KindLIO && obs.PortalsErr != nil) {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, compareKeys)
	for _, k := range gone {
		p.Heals = append(p.Heals, Heal{Action: ActDropJournal, Keys: []Key{k},
			Reason: k.String() + " was removed by the admin during the outage; forgetting its journal entry",
			Steps:  []Step{{Op: OpJournalDelete, Key: k}}})
	}
	return p
}

// classifyPort fills what the port alone tells; ok says it is eligible: an
// RDMA port with a specific, watched address whose endpoint may be healed.
func classifyPort(port configfs.Port, obs Observed, cfg Config, v netView) (Item, bool) {
	it := Item{Key: Key{KindNvmet, port.ID}}
	switch {
	case port.Err != nil:
		it.Reason = "not touched: " + port.Err.Error()
		return it, false
	case port.Trtype != "rdma":
		it.Reason = fmt.Sprintf("transport %q is not rdma", port.Trtype)
		if ap, err := port.Addr(); err == nil {
			it.Address, it.Service = ap.Addr(), ap.Port()
		}
		return it, false
	case port.Adrfam != "ipv4" && port.Adrfam != "ipv6":
		it.Reason = fmt.Sprintf("address family %q is not ipv4 or ipv6", port.Adrfam)
		return it, false
	}
	ap, err := port.Addr()
	if err != nil {
		it.Reason = "not touched: " + err.Error()
		return it, false
	}
	return it, located(&it, ap, obs, cfg, v)
}

func classifyPortal(portal configfs.Portal, obs Observed, cfg Config, v netView) (Item, bool) {
	it := Item{Key: Key{KindLIO, portal.ID()}}
	if portal.Err != nil {
		it.Reason = "not touched: " + portal.Err.Error()
		return it, false
	}
	return it, located(&it, portal.Addr, obs, cfg, v)
}

// located fills the address facts shared by ports and portals, and returns
// whether the object's endpoint is managed (specific and watched).
func located(it *Item, ap netip.AddrPort, obs Observed, cfg Config, v netView) bool {
	it.Address, it.Service = ap.Addr(), ap.Port()
	it.Endpoint = Endpoint{it.Kind, ap}
	c := v.carrierOf(ap.Addr())
	it.Netdev = c.addr.Netdev
	if c.hasDev {
		it.Carrier, it.CarrierPort, it.Device, it.GUID = c.dev.Name, c.port, c.dev.Name, c.dev.NodeGUID
	}
	switch {
	case ap.Addr().IsUnspecified():
		it.Reason = "wildcard address: the kernel re-listens on new devices by itself"
		it.Listening = wildcardListening(obs, v, it.Endpoint)
		return false
	case !watched(cfg, ap.Addr()):
		it.Reason = "outside the watched subnets"
		if obs.ListenersErr == nil {
			es := v.entries(it.Endpoint)
			it.Listening = ptr(len(es) > 0)
			if len(es) > 0 {
				it.Device = es[0].DevName
			}
		}
		return false
	}
	it.Managed = true
	return true
}

func wildcardListening(obs Observed, v netView, e Endpoint) *bool {
	if obs.ListenersErr != nil {
		return nil
	}
	return ptr(len(obs.Devices) > 0 && (v.wild[listenKey(e.Owner(), e.Addr)] || v.wild[listenKey("", e.Addr)]))
}

// judge says whether the endpoint's listener is alive where its address is
// carried now. A LISTEN entry on another device is stranded: hosts that
// reach the address through the carrier are rejected. Without a carrier
// decided from a GID table (address absent, no device carries it, GID table
// unreadable) an entry is taken as alive: nothing better can be bound.
func judge(ep Endpoint, obs Observed, v netView, c carrier) (State, rdma.CMID) {
	if obs.ListenersErr != nil {
		return StateUnknown, rdma.CMID{}
	}
	es := v.entries(ep)
	if len(es) == 0 {
		return StateDead, rdma.CMID{}
	}
	if !c.hasDev || c.how != "gid" {
		return StateListening, es[0]
	}
	for _, e := range es {
		if e.DevIndex == c.dev.Index && (e.Port == 0 || e.Port == c.port) {
			return StateListening, e
		}
	}
	return StateStranded, es[0]
}

// planEndpoint decides one endpoint: its state, the status of its holders,
// and its heal.
func planEndpoint(p *Planned, g *group, obs Observed, mem Memory, cfg Config, v netView) {
	ep := g.ep
	c := v.carrierOf(ep.Addr.Addr())
	st, entry := judge(ep, obs, v, c)
	var h Heal
	var expected bool
	if ep.Kind == KindNvmet {
		expected, h = planPorts(g, st, obs)
	} else {
		expected, h = planPortals(g, st, obs)
	}
	h.Endpoint = ep
	h.Keys = stepKeys(h.Steps)
	es := EndpointState{Endpoint: ep, State: st, Expected: expected}
	if !expected && st != StateListening {
		es.State = StateNone
	}
	if st == StateListening || st == StateStranded {
		es.DevIndex = entry.DevIndex
		es.GUID = v.devByIdx[entry.DevIndex].NodeGUID
	}
	sharers := 0
	for _, hd := range g.holders {
		if sharing(hd) {
			es.Keys = append(es.Keys, p.Items[hd.item].Key)
			sharers++
		}
	}

	// Why, and whether the heal may run now.
	reason := ""
	retryAt := time.Time{}
	gaveUp := false
	switch es.State {
	case StateNone:
		if ep.Kind == KindNvmet {
			reason = "not enabled: no subsystem linked"
		} else {
			reason = "iser is 0: no iSER listener configured"
		}
	case StateUnknown:
		reason = v.unknown
	case StateListening:
		reason = "listening"
	case StateDead:
		reason = "listener dead"
		if ep.Kind == KindLIO {
			reason = "listener dead (iser reads 1)"
		}
	case StateStranded:
		reason = fmt.Sprintf("stranded: listening on %s, but %s is carried by %s port %d now; hosts cannot connect", entry.DevName, ep.Addr.Addr(), c.dev.Name, c.port)
	}
	if h.Action != ActNone && h.Action != ActDropJournal {
		if h.Reason != "" {
			reason = h.Reason + "; " + reason
		}
		if w := gate(ep, g, st, entry, obs, mem, cfg, c, p.Items); w != nil {
			reason += "; " + w.why
			retryAt, gaveUp = w.until, w.gaveUp
			es.Held = w.clockFree && w.until.IsZero()
			h = Heal{}
		}
	}
	if h.Action != ActNone {
		if h.Reason == "" {
			h.Reason = reason
		}
		p.Heals = append(p.Heals, h)
	}
	p.Endpoints = append(p.Endpoints, es)
	for _, hd := range g.holders {
		it := &p.Items[hd.item]
		it.State, it.Sharers, it.Action, it.RetryAt = es.State, sharers, h.Action, retryAt
		it.Reason, it.GaveUp = reason, gaveUp
		it.Expected = expected
		if sharers > 1 && ep.Kind == KindLIO {
			it.Reason += fmt.Sprintf(" (iSER listener shared by %d portals)", sharers)
		}
		if hd.boot != nil && hd.boot.Kind == KindNvmet {
			var absent []string
			for _, n := range hd.boot.NQNs {
				if !obs.Subsystems[n] {
					absent = append(absent, n)
				}
			}
			if len(absent) > 0 {
				it.Reason += fmt.Sprintf("; subsystem(s) %s declared in %s do not exist: not created", strings.Join(absent, ", "), hd.boot.Source)
			}
		}
		if !sharing(hd) {
			// A plain iSCSI/TCP portal on the address: no iSER listener of its own.
			it.Managed, it.Expected = false, false
			it.Reason = "iser is 0: no iSER listener configured"
			if st == StateListening {
				it.Reason += " (the address's iSER listener belongs to other portals)"
			}
			it.State = StateNone
			continue
		}
		switch es.State {
		case StateListening:
			it.Listening = ptr(true)
			if entry.DevName != "" {
				it.Device = entry.DevName
			}
		case StateDead, StateStranded:
			it.Listening = ptr(false)
			it.DeadSince = mem.DeadSince[ep]
			if es.State == StateStranded {
				it.Device = entry.DevName
			}
		case StateNone:
			if obs.ListenersErr == nil {
				it.Listening = ptr(false)
			}
		}
	}
}

// stepKeys lists the objects the steps write, in order of first write.
func stepKeys(steps []Step) []Key {
	var keys []Key
	seen := map[Key]bool{}
	for _, s := range steps {
		if !seen[s.Key] {
			seen[s.Key] = true
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// sharing says whether a holder holds the endpoint's listener: every nvmet
// port, and a LIO portal with iser=1 (or at 0 by a journaled heal, or
// declared by a saved config). A plain iSCSI/TCP portal on the same
// address:port does not.
func sharing(hd holder) bool {
	return hd.port.ID != "" || hd.portal.ISER || hd.intent != nil || hd.boot != nil
}

// planPorts plans an nvmet endpoint (normally one port). It returns whether
// a listener is expected and the heal (Action none when nothing is due).
func planPorts(g *group, st State, obs Observed) (bool, Heal) {
	var h Heal
	expected := false
	var journalPuts, unlinks, links, deletes []Step
	boot := false
	for _, hd := range g.holders {
		port := hd.port
		k := Key{KindNvmet, port.ID}
		present := port.Links
		if obs.LinksUnread[port.ID] {
			expected = true
			continue // alive when read: nothing to plan
		}
		if hd.intent != nil && hd.intent.Address != g.ep.Addr.String() {
			// The admin re-created the port with another address meanwhile.
			h.Reason = fmt.Sprintf("journal is for %s, the port now has %s: the admin changed it", hd.intent.Address, g.ep.Addr)
			deletes = append(deletes, Step{Op: OpJournalDelete, Key: k})
			hd.intent = nil
		}
		// want: the journal's links first (in their order), then links
		// present that it lacks, then those a saved config declares.
		var want []configfs.Link
		if hd.intent != nil {
			for _, l := range hd.intent.Links {
				if obs.Subsystems[l.NQN] || slices.Contains(present, l) {
					want = append(want, l)
				}
			}
		}
		for _, l := range present {
			if !slices.Contains(want, l) {
				want = append(want, l)
			}
		}
		var declaredMissing []configfs.Link
		if hd.boot != nil {
			for _, n := range hd.boot.NQNs {
				l := configfs.Link{Name: n, NQN: n}
				if obs.Subsystems[n] && !slices.ContainsFunc(want, func(w configfs.Link) bool { return w.NQN == n }) {
					declaredMissing = append(declaredMissing, l)
				}
			}
		}
		missing := func(ls []configfs.Link) []configfs.Link {
			var m []configfs.Link
			for _, l := range ls {
				if !slices.Contains(present, l) {
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
				in := Intent{Kind: KindNvmet, ID: port.ID, Address: g.ep.Addr.String(), Links: all, Started: obs.Now}
				journalPuts = append(journalPuts, Step{Op: OpJournalPut, Key: k, Intent: in, LinksAre: slices.Clone(present)})
				for _, l := range present {
					unlinks = append(unlinks, Step{Op: OpUnlink, Key: k, Link: l})
				}
			}
			for _, l := range all {
				links = append(links, Step{Op: OpLink, Key: k, Link: l})
			}
			if len(present) > 0 || hd.intent != nil {
				deletes = append(deletes, Step{Op: OpJournalDelete, Key: k})
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
				links = append(links, Step{Op: OpLink, Key: k, Link: l})
			}
			if hd.intent != nil {
				deletes = append(deletes, Step{Op: OpJournalDelete, Key: k})
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

// planPortals plans a LIO iSER endpoint: every portal with the address:port.
// The kernel keeps one iSER listener per address:port for all of them, so a
// dead one is re-created only when every sharer goes to 0 before any goes
// back to 1 (KERNEL.md).
func planPortals(g *group, st State, obs Observed) (bool, Heal) {
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
	key := func(hd holder) Key { return Key{KindLIO, hd.portal.ID()} }
	var steps []Step
	switch st {
	case StateDead, StateStranded:
		if !expected {
			break
		}
		for _, hd := range on {
			if hd.intent == nil {
				in := Intent{Kind: KindLIO, ID: hd.portal.ID(), Address: g.ep.Addr.String(), ISER: true, Started: obs.Now}
				steps = append(steps, Step{Op: OpJournalPut, Key: key(hd), Intent: in})
			}
		}
		for _, hd := range on {
			steps = append(steps, Step{Op: OpSetISER, Key: key(hd), On: false})
		}
		for _, hd := range g.holders { // configfs order
			if sharing(hd) {
				steps = append(steps, Step{Op: OpSetISER, Key: key(hd), On: true})
			}
		}
		for _, hd := range g.holders {
			if hd.portal.ISER || hd.intent != nil {
				steps = append(steps, Step{Op: OpJournalDelete, Key: key(hd)})
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
			steps = append(steps, Step{Op: OpSetISER, Key: key(hd), On: true})
		}
		for _, hd := range journaled {
			steps = append(steps, Step{Op: OpJournalDelete, Key: key(hd)})
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

// hold is why gate holds a heal back: rendered in Reason, and when to
// look again (zero: at the next event or resync).
type hold struct {
	why    string
	until  time.Time
	gaveUp bool // the give-up timer ran out (Item.GaveUp, a metric)
	// clockFree: only a change of the inputs ends it, never the clock
	// (the address on no netdev, pin_device, given up).
	clockFree bool
}

// gate applies the conditions shared by every heal: the address is carried
// by an RDMA device, the give-up timer, the removal and repair graces,
// pinning and backoff. It returns nil when the heal may run now.
func gate(ep Endpoint, g *group, st State, entry rdma.CMID, obs Observed, mem Memory, cfg Config, c carrier, items []Item) *hold {
	now := obs.Now
	switch {
	case obs.AddrsErr != nil:
		return &hold{why: fmt.Sprintf("waiting: addresses unknown (%v)", obs.AddrsErr), clockFree: true}
	case !c.has:
		return &hold{why: fmt.Sprintf("waiting for %s to appear on a netdev", ep.Addr.Addr()), clockFree: true}
	case !c.hasDev:
		return &hold{why: fmt.Sprintf("waiting for an RDMA device to carry %s on %s (no GID table entry yet)", ep.Addr.Addr(), c.addr.Netdev), until: recheck(obs)}
	}
	if st == StateStranded && cfg.PinDevice {
		return &hold{why: fmt.Sprintf("pin_device = true: left on %s", entry.DevName), clockFree: true}
	}
	for _, hd := range g.holders {
		if mem.Forced[items[hd.item].Key] {
			return nil
		}
	}
	since, ok := mem.DeadSince[ep]
	if !ok {
		since = now
	}
	if st == StateDead || st == StateStranded {
		if cfg.GiveUpAfter > 0 && now.Sub(since) >= cfg.GiveUpAfter {
			return &hold{why: fmt.Sprintf("gave up: dead for more than give_up_after=%v (run `nvmet-rebind rebind %s` or reload to try again)", cfg.GiveUpAfter, items[g.holders[0].item].ID), gaveUp: true, clockFree: true}
		}
	}
	if st == StateDead {
		if idx, ok := mem.AliveOn[ep]; ok && idx == c.dev.Index+1 {
			if until := since.Add(removalGrace); now.Before(until) {
				return &hold{why: fmt.Sprintf("waiting: %s (index %d) that it listened on is still registered, its removal is probably in progress", c.dev.Name, c.dev.Index), until: until}
			}
		}
	}
	if st == StateStranded {
		if until := since.Add(strandedGrace); now.Before(until) {
			return &hold{why: fmt.Sprintf("waiting until %s for the kernel's own repair", until.Format(time.TimeOnly+".000")), until: until}
		}
	}
	if cfg.PinDevice {
		for _, hd := range g.holders {
			k := items[hd.item].Key
			if pin, ok := mem.Pins[k]; ok && pin != c.dev.NodeGUID {
				return &hold{why: fmt.Sprintf("pinned: was on node GUID %s, %s is now on %s (GUID %s)", rdma.FormatGUID(pin), ep.Addr.Addr(), c.dev.Name, rdma.FormatGUID(c.dev.NodeGUID))}
			}
		}
	}
	if t, ok := mem.NextTry[ep]; ok && now.Before(t) {
		return &hold{why: fmt.Sprintf("retry in %v", t.Sub(now).Round(time.Millisecond)), until: t}
	}
	return nil
}

// recheck returns the next look after the last event, or zero when the
// short re-checks are over (the periodic resync looks again).
func recheck(obs Observed) time.Time {
	if obs.EventAt.IsZero() {
		return time.Time{}
	}
	for _, d := range recheckAfter {
		if t := obs.EventAt.Add(d); t.After(obs.Now) {
			return t
		}
	}
	return time.Time{}
}

// ServiceString renders the service as configfs spells it.
func (it Item) ServiceString() string {
	if it.Service == 0 && !it.Address.IsValid() {
		return ""
	}
	return strconv.Itoa(int(it.Service))
}

// Describe renders a step for `plan`: the write, with configfs paths under
// root, and its precondition.
func (s Step) Describe(root string) string {
	port := func() string { return root + "/nvmet/ports/" + s.Key.ID + "/subsystems/" + s.Link.Name }
	w := ""
	switch s.Op {
	case OpJournalPut:
		w = "journal " + s.Key.String()
	case OpUnlink:
		w = "rm " + port()
	case OpLink:
		w = "ln -s " + root + "/nvmet/subsystems/" + s.Link.NQN + " " + port()
	case OpSetISER:
		iqn, tpg, np, _ := configfs.ParsePortalID(s.Key.ID)
		v := "0"
		if s.On {
			v = "1"
		}
		w = "echo " + v + " > " + root + "/target/iscsi/" + iqn + "/" + tpg + "/np/" + np + "/iser"
	case OpJournalDelete:
		w = "forget the journal entry of " + s.Key.String()
	}
	if pre := s.Precondition(); pre != "" {
		w += "    (if " + pre + ")"
	}
	return w
}

// Learn is the one place memory changes: from what a plan concluded about
// every endpoint (dead-since, last device alive on, pins) and from the
// outcomes of the heals applied this round (backoff). It is pure: mem is
// not modified; the new memory is returned with whether pins changed.
func Learn(mem Memory, eps []EndpointState, items []Item, outcomes []Outcome, now time.Time) (Memory, bool) {
	out := Memory{DeadSince: cloneMap(mem.DeadSince), NextTry: cloneMap(mem.NextTry), Backoff: cloneMap(mem.Backoff),
		AliveOn: cloneMap(mem.AliveOn), Pins: cloneMap(mem.Pins), Forced: cloneMap(mem.Forced)}
	pinsChanged := false
	present := map[Endpoint]bool{}
	for _, e := range eps {
		present[e.Endpoint] = true
		switch e.State {
		case StateListening:
			out.AliveOn[e.Endpoint] = e.DevIndex + 1
			delete(out.DeadSince, e.Endpoint)
			delete(out.NextTry, e.Endpoint)
			delete(out.Backoff, e.Endpoint)
			for _, k := range e.Keys {
				delete(out.Forced, k)
				if e.GUID != 0 && out.Pins[k] != e.GUID {
					out.Pins[k] = e.GUID
					pinsChanged = true
				}
			}
		case StateDead, StateStranded:
			if _, ok := out.DeadSince[e.Endpoint]; !ok {
				out.DeadSince[e.Endpoint] = now
			}
		default:
			delete(out.DeadSince, e.Endpoint)
		}
	}
	for _, o := range outcomes {
		ep := o.Endpoint
		for _, k := range o.Keys {
			delete(out.Forced, k)
		}
		if o.Result == "ok" || o.Result == "" {
			delete(out.Backoff, ep)
			delete(out.NextTry, ep)
			continue
		}
		d := backoff.Next(out.Backoff[ep], backoffMin, backoffMax)
		out.Backoff[ep] = d
		out.NextTry[ep] = now.Add(d)
	}
	for ep := range out.AliveOn {
		if !present[ep] {
			delete(out.AliveOn, ep)
		}
	}
	keys := map[Key]bool{}
	for _, it := range items {
		keys[it.Key] = true
	}
	for k := range out.Forced {
		if !keys[k] {
			delete(out.Forced, k)
		}
	}
	for k := range out.Pins {
		if !keys[k] {
			delete(out.Pins, k)
			pinsChanged = true
		}
	}
	return out, pinsChanged
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Outcome is what applying one heal came to, after verification.
type Outcome struct {
	Endpoint Endpoint
	Action   Action
	Keys     []Key
	Result   string // "ok", "refused", "error", "unverified", "" (journal drop)
	Err      error
	At       time.Time
	Latency  time.Duration
}
