// Package daemon wires nvmet-rebind together: the engine over the live
// kernel and configfs, the state directory, the event sources, the control
// socket, metrics and systemd's notification protocol. Run is the daemon
// (`nvmet-rebind run`): its tasks run in one errgroup, and the engine's
// loop is the only writer of configfs. Open builds an engine for the
// commands that run without a daemon, read-only unless asked to write.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// Paths are the roots and files the daemon uses (flags of the command).
type Paths struct {
	Config   string // the TOML config
	Configfs string // configfs mount point
	Sysfs    string // sysfs mount point
	State    string // journal, pins, lock
	Run      string // control socket
}

// Socket is the control socket's path.
func (p Paths) Socket() string { return filepath.Join(p.Run, "control.sock") }

// Mode says what an engine built by Open may do.
type Mode int

// Modes.
const (
	ReadOnly Mode = iota // status, check, plan: writes nothing anywhere
	Write                // trigger, rebind without a daemon (under Lock)
)

// Env is an engine over the live system.
type Env struct {
	Config rebind.Config
	Engine *rebind.Engine
	Kernel *rdma.Live
	Store  *state.Store
	// Model is the daemon's inotify model of configfs (nil: configfs is
	// read whole at every observation, as the one-shot commands do).
	Model *watch.Model
}

// Close releases the kernel sockets and the model's inotify descriptor.
func (e *Env) Close() error {
	if e.Model != nil {
		e.Model.Close()
	}
	return e.Kernel.Close()
}

// Open builds an engine over the live kernel. ReadOnly never creates,
// changes or removes anything (the state directory is opened read-only and
// the engine runs dry); Write opens the state directory for the writer and
// cleans it: the caller must hold Lock.
func Open(p Paths, log *slog.Logger, mode Mode, fault func(string) bool) (*Env, error) {
	return open(p, log, mode, fault, 0, false)
}

// open builds the engine; with model, configfs is read through an inotify
// model of it (the daemon), else whole at every observation.
func open(p Paths, log *slog.Logger, mode Mode, fault func(string) bool, heartbeat time.Duration, model bool) (*Env, error) {
	cfg, err := config.Load(p.Config)
	if err != nil {
		return nil, err
	}
	env := &Env{Config: cfg, Kernel: rdma.NewLive(p.Sysfs)}
	fsys := configfs.New(p.Configfs)
	var tree rebind.Tree = fsys
	if model {
		rescan := cfg.RescanInterval
		if rescan == 0 {
			rescan = -1
		}
		m, err := watch.New(fsys, watch.Options{RescanEvery: rescan, Logger: log})
		if err != nil {
			// No inotify (instances exhausted, a seccomp filter): the
			// daemon still works, reading configfs whole every time.
			log.Warn("configfs model unavailable; reading configfs whole at every event", "err", err)
		} else {
			env.Model, tree = m, m
		}
	}
	opts := rebind.Options{Tree: tree, Kernel: env.Kernel, Config: cfg, Logger: log,
		Declared: saved.Load, HeartbeatEvery: heartbeat}
	if mode == ReadOnly {
		env.Store = state.OpenReadOnly(p.State)
		opts.DryRun = true
	} else {
		if env.Store, err = state.Open(p.State); err != nil {
			return nil, err
		}
		moved, err := env.Store.Clean()
		for _, m := range moved {
			log.Error("journal entry ignored", "err", m)
		}
		if err != nil {
			return nil, err
		}
		opts.Fault, opts.Quarantined = fault, moved
	}
	opts.Store = env.Store
	env.Engine = rebind.New(opts)
	return env, nil
}

// SetupError is a failure before the daemon started its tasks (a bad
// config, the lock held by another daemon, the socket): the command exits 2.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// RunOptions are the daemon's own settings.
type RunOptions struct {
	DryRun        bool
	MetricsListen string // loopback address for Prometheus; "" = off
	// MetricsTextfile is the node_exporter textfile to write; "" = the
	// config's metrics.textfile (off when that is empty too).
	MetricsTextfile string
	Version         string
	Fault           func(string) bool // test builds: crash points
	// NoWatch reads configfs whole at every observation instead of
	// through the inotify model (run --no-watch).
	NoWatch bool
}

// Run is the daemon: until ctx is done or a task fails.
func Run(ctx context.Context, p Paths, log *slog.Logger, o RunOptions) error {
	var beat time.Duration
	if d, err := sd.SdWatchdogEnabled(false); err != nil {
		return &SetupError{fmt.Errorf("systemd watchdog: %w", err)}
	} else if d > 0 {
		beat = d / 2
	}
	unlock, err := Lock(p.State)
	if err != nil {
		return &SetupError{err}
	}
	defer unlock()
	mode := Write
	if o.DryRun {
		mode = ReadOnly
	}
	env, err := open(p, log, mode, o.Fault, beat, !o.NoWatch)
	if err != nil {
		return &SetupError{err}
	}
	defer env.Close()
	if o.MetricsListen != "" {
		if err := metrics.CheckAddr(o.MetricsListen, false); err != nil {
			return &SetupError{err}
		}
	}
	if o.MetricsTextfile != "" {
		if err := metrics.CheckTextfile(o.MetricsTextfile); err != nil {
			return &SetupError{err}
		}
	}
	cfg := env.Config
	log.Info("starting", "version", o.Version, "configfs", p.Configfs, "watch", fmt.Sprint(cfg.Watch),
		"give_up_after", cfg.GiveUpAfter, "pin_device", cfg.PinDevice, "resync_interval", cfg.ResyncInterval, "dry_run", o.DryRun,
		"metrics_textfile", textfilePath(o.MetricsTextfile, cfg), "configfs_model", env.Model != nil, "rescan_interval", cfg.RescanInterval)

	d := &daemon{paths: p, log: log, env: env}
	srv, err := control.Listen(p.Socket(), d.handler())
	if err != nil {
		return &SetupError{err}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	g, ctx := errgroup.WithContext(ctx)
	poke := func(h udev.Hint) {
		log.Debug("event", "source", h.Source, "reason", h.Reason, "resync", h.Resync, "configfs", h.Configfs)
		if env.Model != nil && (h.Configfs || h.Resync) {
			// A configfs module loaded or unloaded (its tree appears or
			// vanishes without an inotify event), or uevents were lost.
			env.Model.Invalidate()
		}
		env.Engine.Poke()
	}
	stats := new(udev.Stats)
	g.Go(func() error { return quiet(ctx, "uevents", udev.WatchUevents(ctx, poke, udev.Options{Stats: stats})) })
	g.Go(func() error {
		return quiet(ctx, "rtnetlink", udev.WatchRtnetlink(ctx, poke, udev.Options{Stats: stats}))
	})
	ready := false
	// rounds tells the textfile writer a round (or a beat) happened; it
	// holds one poke, so a slow write never holds the loop up.
	rounds := make(chan struct{}, 1)
	// trims does the same for the memory policy (trimMemory).
	trims := make(chan struct{}, 1)
	g.Go(func() error {
		return quiet(ctx, "reconciler", env.Engine.Run(ctx, func() {
			// READY=1 after the first full reconcile; then every beat
			// proves the loop is alive.
			if !ready {
				ready = true
				d.notify("READY=1\nSTATUS=reconciling; see nvmet-rebind status")
			}
			d.notify("WATCHDOG=1")
			select {
			case rounds <- struct{}{}:
			default:
			}
			select {
			case trims <- struct{}{}:
			default:
			}
		}))
	})
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		g.Go(func() error { trimMemory(ctx, trims); return nil })
	}
	col := metrics.NewCollector(env.Engine, stats)
	if o.MetricsListen != "" {
		g.Go(func() error { return quiet(ctx, "metrics", metrics.Serve(ctx, o.MetricsListen, col)) })
	}
	g.Go(func() error { d.writeTextfile(ctx, o.MetricsTextfile, metrics.NewTextfile(col), rounds); return nil })
	g.Go(func() error { return quiet(ctx, "control", srv.Serve(ctx)) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				d.reload() // errors are logged and told to systemd: the old config stays
			}
		}
	})
	<-ctx.Done()
	d.notify("STOPPING=1")
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// textfilePath is the metrics textfile in force: the flag, else the
// config's ("" = none).
func textfilePath(flag string, cfg rebind.Config) string {
	if flag != "" {
		return flag
	}
	return cfg.MetricsTextfile
}

// writeTextfile writes the metrics textfile after every reconcile round and
// at least every resync interval (so its mtime, node_textfile_mtime_seconds,
// says the daemon is alive even while nothing happens), until ctx is done.
// rounds is poked by the loop after each round and each watchdog beat; a
// beat without a new round does not rewrite the file before the interval.
// The path is re-read from the config each time (a reload may set, change
// or clear it); a file the daemon stops writing to is removed, so no stale
// metrics stay behind. A failed write is logged once (and its recovery),
// never fatal: metrics must not stop the healing.
func (d *daemon) writeTextfile(ctx context.Context, flag string, tf *metrics.Textfile, rounds <-chan struct{}) {
	var (
		last     string // the path last written
		lastN    uint64 // reconciles counted at that write
		failing  bool
		interval = time.NewTimer(time.Hour)
	)
	interval.Stop()
	defer interval.Stop()
	write := func(force bool) {
		cfg := d.env.Engine.Config()
		path := textfilePath(flag, cfg)
		if last != "" && path != last {
			if err := os.Remove(last); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.log.Warn("old metrics textfile not removed", "path", last, "err", err)
			}
			last, failing = "", false
		}
		if path == "" {
			return
		}
		n := d.env.Engine.Snapshot().Stats.Reconciles
		if !force && path == last && n == lastN {
			return // a watchdog beat, no new round
		}
		err := tf.Write(path)
		switch {
		case err != nil && !failing:
			d.log.Error("metrics textfile not written; retrying after each round", "err", err)
		case err == nil && failing:
			d.log.Info("metrics textfile written again", "path", path)
		}
		failing = err != nil
		last, lastN = path, n
		interval.Reset(cfg.ResyncInterval)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds:
			write(false)
		case <-interval.C:
			write(true)
		}
	}
}

// The daemon's memory policy (trimMemory), unless GOGC or GOMEMLIMIT is
// set in the environment: then the Go runtime does as told and the
// daemon does nothing of its own.
//
// The daemon idles between rounds, and a round allocates more than the
// daemon keeps: a planned round at 4096 ports and 4096 portals about
// 25 MB, an idle resync whose inputs did not change (its plan kept) a
// megabyte or two, the periodic rescan tens of megabytes; the live heap
// is about 10 MB. Left to the runtime (GOGC=100), the pages of that
// garbage stay mapped until a GC and the scavenger return them, which at
// idle (a GC every 2 minutes) is slow: the idle RSS is a multiple of the
// live heap. So once the loop has been quiet for trimAfter after rounds
// that allocated trimMin or more, trimMemory collects and returns every
// free page to the system (debug.FreeOSMemory), and sets GOGC so that a
// burst as large fits the heap goal without a GC in its middle (the
// trim's GC takes its place). The cost is a GC per trim and the page
// faults of the next round re-touching returned pages, in system time;
// BENCHMARKS.md ("Idle") has RSS and CPU with and without it
// (tests/idle-cost.sh 600 4096 4096 model; GOGC=100 in the environment
// turns the policy off).

// trimAfter is how long the loop must have been quiet (no round, no beat)
// before trimMemory trims; trimMin the least heap allocated since the
// last trim that makes one worth it; maxGCPercent bounds the GOGC it sets.
const (
	trimAfter    = 250 * time.Millisecond
	trimMin      = 1 << 20
	maxGCPercent = 400
)

// trimMemory is the memory policy: once the loop has been quiet for
// trimAfter after rounds that allocated trimMin or more, it collects and
// returns the free heap to the system, then sets GOGC to make the heap
// goal the live heap plus 1.25 times what those rounds allocated (between
// 100 and maxGCPercent). A burst that allocates twice that before the
// loop is quiet again sets GOGC back to 100: the runtime's own pacing,
// for a heap that is growing.
func trimMemory(ctx context.Context, rounds <-chan struct{}) {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (allocs, live uint64) {
		rtmetrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	last, _ := read() // allocations at the last trim
	var expect uint64 // the burst the GOGC set was made for; 0: GOGC is 100
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds:
			quiet.Reset(trimAfter)
			if expect != 0 {
				if allocs, _ := read(); allocs-last > 2*expect {
					debug.SetGCPercent(100)
					expect = 0
				}
			}
		case <-quiet.C:
			allocs, _ := read()
			burst := allocs - last
			if burst < trimMin {
				continue
			}
			debug.FreeOSMemory()
			var live uint64
			last, live = read()
			expect = 0
			pct := 100
			if live > 0 {
				pct = int(min(max(100*burst*5/4/live, 100), maxGCPercent))
			}
			if pct > 100 {
				expect = burst
			}
			debug.SetGCPercent(pct)
		}
	}
}

// quiet drops the error a task returns because the daemon is stopping.
func quiet(ctx context.Context, name string, err error) error {
	if err == nil || ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err())) {
		return nil
	}
	if errors.Is(err, rebind.ErrCrashed) {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

type daemon struct {
	paths Paths
	log   *slog.Logger
	env   *Env
}

// notify sends to systemd's NOTIFY_SOCKET (nothing without one).
func (d *daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Warn("sd_notify failed", "state", strings.SplitN(state, "=", 2)[0], "err", err)
	}
}

// reload is the one reload, for SIGHUP and the control socket: RELOADING=1
// with MONOTONIC_USEC, validate, swap the config (give-up windows and
// backoffs restart), READY=1 whatever happened (or `systemctl reload`
// hangs). A bad config is refused and the old one kept.
func (d *daemon) reload() error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
		d.notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000))
	} else {
		d.notify("RELOADING=1")
	}
	defer d.notify("READY=1")
	cfg, err := config.Load(d.paths.Config)
	if err != nil {
		d.log.Error("reload refused, keeping the old config", "err", err)
		d.notify("STATUS=reload refused: " + err.Error())
		return fmt.Errorf("%w; the daemon keeps its current config", err)
	}
	d.env.Engine.SetConfig(cfg)
	if d.env.Model != nil {
		// A reload also checks the model: a full rescan, compared object
		// by object (a difference is logged as a bug; the rescan wins).
		d.env.Model.SetRescanEvery(cfg.RescanInterval)
		d.env.Model.Rescan()
	}
	d.log.Info("config reloaded; give-up windows restarted", "watch", fmt.Sprint(cfg.Watch), "give_up_after", cfg.GiveUpAfter)
	d.notify("STATUS=reconciling; see nvmet-rebind status")
	d.env.Engine.Poke()
	return nil
}

// handler serves the control socket.
func (d *daemon) handler() control.Handler {
	return func(ctx context.Context, req control.Request) (any, error) {
		switch req.Cmd {
		case "status":
			snap, err := d.env.Engine.Look()
			if err != nil {
				return nil, err
			}
			return status.Report(snap, "daemon"), nil
		case "trigger":
			d.env.Engine.Poke()
			return map[string]bool{"poked": true}, nil
		case "reload":
			if err := d.reload(); err != nil {
				return nil, err
			}
			return map[string]bool{"reloaded": true}, nil
		case "rebind":
			k, err := KeyOf(req.ID)
			if err != nil {
				return nil, err
			}
			items, err := d.env.Engine.Rebind(ctx, k)
			if err != nil {
				return nil, err
			}
			return Find(items, d.env.Engine.Snapshot(), k)
		}
		return nil, fmt.Errorf("unknown command %q", req.Cmd)
	}
}

// KeyOf parses what `nvmet-rebind rebind` takes: a port id, or a portal id
// <iqn>/tpgt_<N>/<ip>:<port>.
func KeyOf(id string) (rebind.Key, error) {
	if id == "" {
		return rebind.Key{}, errors.New("give one port id or portal id (see `nvmet-rebind status`)")
	}
	if strings.Contains(id, "/") {
		if _, _, _, err := configfs.ParsePortalID(id); err != nil {
			return rebind.Key{}, err
		}
		return rebind.Key{Kind: rebind.KindLIO, ID: id}, nil
	}
	return rebind.Key{Kind: rebind.KindNvmet, ID: id}, nil
}

// Find returns the status line of k from a round's items.
func Find(items []rebind.Item, snap rebind.Snapshot, k rebind.Key) (status.ListenerStatus, error) {
	snap.Items = items
	for _, l := range status.Report(snap, "daemon").Listeners {
		if l.Kind == string(k.Kind) && l.ID == k.ID {
			return l, nil
		}
	}
	return status.ListenerStatus{}, fmt.Errorf("%s: no such port or portal in configfs (ids are shown by `nvmet-rebind status`)", k)
}
