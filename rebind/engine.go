package rebind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/kernel"
)

// Kernel is the engine's view of the running kernel's RDMA state.
type Kernel interface {
	Devices() ([]kernel.Device, error)
	CMIDs(devs []kernel.Device) ([]kernel.CMID, error)
	Addrs() ([]kernel.Addr, error)
}

// Backoff bounds for refused binds.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

// ErrCrashed is returned when a test fault point stopped a rebind the way a
// crash would: no further write, no cleanup.
var ErrCrashed = errors.New("stopped at a fault point")

// Options configure an Engine.
type Options struct {
	FS       *configfs.FS
	Kernel   Kernel
	Journal  *Journal
	Config   Config
	Logger   *slog.Logger
	DryRun   bool                    // plan and log, write nothing
	Now      func() time.Time        // clock; time.Now when nil
	Fault    func(point string) bool // test hook: true stops the rebind there (ErrCrashed)
	StateDir string                  // for pins.json; "" keeps pins in memory only
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

	run         sync.Mutex // one reconcile at a time
	mu          sync.Mutex // guards the fields below
	cfg         Config
	mem         Memory
	backoff     map[Key]time.Duration
	results     map[Key]Result
	last        []Item
	lastObs     Observed
	lastAt      time.Time
	stats       Stats
	journalErrs []error
	bootUntil   time.Time
}

// Stats are counters for metrics and status.
type Stats struct {
	Reconciles     uint64
	Rebinds        map[string]uint64 // by result: ok, refused, error, unverified
	LastLatency    time.Duration
	PendingRetries int
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
		opt:     opt,
		log:     opt.Logger,
		trigger: make(chan struct{}, 1),
		cfg:     opt.Config,
		mem:     Memory{DeadSince: map[Key]time.Time{}, NextTry: map[Key]time.Time{}, Pins: map[Key]uint64{}, AliveOn: map[Key]uint32{}},
		backoff: map[Key]time.Duration{},
		results: map[Key]Result{},
		stats:   Stats{Rebinds: map[string]uint64{}},
	}
	e.bootUntil = opt.Now().Add(opt.Config.BootWindow)
	e.loadPins()
	return e
}

// Poke asks for a reconcile; it never blocks, and pokes coalesce.
func (e *Engine) Poke() {
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
	clear(e.mem.DeadSince)
	clear(e.mem.NextTry)
	clear(e.backoff)
}

// Config returns the configuration in use.
func (e *Engine) Config() Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// Retry forgets the give-up window and backoff of one listener (a manual
// rebind request).
func (e *Engine) Retry(k Key) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.mem.DeadSince, k)
	delete(e.mem.NextTry, k)
	delete(e.mem.AliveOn, k) // the admin asks now: no removal grace
	delete(e.backoff, k)
}

// Observe reads configfs, the journal and the kernel. Errors that make the
// observation unusable (configfs unreadable) are returned; kernel read errors
// are recorded in Observed and make the affected facts unknown.
func (e *Engine) Observe() (Observed, error) {
	obs := Observed{Now: e.opt.Now(), Subsystems: map[string]bool{}}
	// The kernel first: which listeners are alive decides how much of
	// configfs must be read (a live port's links are not needed).
	obs.Devices, obs.DevicesErr = e.opt.Kernel.Devices()
	obs.Addrs, obs.AddrsErr = e.opt.Kernel.Addrs()
	if obs.DevicesErr != nil {
		obs.ListenersErr = obs.DevicesErr
	} else {
		obs.Listeners, obs.ListenersErr = e.opt.Kernel.CMIDs(obs.Devices)
	}
	if e.opt.Journal != nil {
		var bad []error
		obs.Journal, bad = e.opt.Journal.Load()
		if len(bad) > 0 {
			e.mu.Lock()
			e.journalErrs = append(e.journalErrs, bad...)
			e.mu.Unlock()
			for _, b := range bad {
				e.log.Error("journal entry ignored", "err", b)
			}
		}
	}
	e.mu.Lock()
	cfg, bootUntil := e.cfg, e.bootUntil
	e.mu.Unlock()
	obs.BootUntil = bootUntil
	if cfg.NvmetConfig != "" || cfg.TargetConfig != "" {
		d, err := LoadDeclared(cfg)
		if err != nil {
			e.log.Warn("saved config unreadable; boot completion skipped", "err", err)
		}
		obs.Declared = d
	}
	live := map[netip.AddrPort]bool{}
	if obs.ListenersErr == nil {
		for _, c := range obs.Listeners {
			if c.Listening() && c.Port != 0 && c.KernName == KindNvmet.owner() {
				live[unzoned(c.Src)] = true
			}
		}
	}
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
		return p.Trtype != "rdma" || err != nil || !live[ap]
	}
	var err error
	if obs.Ports, err = e.opt.FS.PortsWith(needLinks); err != nil {
		return obs, err
	}
	if obs.Portals, obs.PortalsErr = e.opt.FS.Portals(); obs.PortalsErr != nil {
		e.log.Warn("some LIO portals unreadable; the rest is reconciled", "err", obs.PortalsErr)
	}
	nqns, err := e.opt.FS.Subsystems()
	if err != nil {
		return obs, err
	}
	for _, n := range nqns {
		obs.Subsystems[n] = true
	}
	return obs, nil
}

// PlanNow observes and plans without writing anything.
func (e *Engine) PlanNow() ([]Item, Observed, error) {
	obs, err := e.Observe()
	if err != nil {
		return nil, obs, err
	}
	e.mu.Lock()
	items := Plan(obs, e.memCopy(), e.cfg)
	e.mu.Unlock()
	return items, obs, nil
}

func (e *Engine) memCopy() Memory {
	return Memory{DeadSince: maps.Clone(e.mem.DeadSince), NextTry: maps.Clone(e.mem.NextTry), Pins: maps.Clone(e.mem.Pins), AliveOn: maps.Clone(e.mem.AliveOn)}
}

// Reconcile observes, plans, applies and verifies once. It returns the
// plan as it stood after the actions (for status).
func (e *Engine) Reconcile(ctx context.Context) ([]Item, error) {
	e.run.Lock()
	defer e.run.Unlock()
	items, obs, err := e.PlanNow()
	if err != nil {
		return nil, err
	}
	e.remember(items, obs)
	var done []pending
	for i := range items {
		if err := ctx.Err(); err != nil {
			return items, err
		}
		it := &items[i]
		if it.Action == ActNone {
			continue
		}
		if e.opt.DryRun {
			e.log.Info("dry run: would act", "listener", it.Key.String(), "action", it.Action.String(), "address", it.Address, "reason", it.Reason)
			continue
		}
		p, err := e.apply(it)
		if errors.Is(err, ErrCrashed) {
			return items, err
		}
		if p != nil {
			done = append(done, *p)
		}
	}
	if len(done) > 0 {
		// One observation verifies every action of this round (one cm_id
		// dump per device, not one per port) and refreshes the status.
		items2, obs2, err := e.PlanNow()
		if err == nil {
			items = items2
			e.remember(items, obs2)
		}
		e.settle(done, items2, err)
	}
	e.mu.Lock()
	e.last = items
	e.lastAt = e.opt.Now()
	e.stats.Reconciles++
	e.mu.Unlock()
	return items, nil
}

// remember updates dead-since and pins from a plan.
func (e *Engine) remember(items []Item, obs Observed) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lastObs = obs
	pinsChanged := false
	present := map[Key]bool{}
	for _, it := range items {
		present[it.Key] = true
		switch {
		case !it.Managed || it.Listening == nil:
			delete(e.mem.DeadSince, it.Key)
		case *it.Listening:
			e.mem.AliveOn[it.Key] = it.devIndex + 1
			delete(e.mem.DeadSince, it.Key)
			delete(e.mem.NextTry, it.Key)
			delete(e.backoff, it.Key)
			if it.GUID != 0 && e.mem.Pins[it.Key] != it.GUID {
				e.mem.Pins[it.Key] = it.GUID
				pinsChanged = true
			}
		case it.Reason == "not enabled: no subsystem linked":
			delete(e.mem.DeadSince, it.Key)
		default:
			if _, ok := e.mem.DeadSince[it.Key]; !ok {
				e.mem.DeadSince[it.Key] = obs.Now
			}
		}
	}
	for k := range e.mem.AliveOn {
		if !present[k] {
			delete(e.mem.AliveOn, k)
		}
	}
	for k := range e.mem.Pins {
		if !present[k] {
			delete(e.mem.Pins, k)
			pinsChanged = true
		}
	}
	if pinsChanged {
		e.savePins()
	}
}

func (e *Engine) fault(point string) bool {
	return e.opt.Fault != nil && e.opt.Fault(point)
}

// refused reports a bind the kernel refused because the address or device
// is not ready: retried with backoff.
func refused(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENODEV)
}

// pending is an action written and waiting for verification.
type pending struct {
	it    Item
	start time.Time // engine clock
	wall  time.Time // for the latency
	err   error
}

// apply performs one item's action. Actions that change listeners are
// returned for settle to verify; a journal drop is final at once.
func (e *Engine) apply(it *Item) (*pending, error) {
	p := &pending{it: *it, start: e.opt.Now(), wall: time.Now()}
	switch it.Action {
	case ActRebindPort:
		p.err = e.rebindPort(it)
	case ActCompletePort:
		p.err = e.restorePort(it)
	case ActToggleISER:
		p.err = e.toggleISER(it)
	case ActCompleteISER:
		p.err = e.completeISER(it.ID)
	case ActCompleteBoot:
		p.err = e.completeBoot(it)
	case ActDropJournal:
		err := e.opt.Journal.Delete(it.Key)
		e.log.Info("journal entry dropped", "listener", it.Key.String(), "reason", it.Reason)
		return nil, err
	}
	if errors.Is(p.err, ErrCrashed) {
		return nil, p.err
	}
	return p, nil
}

// settle records the outcome of this round's actions from the observation
// made after them (items; planErr when it failed): ok when the listener is
// in LISTEN, else backoff.
func (e *Engine) settle(done []pending, items []Item, planErr error) {
	now := time.Now()
	byKey := make(map[Key]*Item, len(items))
	for i := range items {
		byKey[items[i].Key] = &items[i]
	}
	for _, p := range done {
		it := p.it
		res := Result{Action: it.Action, At: p.start, Err: p.err}
		outcome := "ok"
		switch {
		case p.err != nil && refused(p.err):
			outcome = "refused"
		case p.err != nil:
			outcome = "error"
		case planErr != nil:
			res.Err, outcome = fmt.Errorf("verify: %w", planErr), "unverified"
		default:
			after, ok := byKey[it.Key]
			switch {
			case !ok:
				// Removed by the admin meanwhile: nothing to verify.
			case after.Listening == nil:
				res.Err, outcome = errors.New("verify: listener state unknown"), "unverified"
			case !*after.Listening:
				res.Err, outcome = errors.New("written, but no listener in the cm_id table"), "unverified"
			}
			res.Latency = now.Sub(p.wall)
		}
		e.mu.Lock()
		e.results[it.Key] = res
		e.stats.Rebinds[outcome]++
		var retry time.Duration
		if outcome == "ok" {
			e.stats.LastLatency = res.Latency
			delete(e.backoff, it.Key)
			delete(e.mem.NextTry, it.Key)
		} else {
			retry = e.backoff[it.Key]
			if retry == 0 {
				retry = backoffMin
			} else {
				retry = min(2*retry, backoffMax)
			}
			e.backoff[it.Key] = retry
			e.mem.NextTry[it.Key] = e.opt.Now().Add(retry)
			if after, ok := byKey[it.Key]; ok {
				after.RetryAt = e.mem.NextTry[it.Key]
			}
		}
		e.mu.Unlock()
		if outcome == "ok" {
			e.log.Info("listener restored", "listener", it.Key.String(), "address", it.Address, "service", it.Service, "action", it.Action.String(), "latency", res.Latency)
		} else {
			e.log.Warn("rebind failed, will retry", "listener", it.Key.String(), "address", it.Address, "action", it.Action.String(), "result", outcome, "err", res.Err, "retry_in", retry)
		}
	}
}

// rebindPort: journal, unlink all, relink all in order.
func (e *Engine) rebindPort(it *Item) error {
	fsys := e.opt.FS
	// Re-read the port right before writing: another tool may have changed
	// it since the plan was made.
	p, err := fsys.Port(it.ID)
	if err != nil {
		return fmt.Errorf("nvmet port %s: re-read: %w", it.ID, err)
	}
	if len(p.Links) == 0 {
		return nil
	}
	in := Intent{Kind: KindNvmet, ID: it.ID, Address: addrString(it), Links: p.Links, Started: e.opt.Now()}
	if err := e.opt.Journal.Put(in); err != nil {
		return err
	}
	if e.fault("after-journal") {
		return ErrCrashed
	}
	for i, l := range p.Links {
		if err := fsys.Unlink(it.ID, l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Put back what we took, then report.
			if cerr := e.completePort(it.ID, p.Links); cerr != nil {
				return errors.Join(err, cerr)
			}
			return err
		}
		if e.fault(fmt.Sprintf("after-unlink-%d", i)) {
			return ErrCrashed
		}
	}
	return e.completePort(it.ID, p.Links)
}

// restorePort finishes a rebind from the journal. When the port still has
// some of the links (a crash between unlinks) its listener is dead, so those
// are unlinked too and everything is relinked in the journal's order.
func (e *Engine) restorePort(it *Item) error {
	p, err := e.opt.FS.Port(it.ID)
	if err != nil {
		return fmt.Errorf("nvmet port %s: re-read: %w", it.ID, err)
	}
	if it.Listening == nil || !*it.Listening {
		for _, l := range p.Links {
			if !slices.Contains(it.Links, l) {
				continue
			}
			if err := e.opt.FS.Unlink(it.ID, l); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return e.completePort(it.ID, it.Links)
}

// completePort relinks every link of the journal that is missing, in
// order, and drops the journal entry when all are back.
func (e *Engine) completePort(id string, links []configfs.Link) error {
	fsys := e.opt.FS
	for i, l := range links {
		p, err := fsys.Port(id)
		if errors.Is(err, fs.ErrNotExist) {
			return e.opt.Journal.Delete(Key{KindNvmet, id}) // the admin removed the port
		}
		if err != nil {
			return err
		}
		if slices.Contains(p.Links, l) {
			continue
		}
		err = fsys.Relink(id, l)
		switch {
		case err == nil, errors.Is(err, fs.ErrExist):
		case errors.Is(err, fs.ErrNotExist):
			// The subsystem was deleted by the admin: respected.
			e.log.Info("subsystem gone, not relinked", "listener", Key{KindNvmet, id}.String(), "nqn", l.NQN)
		default:
			return err // refused binds included: the journal keeps the links
		}
		if e.fault(fmt.Sprintf("after-relink-%d", i)) {
			return ErrCrashed
		}
	}
	return e.opt.Journal.Delete(Key{KindNvmet, id})
}

// completeBoot links the declared subsystems that are missing, in order.
func (e *Engine) completeBoot(it *Item) error {
	for _, l := range it.Links {
		err := e.opt.FS.Relink(it.ID, l)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

func (e *Engine) toggleISER(it *Item) error {
	p, err := e.opt.FS.Portal(it.ID)
	if err != nil {
		return fmt.Errorf("lio portal %s: re-read: %w", it.ID, err)
	}
	if !p.ISER {
		return nil // the admin set iser=0 meanwhile
	}
	if err := e.opt.Journal.Put(Intent{Kind: KindLIO, ID: it.ID, Address: addrString(it), ISER: true, Started: e.opt.Now()}); err != nil {
		return err
	}
	if e.fault("after-journal") {
		return ErrCrashed
	}
	if err := e.opt.FS.SetISER(it.ID, false); err != nil {
		return err
	}
	if e.fault("after-iser-0") {
		return ErrCrashed
	}
	return e.completeISER(it.ID)
}

func (e *Engine) completeISER(id string) error {
	p, err := e.opt.FS.Portal(id)
	if errors.Is(err, fs.ErrNotExist) {
		return e.opt.Journal.Delete(Key{KindLIO, id}) // the admin removed the portal
	}
	if err != nil {
		return err
	}
	if !p.ISER {
		if err := e.opt.FS.SetISER(id, true); err != nil {
			return err
		}
		if e.fault("after-iser-1") {
			return ErrCrashed
		}
	}
	return e.opt.Journal.Delete(Key{KindLIO, id})
}

func addrString(it *Item) string {
	return netipAddrPort(it).String()
}

// Run reconciles until ctx is done: at start, on every Poke, every
// resync interval, and when a retry is due. Reconcile errors are logged
// and retried; they never stop the loop.
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
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-beat:
			heartbeat()
			continue
		case <-e.trigger:
		case <-resync.C:
		case <-retry.C:
		}
		items, err := e.Reconcile(ctx)
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
		next := time.Time{}
		for _, it := range items {
			if !it.RetryAt.IsZero() && (next.IsZero() || it.RetryAt.Before(next)) {
				next = it.RetryAt
			}
		}
		e.mu.Lock()
		for _, t := range e.mem.NextTry {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		e.stats.PendingRetries = len(e.mem.NextTry)
		e.mu.Unlock()
		retry.Stop()
		if !next.IsZero() {
			retry.Reset(max(time.Until(next), time.Millisecond))
		}
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

func (e *Engine) pinsFile() string {
	if e.opt.StateDir == "" {
		return ""
	}
	return filepath.Join(e.opt.StateDir, "pins.json")
}

type pinEntry struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
	GUID string `json:"node_guid"`
}

func (e *Engine) loadPins() {
	path := e.pinsFile()
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			e.log.Warn("pins unreadable, starting without", "file", path, "err", err)
		}
		return
	}
	var pins []pinEntry
	if err := json.Unmarshal(b, &pins); err != nil {
		e.log.Warn("pins unreadable, starting without", "file", path, "err", err)
		return
	}
	for _, p := range pins {
		var g uint64
		if _, err := fmt.Sscanf(p.GUID, "%x", &g); err == nil {
			e.mem.Pins[Key{p.Kind, p.ID}] = g
		}
	}
}

// savePins persists the pins (called with e.mu held).
func (e *Engine) savePins() {
	path := e.pinsFile()
	if path == "" || e.opt.DryRun {
		return
	}
	var pins []pinEntry
	for k, g := range e.mem.Pins {
		pins = append(pins, pinEntry{Kind: k.Kind, ID: k.ID, GUID: fmt.Sprintf("%016x", g)})
	}
	slices.SortFunc(pins, func(a, b pinEntry) int { return strings.Compare(string(a.Kind)+a.ID, string(b.Kind)+b.ID) })
	b, _ := json.MarshalIndent(pins, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		e.log.Warn("pins not saved", "file", path, "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		e.log.Warn("pins not saved", "file", path, "err", err)
	}
}
