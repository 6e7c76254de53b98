// Command nvmet-rebind re-creates the RDMA listeners of nvmet ports and LIO
// iSER portals that the kernel destroyed when their RDMA device went away,
// once the device and the address are back.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/sdnotify"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries an exit code through urfave/cli.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	app := newApp(os.Stdout, os.Stderr)
	if err := app.Run(os.Args); err != nil {
		code := 2
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "nvmet-rebind:", err)
		}
		os.Exit(code)
	}
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "nvmet-rebind",
		Usage:     "re-create nvmet-rdma and LIO iSER listeners after an RDMA device reset",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Value: "/etc/nvmet-rebind/config.toml", Usage: "configuration file", EnvVars: []string{"NVMET_REBIND_CONFIG"}},
			&cli.StringFlag{Name: "configfs-root", Value: "/sys/kernel/config", Usage: "configfs mount point"},
			&cli.StringFlag{Name: "sysfs-root", Value: "/sys", Usage: "sysfs mount point"},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/nvmet-rebind", Usage: "intent journal and pins"},
			&cli.StringFlag{Name: "run-dir", Value: "/run/nvmet-rebind", Usage: "directory of the control socket"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			{Name: "run", Usage: "run the daemon in the foreground", Action: cmdRun,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "dry-run", Usage: "plan and log, write nothing to configfs"},
					&cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics on this loopback address (e.g. 127.0.0.1:9767); off when empty"},
				}},
			{Name: "reload", Usage: "validate the config, then make the running daemon re-read it", Action: cmdReload},
			{Name: "status", Usage: "every RDMA port and portal: listening as verified, managed and why", Action: cmdStatus,
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output (stable field names)"}}},
			{Name: "check", Usage: "exit 0 when every managed listener is alive, 1 when one is dead, 2 on error", Action: cmdCheck},
			{Name: "plan", Usage: "show what a reconcile would write, writing nothing", Action: cmdPlan},
			{Name: "trigger", Usage: "poke the running daemon (udev RUN hook); without a daemon, reconcile once under the lock", Action: cmdTrigger},
			{Name: "rebind", Usage: "re-create one listener now, ignoring the give-up timer and backoff", ArgsUsage: "<port id | iqn/tpgt_N/np>", Action: cmdRebind},
			{Name: "version", Usage: "print the version", Action: func(c *cli.Context) error {
				fmt.Fprintln(c.App.Writer, "nvmet-rebind", version)
				return nil
			}},
		},
	}
}

func newLogger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, &exitError{2, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.String("log-level"))}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if stderrIsJournal() {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts)), nil
}

// stderrIsJournal: systemd sets JOURNAL_STREAM=<dev>:<ino> of stderr.
func stderrIsJournal() bool {
	js := os.Getenv("JOURNAL_STREAM")
	if js == "" {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(2, &st); err != nil {
		return false
	}
	return js == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

type env struct {
	cfg    rebind.Config
	log    *slog.Logger
	fs     *configfs.FS
	kernel *rebind.LiveKernel
	eng    *rebind.Engine
}

func setup(c *cli.Context, dryRun bool) (*env, error) { return setupWith(c, dryRun, 0) }

// setupWith builds the engine; heartbeat > 0 makes the loop beat for the
// systemd watchdog.
func setupWith(c *cli.Context, dryRun bool, heartbeat time.Duration) (*env, error) {
	log, err := newLogger(c)
	if err != nil {
		return nil, err
	}
	cfg, err := rebind.LoadConfig(c.String("config"))
	if err != nil {
		return nil, &exitError{2, err}
	}
	e := &env{cfg: cfg, log: log, fs: configfs.New(c.String("configfs-root")), kernel: rebind.NewLiveKernel(c.String("sysfs-root"))}
	opts := rebind.Options{FS: e.fs, Kernel: e.kernel, Config: cfg, Logger: log, DryRun: dryRun, HeartbeatEvery: heartbeat}
	if !dryRun {
		j, err := rebind.OpenJournal(c.String("state-dir"))
		if err != nil {
			return nil, &exitError{2, err}
		}
		opts.Journal, opts.StateDir = j, c.String("state-dir")
		opts.Fault = faultHook()
	} else if j, err := readOnlyJournal(c.String("state-dir")); err == nil {
		opts.Journal = j
	}
	e.eng = rebind.New(opts)
	return e, nil
}

// readOnlyJournal opens an existing journal without creating anything.
func readOnlyJournal(stateDir string) (*rebind.Journal, error) {
	if _, err := os.Stat(filepath.Join(stateDir, "journal")); err != nil {
		return nil, err
	}
	return rebind.OpenJournal(stateDir)
}

func pidFile(c *cli.Context) string { return filepath.Join(c.String("state-dir"), "nvmet-rebind.pid") }

func cmdRun(c *cli.Context) error {
	notify, err := sdnotify.New()
	if err != nil {
		return &exitError{2, err}
	}
	var beat time.Duration
	if d, ok := notify.WatchdogInterval(); ok {
		beat = d / 2
	}
	e, err := setupWith(c, c.Bool("dry-run"), beat)
	if err != nil {
		return err
	}
	defer e.kernel.Close()
	unlock, err := lockStateDir(c.String("state-dir"))
	if err != nil {
		return &exitError{2, err}
	}
	defer unlock()
	if err := os.WriteFile(pidFile(c), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return &exitError{2, fmt.Errorf("pid file: %w", err)}
	}
	defer os.Remove(pidFile(c))

	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	e.log.Info("starting", "version", version, "configfs", e.fs.Root(), "watch", fmt.Sprint(e.cfg.Watch),
		"give_up_after", e.cfg.GiveUpAfter, "pin_device", e.cfg.PinDevice, "resync_interval", e.cfg.ResyncInterval, "dry_run", c.Bool("dry-run"))

	poke := func(h udev.Hint) {
		e.log.Debug("event", "source", h.Source, "reason", h.Reason, "resync", h.Resync)
		e.eng.Poke()
	}
	stats := new(udev.Stats)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	task := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	task("uevents", func() error { return udev.WatchUevents(ctx, poke, udev.Options{Stats: stats}) })
	task("rtnetlink", func() error { return udev.WatchRtnetlink(ctx, poke, udev.Options{Stats: stats}) })
	var readyOnce sync.Once
	task("reconciler", func() error {
		err := e.eng.Run(ctx, func() {
			// READY=1 after the first full reconcile; then every beat
			// proves the loop is alive.
			readyOnce.Do(func() {
				if err := notify.Ready(); err != nil {
					e.log.Warn("sd_notify READY failed", "err", err)
				}
				notify.Status("reconciling; see nvmet-rebind status")
			})
			if err := notify.Watchdog(); err != nil {
				e.log.Warn("sd_notify WATCHDOG failed", "err", err)
			}
		})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	if addr := c.String("metrics-listen"); addr != "" {
		if err := metrics.CheckAddr(addr, false); err != nil {
			return &exitError{2, err}
		}
		col := metrics.NewCollector(e.eng, stats)
		task("metrics", func() error { return metrics.Serve(ctx, addr, col) })
	}
	srv, err := control.Listen(sockPath(c), e.handler(c))
	if err != nil {
		return &exitError{2, err}
	}
	task("control", func() error { return srv.Serve(ctx) })
	task("signals", func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				if err := notify.Reloading(); err != nil {
					e.log.Warn("sd_notify RELOADING failed", "err", err)
				}
				cfg, err := rebind.LoadConfig(c.String("config"))
				if err != nil {
					e.log.Error("reload refused, keeping the old config", "err", err)
					notify.Status("reload refused: " + err.Error())
				} else {
					e.eng.SetConfig(cfg)
					e.log.Info("config reloaded; give-up windows restarted", "watch", fmt.Sprint(cfg.Watch), "give_up_after", cfg.GiveUpAfter)
					e.eng.Poke()
				}
				// Always READY again, or `systemctl reload` hangs.
				if err := notify.Ready(); err != nil {
					e.log.Warn("sd_notify READY failed", "err", err)
				}
			}
		}
	})
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	if err := notify.Stopping(); err != nil {
		e.log.Warn("sd_notify STOPPING failed", "err", err)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		return &exitError{1, runErr}
	}
	e.log.Info("stopped")
	return nil
}

func sockPath(c *cli.Context) string { return filepath.Join(c.String("run-dir"), "control.sock") }

// handler serves the control socket from the running engine.
func (e *env) handler(c *cli.Context) control.Handler {
	return func(ctx context.Context, req control.Request) (any, error) {
		switch req.Cmd {
		case "status":
			r, _, err := e.eng.Status("daemon")
			return r, err
		case "trigger":
			e.eng.Poke()
			return map[string]bool{"poked": true}, nil
		case "reload":
			cfg, err := rebind.LoadConfig(c.String("config"))
			if err != nil {
				e.log.Error("reload refused, keeping the old config", "err", err)
				return nil, fmt.Errorf("%w; the daemon keeps its current config", err)
			}
			e.eng.SetConfig(cfg)
			e.log.Info("config reloaded; give-up windows restarted", "watch", fmt.Sprint(cfg.Watch), "give_up_after", cfg.GiveUpAfter)
			e.eng.Poke()
			return map[string]bool{"reloaded": true}, nil
		case "rebind":
			return e.rebindOne(ctx, req.ID)
		}
		return nil, fmt.Errorf("unknown command %q", req.Cmd)
	}
}

// rebindOne forgets the give-up window and backoff of one listener and
// reconciles at once; it answers with that listener's status.
func (e *env) rebindOne(ctx context.Context, id string) (rebind.ListenerStatus, error) {
	k := rebind.Key{Kind: rebind.KindNvmet, ID: id}
	if strings.Contains(id, "/") {
		k.Kind = rebind.KindLIO
	}
	e.eng.Retry(k)
	if _, err := e.eng.Reconcile(ctx); err != nil {
		return rebind.ListenerStatus{}, err
	}
	r := rebind.Report(e.eng.Snapshot(), "daemon")
	for _, l := range r.Listeners {
		if l.Kind == string(k.Kind) && l.ID == id {
			return l, nil
		}
	}
	return rebind.ListenerStatus{}, fmt.Errorf("%s: no such port or portal in configfs (ids are shown by `nvmet-rebind status`)", k)
}

func cmdTrigger(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
	err := control.Call(ctx, sockPath(c), control.Request{Cmd: "trigger"}, nil)
	cancel()
	if err == nil || !errors.Is(err, control.ErrNoDaemon) {
		return err
	}
	// No daemon: one bounded reconcile, under the lock the daemon holds.
	e, err := setup(c, false)
	if err != nil {
		return err
	}
	defer e.kernel.Close()
	unlock, err := lockStateDir(c.String("state-dir"))
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "nvmet-rebind: trigger: another reconciler holds the lock; nothing to do")
		return nil
	}
	defer unlock()
	ctx, cancel = context.WithTimeout(c.Context, 20*time.Second)
	defer cancel()
	if _, err := e.eng.Reconcile(ctx); err != nil {
		return &exitError{2, err}
	}
	return nil
}

func cmdRebind(c *cli.Context) error {
	id := c.Args().First()
	if id == "" || c.NArg() != 1 {
		return &exitError{2, errors.New("rebind: give one port id or portal id (see `nvmet-rebind status`)")}
	}
	var ls rebind.ListenerStatus
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	err := control.Call(ctx, sockPath(c), control.Request{Cmd: "rebind", ID: id}, &ls)
	if errors.Is(err, control.ErrNoDaemon) {
		e, serr := setup(c, false)
		if serr != nil {
			return serr
		}
		defer e.kernel.Close()
		unlock, lerr := lockStateDir(c.String("state-dir"))
		if lerr != nil {
			return &exitError{2, lerr}
		}
		defer unlock()
		ls, err = e.rebindOne(ctx, id)
	}
	if err != nil {
		return &exitError{2, err}
	}
	fmt.Fprintf(c.App.Writer, "%s %s: listening=%s: %s\n", ls.Kind, ls.ID, yesNo(ls.Listening), ls.Reason)
	if ls.Listening == nil || !*ls.Listening {
		return &exitError{1, errors.New("")}
	}
	return nil
}

func cmdReload(c *cli.Context) error {
	if _, err := rebind.LoadConfig(c.String("config")); err != nil {
		return &exitError{2, fmt.Errorf("%w; the daemon keeps its current config", err)}
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	err := control.Call(ctx, sockPath(c), control.Request{Cmd: "reload"}, nil)
	if err == nil {
		fmt.Fprintf(c.App.Writer, "config %s is valid; daemon reloaded it\n", c.String("config"))
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return &exitError{2, err}
	}
	// No answer on the socket. Never signal a pid from a file: after a
	// crash it may belong to another process. The lock tells whether a
	// daemon is there at all.
	unlock, lerr := lockStateDir(c.String("state-dir"))
	if lerr != nil {
		return &exitError{2, fmt.Errorf("config %s is valid, but the daemon holding %s does not answer on %s (%v); use systemctl reload nvmet-rebind", c.String("config"), c.String("state-dir"), sockPath(c), err)}
	}
	unlock()
	fmt.Fprintf(c.App.Writer, "config %s is valid; no daemon is running, nothing to reload\n", c.String("config"))
	return nil
}

// snapshot observes and plans once without writing (status, check, plan).
func snapshot(c *cli.Context) (rebind.StatusReport, []rebind.Item, error) {
	e, err := setup(c, true)
	if err != nil {
		return rebind.StatusReport{}, nil, err
	}
	defer e.kernel.Close()
	r, items, err := e.eng.Status("direct")
	if err != nil {
		return rebind.StatusReport{}, nil, &exitError{2, err}
	}
	return r, items, nil
}

// liveOrDirect asks the daemon for its live status, else reads directly.
func liveOrDirect(c *cli.Context) (rebind.StatusReport, error) {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	var r rebind.StatusReport
	err := control.Call(ctx, sockPath(c), control.Request{Cmd: "status"}, &r)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		fmt.Fprintf(c.App.ErrWriter, "nvmet-rebind: daemon status unavailable (%v); reading the kernel directly\n", err)
	}
	r, _, err = snapshot(c)
	return r, err
}

func cmdStatus(c *cli.Context) error {
	r, err := liveOrDirect(c)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tID\tADDRESS\tSTATE\tSHARERS\tLISTENER ON\tCARRIED BY\tNETDEV\tMANAGED\tLAST ACTION\tRETRY\tREASON")
	for _, l := range r.Listeners {
		addr := l.Address
		if l.Service != "" {
			addr = joinHostPort(l.Address, l.Service)
		}
		last := "-"
		if l.LastAction != "" {
			last = l.LastAction + ": " + l.LastResult
			if l.LastAt != nil {
				last += " (" + l.LastAt.Local().Format(time.TimeOnly) + ")"
			}
		}
		retry := "-"
		if l.RetryAt != nil {
			retry = "in " + time.Until(*l.RetryAt).Round(time.Millisecond).String()
		}
		state := l.State
		if state == "" {
			state = "-"
		}
		sharers := "-"
		if l.Sharers > 0 {
			sharers = strconv.Itoa(l.Sharers)
		}
		on := "-"
		if l.State == "listening" || l.State == "stranded" {
			on = dash(l.Device)
		}
		carried := "-"
		if l.RDMADevice != "" {
			carried = l.RDMADevice + "/" + strconv.Itoa(int(l.RDMAPort))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Kind, l.ID, dash(addr), state, sharers, on, carried, dash(l.Netdev),
			yesNoB(l.Managed), last, retry, l.Reason)
	}
	fmt.Fprintf(w, "\n(source: %s)\n", r.Source)
	if err := w.Flush(); err != nil {
		return err
	}
	if r.ListenersError != "" {
		fmt.Fprintf(c.App.Writer, "\nlistening is unknown: %s\n", r.ListenersError)
	}
	return nil
}

func joinHostPort(a, p string) string {
	if strings.Contains(a, ":") {
		return "[" + a + "]:" + p
	}
	return a + ":" + p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return yesNoB(*b)
}

func yesNoB(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func cmdCheck(c *cli.Context) error {
	r, err := liveOrDirect(c)
	if err != nil {
		return err
	}
	h, why := rebind.Check(r)
	for _, s := range why {
		fmt.Fprintln(c.App.Writer, s)
	}
	switch h {
	case rebind.Healthy:
		fmt.Fprintln(c.App.Writer, "ok: every managed listener is alive")
		return nil
	case rebind.Dead:
		return &exitError{1, errors.New("")}
	default:
		return &exitError{2, errors.New("")}
	}
}

func cmdPlan(c *cli.Context) error {
	e, err := setup(c, true)
	if err != nil {
		return err
	}
	defer e.kernel.Close()
	pl, _, err := e.eng.PlanAll()
	if err != nil {
		return &exitError{2, err}
	}
	for _, h := range pl.Heals {
		what := h.Endpoint.String()
		if !h.Endpoint.Addr.IsValid() {
			what = "journal"
		}
		fmt.Fprintf(c.App.Writer, "%s: %s (%s)\n", what, h.Action, h.Reason)
		for _, s := range h.Steps {
			fmt.Fprintf(c.App.Writer, "  %s\n", s.Describe(c.String("configfs-root")))
		}
	}
	if len(pl.Heals) == 0 {
		fmt.Fprintln(c.App.Writer, "nothing to do")
	}
	return nil
}
