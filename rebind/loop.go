package rebind

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	// Probe looks at the configfs root at every observation (what Sight
	// says of configfs; ProbeConfigfs); nil: nothing is known of it.
	Probe func() ConfigfsSight
	// HeartbeatEvery, when set, makes Run call its heartbeat at least this
	// often from the loop itself (the systemd watchdog): a round that
	// hangs stops the beats.
	HeartbeatEvery time.Duration
	// Completer makes the objects a saved config declares and configfs
	// lacks (boot completion of objects); nil: only links and iser are
	// completed.
	Completer Completer
	// Exhaustive makes every round a fresh observation, every endpoint
	// decided and a full learn: the reference the differential test holds
	// the normal rounds to.
	Exhaustive bool
	// ISERWriters is how many iser=1 writes of a shared portal's sharers
	// run side by side after the first (attachISERs); 0:
	// DefaultISERWriters, 1: one at a time.
	ISERWriters int
}

// DefaultISERWriters: every iser=1 makes the kernel spawn modprobe
// (request_module("ib_isert") in iscsi_target_configfs.c), and a sharer's
// write waits for it; eight at a time overlap those waits.
const DefaultISERWriters = 8

// Engine reconciles. Its rounds (Reconcile) run one at a time, and a round
// is the one writer of the engine's memory; everyone else sends a request
// (SetConfig, Retry, Rebind, Poke) or reads the snapshot the round
// publishes (Snapshot).
type Engine struct {
	opt      Options
	log      *slog.Logger
	trigger  chan struct{}
	requests chan request // manual rebinds, served by Run
	eventAt  atomic.Int64 // the last Poke (unix ns): an input of the next observation
	looping  atomic.Bool  // Run is running: its retry timers retry a failed rebind

	// Requests waiting for the next round.
	wantCfg atomic.Pointer[Config] // the config asked for last (New, SetConfig)
	inbox   struct {
		sync.Mutex
		retry []Key
	}

	run sync.Mutex // one round at a time; guards the round's own state:
	// the round's state, written by rounds only.
	cfgIn     *Config // the wantCfg the round's cfg is
	cfg       Config
	mem       Memory
	bootUntil time.Time
	base      *Baseline // the last round's observation and plan: select's baseline
	// decided is every managed endpoint's decision, decided in place by
	// the rounds: a round replaces those it selects (decide).
	decided map[epKey]*decision
	wake    *wakeups // when endpoints are decided again by the clock
	stats   Stats
	// completion is the last round's boot completion of objects;
	// waitsDevice whether it waits for a device path (WaitsForDevice).
	completion  Completion
	waitsDevice atomic.Bool

	snap atomic.Pointer[Snapshot] // published once per round
	// saved is what the saved configs declared when the loop last read
	// them: at its first round and at each config swap (a reload), never
	// behind the admin's back. Written by rounds, read by every observe.
	saved atomic.Pointer[savedConfigs]
}

// savedConfigs is one reading of the saved configs.
type savedConfigs struct {
	declared []Declared
	err      error
}

// request is a manual rebind handed to the loop.
type request struct {
	key  Key
	done chan []Item
}

// New returns an engine; it reads nothing of the kernel or configfs until
// the first round.
func New(opt Options) *Engine {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{opt: opt, log: opt.Logger, trigger: make(chan struct{}, 1), requests: make(chan request),
		mem: NewMemory(), cfg: opt.Config, wake: newWakeups()}
	cfg := opt.Config
	e.wantCfg.Store(&cfg)
	e.cfgIn = &cfg
	e.bootUntil = opt.Now().Add(opt.Config.BootWindow)
	if opt.Store != nil {
		pins, err := opt.Store.Pins()
		if err != nil {
			e.log.Warn("pins unreadable, starting without", "err", err)
		}
		if pins != nil {
			e.mem.Pins = pins
		}
		settled, err := opt.Store.Settled()
		if err != nil {
			e.log.Warn("what boot completion saw this boot is unreadable; starting without it", "err", err)
		}
		if settled != nil {
			e.mem.Settled = settled
		}
	}
	e.snap.Store(&Snapshot{Config: cfg, Memory: e.mem, JournalErrs: opt.Quarantined})
	return e
}

// Poke asks for a round; it never blocks, and pokes coalesce. A poke is an
// event (device, address, udev trigger): endpoints waiting for their
// address to appear in a GID table are looked at again shortly after it.
func (e *Engine) Poke() {
	e.eventAt.Store(e.opt.Now().UnixNano())
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// readSaved reads the saved configs that cfg names.
func (e *Engine) readSaved(cfg Config) *savedConfigs {
	if e.opt.Declared == nil || cfg.NvmetConfig == "" && cfg.TargetConfig == "" {
		return &savedConfigs{}
	}
	d, err := e.opt.Declared(cfg)
	return &savedConfigs{declared: d, err: err}
}

// SetConfig asks the next round to use cfg (reload). An explicit reload is
// an admin's request to try again: give-up windows and backoffs restart.
func (e *Engine) SetConfig(cfg Config) { e.wantCfg.Store(&cfg) }

// Config returns the configuration in use, or asked for by SetConfig.
func (e *Engine) Config() Config { return *e.wantCfg.Load() }

// Retry asks the next round to forget the give-up window, backoff and
// graces of the endpoint of one object (a manual rebind): its next heal
// is not held back.
func (e *Engine) Retry(k Key) {
	e.inbox.Lock()
	e.inbox.retry = append(e.inbox.retry, k)
	e.inbox.Unlock()
}

// takeRequests applies the requests made since the last round: a config
// swap (memory's timers restart; every endpoint is decided again) and
// retries. It returns whether the saved configs were read again (the
// first round, a reload).
func (e *Engine) takeRequests() (reread bool) {
	if c := e.wantCfg.Load(); c != e.cfgIn {
		e.cfgIn, e.cfg = c, *c
		e.mem = e.mem.restarted()
		e.base = nil
		e.saved.Store(nil)
	}
	if e.saved.Load() == nil {
		e.saved.Store(e.readSaved(e.cfg))
		reread = true
	}
	e.inbox.Lock()
	retry := e.inbox.retry
	e.inbox.retry = nil
	e.inbox.Unlock()
	for _, k := range retry {
		var ep Endpoint
		for _, it := range e.snap.Load().Items {
			if it.Key == k {
				ep = it.Endpoint
			}
		}
		e.mem = e.mem.forced(k, ep)
	}
	return reread
}

// complete runs boot completion of objects (Options.Completer): first in
// a round, so that the round observes the ports it made and links them.
func (e *Engine) complete(ctx context.Context, reread bool) {
	if e.opt.Completer == nil {
		return
	}
	now := e.opt.Now()
	e.completion = e.opt.Completer.Complete(ctx, CompletionInput{Config: e.cfg, Reload: reread,
		Open: now.Before(e.bootUntil), DryRun: e.opt.DryRun, Now: now})
	e.waitsDevice.Store(e.completion.Again > 0)
}

// WaitsForDevice tells whether the last round's boot completion waits for
// a device path to appear (a block device's event is then worth a round).
func (e *Engine) WaitsForDevice() bool { return e.waitsDevice.Load() }

// Reconcile is one round: observe → select the endpoints to decide →
// plan them → apply the heals → verify over a fresh observation → learn →
// publish. It returns the status items the round published.
func (e *Engine) Reconcile(ctx context.Context) ([]Item, error) { return e.round(ctx, nil) }

// round is Reconcile; with only set, it acts on only's endpoint alone
// (ReconcileKey).
func (e *Engine) round(ctx context.Context, only *Key) ([]Item, error) {
	e.run.Lock()
	defer e.run.Unlock()
	start := time.Now()
	if reread := e.takeRequests(); only == nil {
		e.complete(ctx, reread)
	}
	completed := time.Now()
	if e.opt.Exhaustive {
		e.base = nil
	}
	obs, err := e.observe(e.cfg, e.base, nil)
	if err == nil && only != nil {
		err = obs.holds(*only)
	}
	if err != nil {
		e.stats.ReconcileTime += time.Since(start)
		return nil, err
	}
	observed := time.Now()
	sel := Select(&obs, e.mem, e.base)
	pl := decide(&obs, e.mem, e.cfg, sel, e.decided, e.wake)
	e.decided = pl.decided
	if only != nil {
		pl.Heals = slices.DeleteFunc(pl.Heals, func(h Heal) bool { return !slices.Contains(h.Keys, *only) })
	}
	planned, w0, j0, reads := time.Now(), e.stats.WriteTime, e.stats.JournalTime, readTimes(obs.readTook) // act makes obs its verification's
	outcomes, ran, verified, err := e.act(ctx, &obs, &pl, &sel)
	if err != nil {
		e.stats.ReconcileTime += time.Since(start)
		return nil, err
	}
	if len(ran) > 0 {
		// Where a round that healed spent its time (debug).
		// observe is the boot completion's pass (complete), the inputs'
		// reads (reads) and then configfs's.
		e.log.Debug("round", "heals", len(ran), "selected", sel.Size(), "observe", observed.Sub(start), "complete", completed.Sub(start),
			"reads", reads, "plan", planned.Sub(observed),
			"act_and_verify", time.Since(planned), "configfs_writes", e.stats.WriteTime-w0, "journal", e.stats.JournalTime-j0, "verify", verified)
	}
	assemble(&pl, &obs, e.cfg, sel)
	e.learn(&obs, &pl, sel)
	e.stats.ReconcileTime += time.Since(start)
	next := nextLook(pl, ran, obs.Now, e.opt.DryRun)
	if a := e.completion.Again; a > 0 && (next.IsZero() || obs.Now.Add(a).Before(next)) {
		next = obs.Now.Add(a) // an object waits for a device path
	}
	e.publish(&obs, &pl, outcomes, next)
	e.report(outcomes)
	return pl.Items, nil
}

// act applies the plan's heals and verifies them: one observation made
// after the writes verifies every heal (one cm_id dump per device, not one
// per endpoint); memory learns the outcomes (backoff) and the endpoints
// the observation selects against the round's plan are planned again, so
// obs, pl and sel end as the round's status. It returns the outcomes and
// the endpoints healed, with the time the verification took; an error
// only for ctx or a fault point.
func (e *Engine) act(ctx context.Context, obs *Observed, pl *Planned, sel *Selection) ([]Outcome, map[Endpoint]bool, time.Duration, error) {
	if len(pl.Heals) == 0 {
		return nil, nil, 0, nil
	}
	if e.opt.DryRun {
		for _, h := range pl.Heals {
			e.log.Info("dry run: would act", "endpoint", h.Endpoint.String(), "action", h.Action.String(), "objects", len(h.Keys), "steps", len(h.Steps), "reason", h.Reason)
		}
		return nil, nil, 0, nil
	}
	done, err := e.apply(ctx, pl.Heals, obs)
	if err != nil {
		return nil, nil, 0, err
	}
	acted := time.Now()
	ran := make(map[Endpoint]bool, len(done))
	var outcomes []Outcome
	next, base := *obs, baseline(*obs, *pl)
	if len(done) > 0 {
		obs2, err := e.observe(e.cfg, e.base, obs.Devices) // e.base: nil when exhaustive
		outcomes = verify(done, &obs2, err, e.mem, e.cfg, time.Now())
		e.mem = learnOutcomes(e.mem, outcomes, obs2.Now)
		for _, p := range done {
			ran[p.heal.Endpoint] = true
		}
		if err != nil {
			base = nil // nothing fresh to select against: plan the round's own observation again, all of it
		} else {
			next = obs2
		}
	}
	if e.opt.Exhaustive {
		base = nil
	}
	*obs, *sel = next, Select(&next, e.mem, base)
	*pl = decide(obs, e.mem, e.cfg, *sel, e.decided, e.wake)
	e.decided = pl.decided
	return outcomes, ran, time.Since(acted), nil
}

// learn keeps what the round concluded: memory (Learn), the pins when they
// changed, and the baseline of the next round's selection.
func (e *Engine) learn(obs *Observed, pl *Planned, sel Selection) {
	var pinsChanged bool
	settled := len(e.mem.Settled) // it only grows
	e.mem, pinsChanged = Learn(e.mem, pl.endpoints(), pl.Items, obs.Now)
	if pinsChanged && e.opt.Store != nil && !e.opt.DryRun {
		if err := e.opt.Store.SavePins(e.mem.Pins); err != nil {
			e.log.Warn("pins not saved", "err", err)
		}
	}
	if len(e.mem.Settled) != settled && e.opt.Store != nil && !e.opt.DryRun {
		if err := e.opt.Store.SaveSettled(e.mem.Settled); err != nil {
			e.log.Warn("what boot completion saw in place not saved", "err", err)
		}
	}
	e.base = baseline(*obs, *pl)
	if e.opt.Exhaustive {
		e.base = nil
	}
	if sel.Size() == 0 && len(pl.Heals) == 0 {
		e.stats.Unchanged++
	}
}

// report logs the round's outcomes.
func (e *Engine) report(outcomes []Outcome) {
	for _, o := range outcomes {
		addr, svc := o.Endpoint.Addr.Addr(), o.Endpoint.Addr.Port()
		if o.Result == ResultOK {
			e.log.Info("listener restored", "listener", keysString(o.Keys), "endpoint", o.Endpoint.String(), "address", addr, "service", svc, "action", o.Action.String(), "latency", o.Latency)
		} else if e.looping.Load() {
			e.log.Warn("rebind failed, will retry", "listener", keysString(o.Keys), "endpoint", o.Endpoint.String(), "address", addr, "action", o.Action.String(), "result", o.Result.String(), "err", o.Err, "retry_in", e.mem.Backoff[o.Endpoint])
		} else {
			// A round outside Run (trigger, rebind without a daemon): no
			// retry timer runs after it.
			e.log.Warn("rebind failed, not retried: no daemon runs", "listener", keysString(o.Keys), "endpoint", o.Endpoint.String(), "address", addr, "action", o.Action.String(), "result", o.Result.String(), "err", o.Err)
		}
	}
}

// Run runs rounds until ctx is done: at start, on every Poke, every resync
// interval, when the last round's plan says to look again (nextLook), and
// for every manual rebind (Rebind). It is the one goroutine that writes
// configfs. Round errors are logged and retried; they never stop the loop.
func (e *Engine) Run(ctx context.Context, heartbeat func()) error {
	e.looping.Store(true)
	defer e.looping.Store(false)
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
		if wait, ok := e.nextWait(); err == nil && ok {
			retry.Reset(wait)
		}
	}
}

// nextWait is how long until the last round's next look (Snapshot.Next,
// at least 1 ms); false when it asked for none.
func (e *Engine) nextWait() (time.Duration, bool) {
	next := e.snap.Load().Next
	if next.IsZero() {
		return 0, false
	}
	return max(next.Sub(e.opt.Now()), time.Millisecond), true
}

// Settle is the one-shot reconcile of a trigger without a daemon: an
// event (Poke: the GID-table rechecks count from it), a round, and more
// rounds at the plan's own next look (nextLook: a GID table filling, the
// kernel's repair grace of a stranded listener, a device's removal grace,
// a refused bind's backoff, boot completion's wait for a device path)
// while that falls before until; a zero until runs one round. One round
// alone would leave such work to the next event, and an event would find the same grace again (nothing outside a daemon
// remembers when a listener went down). Work still waiting at until is
// logged. It returns the last round's items; ctx bounds each round.
func (e *Engine) Settle(ctx context.Context, until time.Time) ([]Item, error) {
	e.Poke()
	e.looping.Store(true) // a failed rebind is retried here, within the deadline
	defer e.looping.Store(false)
	for {
		items, err := e.Reconcile(ctx)
		if err != nil {
			return items, err
		}
		wait, ok := e.nextWait()
		if !ok {
			return items, nil
		}
		if time.Now().Add(wait).After(until) {
			if !until.IsZero() {
				e.log.Warn("work left after the one-shot reconcile: no daemon runs to look again; the next event, trigger or the daemon's start does", "next_look", e.snap.Load().Next.Format(time.TimeOnly+".000"))
			}
			return items, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return items, nil
		case <-t.C:
		}
	}
}

// Rebind asks the loop (Run) for a manual rebind of one object: give-up,
// graces and backoff are lifted for it, and the answer is the status after
// that round. Only Run writes configfs; without a running loop, use Retry
// and Reconcile under the state-dir lock instead.
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
