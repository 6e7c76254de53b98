package rebind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// checkActionable, set by the package's tests, compares the heals of the
// plan of the actionable objects with those of the full plan.
var checkActionable func(fast, full []Heal)

// checkSteady, set by the package's tests, compares what a round that
// skipped its plan (nothing it reads changed) kept with a plan made anyway.
// The memory the round kept and what Learn makes of the plan are passed too.
var checkSteady func(kept []Item, plan Planned, mem, learnt Memory)

// GIDReuser is a Kernel that can list devices reusing the GID tables of
// an earlier listing for the ports it had (rdma.Live): the verification
// at the end of a round judges with the round's GID tables instead of
// reading them again (thousands of sysfs files on rxe). A change of the
// tables meanwhile comes with an event, which runs another round.
type GIDReuser interface {
	DevicesReusingGIDs(prev []rdma.Device) ([]rdma.Device, error)
}

// Backoff bounds for refused binds.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

// ErrCrashed is returned when a test fault point stopped a rebind the way a
// crash would: no further write, no cleanup.
var ErrCrashed = errors.New("stopped at a fault point")

// Tree is the engine's view of configfs (configfs.FS): read the nvmet
// ports and LIO portals, and the few writes a heal makes.
type Tree interface {
	Ports() ([]configfs.Port, error) // attributes only; Links is empty
	Links(portID string) ([]configfs.Link, error)
	Portals() ([]configfs.Portal, error)
	Portal(id string) (configfs.Portal, error)
	Subsystems() ([]string, error)
	Unlink(portID string, l configfs.Link) error
	Relink(portID string, l configfs.Link) error
	SetISER(portalID string, on bool) error
}

// Store keeps the intent journal and the device pins (rebind/state).
type Store interface {
	// PutAll writes intents durably before the first configfs write they
	// cover (the sharers of an endpoint in one batch: one directory sync).
	PutAll([]Intent) error
	// DeleteAll removes the intents of keys; missing ones are no error.
	DeleteAll([]Key) error
	// Load reads every intent and changes nothing; unreadable entries are
	// reported, never acted on.
	Load() (map[Key]Intent, []error)
	Pins() (map[Key]uint64, error)
	SavePins(map[Key]uint64) error
}

// Options configure an Engine.
type Options struct {
	Tree   Tree
	Kernel Kernel
	// Store is the state directory; nil keeps nothing across restarts
	// (and makes a heal impossible: the journal is what makes it safe).
	Store Store
	// Quarantined are the journal entries the writer moved aside at start
	// (state.Store.Clean): reported in status with those Load finds.
	Quarantined []error
	// Declared reads the saved configs of cfg (boot completion); nil: none.
	Declared func(cfg Config) ([]Declared, error)
	Config   Config
	Logger   *slog.Logger
	DryRun   bool                    // plan and log, write nothing
	Now      func() time.Time        // clock; time.Now when nil
	Fault    func(point string) bool // test hook: true stops the rebind there (ErrCrashed)
	// HeartbeatEvery, when set, makes Run call its heartbeat at least this
	// often from the loop itself (the systemd watchdog): a reconcile that
	// hangs stops the beats.
	HeartbeatEvery time.Duration
}

// Result is the outcome of the last action on a listener.
type Result struct {
	Action  Action
	At      time.Time
	Err     error
	Latency time.Duration // from the first write to LISTEN verified
}

// Engine reconciles. Only one Reconcile runs at a time.
type Engine struct {
	opt     Options
	log     *slog.Logger
	trigger chan struct{}

	run sync.Mutex // one reconcile at a time
	// views are the listener indexes of a round's two observations,
	// reused from round to round (under run).
	views   [2]netView
	mu      sync.Mutex // guards the fields below
	cfg     Config
	mem     Memory
	results map[Key]Result
	last    []Item
	lastObs Observed
	lastAt  time.Time
	// steady is the observation of the last round when that round planned
	// every object, acted on nothing and left nothing time-dependent in
	// memory: a round that observes the same again decides the same and
	// skips its plan (idle resyncs, re-checks after a heal). nil: plan.
	steady      *Observed
	stats       Stats
	journalErrs []error
	bootUntil   time.Time
	eventAt     time.Time
	requests    chan request // manual rebinds, served by Run
}

// request is a manual rebind handed to the loop: the one writer.
type request struct {
	key  Key
	done chan []Item
}

// Stats are counters for metrics and status.
type Stats struct {
	Reconciles uint64
	// Unchanged counts the rounds that observed exactly what the last one
	// had, with nothing waiting on a timer, and so skipped the plan.
	Unchanged      uint64
	Rebinds        map[string]uint64 // by result: ok, refused, error, unverified
	LastLatency    time.Duration
	PendingRetries int
	// ReconcileTime is the time spent in Reconcile (observe, plan, act,
	// verify); WriteTime the part of it inside configfs writes (the
	// kernel's: each write binds or unbinds a listener), over Writes.
	ReconcileTime, WriteTime time.Duration
	Writes                   uint64
	// JournalTime is the time spent writing and removing intent journal
	// entries (fsync'd).
	JournalTime time.Duration
}

// New returns an engine; it reads nothing until the first Reconcile.
func New(opt Options) *Engine {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		opt:      opt,
		log:      opt.Logger,
		trigger:  make(chan struct{}, 1),
		requests: make(chan request),
		cfg:      opt.Config,
		mem:      NewMemory(),
		results:  map[Key]Result{},
		stats:    Stats{Rebinds: map[string]uint64{}},
	}
	e.bootUntil = opt.Now().Add(opt.Config.BootWindow)
	if opt.Store != nil {
		pins, err := opt.Store.Pins()
		if err != nil {
			e.log.Warn("pins unreadable, starting without", "err", err)
		}
		e.mem.Pins = pins
		if e.mem.Pins == nil {
			e.mem.Pins = map[Key]uint64{}
		}
	}
	return e
}

// Poke asks for a reconcile; it never blocks, and pokes coalesce. A poke
// is an event (device, address, udev trigger): endpoints waiting for their
// address to appear in a GID table are looked at again shortly after it.
func (e *Engine) Poke() {
	e.mu.Lock()
	e.eventAt = e.opt.Now()
	e.mu.Unlock()
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// SetConfig replaces the configuration (reload). An explicit reload is an
// admin's request to try again: give-up windows and backoffs restart.
func (e *Engine) SetConfig(cfg Config) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg = cfg
	e.steady = nil
	clear(e.mem.DeadSince)
	clear(e.mem.NextTry)
	clear(e.mem.Backoff)
}

// Config returns the configuration in use.
func (e *Engine) Config() Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// Retry forgets the give-up window, backoff and graces of the endpoint of
// one object (a manual rebind request): its next heal is not held back.
func (e *Engine) Retry(k Key) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mem.Forced[k] = true
	e.steady = nil
	for _, it := range e.last {
		if it.Key == k && it.Endpoint.Addr.IsValid() {
			delete(e.mem.DeadSince, it.Endpoint)
			delete(e.mem.NextTry, it.Endpoint)
			delete(e.mem.Backoff, it.Endpoint)
		}
	}
}

// Observe reads configfs, the journal and the kernel. Errors that make the
// observation unusable (configfs unreadable) are returned; kernel read errors
// are recorded in Observed and make the affected facts unknown.
func (e *Engine) Observe() (Observed, error) { return e.observe(nil, nil) }

// observe is Observe; with prev (the devices of the round's first
// observation), GID tables are reused where the Kernel can. With into,
// the observation's listener index is built in it (its storage reused),
// else in a new one.
func (e *Engine) observe(prev []rdma.Device, into *netView) (Observed, error) {
	obs := Observed{Now: e.opt.Now(), Subsystems: map[string]bool{}, LinksUnread: map[string]bool{}}
	// The kernel first: which listeners are alive decides how much of
	// configfs must be read (a live port's links are not needed).
	if r, ok := e.opt.Kernel.(GIDReuser); ok && prev != nil {
		obs.Devices, obs.DevicesErr = r.DevicesReusingGIDs(prev)
	} else {
		obs.Devices, obs.DevicesErr = e.opt.Kernel.Devices()
	}
	obs.Addrs, obs.AddrsErr = e.opt.Kernel.Addrs()
	if obs.DevicesErr != nil {
		obs.ListenersErr = obs.DevicesErr
	} else {
		obs.Listeners, obs.ListenersErr = e.opt.Kernel.CMIDs(obs.Devices)
	}
	if e.opt.Store != nil {
		var bad []error
		obs.Journal, bad = e.opt.Store.Load()
		e.mu.Lock()
		e.journalErrs = append(slices.Clone(e.opt.Quarantined), bad...)
		e.mu.Unlock()
	}
	e.mu.Lock()
	cfg, bootUntil := e.cfg, e.bootUntil
	obs.EventAt = e.eventAt
	e.mu.Unlock()
	obs.BootUntil = bootUntil
	if e.opt.Declared != nil && (cfg.NvmetConfig != "" || cfg.TargetConfig != "") {
		d, err := e.opt.Declared(cfg)
		if err != nil {
			e.log.Warn("saved config unreadable; boot completion skipped", "err", err)
		}
		obs.Declared = d
	}
	if into == nil {
		into = new(netView)
	}
	into.reindex(obs)
	obs.view = into
	v := *into
	declared := map[string]bool{}
	for _, d := range obs.Declared {
		if d.Kind == KindNvmet {
			declared[d.ID] = true
		}
	}
	needLinks := func(p configfs.Port) bool {
		if _, ok := obs.Journal[Key{KindNvmet, p.ID}]; ok || declared[p.ID] {
			return true
		}
		ap, err := p.Addr()
		if p.Trtype != "rdma" || err != nil {
			return true
		}
		// Exactly Plan's judgement: a stranded port needs its links.
		st, _ := judge(Endpoint{KindNvmet, ap}, obs, v, v.carrierOf(ap.Addr()))
		return st != StateListening
	}
	ports, err := e.opt.Tree.Ports()
	if err != nil {
		return obs, err
	}
	obs.Ports = ports[:0]
	for _, p := range ports {
		switch {
		case p.Err != nil:
		case needLinks(p):
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
	}
	if obs.Portals, obs.PortalsErr = e.opt.Tree.Portals(); obs.PortalsErr != nil {
		e.log.Warn("some LIO portals unreadable; the rest is reconciled", "err", obs.PortalsErr)
	}
	nqns, err := e.opt.Tree.Subsystems()
	if err != nil {
		return obs, err
	}
	for _, n := range nqns {
		obs.Subsystems[n] = true
	}
	return obs, nil
}

// PlanAll observes and plans without writing anything.
func (e *Engine) PlanAll() (Planned, Observed, error) {
	obs, err := e.Observe()
	if err != nil {
		return Planned{}, obs, err
	}
	e.mu.Lock()
	p := Plan(obs, e.mem, e.cfg)
	e.mu.Unlock()
	return p, obs, nil
}

// PlanNow observes and plans without writing anything; it returns the
// status items.
func (e *Engine) PlanNow() ([]Item, Observed, error) {
	p, obs, err := e.PlanAll()
	return p.Items, obs, err
}

// Reconcile observes, plans, applies and verifies once. It returns the
// status items as they stood after the actions.
func (e *Engine) Reconcile(ctx context.Context) ([]Item, error) {
	e.run.Lock()
	defer e.run.Unlock()
	start := time.Now()
	defer func() {
		e.mu.Lock()
		e.stats.ReconcileTime += time.Since(start)
		e.mu.Unlock()
	}()
	// The round's two observations (before acting, and the verification)
	// are indexed into the engine's two views: under e.run, and neither
	// outlives the round (learn drops it from what it keeps).
	obs, err := e.observe(nil, &e.views[0])
	if err != nil {
		return nil, err
	}
	observed := time.Now()
	e.mu.Lock()
	same := e.steady != nil && sameInputs(e.steady, &obs)
	var items []Item
	if same {
		items = e.last
	}
	e.mu.Unlock()
	if same {
		// Nothing the plan reads changed, and nothing in it depends on the
		// clock: the last round's plan stands (it had no heal).
		if checkSteady != nil {
			e.mu.Lock()
			p := Plan(obs, e.mem, e.cfg)
			learnt, _ := Learn(e.mem, p.Endpoints, p.Items, nil, obs.Now)
			mem := e.mem
			e.mu.Unlock()
			checkSteady(items, p, mem, learnt)
		}
		e.mu.Lock()
		e.stats.Unchanged++
		e.mu.Unlock()
		e.report(nil, items)
		return items, nil
	}
	// The objects whose endpoint may need an action are planned first:
	// the first write does not wait for the plan of thousands of healthy
	// listeners. Status and memory come from a plan of every object only.
	e.mu.Lock()
	var all *Planned
	var pl Planned
	missed := false
	if sub := actionable(obs, e.mem); 2*(len(sub.Ports)+len(sub.Portals)) < len(obs.Ports)+len(obs.Portals) {
		pl = Plan(sub, e.mem, e.cfg)
		if len(pl.Heals) == 0 {
			p := Plan(obs, e.mem, e.cfg)
			all, pl = &p, p
			missed = len(p.Heals) > 0
		}
	} else {
		// Most objects may need an action (listening unknown without RDMA
		// netlink, a whole device down): one plan of every object.
		p := Plan(obs, e.mem, e.cfg)
		all, pl = &p, p
	}
	e.mu.Unlock()
	if missed {
		e.log.Warn("bug: the plan of the objects that are not alive missed heals; acting on the full plan", "heals", len(pl.Heals))
	}
	if checkActionable != nil && all == nil {
		e.mu.Lock()
		p := Plan(obs, e.mem, e.cfg)
		e.mu.Unlock()
		checkActionable(pl.Heals, p.Heals)
	}
	planned := time.Now()
	full := func() Planned {
		if all == nil {
			e.mu.Lock()
			p := Plan(obs, e.mem, e.cfg)
			e.mu.Unlock()
			all = &p
		}
		return *all
	}
	if len(pl.Heals) == 0 || e.opt.DryRun {
		pl = full()
		e.learn(pl, obs, nil)
	}
	// With heals, memory is learnt once, from the verification after them
	// (below): not before the first write, which it would only delay.
	var done []pending
	var verified time.Duration // the verification's share of act_and_verify
	if len(pl.Heals) > 0 {
		// Where a round's time goes (debug: one line per round that acts):
		// observing, planning, then acting (configfs writes, the journal,
		// re-reads before each write) and verifying.
		e.mu.Lock()
		w0, j0 := e.stats.WriteTime, e.stats.JournalTime
		e.mu.Unlock()
		heals := len(pl.Heals)
		defer func() {
			e.mu.Lock()
			w, j := e.stats.WriteTime-w0, e.stats.JournalTime-j0
			e.mu.Unlock()
			e.log.Debug("round", "heals", heals, "observe", observed.Sub(start), "plan", planned.Sub(observed),
				"act_and_verify", time.Since(planned), "configfs_writes", w, "journal", j, "verify", verified)
		}()
	}
	// Journal entries are written in two batches: the first heal's alone
	// (its first write waits for nothing else), then those of every other
	// heal of the round at once (one directory sync, not one per
	// endpoint); each heal re-checks its own preconditions before its
	// first write.
	pre := map[int]putResult{}
	journaled := 0 // heals [0, journaled) are journaled
	var deletes []Key
	var dropped []Heal
	for i, h := range pl.Heals {
		if err := ctx.Err(); err != nil {
			return pl.Items, err
		}
		if e.opt.DryRun {
			e.log.Info("dry run: would act", "endpoint", h.Endpoint.String(), "action", h.Action.String(), "objects", len(h.Keys), "steps", len(h.Steps), "reason", h.Reason)
			continue
		}
		if i >= journaled {
			end := len(pl.Heals)
			if i == 0 {
				end = 1
			}
			if err := e.journalRound(pl.Heals[i:end], i, pre); err != nil {
				return pl.Items, err
			}
			journaled = end
		}
		p := pending{heal: h, start: e.opt.Now(), wall: time.Now()}
		var del []Key
		del, p.err = e.execute(h, pre[i])
		if errors.Is(p.err, ErrCrashed) {
			return pl.Items, p.err
		}
		deletes = append(deletes, del...)
		if h.Action == ActDropJournal {
			dropped = append(dropped, h)
			continue
		}
		done = append(done, p)
	}
	if len(deletes) > 0 {
		// The journal entries of the heals that completed, in one batch.
		t := time.Now()
		err := e.opt.Store.DeleteAll(deletes)
		e.journalTime(t)
		if err != nil {
			e.log.Warn("journal entries not removed; the next round finds their work done", "keys", keysString(deletes), "err", err)
		}
		for _, h := range dropped {
			if err != nil {
				e.log.Warn("journal entry not dropped", "keys", fmt.Sprint(h.Keys), "err", err)
			} else {
				e.log.Info("journal entry dropped", "listener", keysString(h.Keys), "reason", h.Reason)
			}
		}
	}
	if len(done) == 0 && len(pl.Heals) > 0 && !e.opt.DryRun {
		pl = full()
		e.learn(pl, obs, nil) // only journal entries dropped: nothing to verify
	}
	var outcomes []Outcome
	if len(done) > 0 {
		// One observation verifies every heal of this round (one cm_id
		// dump per device, not one per endpoint) and refreshes the status.
		t := time.Now()
		obs2, err := e.observe(obs.Devices, &e.views[1])
		var pl2 Planned
		if err == nil {
			e.mu.Lock()
			pl2 = Plan(obs2, e.mem, e.cfg)
			e.mu.Unlock()
		}
		outcomes = e.verify(done, pl2, err)
		if err == nil {
			pl, obs = pl2, obs2
			retryDueNow(pl.Items, done, obs.Now)
		} else {
			pl = full()
		}
		e.learn(pl, obs, outcomes)
		verified = time.Since(t)
	}
	e.report(outcomes, pl.Items)
	return pl.Items, nil
}

// retryDueNow asks for the next round now for each heal that the
// verification's plan finds due but this round did not run: its backoff
// ran out, or its device came back, while the round acted on others.
// Nothing executes that plan, so without a retry time it would wait for
// the resync.
func retryDueNow(items []Item, ran []pending, now time.Time) {
	done := make(map[Endpoint]bool, len(ran))
	for _, p := range ran {
		done[p.heal.Endpoint] = true
	}
	for i := range items {
		it := &items[i]
		if it.Action != ActNone && it.Action != ActDropJournal && it.RetryAt.IsZero() && !done[it.Endpoint] {
			it.RetryAt = now
		}
	}
}

// learn updates the memory through Learn and persists changed pins.
func (e *Engine) learn(pl Planned, obs Observed, outcomes []Outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Kept for status and the next round's comparison, without its index
	// (megabytes at thousands of listeners; Plan builds one when asked).
	obs.view = nil
	e.lastObs = obs
	var pinsChanged bool
	defer func() { e.stats.PendingRetries = len(e.mem.NextTry) }()
	e.mem, pinsChanged = Learn(e.mem, pl.Endpoints, pl.Items, outcomes, obs.Now)
	e.steady = nil
	// After a heal too: pl is then the verification's plan, and timeless
	// judges the memory the outcomes left.
	if len(pl.Heals) == 0 && timeless(pl, obs, e.mem) {
		e.steady = &obs
	}
	if pinsChanged && e.opt.Store != nil && !e.opt.DryRun {
		if err := e.opt.Store.SavePins(e.mem.Pins); err != nil {
			e.log.Warn("pins not saved", "err", err)
		}
	}
}

// timeless reports whether a plan of obs decides nothing by the clock, so
// that the same observation planned later decides the same and Learn
// leaves the memory as it is: every endpoint listens, has nothing to
// listen, is unknown, or is dead with its heal held by something only the
// inputs end (Held); memory holds no backoff, no forced rebind and no
// dead-since but those endpoints'; there is no journal entry, no retry
// time, and the boot window is over.
func timeless(pl Planned, obs Observed, mem Memory) bool {
	if len(mem.NextTry)+len(mem.Backoff)+len(mem.Forced) > 0 || len(obs.Journal) > 0 ||
		len(obs.Declared) > 0 && obs.Now.Before(obs.BootUntil) {
		return false
	}
	// A dead or stranded endpoint is timeless only while its heal is held
	// by something the clock does not end (Held: e.g. its address on no
	// netdev, a device gone for good): the give-up timer and the graces
	// run from DeadSince, which Learn keeps as it is. mem is what Learn
	// made of this plan, so it holds a dead-since for each of them; one
	// more is one Learn would keep for an endpoint no longer planned.
	held := 0
	for _, es := range pl.Endpoints {
		switch es.State {
		case StateListening, StateNone, StateUnknown:
		case StateDead, StateStranded:
			if !es.Held {
				return false
			}
			held++
		default:
			return false
		}
	}
	if len(mem.DeadSince) != held {
		return false
	}
	for _, it := range pl.Items {
		if !it.RetryAt.IsZero() {
			return false
		}
		if (it.State == StateDead || it.State == StateStranded) && it.DeadSince.IsZero() {
			return false // planned before Learn set its dead-since: the next plan shows it
		}
	}
	return true
}

// sameErr reports whether a and b are both nil or say the same.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// sameInputs reports whether b holds what a plan reads of a, but the
// clock: the configfs objects, the kernel's devices (GID tables included),
// addresses and listening entries (connections come and go without
// changing a plan; a listener's cm_id number is not read), the journal,
// the saved configs and the boot window. A table that could not be read
// (devices, addresses, listeners, portals) is the same when its error
// says the same; a configfs object that could not be read is never.
func sameInputs(a, b *Observed) bool {
	// An error read again is the same input (a plan reads only its
	// message: "unknown", "addresses unknown", a port's reason): a host
	// without RDMA netlink, or whose ib_core is gone, plans once.
	if !sameErr(a.DevicesErr, b.DevicesErr) || !sameErr(a.AddrsErr, b.AddrsErr) ||
		!sameErr(a.ListenersErr, b.ListenersErr) || !sameErr(a.PortalsErr, b.PortalsErr) {
		return false
	}
	// EventAt is not compared: a plan reads it only for an endpoint that
	// waits for its address in a GID table (dead), and a steady plan has
	// none.
	if !a.BootUntil.Equal(b.BootUntil) || len(a.Journal)+len(b.Journal) > 0 ||
		!reflect.DeepEqual(a.Declared, b.Declared) {
		return false
	}
	if !maps.Equal(a.Subsystems, b.Subsystems) || !maps.Equal(a.LinksUnread, b.LinksUnread) {
		return false
	}
	if !slices.EqualFunc(a.Ports, b.Ports, func(x, y configfs.Port) bool {
		return x.Err == nil && y.Err == nil && x.ID == y.ID && x.Trtype == y.Trtype && x.Adrfam == y.Adrfam &&
			x.Traddr == y.Traddr && x.Trsvcid == y.Trsvcid && slices.Equal(x.Links, y.Links)
	}) {
		return false
	}
	if !slices.EqualFunc(a.Portals, b.Portals, func(x, y configfs.Portal) bool {
		return x.Err == nil && y.Err == nil && x.IQN == y.IQN && x.TPG == y.TPG && x.NP == y.NP && x.Addr == y.Addr && x.ISER == y.ISER
	}) {
		return false
	}
	if !slices.EqualFunc(a.Addrs, b.Addrs, func(x, y rdma.Addr) bool {
		return x.Ifindex == y.Ifindex && x.Netdev == y.Netdev && x.IP == y.IP && bytes.Equal(x.HWAddr, y.HWAddr)
	}) {
		return false
	}
	if !reflect.DeepEqual(a.Devices, b.Devices) {
		return false
	}
	i, j := 0, 0
	for {
		for i < len(a.Listeners) && !a.Listeners[i].Listening() {
			i++
		}
		for j < len(b.Listeners) && !b.Listeners[j].Listening() {
			j++
		}
		if i == len(a.Listeners) || j == len(b.Listeners) {
			return i == len(a.Listeners) && j == len(b.Listeners)
		}
		// What a plan reads of a listening entry (not the cm_id's number:
		// the same listener is the same, and nothing is planned from it).
		x, y := a.Listeners[i], b.Listeners[j]
		if x.DevIndex != y.DevIndex || x.DevName != y.DevName || x.Port != y.Port || x.Src != y.Src || x.KernName != y.KernName || x.PS != y.PS {
			return false
		}
		i++
		j++
	}
}

func keysString(ks []Key) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

func (e *Engine) fault(point string) bool {
	return e.opt.Fault != nil && e.opt.Fault(point)
}

// refused reports a bind the kernel refused because the address or device
// is not ready: retried with backoff.
func refused(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENODEV)
}

// pending is a heal written and waiting for verification.
type pending struct {
	heal  Heal
	start time.Time // engine clock
	wall  time.Time // for the latency
	err   error
}

// verify turns the heals of this round into outcomes from the observation
// made after them (pl; planErr when it failed): ok when the endpoint
// listens where its address is carried.
func (e *Engine) verify(done []pending, pl Planned, planErr error) []Outcome {
	now := time.Now()
	state := make(map[Endpoint]State, len(pl.Endpoints))
	for _, es := range pl.Endpoints {
		state[es.Endpoint] = es.State
	}
	out := make([]Outcome, 0, len(done))
	for _, p := range done {
		h := p.heal
		o := Outcome{Endpoint: h.Endpoint, Action: h.Action, Keys: h.Keys, At: p.start, Err: p.err, Result: "ok"}
		switch st, ok := state[h.Endpoint]; {
		case p.err != nil && refused(p.err):
			o.Result = "refused"
		case p.err != nil:
			o.Result = "error"
		case planErr != nil:
			o.Err, o.Result = fmt.Errorf("verify: %w", planErr), "unverified"
		case !ok, st == StateListening, st == StateNone:
			// Removed (or emptied) by the admin meanwhile: nothing to verify.
			o.Latency = now.Sub(p.wall)
		case st == StateUnknown:
			o.Err, o.Result = errors.New("verify: listener state unknown"), "unverified"
		case st == StateStranded:
			o.Err, o.Result = errors.New("written, but the listener is still on a device that does not carry the address"), "unverified"
		default:
			o.Err, o.Result = errors.New("written, but no listener in the cm_id table"), "unverified"
		}
		out = append(out, o)
	}
	return out
}

// report counts the round's outcomes and ends the round in one critical
// section with them (the status items, Reconciles), so that a snapshot
// never shows a round's rebinds without the round (the metrics textfile is
// rewritten when Reconciles moves), then logs the outcomes.
func (e *Engine) report(outcomes []Outcome, items []Item) {
	e.mu.Lock()
	retry := map[Endpoint]time.Time{}
	for _, o := range outcomes {
		res := Result{Action: o.Action, At: o.At, Err: o.Err, Latency: o.Latency}
		for _, k := range o.Keys {
			e.results[k] = res
		}
		e.stats.Rebinds[o.Result]++
		if o.Result == "ok" {
			e.stats.LastLatency = o.Latency
		}
		if t, ok := e.mem.NextTry[o.Endpoint]; ok {
			retry[o.Endpoint] = t
		}
	}
	for i := range items {
		if t, ok := retry[items[i].Endpoint]; ok && items[i].Expected {
			items[i].RetryAt = t
		}
	}
	mem := e.mem
	e.last = items
	e.lastAt = e.opt.Now()
	e.stats.Reconciles++
	e.mu.Unlock()
	for _, o := range outcomes {
		addr, svc := o.Endpoint.Addr.Addr(), o.Endpoint.Addr.Port()
		if o.Result == "ok" {
			e.log.Info("listener restored", "listener", keysString(o.Keys), "endpoint", o.Endpoint.String(), "address", addr, "service", svc, "action", o.Action.String(), "latency", o.Latency)
		} else {
			e.log.Warn("rebind failed, will retry", "listener", keysString(o.Keys), "endpoint", o.Endpoint.String(), "address", addr, "action", o.Action.String(), "result", o.Result, "err", o.Err, "retry_in", mem.Backoff[o.Endpoint])
		}
	}
}

// putResult is what the round's journal batch did for one heal.
type putResult struct {
	put  []Key        // journaled by this round, in this heal's order
	skip map[Key]bool // objects the admin removed or set to 0 before the batch
	err  error        // a precondition that stops the heal (or the batch failed)
	// first: the heal is the first of its batch, so nothing was written
	// between its preconditions and its first write (no re-check).
	first bool
}

// journalRound writes the journal entries of heals (the round's heals
// from index first) in one batch, each object's precondition checked
// right before (a failed one stops that heal, or skips that object). It
// records what it did in out by the round's heal index; an error only for
// a fault point.
func (e *Engine) journalRound(heals []Heal, first int, out map[int]putResult) error {
	var ins []Intent
	var from []int
	for n, h := range heals {
		i := first + n
		r := putResult{skip: map[Key]bool{}, first: n == 0}
		var mine []Intent
		for _, s := range h.Steps {
			if s.Op != OpJournalPut {
				continue
			}
			ok, err := e.journalPrecondition(s)
			if err != nil {
				r.err, mine = err, nil
				break
			}
			if !ok {
				r.skip[s.Key] = true
				continue
			}
			in := s.Intent
			in.Started = e.opt.Now()
			mine = append(mine, in)
		}
		for _, in := range mine {
			r.put = append(r.put, Key{in.Kind, in.ID})
			ins = append(ins, in)
			from = append(from, i)
		}
		out[i] = r
	}
	if len(ins) == 0 {
		return nil
	}
	t := time.Now()
	err := e.opt.Store.PutAll(ins)
	e.journalTime(t)
	if err != nil {
		for _, i := range from {
			r := out[i]
			r.put, r.err = nil, err
			out[i] = r
		}
		return nil
	}
	if e.fault("after-journal") {
		return ErrCrashed
	}
	return nil
}

// execute performs one heal's writes in order, checking each step's
// precondition right before it; its journal entries were written by the
// round's batch (pre). It decides nothing: what to write is the plan's. A
// write error stops the heal; the journal keeps what is left to do for the
// next round. It returns the journal entries to remove once the heal is
// done (the round removes them in one batch).
func (e *Engine) execute(h Heal, pre putResult) ([]Key, error) {
	if pre.err != nil {
		return nil, pre.err
	}
	fsys := timedTree{e.opt.Tree, e}
	skip := maps.Clone(pre.skip)
	// When earlier heals of the round ran since the batch, the ports
	// journaled for this one are checked again before the first write (an
	// admin's change meanwhile stops the heal, and its fresh entries go).
	for _, s := range h.Steps {
		if pre.first || s.Op != OpJournalPut || s.Key.Kind != KindNvmet || !slices.Contains(pre.put, s.Key) {
			continue
		}
		ok, err := e.journalPrecondition(s)
		if err == nil && ok {
			continue
		}
		if derr := e.opt.Store.DeleteAll(pre.put); derr != nil {
			e.log.Warn("journal entries not removed", "keys", keysString(pre.put), "err", derr)
		}
		if err != nil {
			return nil, err
		}
		return nil, nil // the admin removed the port: nothing to do
	}
	offs := 0
	for _, s := range h.Steps {
		if s.Op == OpSetISER && !s.On {
			offs++
		}
	}
	var deletes []Key
	var nUnlink, nLink, nOff, nOn int
	for _, s := range h.Steps {
		if skip[s.Key] && s.Op != OpJournalDelete {
			continue
		}
		switch s.Op {
		case OpJournalPut:
			// Written by the round's batch.
		case OpJournalDelete:
			deletes = append(deletes, s.Key)
		case OpUnlink:
			if err := fsys.Unlink(s.Key.ID, s.Link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			if e.fault(fmt.Sprintf("after-unlink-%d", nUnlink)) {
				return nil, ErrCrashed
			}
			nUnlink++
		case OpLink:
			// No re-read: the kernel checks the precondition. The link
			// there already (EEXIST) is done; the port or the subsystem
			// gone (ENOENT) is the admin's removal, respected.
			err := fsys.Relink(s.Key.ID, s.Link)
			switch {
			case err == nil, errors.Is(err, fs.ErrExist):
			case errors.Is(err, fs.ErrNotExist):
				e.log.Info("port or subsystem gone, not relinked", "listener", s.Key.String(), "nqn", s.Link.NQN)
				continue
			default:
				return nil, err // refused binds included: the journal keeps the links
			}
			if e.fault(fmt.Sprintf("after-relink-%d", nLink)) {
				return nil, ErrCrashed
			}
			nLink++
		case OpSetISER:
			p, err := fsys.Portal(s.Key.ID)
			if errors.Is(err, fs.ErrNotExist) {
				skip[s.Key] = true // the admin removed the portal
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: re-read: %w", s.Key, err)
			}
			if p.ISER == s.On {
				if !s.On {
					skip[s.Key] = true // the admin set iser=0 meanwhile
				}
				continue
			}
			if err := fsys.SetISER(s.Key.ID, s.On); err != nil {
				return nil, err
			}
			if !s.On {
				nOff++
				if nOff == 1 && e.fault("after-iser-0") || nOff > 1 && nOff == offs && e.fault("after-all-iser-0") {
					return nil, ErrCrashed
				}
			} else {
				nOn++
				if nOn == 1 && e.fault("after-iser-1") {
					return nil, ErrCrashed
				}
			}
		}
	}
	return deletes, nil
}

func (e *Engine) journalTime(start time.Time) {
	d := time.Since(start)
	e.mu.Lock()
	e.stats.JournalTime += d
	e.mu.Unlock()
}

// timedTree counts the configfs writes and the time spent in them.
type timedTree struct {
	Tree
	e *Engine
}

func (t timedTree) timed(start time.Time) {
	d := time.Since(start)
	t.e.mu.Lock()
	t.e.stats.WriteTime += d
	t.e.stats.Writes++
	t.e.mu.Unlock()
}

func (t timedTree) Unlink(portID string, l configfs.Link) error {
	defer t.timed(time.Now())
	return t.Tree.Unlink(portID, l)
}

func (t timedTree) Relink(portID string, l configfs.Link) error {
	defer t.timed(time.Now())
	return t.Tree.Relink(portID, l)
}

func (t timedTree) SetISER(portalID string, on bool) error {
	defer t.timed(time.Now())
	return t.Tree.SetISER(portalID, on)
}

// journalPrecondition re-reads the object right before its journal entry
// is written: false skips the object (the admin removed it, or set iser=0);
// an error stops the heal (the admin changed the port's links: plan again).
func (e *Engine) journalPrecondition(s Step) (bool, error) {
	if s.Key.Kind == KindLIO {
		p, err := e.opt.Tree.Portal(s.Key.ID)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: re-read: %w", s.Key, err)
		}
		return p.ISER, nil
	}
	links, err := e.opt.Tree.Links(s.Key.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: re-read: %w", s.Key, err)
	}
	if !slices.Equal(links, s.LinksAre) {
		return false, fmt.Errorf("%s: its links changed since the plan; planning again", s.Key)
	}
	return true, nil
}

// Run reconciles until ctx is done: at start, on every Poke, every
// resync interval, when a retry is due, and for every manual rebind
// (Rebind). It is the one goroutine that writes configfs. Reconcile errors
// are logged and retried; they never stop the loop.
func (e *Engine) Run(ctx context.Context, heartbeat func()) error {
	resync := time.NewTimer(0)
	defer resync.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var beat <-chan time.Time
	if e.opt.HeartbeatEvery > 0 && heartbeat != nil {
		t := time.NewTicker(e.opt.HeartbeatEvery)
		defer t.Stop()
		beat = t.C
	}
	for {
		var req *request
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-beat:
			heartbeat()
			continue
		case r := <-e.requests:
			e.Retry(r.key)
			req = &r
		case <-e.trigger:
		case <-resync.C:
		case <-retry.C:
		}
		items, err := e.Reconcile(ctx)
		if req != nil {
			req.done <- items
		}
		if errors.Is(err, ErrCrashed) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			e.log.Error("reconcile failed", "err", err)
		}
		if heartbeat != nil {
			heartbeat()
		}
		resync.Reset(e.Config().ResyncInterval)
		retry.Stop()
		if next := nextRetry(items); !next.IsZero() {
			retry.Reset(max(next.Sub(e.opt.Now()), time.Millisecond))
		}
	}
}

// nextRetry is the one place the next retry is decided: the earliest
// RetryAt of the round's items (backoff, graces, GID-table rechecks).
func nextRetry(items []Item) time.Time {
	var next time.Time
	for _, it := range items {
		if !it.RetryAt.IsZero() && (next.IsZero() || it.RetryAt.Before(next)) {
			next = it.RetryAt
		}
	}
	return next
}

// Rebind asks the loop (Run) for a manual rebind of one object: give-up,
// graces and backoff are lifted for it, and the answer is the status after
// that round. Only Run writes configfs; without a running loop, use
// Retry and Reconcile under the state-dir lock instead.
func (e *Engine) Rebind(ctx context.Context, k Key) ([]Item, error) {
	r := request{key: k, done: make(chan []Item, 1)}
	select {
	case e.requests <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case items := <-r.done:
		return items, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Snapshot is the engine's live state for status.
type Snapshot struct {
	Items        []Item
	Results      map[Key]Result
	At           time.Time
	Stats        Stats
	ListenersErr error
	JournalErrs  []error
}

// Snapshot returns the state after the last reconcile.
func (e *Engine) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Rebinds = maps.Clone(e.stats.Rebinds)
	return Snapshot{Items: slices.Clone(e.last), Results: maps.Clone(e.results), At: e.lastAt, Stats: st,
		ListenersErr: e.lastObs.ListenersErr, JournalErrs: slices.Clone(e.journalErrs)}
}

// Look observes and plans now, writing nothing, and returns that with the
// engine's memory (last results, pending retries): what `status` shows.
func (e *Engine) Look() (Snapshot, error) {
	items, obs, err := e.PlanNow()
	if err != nil {
		return Snapshot{}, err
	}
	snap := e.Snapshot()
	snap.Items, snap.At, snap.ListenersErr, snap.JournalErrs = items, obs.Now, obs.ListenersErr, e.journalErrsNow()
	return snap, nil
}

func (e *Engine) journalErrsNow() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.journalErrs)
}
