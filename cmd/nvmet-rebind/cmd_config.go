package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
)

// The config command: `config check` validates what the daemon would read
// (daemon.Validate, the same judge as reload and the daemon's own reload),
// changing nothing.

func configCommand() *cli.Command {
	return &cli.Command{
		Name:      "config",
		Usage:     "validate the configuration (config check)",
		ArgsUsage: "check [--config FILE]",
		Action:    cmdConfigNone,
		Subcommands: []*cli.Command{{
			Name: "check",
			Usage: "validate what the daemon would read — the config (TOML), the configfs root, and the [boot] files (each must exist and parse, " +
				"the first bad entry named) — changing nothing; exit 0 valid, 78 (EX_CONFIG, as run) invalid, 2 usage error",
			Flags:        []cli.Flag{&cli.StringFlag{Name: "config", Usage: "configuration file to check (default: the global --config)"}},
			Action:       cmdConfigCheck,
			OnUsageError: configUsageError,
		}},
		OnUsageError: configUsageError,
	}
}

// cmdConfigNone: bare `config` shows its help; an unknown subcommand is a
// usage error.
func cmdConfigNone(c *cli.Context) error {
	if c.Args().Present() {
		return exit(2, fmt.Errorf("config: unknown subcommand %q: the only one is check (nvmet-rebind config check)", clipArg(c.Args().First())))
	}
	return cli.ShowSubcommandHelp(c)
}

// configUsageError: exit 2, without the help text.
func configUsageError(c *cli.Context, err error, _ bool) error {
	return exit(2, fmt.Errorf("config %s: %v (global flags such as --configfs-root go before the command; see nvmet-rebind config check --help)", c.Command.Name, err))
}

// cmdConfigCheck prints "config F is valid (…)", or exits exitConfig with
// the first problem.
func cmdConfigCheck(c *cli.Context) error {
	if c.Args().Present() {
		return exit(2, fmt.Errorf("config check takes no argument, got %q: the file is given with --config", clipArg(c.Args().First())))
	}
	p := paths(c)
	if v := c.String("config"); v == "" {
		// The subcommand's own --config was not given: the global one.
		p.Config = globalString(c, "config")
	}
	v, err := daemon.Validate(p)
	if err != nil {
		return exit(exitConfig, fmt.Errorf("config check: %w", err))
	}
	fmt.Fprintln(c.App.Writer, v.Summary())
	return nil
}

// globalString is the value of an app-level flag, seen from a
// subcommand that defines a flag of the same name: its parent's (the
// config command defines none of its own).
func globalString(c *cli.Context, name string) string {
	for _, cc := range c.Lineage()[1:] {
		if cc.App != nil {
			return cc.String(name)
		}
	}
	return ""
}
