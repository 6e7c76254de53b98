package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// controlSocket serves the control socket (handler) until the daemon stops.
// Running out of fds or memory at accept, or a flood of connections, does
// not end it (control.Server.Serve backs off, caps connections at 64): only
// a broken listener does, and that ends the daemon.
type controlSocket struct{ srv *control.Server }

func (c *controlSocket) String() string                { return "control" }
func (c *controlSocket) Run(ctx context.Context) error { return c.srv.Serve(ctx) }

// reloader reloads the config at each SIGHUP (hup, caught by Run before
// any task starts). A refused config is logged and told to systemd; the
// old one stays, and the daemon goes on.
type reloader struct {
	d   *daemon
	hup <-chan os.Signal
}

func (r *reloader) String() string { return "reload" }

func (r *reloader) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.hup:
			r.d.reload() // errors are logged, told to systemd and remembered: the old config stays
		}
	}
}

// reload is the one reload, for SIGHUP and the control socket: RELOADING=1
// with MONOTONIC_USEC, validate (Validate, as `config check`: the TOML,
// the roots, the [boot] files), swap the config (give-up windows and
// backoffs restart), READY=1 whatever happened (or `systemctl reload`
// hangs). A bad config is refused and the old one kept; the refusal is
// remembered (check, the metrics, the status line) until a good reload.
func (d *daemon) reload() (Valid, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
		d.notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000))
	} else {
		d.notify("RELOADING=1")
	}
	defer d.notify("READY=1")
	v, err := Validate(d.paths)
	if err != nil {
		d.log.Error("reload refused, keeping the old config", "err", err)
		msg := err.Error()
		d.refused.Store(&msg)
		d.env.Engine.Poke() // the status line says it at once
		return v, fmt.Errorf("%w; the daemon keeps its current config", err)
	}
	cfg := v.Config
	d.env.Engine.SetConfig(cfg)
	if d.env.Model != nil {
		// A reload also checks the model: a full rescan, compared object
		// by object (a difference is logged as a bug; the rescan wins).
		d.env.Model.SetRescanEvery(cfg.RescanInterval)
		d.env.Model.Rescan()
	}
	d.log.Info("config reloaded; give-up windows restarted", "watch", fmt.Sprint(cfg.Watch), "give_up_after", cfg.GiveUpAfter)
	d.refused.Store(nil)
	d.savedBad.Store(nil) // Validate read them whole
	d.env.Engine.Poke()
	return v, nil
}

// configStatus is the report's StatusReport.Config: nil when the daemon
// has no trouble with its config.
func (d *daemon) configStatus() *status.ConfigStatus {
	var c status.ConfigStatus
	if p := d.refused.Load(); p != nil {
		c.ReloadRefused = *p
	}
	if p := d.savedBad.Load(); p != nil {
		c.SavedUnreadable = *p
	}
	if c == (status.ConfigStatus{}) {
		return nil
	}
	return &c
}

// configState is configStatus for the metrics.
func (d *daemon) configState() metrics.ConfigState {
	return metrics.ConfigState{ReloadRefused: d.refused.Load() != nil, SavedUnreadable: d.savedBad.Load() != nil}
}

// ReloadReply is the control socket's answer to a reload it made.
type ReloadReply struct {
	Reloaded bool   `json:"reloaded"`
	Summary  string `json:"summary"` // Valid.Summary: "config F is valid (…)"
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
			r := status.Report(snap, "daemon")
			r.Config = d.configStatus()
			return r, nil
		case "trigger":
			d.env.Engine.Poke()
			return map[string]bool{"poked": true}, nil
		case "reload":
			if req.ID != "" && filepath.Clean(req.ID) != filepath.Clean(d.paths.Config) {
				return nil, fmt.Errorf("the daemon reads %s, not %s: reload %s (nvmet-rebind --config %s reload), or check %s with nvmet-rebind --config %s plan",
					d.paths.Config, req.ID, d.paths.Config, d.paths.Config, req.ID, req.ID)
			}
			v, err := d.reload()
			if err != nil {
				return nil, err
			}
			return ReloadReply{Reloaded: true, Summary: v.Summary()}, nil
		case "rebind":
			k, err := status.KeyOf(req.ID)
			if err != nil {
				return nil, err
			}
			// The id is resolved against what configfs holds now, before
			// the loop is asked for anything: an unknown one (a typo) runs
			// no round.
			snap, err := d.env.Engine.Look()
			if err != nil {
				return nil, err
			}
			if err := rebind.Resolve(snap.Items, k); err != nil {
				return nil, err
			}
			items, err := d.env.Engine.Rebind(ctx, k)
			if err != nil {
				return nil, err
			}
			return status.Find(items, d.env.Engine.Snapshot(), k)
		}
		return nil, fmt.Errorf("unknown command %q", req.Cmd)
	}
}
