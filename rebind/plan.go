// Package rebind is the engine of nvmet-rebind: it observes configfs and the
// kernel's RDMA state, plans with a pure function which nvmet ports and LIO
// iSER portals need their listener re-created, applies that plan through
// configfs with an intent journal, verifies the result in the kernel's cm_id
// table, and retries with backoff.
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

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/kernel"
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

// Key identifies a listener: an nvmet port id or a LIO portal id.
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

// Action is what a plan item asks Apply to do.
type Action int

// Actions.
const (
	ActNone Action = iota
	// ActRebindPort: journal the links, unlink every subsystem, relink
	// them in order (the port's listener is dead).
	ActRebindPort
	// ActCompletePort: relink the journaled links that are missing (a
	// refused relink, or a crash mid-rebind).
	ActCompletePort
	// ActToggleISER: journal, write iser 0 then 1 (the portal is dead).
	ActToggleISER
	// ActCompleteISER: write iser 1 (journaled, reads 0).
	ActCompleteISER
	// ActDropJournal: the journal entry has nothing left to do (the port
	// or its subsystems were removed by the admin, or all links are back).
	ActDropJournal
	// ActCompleteBoot: link the subsystems a saved config declares for
	// this port that the boot-time restore could not link.
	ActCompleteBoot
)

func (a Action) String() string {
	return [...]string{"none", "rebind", "complete-relink", "toggle-iser", "complete-iser", "drop-journal", "complete-boot"}[a]
}

// Observed is everything one reconcile reads.
type Observed struct {
	Ports      []configfs.Port
	Subsystems map[string]bool // nvmet/subsystems/<nqn> exists
	Portals    []configfs.Portal
	PortalsErr error // some portals could not be read: never forget their journal
	Devices    []kernel.Device
	DevicesErr error
	Addrs      []kernel.Addr
	AddrsErr   error
	Listeners  []kernel.CMID
	// ListenersErr is set when the cm_id table could not be read: whether
	// anything listens is then unknown and no rebind is planned.
	ListenersErr error
	Journal      map[Key]Intent
	// Declared is what nvmetcli's/targetcli's saved configs declare;
	// BootUntil ends the window in which it is completed.
	Declared  []Declared
	BootUntil time.Time
	Now       time.Time
}

// Memory is what the engine remembers between reconciles.
type Memory struct {
	DeadSince map[Key]time.Time // first reconcile that saw the listener dead
	NextTry   map[Key]time.Time // backoff: no attempt before this
	Pins      map[Key]uint64    // node GUID the listener was last alive on
	// AliveOn is the RDMA device index (+1) the listener was last seen
	// alive on. Indices are never reused: while that same device is still
	// registered, a vanished listener means the device is being removed
	// right now, and a rebind would race the removal.
	AliveOn map[Key]uint32
}

// removalGrace bounds the wait for a device whose listener vanished to
// finish unregistering.
const removalGrace = 5 * time.Second

// Item is the plan for one listener, and its status.
type Item struct {
	Key
	Address   netip.Addr
	Service   uint16
	Managed   bool
	Reason    string
	Listening *bool // nil: unknown
	Device    string
	GUID      uint64
	Netdev    string
	Action    Action
	Expected  bool            // a listener should exist: links, iser=1 or a journal entry
	Links     []configfs.Link // ActRebindPort: all links; ActCompletePort: the journal's
	DeadSince time.Time
	RetryAt   time.Time // a pending retry (backoff)
	eligible  bool      // RDMA, specific address, watched: may be written
	devIndex  uint32    // RDMA device index of the live listener
}

func ptr[T any](v T) *T { return &v }

// Plan decides, for every nvmet port and LIO portal, whether it is managed
// and what to do. It is pure: same input, same output, no I/O.
func Plan(obs Observed, mem Memory, cfg Config) []Item {
	net := netIndex(obs)
	var items []Item
	seen := map[Key]bool{}
	for _, p := range obs.Ports {
		it := planPort(p, obs, mem, cfg, net)
		seen[it.Key] = true
		items = append(items, it)
	}
	for _, p := range obs.Portals {
		it := planPortal(p, obs, mem, cfg, net)
		seen[it.Key] = true
		items = append(items, it)
	}
	items = completeBoot(items, obs, mem, cfg, net)
	// Journal entries whose object is gone: the admin removed it.
	keys := make([]Key, 0, len(obs.Journal))
	for k := range obs.Journal {
		if !seen[k] && !(k.Kind == KindLIO && obs.PortalsErr != nil) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if a.Kind != b.Kind {
			return strings.Compare(string(a.Kind), string(b.Kind))
		}
		return strings.Compare(a.ID, b.ID)
	})
	for _, k := range keys {
		items = append(items, Item{Key: k, Reason: "removed by the admin during the outage; forgetting the journal entry", Action: ActDropJournal})
	}
	return items
}

// netView answers: which netdev holds an address, and which RDMA device
// sits on a netdev.
type netView struct {
	addrNetdev map[netip.Addr]kernel.Addr
	devByIf    map[int]kernel.Device
	devByName  map[string]kernel.Device
	bound      map[lkey]kernel.CMID // address-bound LISTEN entries
	wild       map[lkey]bool        // wildcard children (no port)
}

// lkey indexes listeners by kernel owner and source address.
type lkey struct {
	owner string
	src   netip.AddrPort
}

func netIndex(obs Observed) netView {
	v := netView{addrNetdev: map[netip.Addr]kernel.Addr{}, devByIf: map[int]kernel.Device{}, devByName: map[string]kernel.Device{},
		bound: map[lkey]kernel.CMID{}, wild: map[lkey]bool{}}
	for _, c := range obs.Listeners {
		if !c.Listening() {
			continue
		}
		k := lkey{c.KernName, unzoned(c.Src)}
		if c.Port == 0 {
			v.wild[k] = true
		} else if _, dup := v.bound[k]; !dup {
			v.bound[k] = c
		}
	}
	for _, a := range obs.Addrs {
		v.addrNetdev[a.IP.Unmap()] = a
	}
	for _, d := range obs.Devices {
		for _, p := range d.Ports {
			if p.NetdevIndex != 0 {
				v.devByIf[int(p.NetdevIndex)] = d
			}
			if p.Netdev != "" {
				v.devByName[p.Netdev] = d
			}
		}
	}
	return v
}

// where returns the netdev holding ip and the RDMA device on it.
func (v netView) where(ip netip.Addr) (netdev string, dev kernel.Device, hasAddr, hasDev bool) {
	a, ok := v.addrNetdev[ip]
	if !ok {
		return "", kernel.Device{}, false, false
	}
	if d, ok := v.devByIf[a.Ifindex]; ok && a.Ifindex != 0 {
		return a.Netdev, d, true, true
	}
	if d, ok := v.devByName[a.Netdev]; ok && a.Netdev != "" {
		return a.Netdev, d, true, true
	}
	return a.Netdev, kernel.Device{}, true, false
}

// listening looks the address up in the cm_id table: an address-bound
// LISTEN entry of the kind's kernel owner.
func listening(obs Observed, net netView, k Kind, ap netip.AddrPort) (*bool, string) {
	l, c := listenerOf(obs, net, k, ap)
	return l, c.DevName
}

// listenerOf returns whether the listener exists and its cm_id: an
// address-bound LISTEN entry of the kind's kernel owner.
func listenerOf(obs Observed, net netView, k Kind, ap netip.AddrPort) (*bool, kernel.CMID) {
	if obs.ListenersErr != nil {
		return nil, kernel.CMID{}
	}
	if c, ok := net.bound[lkey{k.owner(), ap}]; ok {
		return ptr(true), c
	}
	if c, ok := net.bound[lkey{"", ap}]; ok {
		return ptr(true), c
	}
	return ptr(false), kernel.CMID{}
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

// common fills the fields shared by ports and portals and decides whether
// the listener is managed. It returns false when the item is final.
func common(it *Item, ap netip.AddrPort, obs Observed, mem Memory, cfg Config, net netView) bool {
	it.Address, it.Service = ap.Addr(), ap.Port()
	netdev, dev, _, hasDev := net.where(ap.Addr())
	it.Netdev = netdev
	if hasDev {
		it.Device, it.GUID = dev.Name, dev.NodeGUID
	}
	if ap.Addr().IsUnspecified() {
		it.Reason = "wildcard address: the kernel re-listens on new devices by itself"
		it.Listening, _ = wildcardListening(obs, net, it.Kind, ap)
		return false
	}
	if !watched(cfg, ap.Addr()) {
		it.Reason = "outside the watched subnets"
		it.Listening, it.Device = listening(obs, net, it.Kind, ap)
		return false
	}
	it.Managed, it.eligible = true, true
	if l, c := listenerOf(obs, net, it.Kind, ap); l != nil && *l {
		it.Listening, it.Device, it.devIndex = l, c.DevName, c.DevIndex
	} else {
		it.Listening = l
	}
	it.DeadSince = mem.DeadSince[it.Key]
	return true
}

func wildcardListening(obs Observed, net netView, k Kind, ap netip.AddrPort) (*bool, string) {
	if obs.ListenersErr != nil {
		return nil, ""
	}
	if len(obs.Devices) == 0 {
		return ptr(false), ""
	}
	if net.wild[lkey{k.owner(), ap}] || net.wild[lkey{"", ap}] {
		return ptr(true), ""
	}
	return ptr(false), ""
}

// gate applies the conditions shared by every write: the address is on a
// netdev with an RDMA device, the give-up timer, pinning and backoff. It
// returns false (with Reason set) when no write may happen now.
func gate(it *Item, obs Observed, mem Memory, cfg Config, net netView) bool {
	netdev, dev, hasAddr, hasDev := net.where(it.Address)
	switch {
	case obs.AddrsErr != nil:
		it.Reason += fmt.Sprintf("; waiting: addresses unknown (%v)", obs.AddrsErr)
		return false
	case !hasAddr:
		it.Reason += fmt.Sprintf("; waiting for %s to appear on a netdev", it.Address)
		return false
	case !hasDev:
		it.Reason += fmt.Sprintf("; waiting for an RDMA device on %s", netdev)
		return false
	}
	since, ok := mem.DeadSince[it.Key]
	if !ok {
		since = obs.Now
	}
	if cfg.GiveUpAfter > 0 && obs.Now.Sub(since) >= cfg.GiveUpAfter {
		it.Reason += fmt.Sprintf("; gave up: dead for more than give_up_after=%v (run `nvmet-rebind rebind %s` or reload to try again)", cfg.GiveUpAfter, it.ID)
		return false
	}
	if idx, ok := mem.AliveOn[it.Key]; ok && idx == dev.Index+1 {
		if until := since.Add(removalGrace); obs.Now.Before(until) {
			it.RetryAt = until
			it.Reason += fmt.Sprintf("; waiting: %s (index %d) that it listened on is still registered, its removal is probably in progress", dev.Name, dev.Index)
			return false
		}
	}
	if pin, ok := mem.Pins[it.Key]; ok && cfg.PinDevice && pin != dev.NodeGUID {
		it.Reason += fmt.Sprintf("; pinned: was on node GUID %s, %s is now on %s (GUID %s)", fmtGUID(pin), it.Address, dev.Name, fmtGUID(dev.NodeGUID))
		return false
	}
	if t, ok := mem.NextTry[it.Key]; ok && obs.Now.Before(t) {
		it.RetryAt = t
		it.Reason += fmt.Sprintf("; retry in %v", t.Sub(obs.Now).Round(time.Millisecond))
		return false
	}
	return true
}

func fmtGUID(g uint64) string {
	s := fmt.Sprintf("%016x", g)
	return s[0:4] + ":" + s[4:8] + ":" + s[8:12] + ":" + s[12:16]
}

func planPort(p configfs.Port, obs Observed, mem Memory, cfg Config, net netView) Item {
	it := Item{Key: Key{KindNvmet, p.ID}}
	j, journaled := obs.Journal[it.Key]
	if p.Err != nil {
		it.Reason = "not touched: " + p.Err.Error()
		return it
	}
	if p.Trtype == "rdma" && p.Adrfam != "ipv4" && p.Adrfam != "ipv6" {
		it.Reason = fmt.Sprintf("address family %q is not ipv4 or ipv6", p.Adrfam)
		return it
	}
	if p.Trtype != "rdma" {
		it.Reason = fmt.Sprintf("transport %q is not rdma", p.Trtype)
		if ap, err := p.Addr(); err == nil {
			it.Address, it.Service = ap.Addr(), ap.Port()
		}
		return it
	}
	ap, err := p.Addr()
	if err != nil {
		it.Reason = "not touched: " + err.Error()
		return it
	}
	if !common(&it, ap, obs, mem, cfg, net) {
		return it
	}
	if journaled && j.Address != ap.String() {
		// The admin re-created the port with another address meanwhile.
		it.Action, it.Reason = ActDropJournal, fmt.Sprintf("journal is for %s, the port now has %s: the admin changed it", j.Address, ap)
		return it
	}
	var missing []configfs.Link
	if journaled {
		for _, l := range j.Links {
			if !slices.Contains(p.Links, l) && obs.Subsystems[l.NQN] {
				missing = append(missing, l)
			}
		}
		if len(missing) == 0 && (it.Listening == nil || *it.Listening) {
			it.Action, it.Reason = ActDropJournal, "every journaled link is back"
			return it
		}
	}
	// Links not read: the port's listener was alive, so it is enabled.
	it.Expected = len(p.Links) > 0 || len(missing) > 0 || p.LinksSkipped
	switch {
	case len(missing) > 0:
		it.Reason = fmt.Sprintf("%d subsystem link(s) to restore from the journal", len(missing))
		if it.Listening == nil {
			it.Listening = ptr(false)
		}
		if gate(&it, obs, mem, cfg, net) {
			it.Action, it.Links = ActCompletePort, j.Links
		}
	case !p.LinksSkipped && len(p.Links) == 0:
		it.Reason = "not enabled: no subsystem linked"
	case it.Listening == nil:
		it.Reason = "listener state unknown: " + obs.ListenersErr.Error()
	case *it.Listening:
		it.Reason = "listening"
	default:
		it.Reason = "listener dead"
		if gate(&it, obs, mem, cfg, net) {
			it.Action, it.Links = ActRebindPort, p.Links
		}
	}
	return it
}

func planPortal(p configfs.Portal, obs Observed, mem Memory, cfg Config, net netView) Item {
	it := Item{Key: Key{KindLIO, p.ID()}}
	_, journaled := obs.Journal[it.Key]
	if p.Err != nil {
		it.Reason = "not touched: " + p.Err.Error()
		return it
	}
	if !common(&it, p.Addr, obs, mem, cfg, net) {
		return it
	}
	it.Expected = p.ISER || journaled
	switch {
	case journaled && p.ISER && (it.Listening == nil || *it.Listening):
		it.Action, it.Reason = ActDropJournal, "iser is back to 1"
	case journaled && !p.ISER:
		it.Reason = "iser=1 to restore from the journal"
		if it.Listening == nil {
			it.Listening = ptr(false)
		}
		if gate(&it, obs, mem, cfg, net) {
			it.Action = ActCompleteISER
		}
	case !p.ISER:
		it.Managed = false
		it.Reason = "iser is 0: no iSER listener configured"
	case it.Listening == nil:
		it.Reason = "listener state unknown: " + obs.ListenersErr.Error()
	case *it.Listening:
		it.Reason = "listening"
	default:
		it.Reason = "listener dead (iser reads 1)"
		if gate(&it, obs, mem, cfg, net) {
			it.Action = ActToggleISER
		}
	}
	return it
}

// ServiceString renders the service as configfs spells it.
func (it Item) ServiceString() string {
	if it.Service == 0 && !it.Address.IsValid() {
		return ""
	}
	return strconv.Itoa(int(it.Service))
}

func netipAddrPort(it *Item) netip.AddrPort { return netip.AddrPortFrom(it.Address, it.Service) }

// Writes describes, for `plan`, the configfs writes an item's action makes.
func Writes(it Item, root string) []string {
	port := func(l configfs.Link) string { return root + "/nvmet/ports/" + it.ID + "/subsystems/" + l.Name }
	var w []string
	switch it.Action {
	case ActRebindPort, ActCompletePort:
		w = append(w, "journal "+it.Key.String())
		if it.Action == ActRebindPort {
			for _, l := range it.Links {
				w = append(w, "unlink "+port(l))
			}
		}
		for _, l := range it.Links {
			w = append(w, "ln -s "+root+"/nvmet/subsystems/"+l.NQN+" "+port(l))
		}
	case ActCompleteBoot:
		for _, l := range it.Links {
			w = append(w, "ln -s "+root+"/nvmet/subsystems/"+l.NQN+" "+port(l))
		}
	case ActToggleISER, ActCompleteISER:
		iqn, tpg, np, _ := configfs.ParsePortalID(it.ID)
		f := root + "/target/iscsi/" + iqn + "/" + tpg + "/np/" + np + "/iser"
		if it.Action == ActToggleISER {
			w = append(w, "journal "+it.Key.String(), "echo 0 > "+f)
		}
		w = append(w, "echo 1 > "+f)
	case ActDropJournal:
		w = append(w, "forget the journal entry of "+it.Key.String())
	}
	return w
}

// completeBoot adds, within the boot window, the links and iSER portals
// that a saved config declares and that configfs lacks. Nothing that does
// not exist in configfs is created: it is only reported.
func completeBoot(items []Item, obs Observed, mem Memory, cfg Config, net netView) []Item {
	idx := map[Key]int{}
	for i, it := range items {
		idx[it.Key] = i
	}
	linked := map[string]map[string]bool{}
	for _, p := range obs.Ports {
		m := map[string]bool{}
		for _, l := range p.Links {
			m[l.NQN] = true
		}
		linked[p.ID] = m
	}
	portalISER := map[string]bool{}
	for _, p := range obs.Portals {
		portalISER[p.ID()] = p.ISER
	}
	open := obs.Now.Before(obs.BootUntil)
	for _, d := range obs.Declared {
		k := Key{d.Kind, d.ID}
		i, ok := idx[k]
		if !ok {
			items = append(items, Item{Key: k, Address: d.Addr.Addr(), Service: d.Addr.Port(),
				Reason: fmt.Sprintf("declared in %s but not in configfs: not created", d.Source)})
			idx[k] = len(items) - 1
			continue
		}
		it := &items[i]
		if !it.eligible || it.Action != ActNone || (it.Address != d.Addr.Addr() || it.Service != d.Addr.Port()) {
			continue
		}
		var missing []configfs.Link
		var absent []string
		if d.Kind == KindNvmet {
			for _, n := range d.NQNs {
				switch {
				case linked[d.ID][n]:
				case !obs.Subsystems[n]:
					absent = append(absent, n)
				default:
					missing = append(missing, configfs.Link{Name: n, NQN: n})
				}
			}
			if len(absent) > 0 {
				it.Reason += fmt.Sprintf("; subsystem(s) %s declared in %s do not exist: not created", strings.Join(absent, ", "), d.Source)
			}
			if len(missing) == 0 {
				continue
			}
		} else if portalISER[d.ID] {
			continue
		}
		what := fmt.Sprintf("%d link(s)", len(missing))
		if d.Kind == KindLIO {
			what = "iser=1"
		}
		if !open {
			it.Reason += fmt.Sprintf("; %s declared in %s missing; boot completion window is over, not restored", what, d.Source)
			continue
		}
		it.Reason = fmt.Sprintf("%s declared in %s missing (refused at boot?)", what, d.Source)
		it.Expected, it.Managed = true, true
		if gate(it, obs, mem, cfg, net) {
			if d.Kind == KindNvmet {
				it.Action, it.Links = ActCompleteBoot, missing
			} else {
				it.Action = ActCompleteISER
			}
		}
	}
	return items
}

// unzoned drops an IPv6 scope the kernel reports for link-local listeners.
func unzoned(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port())
}
