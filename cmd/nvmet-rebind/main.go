// Command nvmet-rebind re-creates the RDMA listeners of nvmet ports and LIO
// iSER portals that the kernel destroyed when their RDMA device went away,
// once the device and the address are back.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/urfave/cli/v2"

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

// exit returns err with an exit code (cli.Exit, which keeps err's chain
// for errors.Is); a nil err is a bare code.
func exit(code int, err error) cli.ExitCoder {
	if err == nil {
		return cli.Exit("", code)
	}
	return cli.Exit(err, code)
}

// needsRoot is the one message of every command run without the rights
// it needs (the config, the state directory, configfs and the control
// socket are root's).
const needsRoot = "needs root (or a sudoers rule: see nvmet-rebind(8))"

// rights is err with needsRoot before it when err is a refusal of the
// caller: a permission denied (EACCES, EPERM), or the daemon refusing it
// (control.ErrRefused). Any other err is returned as it is.
func rights(err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) && !errors.Is(err, control.ErrRefused) || strings.Contains(err.Error(), needsRoot) {
		return err
	}
	return fmt.Errorf("%s: %w", needsRoot, err)
}

// oneProcessor runs the program's Go code on one processor (GOMAXPROCS=1)
// unless the environment sets GOMAXPROCS. Its work is one loop making one
// configfs write at a time, and what a heal waits on is the kernel's own
// work beside it: the device still registering when its uevent arrives, the
// bind; a second processor can only run the collector and the runtime
// alongside that work (the reasoning, not measured). On two CPUs, the
// first LISTEN of 256 sharers of one iSER portal took 346 ms with one
// processor against 413 ms with two on 7.3.4, and the same (344 against
// 339 ms) on 6.1 (BENCHMARKS.md). The
// writes that wait in the kernel (the sharers' iser=1) still go side by
// side: a goroutine blocked in a system call gives up its processor.
func oneProcessor() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

func main() {
	oneProcessor()
	app := newApp(os.Stdout, os.Stderr)
	if err := app.Run(os.Args); err != nil {
		code := 2
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "nvmet-rebind:", rights(err))
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
			{Name: "reload", Usage: "validate the config (as config check), then make the running daemon re-read it; a bad one is refused, saying why (exit 2)", Action: cmdReload},
			configCommand(),
			{Name: "status", Usage: "every RDMA port and portal: listening as verified, managed and why; with an id, that one in full and its last heals", Action: cmdStatus,
				ArgsUsage: "[port id | iqn/tpgt_N/np]",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output (stable field names)"},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "wide: every column, each reason whole on its row's line (by default the table fits 120 columns); json: as --json"}}},
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

// paths are the command's files and roots; the roots are made absolute
// (configfs symlinks resolve to absolute paths, and a relative root would
// read every link as leaving it).
func paths(c *cli.Context) daemon.Paths {
	return daemon.Paths{Config: c.String("config"), Configfs: absPath(c.String("configfs-root")), Sysfs: absPath(c.String("sysfs-root")),
		State: absPath(c.String("state-dir")), Run: absPath(c.String("run-dir"))}
}

// absPath is p made absolute against the working directory (p as it is
// when that cannot be read: the error then names p as given).
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
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
