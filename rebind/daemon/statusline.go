package daemon

import (
	"context"
	"slices"
	"strings"
	"unsafe"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// statusLine keeps systemd's STATUS= (the "Status:" line of `systemctl
// status`) saying what matters at a glance: `check`'s verdict of the last
// round — `CRITICAL: 1 of 12 listeners dead: nvmet 1 192.0.2.1:4420` — one
// owner for both (status.Check). It is sent when it changes, never per
// round, and rebuilt only when the round published other items or another
// sight: an idle resync keeps the last round's items and costs nothing.
type statusLine struct {
	eng    *rebind.Engine
	notify func(string)
	rounds <-chan struct{}
	// config is the daemon's trouble with its config (daemon.configStatus:
	// a refused reload, saved configs unreadable at the start), until a
	// reload succeeds; check judges it with the round's items.
	config func() *status.ConfigStatus

	sent  string
	items *rebind.Item // the items last judged (their backing array) …
	n     int          // … and how many
	sight rebind.Sight
	conf  status.ConfigStatus // the config trouble last judged
}

func (w *statusLine) String() string { return "status line" }

func (w *statusLine) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.rounds:
			w.update()
		}
	}
}

// update sends the status of the last published round if it changed.
func (w *statusLine) update() {
	snap := w.eng.Snapshot()
	var conf status.ConfigStatus
	if c := w.config(); c != nil {
		conf = *c
	}
	if snap.Stats.Reconciles == 0 {
		return
	}
	items := unsafe.SliceData(snap.Items)
	if w.sent != "" && items == w.items && len(snap.Items) == w.n && sameSight(snap.Sight, w.sight) && conf == w.conf {
		return
	}
	w.items, w.n, w.sight, w.conf = items, len(snap.Items), snap.Sight, conf
	r := status.Report(snap, "daemon")
	if conf != (status.ConfigStatus{}) {
		r.Config = &conf
	}
	line := statusText(status.Check(r), conf.ReloadRefused)
	if line != w.sent {
		w.sent = line
		w.notify("STATUS=" + line)
	}
}

// statusText is the STATUS= line of a verdict: its health and summary,
// and a refused reload (the config on disk is not the one in use) when
// the summary does not say it (a worse problem outranks it there).
func statusText(v status.Verdict, refused string) string {
	s := v.Health.String() + ": " + v.Summary
	if v.SavedComplete {
		s += "; completed the saved config"
	}
	if refused != "" && !strings.Contains(v.Summary, "reload refused") {
		s += "; reload refused, the old config kept: " + refused
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// errText is err's text ("" for nil).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sameSight reports whether two sights say the same.
func sameSight(a, b rebind.Sight) bool {
	return a.Configfs.Probed == b.Configfs.Probed && a.Configfs.Mounted == b.Configfs.Mounted && a.Configfs.Nvmet == b.Configfs.Nvmet &&
		a.Configfs.LIO == b.Configfs.LIO && errText(a.Configfs.Err) == errText(b.Configfs.Err) &&
		errText(a.Netlink) == errText(b.Netlink) && errText(a.Addrs) == errText(b.Addrs) &&
		a.NvmetWanted == b.NvmetWanted && a.LIOWanted == b.LIOWanted && slices.Equal(a.Unreadable, b.Unreadable) &&
		errText(a.Saved) == errText(b.Saved)
}
