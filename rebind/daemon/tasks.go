package daemon

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// A watcher is one of the kernel's event streams (udev.WatchUevents,
// udev.WatchRtnetlink, udev.WatchRDMAMonitor): it resubscribes and resyncs
// by itself, and each hint pokes the engine.
type watcher struct {
	name  string
	watch func(context.Context, func(udev.Hint), udev.Options) error
	hint  func(udev.Hint)
	stats *udev.Stats // counted for the metrics
	// log, when set, makes the stream optional: a kernel without it
	// (udev.ErrRDMAMonitorUnsupported) is logged once and the watcher
	// ends without stopping the daemon.
	log *slog.Logger
}

func (w *watcher) String() string { return w.name }

func (w *watcher) Run(ctx context.Context) error {
	err := w.watch(ctx, w.hint, udev.Options{Stats: w.stats})
	if w.log != nil && errors.Is(err, udev.ErrRDMAMonitorUnsupported) {
		w.log.Info("RDMA netlink monitor not available on this kernel; uevents and rtnetlink cover RDMA device changes",
			"source", w.name, "reason", err)
		return nil
	}
	return err
}

// hint is what an event does: the engine looks again. A block device's
// event only when boot completion waits for a device (a disk's media
// change every few seconds must not cost a round each).
func (d *daemon) hint(h udev.Hint) {
	if h.Disk && !d.env.Engine.WaitsForDevice() {
		return
	}
	d.log.Debug("event", "source", h.Source, "reason", h.Reason, "resync", h.Resync, "configfs", h.Configfs)
	if d.env.Model != nil && (h.Configfs || h.Resync) {
		// A configfs module loaded or unloaded (its tree appears or
		// vanishes without an inotify event), or uevents were lost.
		d.env.Model.Invalidate()
	}
	d.env.Engine.Poke()
}

// The reconciler is the engine's loop. It is ready after its first full
// reconcile; every beat (after each round, and at least every half
// watchdog interval) proves the loop alive to systemd (WATCHDOG=1) and
// pokes the tasks that follow the rounds.
type reconciler struct {
	eng    *rebind.Engine
	notify func(string)
	beats  []trigger
	ready  chan struct{}
}

func newReconciler(eng *rebind.Engine, notify func(string), beats ...trigger) *reconciler {
	return &reconciler{eng: eng, notify: notify, beats: beats, ready: make(chan struct{})}
}

func (r *reconciler) String() string         { return "reconciler" }
func (r *reconciler) Ready() <-chan struct{} { return r.ready }

func (r *reconciler) Run(ctx context.Context) error {
	first := true
	return r.eng.Run(ctx, func() {
		if first {
			first = false
			close(r.ready)
		}
		r.notify("WATCHDOG=1")
		for _, b := range r.beats {
			b.poke()
		}
	})
}

// metricsServer serves /metrics (metrics.Serve) on a loopback address.
type metricsServer struct {
	addr string
	col  *metrics.Collector
}

func (m *metricsServer) String() string { return "metrics" }

func (m *metricsServer) Run(ctx context.Context) error { return metrics.Serve(ctx, m.addr, m.col) }
