package rebind

import (
	"errors"
	"io/fs"
	"net/netip"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Kernel is the engine's view of the running kernel's RDMA state.
type Kernel interface {
	Devices() ([]rdma.Device, error)
	CMIDs(devs []rdma.Device) ([]rdma.CMID, error)
	Addrs() ([]rdma.Addr, error)
}

// TCPKernel is a Kernel that also lists the TCP sockets in LISTEN (local
// address:port, sorted): whether nvmet-tcp listens on a port's address.
// Without it, every TCP port's listener is unknown.
type TCPKernel interface {
	TCPListeners() ([]netip.AddrPort, error)
}

// errNoTCP is the TCP listeners' error with a Kernel that cannot list them.
var errNoTCP = errors.New("the kernel view lists no TCP sockets")

// TableReader is a Kernel that reads the devices and the addresses in
// one pass (rdma.Live.Read): how far a RoCE port's GID table is read
// follows from the addresses, so one reading of the netdevs and addresses
// serves both. With prev (the devices of the round's first observation:
// the verification), the GID tables of prev's ports are reused instead of
// read again (thousands of sysfs files on rxe); a change of the tables
// meanwhile comes with an event, which runs another round.
type TableReader interface {
	Read(prev []rdma.Device) rdma.Reading
}

// Tree is the engine's view of configfs (configfs.FS): read the nvmet
// ports and LIO portals, and the few writes a heal makes.
type Tree interface {
	Ports() ([]configfs.Port, error) // attributes only; Links is empty
	Links(portID string) ([]configfs.Link, error)
	Portals() ([]configfs.Portal, error)
	Portal(id string) (configfs.Portal, error)
	Subsystems() ([]string, error)
	// UnlinkAll removes links of a port in order, telling done each
	// result (false stops); its error is the port's (nothing removed).
	UnlinkAll(portID string, links []configfs.Link, done func(i int, err error) bool) error
	// RelinkAll creates links of a port in order, telling done each
	// result (false stops); its error is the port's (nothing created).
	RelinkAll(portID string, links []configfs.Link, done func(i int, err error) bool) error
	// SwapISERs writes iser=on to portals in order where it reads the
	// other value (on one open file), telling done what each read or its
	// error (false stops); its error is the run's (nothing written).
	SwapISERs(portalIDs []string, on bool, done func(i int, was bool, err error) bool) error
}

// Store keeps the intent journal and the device pins (rebind/state).
type Store interface {
	// PutAll writes intents where a restarted daemon reads them, before
	// the first configfs write they cover (the sharers of an endpoint in
	// one batch), and syncs nothing of them; Sync makes them durable.
	PutAll([]Intent) error
	// Sync makes durable what PutAll wrote: once a heal's listener is
	// back, and before the round ends (apply).
	Sync() error
	// DeleteAll removes the intents of keys; missing ones are no error.
	DeleteAll([]Key) error
	// Load reads every intent and changes nothing; unreadable entries are
	// reported, never acted on.
	Load() (map[Key]Intent, []error)
	Pins() (map[Key]uint64, error)
	SavePins(map[Key]uint64) error
	// Settled and SaveSettled keep Memory.Settled for the rest of the
	// boot: a declared link or iser=1 seen once and removed by the admin
	// is never made again by the next start either.
	Settled() (map[Settled]bool, error)
	SaveSettled(map[Settled]bool) error
}

// Observed is everything one round reads, parsed once where it is read:
// addresses as netip values, and each endpoint's verdict (Verdicts).
type Observed struct {
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
	// TCP are the TCP sockets in LISTEN (sorted), TCPErr why they could
	// not be read: nvmet TCP ports' listeners are then unknown.
	TCP         []netip.AddrPort
	TCPErr      error
	Journal     map[Key]Intent
	JournalErrs []error // journal entries quarantined at start or unreadable now
	// Declared is what nvmetcli's/targetcli's saved configs declare;
	// BootUntil ends the window in which it is completed.
	Declared  []Declared
	BootUntil time.Time
	// SavedErr names the saved configs, and the entries of them, that
	// could not be read: they declare nothing (nil: none).
	SavedErr error
	// EventAt is the last device or address event: the GID table fills a
	// moment after such an event, so a missing carrier is looked at again
	// shortly after it (recheck).
	EventAt time.Time
	Now     time.Time
	// Configfs is what the root showed (Options.Probe), read before the
	// trees: part of the round's Sight.
	Configfs ConfigfsSight

	// prev are the devices of the round's first observation, when this one
	// is its verification: their GID tables are reused (TableReader).
	prev []rdma.Device
	// readTook is how long each input's read took (inputs' order): the
	// round's debug line.
	readTook []time.Duration

	// Derived once from the fields above (prepared), never changed after:
	index *rdma.Index // the kernel tables' index (rdma)
	// tok is the Tree's generation the configfs fields were read at, when
	// stable: nothing changed while they were read (Generational).
	tok    uint64
	stable bool
	// shared: the configfs fields and eps are the baseline's (carried
	// whole: every input and configfs read the same): never written, a
	// verdict asked of an endpoint not in eps is judged without adding it.
	shared   bool
	portAddr []parsedAddr  // Ports[i]'s address, parsed
	eps      endpointIndex // every endpoint: its verdict and objects
	judged   bool          // every object is in eps
	unknown  string        // the status of an endpoint whose listeners are unknown (ListenersErr), rendered once
}

// parsedAddr is a port's address and service, or why they do not parse.
type parsedAddr struct {
	ap  netip.AddrPort
	err error
}

// windowOpen reports whether saved configs are completed now.
func (o *Observed) windowOpen() bool { return o.Now.Before(o.BootUntil) }

// prepared returns obs with what is derived from it (an Observed filled
// by hand, in tests and benchmarks; Engine.observe derives as it reads).
func prepared(obs Observed) Observed {
	if obs.judged {
		return obs
	}
	if obs.index == nil {
		obs.index = rdma.NewIndex(obs.Devices, obs.Addrs, obs.Listeners)
	}
	if len(obs.portAddr) != len(obs.Ports) {
		obs.portAddr = make([]parsedAddr, len(obs.Ports))
		for i, p := range obs.Ports {
			obs.portAddr[i].ap, obs.portAddr[i].err = p.Addr()
		}
	}
	obs.unknown = unknownReason(obs.ListenersErr)
	obs.eps = newEndpointIndex(len(obs.Ports), len(obs.Portals))
	for i := range obs.Ports {
		obs.indexPort(i)
	}
	for i := range obs.Portals {
		obs.indexPortal(i)
	}
	obs.judged = true
	return obs
}

// unknownReason is the status of an endpoint whose listeners cannot be
// read because of err (nil: none).
func unknownReason(err error) string {
	if err == nil {
		return ""
	}
	return "listener state unknown: " + err.Error()
}

func newEndpointIndex(ports, portals int) endpointIndex {
	return endpointIndex{at: make(map[epKey]int32, ports+portals), list: make([]endpointEntry, 0, ports+portals),
		nextPort: make([]int32, ports), nextPortal: make([]int32, portals)}
}

// indexPort adds Ports[i] to the endpoint index (a readable port with a
// specific RDMA address).
func (o *Observed) indexPort(i int) {
	o.eps.nextPort[i] = -1
	if ep, ok := o.portEndpoint(i); ok && o.Ports[i].Err == nil {
		o.addObject(ep, i)
	}
}

// indexPortal adds Portals[i] to the endpoint index.
func (o *Observed) indexPortal(i int) {
	o.eps.nextPortal[i] = -1
	if p := o.Portals[i]; p.Err == nil {
		o.addObject(Endpoint{KindLIO, p.Addr}, i)
	}
}

// portEndpoint is Ports[i]'s endpoint, when it is an RDMA or TCP port
// with an address (a wildcard included).
func (o *Observed) portEndpoint(i int) (Endpoint, bool) {
	return portEndpoint(o.Ports[i], o.portAddr[i])
}

func portEndpoint(p configfs.Port, a parsedAddr) (Endpoint, bool) {
	if a.err != nil {
		return Endpoint{}, false
	}
	switch p.Trtype {
	case configfs.TransportRDMA:
		return Endpoint{KindNvmet, a.ap}, true
	case configfs.TransportTCP:
		return Endpoint{KindTCP, a.ap}, true
	}
	return Endpoint{}, false
}

// linksNeeded tells whether a plan reads port p's links: unless its
// listener is alive (v, its endpoint's verdict, when indexed) at a
// specific address, and no journal entry or saved config names it — a
// live port's links are not needed to plan it.
func linksNeeded(p configfs.Port, a parsedAddr, indexed bool, v Verdict, journal map[Key]Intent, declared map[string]bool) bool {
	if _, journaled := journal[Key{KindNvmet, p.ID}]; !indexed || journaled || declared[p.ID] || a.ap.Addr().IsUnspecified() {
		return true
	}
	return v.State != StateListening
}

// observe reads the kernel, the journal, the saved configs and configfs,
// in that order: which listeners are alive decides how much of configfs
// must be read (a live port's links are not needed). With prev (the
// devices of the round's first observation), GID tables are reused where
// the Kernel can (TableReader). With base (the loop's own baseline; observers on other
// goroutines pass nil), an observation that reads the same as base
// carries its objects and verdicts. Errors that make the observation
// unusable (configfs unreadable) are returned; kernel read errors are
// recorded and make the affected facts unknown.
func (e *Engine) observe(cfg Config, base *Baseline, prev []rdma.Device) (Observed, error) {
	obs := Observed{Now: e.opt.Now(), BootUntil: e.bootUntil, Subsystems: map[string]bool{}, LinksUnread: map[string]bool{}}
	if at := e.eventAt.Load(); at != 0 {
		obs.EventAt = time.Unix(0, at)
	}
	obs.prev = prev
	e.readInputs(cfg, &obs)
	declared := map[string]bool{}
	for _, d := range obs.Declared {
		if d.Kind == KindNvmet {
			declared[d.ID] = true
		}
	}
	g, generational := e.opt.Tree.(Generational)
	var tokOK bool
	if generational {
		obs.tok, tokOK = g.Generation()
	}
	if obs.fromBaseline(base, tokOK, e.opt.Tree, declared) {
		return obs, nil
	}
	ports, err := e.opt.Tree.Ports()
	if err != nil {
		return obs, err
	}
	if obs.Portals, obs.PortalsErr = e.opt.Tree.Portals(); obs.PortalsErr != nil {
		e.log.Warn("some LIO portals unreadable; the rest is reconciled", "err", obs.PortalsErr)
	}
	obs.eps = newEndpointIndex(len(ports), len(obs.Portals)) // sized once: no growth while judging
	obs.eps.nextPort = obs.eps.nextPort[:0]
	obs.Ports, obs.portAddr = ports[:0], make([]parsedAddr, 0, len(ports))
	for _, p := range ports {
		var a parsedAddr
		a.ap, a.err = p.Addr()
		ei := int32(-1) // the port's entry in the endpoint index
		if ep, ok := portEndpoint(p, a); ok && p.Err == nil {
			ei = obs.entryAt(ep)
		}
		var v Verdict
		if ei >= 0 {
			v = obs.eps.list[ei].v
		}
		switch {
		case p.Err != nil:
		case e.opt.Exhaustive || linksNeeded(p, a, ei >= 0, v, obs.Journal, declared):
			p.Links, err = e.opt.Tree.Links(p.ID)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we read
			}
			if err != nil {
				p.Err = err
			}
		default:
			obs.LinksUnread[p.ID] = true // alive: its links are not needed
		}
		obs.Ports = append(obs.Ports, p)
		obs.portAddr = append(obs.portAddr, a)
		obs.eps.nextPort = append(obs.eps.nextPort, -1)
		if ei >= 0 {
			obs.chain(ei, len(obs.Ports)-1)
		}
	}
	for i := range obs.Portals {
		obs.indexPortal(i)
	}
	nqns, err := e.opt.Tree.Subsystems()
	if err != nil {
		return obs, err
	}
	for _, n := range nqns {
		obs.Subsystems[n] = true
	}
	obs.judged = true
	if tokOK {
		obs.settle(g) // stable when nothing changed while configfs was read
	}
	return obs, nil
}
