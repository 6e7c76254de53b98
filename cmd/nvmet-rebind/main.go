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
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// exit returns err with an exit code (cli.Exit); a nil err is a bare code.
func exit(code int, err error) cli.ExitCoder {
	if err == nil {
		return cli.Exit("", code)
	}
	return cli.Exit(err.Error(), code)
}

func main() {
	app := newApp(os.Stdout, os.Stderr)
	if err := app.Run(os.Args); err != nil {
		code := 2
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
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
					&cli.StringFlag{Name: "metrics-textfile", Usage: "write the metrics to this *.prom file for node_exporter's textfile collector after every reconcile (overrides [metrics] textfile); off when empty"},
					&cli.BoolFlag{Name: "no-watch", Usage: "read all of configfs at every event instead of keeping a model of it with inotify"},
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
		return nil, exit(2, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.String("log-level")))
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

func paths(c *cli.Context) daemon.Paths {
	return daemon.Paths{Config: c.String("config"), Configfs: c.String("configfs-root"), Sysfs: c.String("sysfs-root"),
		State: c.String("state-dir"), Run: c.String("run-dir")}
}

func cmdRun(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	err = daemon.Run(c.Context, paths(c), log, daemon.RunOptions{DryRun: c.Bool("dry-run"),
		MetricsListen: c.String("metrics-listen"), MetricsTextfile: c.String("metrics-textfile"), Version: version, Fault: faultHook(),
		NoWatch: c.Bool("no-watch")})
	var se *daemon.SetupError
	switch {
	case errors.As(err, &se):
		return exit(2, err)
	case err != nil:
		return exit(1, err)
	}
	return nil
}

// direct builds an engine without a daemon: read-only for observers; for
// writers under the state-dir lock (released by the returned func).
func direct(c *cli.Context, mode daemon.Mode) (*daemon.Env, func(), error) {
	log, err := newLogger(c)
	if err != nil {
		return nil, nil, err
	}
	unlock := func() {}
	if mode == daemon.Write {
		if unlock, err = daemon.Lock(c.String("state-dir")); err != nil {
			return nil, nil, exit(2, err)
		}
	}
	env, err := daemon.Open(paths(c), log, mode, faultHook())
	if err != nil {
		unlock()
		return nil, nil, exit(2, err)
	}
	return env, func() { env.Close(); unlock() }, nil
}

func cmdTrigger(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
	err := control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "trigger"}, nil)
	cancel()
	if err == nil || !errors.Is(err, control.ErrNoDaemon) {
		return err
	}
	// No daemon: one bounded reconcile, under the lock the daemon holds.
	env, done, err := direct(c, daemon.Write)
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "nvmet-rebind: trigger:", err, "; nothing done")
		return nil
	}
	defer done()
	ctx, cancel = context.WithTimeout(c.Context, 20*time.Second)
	defer cancel()
	if _, err := env.Engine.Reconcile(ctx); err != nil {
		return exit(2, err)
	}
	return nil
}

func cmdRebind(c *cli.Context) error {
	k, err := status.KeyOf(c.Args().First())
	if err != nil || c.NArg() != 1 {
		if err == nil {
			err = errors.New("give one port id or portal id (see `nvmet-rebind status`)")
		}
		return exit(2, fmt.Errorf("rebind: %w", err))
	}
	var ls status.ListenerStatus
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	err = control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "rebind", ID: k.ID}, &ls)
	if errors.Is(err, control.ErrNoDaemon) {
		env, done, derr := direct(c, daemon.Write)
		if derr != nil {
			return derr
		}
		defer done()
		env.Engine.Retry(k)
		items, rerr := env.Engine.Reconcile(ctx)
		if rerr != nil {
			return exit(2, rerr)
		}
		ls, err = status.Find(items, env.Engine.Snapshot(), k)
	}
	if err != nil {
		return exit(2, err)
	}
	fmt.Fprintf(c.App.Writer, "%s %s: listening=%s: %s\n", ls.Kind, ls.ID, status.YesNo(ls.Listening), ls.Reason)
	if ls.Listening == nil || !*ls.Listening {
		return exit(1, nil)
	}
	return nil
}

func cmdReload(c *cli.Context) error {
	if _, err := config.Load(c.String("config")); err != nil {
		return exit(2, fmt.Errorf("%w; the daemon keeps its current config", err))
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	err := control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "reload"}, nil)
	if err == nil {
		fmt.Fprintf(c.App.Writer, "config %s is valid; daemon reloaded it\n", c.String("config"))
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return exit(2, err)
	}
	// No answer on the socket. Never signal a pid: after a crash it may
	// belong to another process. The lock tells whether a daemon is there.
	unlock, lerr := daemon.Lock(c.String("state-dir"))
	if lerr != nil {
		return exit(2, fmt.Errorf("config %s is valid, but the daemon holding %s does not answer on %s (%v); use systemctl reload nvmet-rebind", c.String("config"), c.String("state-dir"), paths(c).Socket(), err))
	}
	unlock()
	fmt.Fprintf(c.App.Writer, "config %s is valid; no daemon is running, nothing to reload\n", c.String("config"))
	return nil
}

// liveOrDirect asks the daemon for its live status, else reads directly
// (read-only: nothing is created or changed).
func liveOrDirect(c *cli.Context) (status.StatusReport, error) {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	var r status.StatusReport
	err := control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "status"}, &r)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		fmt.Fprintf(c.App.ErrWriter, "nvmet-rebind: daemon status unavailable (%v); reading the kernel directly\n", err)
	}
	env, done, err := direct(c, daemon.ReadOnly)
	if err != nil {
		return r, err
	}
	defer done()
	snap, err := env.Engine.Look()
	if err != nil {
		return r, exit(2, err)
	}
	return status.Report(snap, "direct"), nil
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
	return status.WriteTable(c.App.Writer, r)
}

func cmdCheck(c *cli.Context) error {
	r, err := liveOrDirect(c)
	if err != nil {
		return err
	}
	h, why := status.Check(r)
	for _, s := range why {
		fmt.Fprintln(c.App.Writer, s)
	}
	switch h {
	case status.Healthy:
		fmt.Fprintln(c.App.Writer, "ok: every managed listener is alive")
		return nil
	case status.Dead:
		return exit(1, nil)
	default:
		return exit(2, nil)
	}
}

func cmdPlan(c *cli.Context) error {
	env, done, err := direct(c, daemon.ReadOnly)
	if err != nil {
		return err
	}
	defer done()
	pl, _, err := env.Engine.PlanAll()
	if err != nil {
		return exit(2, err)
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
