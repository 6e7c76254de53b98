package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	switch {
	case c == nil:
		return nil
	case c.Error != "":
		return exit(2, fmt.Errorf("not seen: configfs: %s", c.Error))
	case !c.Nvmet && !c.LIO:
		return exit(2, fmt.Errorf("not seen: neither nvmet nor LIO iSCSI is loaded (no %s/nvmet, no %s/target/iscsi)", c.Root, c.Root))
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
