// Package daemon is `nvmet-rebind run`: the engine over the live kernel and
// configfs, the state directory, and the daemon's tasks, each a long-lived
// piece run in one errgroup until the daemon stops or one of them fails:
//
//   - uevents, rtnetlink and rdma-monitor (tasks.go): the kernel's event
//     streams; their hints poke the engine, never decide (the RDMA netlink
//     monitor only on kernels ≥ 6.12: elsewhere it logs once and ends)
//   - reconciler (tasks.go): the engine's loop, the only writer of
//     configfs; after its first full reconcile systemd is told READY=1, and
//     each round and beat sends WATCHDOG=1
//   - memory trim (trim.go): returns the garbage of a burst of rounds to the
//     system once the loop is quiet (off when GOGC or GOMEMLIMIT is set)
//   - metrics (tasks.go): /metrics on a loopback address, when asked for
//   - metrics textfile (textfile.go): node_exporter's textfile, after every
//     round and at least every resync interval
//   - sight (sight.go): logs once when configfs, nvmet, LIO or RDMA
//     netlink cannot be seen, and once when they can again
//   - control (control.go): the control socket (status, trigger, reload,
//     rebind)
//   - reload (control.go): SIGHUP, the same reload as the control socket's
//
// Open (env.go) builds an engine for the commands that run without a
// daemon, read-only unless asked to write; Lock keeps two writers apart.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sync/errgroup"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// SetupError is a failure before the daemon started its tasks (a bad
// config, the lock held by another daemon, the socket). Config tells an
// invalid configuration (the file or the flags), which only the admin can
// fix: the command exits 78 (EX_CONFIG), which the unit's
// RestartPreventExitStatus= keeps systemd from restarting in a loop; any
// other setup failure (a lock held for a moment, the socket) exits 2 and
// is restarted.
type SetupError struct {
	Err    error
	Config bool
}

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// configError marks an error of the configuration: the file, or a flag's
// value.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// lockWait bounds the daemon's wait for a lock held by a trigger or a
// rebind: a trigger's rounds follow its plan for 15 s, the last bounded by
// 20 s more.
const lockWait = 60 * time.Second

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

// A task is a long-lived piece of the daemon: Run until ctx is done (then
// nil, or an error quiet drops) or it fails, which stops the daemon.
type task interface {
	Run(ctx context.Context) error
	String() string // its name in the error that stopped the daemon
}

// A readier is a task that is not ready when it starts: READY=1 waits
// for its Ready to be closed.
type readier interface {
	Ready() <-chan struct{}
}

// Run is the daemon: until ctx is done or a task fails. A failure to set
// it up is a *SetupError.
func Run(ctx context.Context, p Paths, log *slog.Logger, o RunOptions) error {
	d, srv, done, err := setUp(ctx, p, log, o)
	if err != nil {
		_, bad := errors.AsType[configError](err)
		return &SetupError{Err: err, Config: bad}
	}
	defer done()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP is caught from here on, before any task runs: its default
	// action would end the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	tasks := d.tasks(o, srv, hup)
	g, ctx := errgroup.WithContext(ctx)
	for _, t := range tasks {
		g.Go(func() error { return quiet(ctx, t.String(), t.Run(ctx)) })
	}
	d.ready(ctx, tasks)
	<-ctx.Done()
	d.notify("STOPPING=1")
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// setUp takes the state directory's lock, builds the engine, checks the
// metrics flags and listens on the control socket; done releases what it
// took.
func setUp(ctx context.Context, p Paths, log *slog.Logger, o RunOptions) (*daemon, *control.Server, func(), error) {
	var beat time.Duration
	if wd, err := sd.SdWatchdogEnabled(false); err != nil {
		return nil, nil, nil, fmt.Errorf("systemd watchdog: %w", err)
	} else if wd > 0 {
		beat = wd / 2
	}
	// A held lock is a trigger or a rebind reconciling (the udev hook's
	// unit runs one per event while no daemon answers, for seconds), or
	// another daemon: the first is waited for, the second refused.
	sock := p.Socket()
	waiting := false
	unlock, err := AwaitLock(ctx, p.State, lockWait, func() error {
		if control.Answers(sock) {
			return fmt.Errorf("state dir %s is locked by another nvmet-rebind daemon, answering on %s; stop it first", p.State, sock)
		}
		if !waiting {
			waiting = true
			log.Info("waiting for the state directory's lock, held by another nvmet-rebind (a trigger or a rebind reconciling)", "state_dir", p.State, "up_to", lockWait)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	mode := Write
	if o.DryRun {
		mode = ReadOnly
	}
	env, err := open(p, log, mode, o.Fault, beat, !o.NoWatch)
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	done := func() { env.Close(); unlock() }
	fail := func(err error) (*daemon, *control.Server, func(), error) {
		done()
		return nil, nil, nil, err
	}
	if o.MetricsListen != "" {
		if err := metrics.CheckAddr(o.MetricsListen, false); err != nil {
			return fail(configError{err})
		}
	}
	if o.MetricsTextfile != "" {
		if err := metrics.CheckTextfile(o.MetricsTextfile); err != nil {
			return fail(configError{err})
		}
	}
	cfg := env.Config
	log.Info("starting", "version", o.Version, "configfs", p.Configfs, "watch", fmt.Sprint(cfg.Watch),
		"give_up_after", cfg.GiveUpAfter, "pin_device", cfg.PinDevice, "resync_interval", cfg.ResyncInterval, "dry_run", o.DryRun,
		"metrics_textfile", textfilePath(o.MetricsTextfile, cfg), "configfs_model", env.Model != nil, "rescan_interval", cfg.RescanInterval,
		"gomaxprocs", runtime.GOMAXPROCS(0))
	d := &daemon{paths: p, log: log, env: env}
	if _, err := saved.Check(cfg); err != nil {
		// Not fatal: the engine completes what it can read (a restore
		// with no file saved yet is common at a first install), but
		// check and the metrics say so until a reload reads it whole.
		log.Warn("saved config unreadable; what it declares is not completed until a reload reads it whole", "err", err)
		msg := err.Error()
		d.savedBad.Store(&msg)
	}
	srv, err := control.Listen(p.Socket(), d.handler())
	if err != nil {
		return fail(err)
	}
	srv.SetLog(log)
	return d, srv, done, nil
}

// tasks is the daemon, in the order Run starts them. The reconciler's
// rounds and beats poke the textfile writer and the memory policy through
// triggers, so neither ever holds the loop up.
func (d *daemon) tasks(o RunOptions, srv *control.Server, hup <-chan os.Signal) []task {
	events := new(udev.Stats)
	rounds, trims, sights, lines := newTrigger(), newTrigger(), newTrigger(), newTrigger()
	col := metrics.NewCollector(d.env.Engine, events)
	col.SetConfigState(d.configState)
	tasks := []task{
		&watcher{name: "uevents", watch: udev.WatchUevents, hint: d.hint, stats: events},
		&watcher{name: "rtnetlink", watch: udev.WatchRtnetlink, hint: d.hint, stats: events},
		&watcher{name: "rdma-monitor", watch: udev.WatchRDMAMonitor, hint: d.hint, stats: events, log: d.log},
		newReconciler(d.env.Engine, d.notify, rounds, trims, sights, lines),
		&sightLogger{eng: d.env.Engine, log: d.log, rounds: sights},
		&statusLine{eng: d.env.Engine, notify: d.notify, rounds: lines, config: d.configStatus},
	}
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		tasks = append(tasks, &trimmer{rounds: trims})
	}
	if o.MetricsListen != "" {
		tasks = append(tasks, &metricsServer{addr: o.MetricsListen, col: col})
	}
	return append(tasks,
		&textfileWriter{eng: d.env.Engine, log: d.log, flag: o.MetricsTextfile, tf: metrics.NewTextfile(col), rounds: rounds},
		&controlSocket{srv: srv},
		&reloader{d: d, hup: hup},
	)
}

// ready tells systemd READY=1 once every task is ready (the reconciler:
// after its first full reconcile), unless ctx is done first.
func (d *daemon) ready(ctx context.Context, tasks []task) {
	for _, t := range tasks {
		r, ok := t.(readier)
		if !ok {
			continue
		}
		select {
		case <-r.Ready():
		case <-ctx.Done():
			return
		}
	}
	d.notify("READY=1") // STATUS= is the status line's (statusLine), sent after each round that changes it
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
	// refused is the error of the last refused reload, until a reload
	// succeeds (the status line says the config on disk is not in use).
	refused atomic.Pointer[string]
	// savedBad says why a saved config [boot] names could not be read
	// whole at the start (saved.Check), until a reload succeeds.
	savedBad atomic.Pointer[string]
}

// notify sends to systemd's NOTIFY_SOCKET (nothing without one).
func (d *daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Warn("sd_notify failed", "state", strings.SplitN(state, "=", 2)[0], "err", err)
	}
}

// A trigger is a buffered(1) poke: a send never blocks, and pokes that
// come before the receiver looks are one.
type trigger chan struct{}

func newTrigger() trigger { return make(trigger, 1) }

func (t trigger) poke() {
	select {
	case t <- struct{}{}:
	default:
	}
}

// A timer is what the textfile writer and the memory policy wait on: a
// stopped time.Timer in the daemon, one a test fires by hand.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// newTimer is a stopped time.Timer.
func newTimer() timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return stdTimer{t}
}

type stdTimer struct{ t *time.Timer }

func (s stdTimer) C() <-chan time.Time   { return s.t.C }
func (s stdTimer) Reset(d time.Duration) { s.t.Reset(d) }
func (s stdTimer) Stop()                 { s.t.Stop() }
