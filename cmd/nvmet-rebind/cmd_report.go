package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
	"github.com/urfave/cli/v2"
)

// The commands that report: status, check and plan.

// liveOrDirect asks the daemon for its live status, else reads directly
// (read-only: nothing is created or changed).
func liveOrDirect(c *cli.Context) (status.StatusReport, error) {
	r, err := readStatus(c, func(s string) { fmt.Fprintln(c.App.ErrWriter, "nvmet-rebind:", s) })
	if err == nil {
		err = notSeen(r.Configfs)
	}
	return r, err
}

// probed is err, a failed reading of configfs, after why the root cannot
// be seen when the probe says so (a root of mode 000 fails the reading
// of its objects before the report is made).
func probed(root string, err error) error {
	if c := rebind.ProbeConfigfs(root); c.Err != nil {
		return fmt.Errorf("not seen: configfs: %v (%w)", c.Err, err)
	}
	return err
}

// notSeen is, as an exit 2, why nothing under the configfs root could be
// seen: what check judges UNKNOWN of the root (the probe's error: missing,
// unreadable, not configfs, one level off; or neither tree loaded) and
// the table's trailer calls "not seen". An empty table or plan is then no
// sign of a healthy target.
func notSeen(c *status.ConfigfsStatus) error {
	if what := c.NotSeen(); what != "" {
		return exit(2, errors.New("not seen: "+what))
	}
	return nil
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
		return r, exit(2, probed(paths(c).Configfs, err))
	}
	return status.Report(snap, "direct"), nil
}

// cmdStatus shows every listener in 120 columns (-o wide: every column,
// one line each), or one listener in full: status <id>.
func cmdStatus(c *cli.Context) error {
	id, asJSON, output := "", c.Bool("json"), c.String("output")
	// urfave/cli stops at the first argument: the flags after an id
	// (status 2 --json) are read here.
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case a == "--json" || a == "-json":
			asJSON = true
		case strings.HasPrefix(a, "-") && (name == "o" || name == "output"):
			if !hasV && i+1 < len(args) {
				i++
				v, hasV = args[i], true
			}
			if !hasV {
				return exit(2, fmt.Errorf("status: %s needs a value: wide or json", a))
			}
			output = v
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return exit(2, fmt.Errorf("status: unknown flag %s (see nvmet-rebind status --help)", clipArg(a)))
		case id == "":
			id = a
		default:
			return exit(2, fmt.Errorf("status: give at most one port id or portal id, not %q and %q", clipArg(id), clipArg(a)))
		}
	}
	switch output {
	case "", "wide":
	case "json":
		asJSON = true
	default:
		return exit(2, fmt.Errorf("status: --output %q: use wide or json", clipArg(output)))
	}
	r, err := liveOrDirect(c)
	if err != nil {
		return err
	}
	var one status.ListenerStatus
	if id != "" {
		if one, err = status.Lookup(r, id); err != nil {
			return exit(2, fmt.Errorf("status: %w", err))
		}
	}
	switch {
	case asJSON:
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if id != "" {
			return enc.Encode(one)
		}
		return enc.Encode(r)
	case id != "":
		return status.WriteListener(c.App.Writer, r, one)
	case output == "wide":
		return status.WriteTable(c.App.Writer, r)
	}
	return status.WriteFitted(c.App.Writer, r, status.Width)
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
	pl, obs, err := env.Engine.PlanAll()
	if err != nil {
		return exit(2, probed(paths(c).Configfs, err))
	}
	if err := notSeen(status.Report(rebind.Snapshot{Sight: rebind.Sight{Configfs: obs.Configfs}}, "direct").Configfs); err != nil {
		return err
	}
	for _, h := range pl.Heals {
		what := h.Endpoint.String()
		if !h.Endpoint.Addr.IsValid() {
			what = "journal"
		}
		fmt.Fprintf(c.App.Writer, "%s: %s (%s)\n", what, h.Action, h.Reason)
		for _, s := range h.Steps {
			fmt.Fprintf(c.App.Writer, "  %s\n", s.Describe(paths(c).Configfs))
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
