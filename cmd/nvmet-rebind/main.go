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
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/urfave/cli/v2"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// exitConfig is run's exit code for an invalid configuration (sysexits'
// EX_CONFIG): the unit's RestartPreventExitStatus=78 leaves it failed
// instead of restarting it every RestartSec= until the admin fixes it.
const exitConfig = 78

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
	app := &cli.App{
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
		// An unknown command is a usage error (exit 2), not a help topic.
		Action:       cmdNone,
		OnUsageError: onUsageError,
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
			{Name: "check", Usage: "monitoring plugin: exit 0 OK, 1 WARNING (healing, stranded within grace), 2 CRITICAL (dead, stranded, gave up), 3 UNKNOWN (not seen, error)", Action: cmdCheck},
			{Name: "plan", Usage: "show what a reconcile would write, writing nothing", Action: cmdPlan},
			{Name: "trigger", Usage: "poke the running daemon (udev RUN hook); without a daemon, reconcile once under the lock", Action: cmdTrigger},
			{Name: "rebind", Usage: "re-create one listener now, ignoring the give-up timer and backoff", ArgsUsage: "<port id | iqn/tpgt_N/np>", Action: cmdRebind},
			{Name: "version", Usage: "print the version", Action: func(c *cli.Context) error {
				fmt.Fprintln(c.App.Writer, "nvmet-rebind", version)
				return nil
			}},
			// urfave/cli's own help command, but `help <unknown>` is a usage
			// error like an unknown command.
			{Name: "help", Aliases: []string{"h"}, Usage: "Shows a list of commands or help for one command", ArgsUsage: "[command]", Action: cmdHelp},
		},
	}
	// With a help command of its own, the app gets no --help flag either.
	app.Flags = append(app.Flags, cli.HelpFlag)
	for _, cmd := range app.Commands {
		cmd.OnUsageError = onUsageError
		if cmd.Name == "check" {
			cmd.OnUsageError = checkUsageError
		}
	}
	return app
}

// cmdNone runs when no command matched: bare nvmet-rebind shows the help;
// an unknown command is a usage error.
func cmdNone(c *cli.Context) error {
	if c.Args().Present() {
		return unknownCommand(c, c.Args().First())
	}
	return cli.ShowAppHelp(c)
}

func cmdHelp(c *cli.Context) error {
	name := c.Args().First()
	if name == "" {
		return cli.ShowAppHelp(c)
	}
	if c.App.Command(name) == nil {
		return unknownCommand(c, name)
	}
	return cli.ShowCommandHelp(c.Lineage()[1], name)
}

func unknownCommand(c *cli.Context, name string) error {
	var names []string
	for _, cmd := range c.App.VisibleCommands() {
		if cmd.Name != "help" {
			names = append(names, cmd.Name)
		}
	}
	return exit(2, fmt.Errorf("unknown command %q: the commands are %s (see nvmet-rebind --help)", clipArg(name), strings.Join(names, ", ")))
}

// onUsageError reports a flag the parser refused on stderr, without the
// help text, exit 2. A global flag after the command gets the command
// line with it moved before the command.
func onUsageError(c *cli.Context, err error, isCommand bool) error {
	where, help := "", "nvmet-rebind --help"
	if isCommand {
		where, help = c.Command.Name+": ", "nvmet-rebind "+c.Command.Name+" --help"
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return exit(2, fmt.Errorf("%s%v (see %s)", where, err, help))
	}
	name = strings.TrimLeft(name, "-")
	if isCommand && flagNamed(c.App.Flags, name) != nil {
		return exit(2, fmt.Errorf("--%s is a global flag: put it before the command: %s", name, moveGlobals(c)))
	}
	if !isCommand {
		for _, cmd := range c.App.Commands {
			if flagNamed(cmd.Flags, name) != nil {
				return exit(2, fmt.Errorf("--%s is a flag of %s: put it after the command: nvmet-rebind %s --%s", name, cmd.Name, cmd.Name, name))
			}
		}
	}
	return exit(2, fmt.Errorf("%sunknown flag --%s (see %s)", where, clipArg(name), help))
}

// checkUsageError is a usage error of `check`, which monitoring agents run:
// UNKNOWN (exit 3) with its status line, as any other failure of check.
func checkUsageError(c *cli.Context, err error, isCommand bool) error {
	err = onUsageError(c, err, isCommand)
	if err := (status.Verdict{Health: status.Unknown, Summary: err.Error()}).Write(c.App.Writer); err != nil {
		return exit(3, err)
	}
	return exit(int(status.Unknown), nil)
}

func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// moveGlobals rebuilds the command line of a command context with every
// global flag before the command.
func moveGlobals(c *cli.Context) string {
	root := c.Lineage()[1] // the app's: commands have no subcommands
	// Global flags as given before the command; one given again after it
	// replaces its value (the later one is what the user meant).
	var globals []string
	value := map[string]int{} // flag -> index of its value in globals
	for _, f := range c.App.Flags {
		if n := f.Names()[0]; n != "help" && n != "version" && root.IsSet(n) {
			globals = append(globals, "--"+n, shellQuote(root.String(n)))
			value[n] = len(globals) - 1
		}
	}
	var rest []string
	args := c.Lineage()[1].Args().Tail()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		n, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := flagNamed(c.App.Flags, n)
		if !strings.HasPrefix(a, "-") || f == nil {
			rest = append(rest, shellQuote(a))
			continue
		}
		if tv, ok := f.(cli.DocGenerationFlag); ok && tv.TakesValue() && !hasV && i+1 < len(args) {
			i++
			v, hasV = args[i], true
		}
		n = f.Names()[0]
		if j, ok := value[n]; ok && hasV {
			globals[j] = shellQuote(v)
			continue
		}
		globals = append(globals, "--"+n)
		if hasV {
			globals = append(globals, shellQuote(v))
			value[n] = len(globals) - 1
		}
	}
	return strings.Join(slices.Concat([]string{"nvmet-rebind"}, globals, []string{c.Command.Name}, rest), " ")
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// clipArg bounds a command-line word echoed in an error.
func clipArg(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func newLogger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, exit(2, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.String("log-level")))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if stderrIsJournal() {
		opts.ReplaceAttr = dropTime
	}
	var h slog.Handler = slog.NewTextHandler(c.App.ErrWriter, opts)
	if c.Command != nil && c.Command.Name == "trigger" && !stderrIsJournal() && journal.Enabled() {
		// Run by udev, whose log keeps stderr only at debug level: the
		// journal gets every line too.
		h = slog.NewMultiHandler(h, newJournalHandler(lvl, "trigger"))
	}
	return slog.New(h), nil
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
	case errors.As(err, &se) && se.Config:
		return exit(exitConfig, err)
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

// cmdTrigger is the udev RUN hook: it pokes the running daemon, or without
// one reconciles once under the daemon's lock. Exit 0: poked, or
// reconciled; 1: nothing done (another nvmet-rebind holds the lock, the
// daemon refused the poke, not root); 2: a usage or configuration error,
// or the reconcile failed. udev logs a RUN program's failure, so every
// non-zero exit says why on stderr.
func cmdTrigger(c *cli.Context) error {
	sock, state := paths(c).Socket(), c.String("state-dir")
	poke := func() error {
		ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
		defer cancel()
		return control.Call(ctx, sock, control.Request{Cmd: "trigger"}, nil)
	}
	err := poke()
	if err == nil {
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return exit(1, fmt.Errorf("trigger: did nothing: the daemon on %s did not take the poke: %w", sock, err))
	}
	// No daemon. Run by udev on a systemd host: the reconcile is systemd's
	// to run, in nvmet-rebind-trigger@.service under the daemon's sandbox,
	// not here in udevd's (its IPAddressDeny= would hold every NVMe/TCP or
	// siw listener this reconcile makes, and udev(7) keeps long work out of
	// RUN). One instance per event (SEQNUM), so that a burst reconciles
	// after its last event.
	if seq := os.Getenv("SEQNUM"); seq != "" && systemdBooted() {
		err := startTriggerUnit(c.Context, seq)
		if err == nil {
			return nil
		}
		fmt.Fprintf(c.App.ErrWriter, "trigger: %v; reconciling here instead\n", err)
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	// No daemon answers. A held lock is a daemon starting (its socket
	// comes next, then its first reconcile), or another trigger or rebind
	// reconciling (udev runs one trigger per event, often several at
	// once): wait a little for either.
	// Under udev the wait is short (udev kills slow RUN programs);
	// elsewhere (the trigger unit, a shell) the held lock of a burst's
	// reconcile is waited for, so that this event is reconciled after it.
	wait := triggerLockWait
	if os.Getenv("SEQNUM") == "" {
		wait = triggerUnitLockWait
	}
	var unlock func()
	for deadline := time.Now().Add(wait); ; {
		var lerr error
		if unlock, lerr = daemon.Lock(state); lerr == nil {
			break
		}
		switch {
		case errors.Is(lerr, fs.ErrPermission):
			return exit(1, fmt.Errorf("trigger: did nothing: not root (uid %d): no access to the control socket %s nor to the lock in %s: %w", os.Geteuid(), sock, state, lerr))
		case !errors.Is(lerr, syscall.EWOULDBLOCK):
			return exit(2, fmt.Errorf("trigger: did nothing: %w", lerr))
		case time.Now().After(deadline):
			return exit(1, fmt.Errorf("trigger: did nothing: no daemon answers on %s and the lock of %s is held by another nvmet-rebind (a daemon starting or stuck, or a trigger or rebind reconciling) for over %v", sock, state, wait))
		}
		time.Sleep(100 * time.Millisecond)
		if poke() == nil {
			return nil
		}
	}
	defer unlock()
	env, err := daemon.Open(paths(c), log, daemon.Write, faultHook())
	if err != nil {
		return exit(2, fmt.Errorf("trigger: did nothing: %w", err))
	}
	defer env.Close()
	ctx, cancel := context.WithTimeout(c.Context, 20*time.Second)
	defer cancel()
	if _, err := env.Engine.Reconcile(ctx); err != nil {
		return exit(2, fmt.Errorf("trigger: reconcile: %w", err))
	}
	return nil
}

// triggerLockWait bounds how long trigger waits for a held lock under
// udev; triggerUnitLockWait elsewhere.
const (
	triggerLockWait     = 2 * time.Second
	triggerUnitLockWait = 30 * time.Second
)

// triggerUnit is the template the udev hook starts on a systemd host.
const triggerUnit = "nvmet-rebind-trigger@"

// systemdBooted reports whether systemd is PID 1 (sd_booted(3)).
func systemdBooted() bool {
	st, err := os.Lstat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// startTriggerUnit asks systemd to start the trigger unit's instance for
// udev event seq, without waiting for it (udev kills slow RUN programs).
func startTriggerUnit(ctx context.Context, seq string) error {
	if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
		return fmt.Errorf("SEQNUM %q is not udev's event number", seq)
	}
	systemctl, err := exec.LookPath("systemctl")
	if err != nil {
		systemctl = "/usr/bin/systemctl" // udev's RUN may have no PATH
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	unit := triggerUnit + seq + ".service"
	if out, err := exec.CommandContext(ctx, systemctl, "--no-block", "start", unit).CombinedOutput(); err != nil {
		return fmt.Errorf("systemctl --no-block start %s: %w: %s", unit, err, strings.TrimSpace(string(out)))
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
	// A running daemon validates the config itself and refuses a bad one
	// (its status line says so until a good reload): one judge of the
	// config in use. It is told which file this command means, and
	// refuses to reload its own when that is another.
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	err := control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "reload", ID: c.String("config")}, nil)
	if err == nil {
		fmt.Fprintf(c.App.Writer, "config %s is valid; daemon reloaded it\n", c.String("config"))
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return exit(2, err)
	}
	if _, err := config.Load(c.String("config")); err != nil {
		return exit(2, fmt.Errorf("%w; no daemon answers on %s", err, paths(c).Socket()))
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
	return readStatus(c, func(s string) { fmt.Fprintln(c.App.ErrWriter, "nvmet-rebind:", s) })
}

// readStatus is liveOrDirect telling note why it reads directly.
func readStatus(c *cli.Context, note func(string)) (status.StatusReport, error) {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	var r status.StatusReport
	err := control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "status"}, &r)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		note(fmt.Sprintf("daemon status unavailable (%v); reading the kernel directly", err))
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

// cmdCheck is a monitoring plugin (Nagios, Icinga, Sensu, Checkmk,
// Zabbix): one status line with perf data, then details, all on stdout;
// the exit code is the verdict (status.Health: 0 OK, 1 WARNING,
// 2 CRITICAL, 3 UNKNOWN, also for any error).
func cmdCheck(c *cli.Context) error {
	var notes []string
	r, err := readStatus(c, func(s string) { notes = append(notes, s) })
	var v status.Verdict
	if err != nil {
		v = status.Failed(err)
	} else {
		v = status.Check(r)
	}
	for _, n := range notes {
		v.Note(n)
	}
	if werr := v.Write(c.App.Writer); werr != nil {
		return exit(int(status.Unknown), werr)
	}
	if v.Health == status.OK {
		return nil
	}
	return exit(int(v.Health), nil)
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
	cp := env.Engine.PlanCompletion(c.Context)
	if len(cp.Planned) > 0 {
		fmt.Fprintf(c.App.Writer, "saved config %s: make what it declares and configfs lacks\n", cp.Source)
		for _, s := range cp.Planned {
			fmt.Fprintf(c.App.Writer, "  %s\n", s)
		}
	}
	for _, m := range cp.Missing {
		if m.Waiting != "due" {
			fmt.Fprintf(c.App.Writer, "saved config: %s: %s\n", m.Object, m.Waiting)
		}
	}
	if len(pl.Heals) == 0 && len(cp.Planned) == 0 {
		fmt.Fprintln(c.App.Writer, "nothing to do")
	}
	return nil
}
