package daemon

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// sightLogger says what the daemon cannot see: after every round it reads
// the published snapshot's Sight (the facts `check` reads too) and logs
// once when a condition starts (configfs missing or not mounted, nvmet or
// LIO not loaded, RDMA netlink or the addresses unreadable) and once when
// it ends. Nothing is repeated per round.
type sightLogger struct {
	eng    *rebind.Engine
	log    *slog.Logger
	rounds <-chan struct{} // poked after each round and beat
	s      sightState
	last   uint64 // the round last looked at (Stats.Reconciles)
}

func (w *sightLogger) String() string { return "sight" }

func (w *sightLogger) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.rounds:
			w.look(ctx)
		}
	}
}

// look logs what the last published round changed in the daemon's sight;
// a beat without a new round changes nothing.
func (w *sightLogger) look(ctx context.Context) {
	snap := w.eng.Snapshot()
	if snap.Stats.Reconciles == w.last {
		return
	}
	w.last = snap.Stats.Reconciles
	for _, l := range w.s.update(snap.Sight) {
		w.log.Log(ctx, l.level, l.msg, l.args...)
	}
}

// sightLine is one log line of a transition.
type sightLine struct {
	level slog.Level
	msg   string
	args  []any
}

// fact is what the daemon last said of one condition.
type fact uint8

const (
	unseen fact = iota // not yet judged (before the first round, or while configfs hides it)
	good
	bad
)

// sightState is what the daemon last said of each condition.
type sightState struct {
	configfs, nvmet, lio, netlink, addrs, tcp, saved fact
	savedErr                                         string // what was said of the saved configs
}

// update compares a round's Sight with what was last said and returns the
// lines to log: a warning (or, for a tree the host does not seem to use,
// an info line) when a condition starts, an info line when it ends;
// nothing when nothing changed. The first round says nothing of what is
// fine.
func (s *sightState) update(sg rebind.Sight) []sightLine {
	var out []sightLine
	say := func(f *fact, now fact, start, end sightLine) {
		switch {
		case now == *f:
		case now == bad:
			out = append(out, start)
		case *f == bad:
			out = append(out, end)
		}
		*f = now
	}
	warn := func(msg string, args ...any) sightLine { return sightLine{slog.LevelWarn, msg, args} }
	info := func(msg string, args ...any) sightLine { return sightLine{slog.LevelInfo, msg, args} }

	if c := sg.Configfs; c.Probed {
		now := good
		var err any
		if c.Err != nil {
			now, err = bad, c.Err
		}
		say(&s.configfs, now,
			warn("configfs not visible: no nvmet port or LIO portal is seen or healed", "root", c.Root, "err", err),
			info("configfs mounted at "+c.Root))
		if now == good {
			// A tree missing is a warning when something needs it (the
			// config or the journal names its objects, or neither tree
			// is there: nothing to do at all); else a host that does not
			// use it, told once at info.
			level := func(wanted bool) slog.Level {
				if wanted || !c.Nvmet && !c.LIO {
					return slog.LevelWarn
				}
				return slog.LevelInfo
			}
			nvmet := filepath.Join(c.Root, "nvmet")
			say(&s.nvmet, is(c.Nvmet),
				sightLine{level(sg.NvmetWanted), "nvmet not loaded: " + nvmet + " missing; no nvmet port is seen or healed (modprobe nvmet-rdma)", nil},
				info("nvmet loaded", "path", nvmet))
			lio := filepath.Join(c.Root, "target", "iscsi")
			say(&s.lio, is(c.LIO),
				sightLine{level(sg.LIOWanted), "LIO iSCSI not loaded: " + lio + " missing; no LIO portal is seen or healed (modprobe iscsi_target_mod)", nil},
				info("LIO iSCSI loaded", "path", lio))
		} else {
			s.nvmet, s.lio = unseen, unseen // hidden by configfs: judged again once it is back
		}
	}
	now := good
	if sg.Netlink != nil {
		now = bad
	}
	// Without RDMA on a host that has RDMA objects: a warning; on a host
	// with none (a TCP-only target, no ib_core), said once at info.
	level := slog.LevelInfo
	if sg.RDMAWanted {
		level = slog.LevelWarn
	}
	say(&s.netlink, now,
		sightLine{level, "RDMA netlink unavailable: RDMA listeners (nvmet-rdma, iSER) unknown and not healed; NVMe/TCP ports are still judged and completed", []any{"err", sg.Netlink}},
		info("RDMA netlink available again: RDMA listeners are judged"))
	now = good
	if sg.TCP != nil && sg.TCPWanted {
		now = bad
	}
	say(&s.tcp, now,
		warn("TCP listeners unreadable (sock_diag): NVMe/TCP ports' listeners unknown, none completed", "err", sg.TCP),
		info("TCP listeners readable again"))
	now = good
	if sg.Addrs != nil {
		now = bad
	}
	say(&s.addrs, now,
		warn("netdev addresses unreadable: nothing is healed", "err", sg.Addrs),
		info("netdev addresses readable again"))
	// The saved configs: said again when what is refused changes (an
	// admin fixing one entry of several).
	if sg.Saved != nil && sg.Saved.Error() != s.savedErr {
		out = append(out, warn("saved config refused in part or whole: what it names is neither completed nor counted missing (fix it and reload)", "err", sg.Saved))
		s.saved, s.savedErr = bad, sg.Saved.Error()
	} else if sg.Saved == nil && s.saved == bad {
		out = append(out, info("saved configs read whole again"))
		s.saved, s.savedErr = good, ""
	}
	return out
}

func is(ok bool) fact {
	if ok {
		return good
	}
	return bad
}
