package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
)

// textfilePath is the metrics textfile in force: the flag, else the
// config's ("" = none).
func textfilePath(flag string, cfg rebind.Config) string {
	if flag != "" {
		return flag
	}
	return cfg.MetricsTextfile
}

// textfileWriter writes the metrics textfile after every reconcile round
// and at least every resync interval (so its mtime,
// node_textfile_mtime_seconds, says the daemon is alive even while nothing
// happens), until ctx is done. rounds is poked by the loop after each
// round and each watchdog beat; a beat without a new round does not
// rewrite the file before the interval. The path is re-read from the
// config each time (a reload may set, change or clear it); a file the
// daemon stops writing to is removed, so no stale metrics stay behind. A
// failed write is logged once (and its recovery), never fatal: metrics
// must not stop the healing.
type textfileWriter struct {
	eng      *rebind.Engine
	log      *slog.Logger
	flag     string // --metrics-textfile ("": the config's)
	tf       *metrics.Textfile
	rounds   <-chan struct{}
	interval timer // nil: a time.Timer (tests fire their own)
}

func (w *textfileWriter) String() string { return "metrics textfile" }

func (w *textfileWriter) Run(ctx context.Context) error {
	interval := w.interval
	if interval == nil {
		interval = newTimer()
	}
	defer interval.Stop()
	var (
		last    string // the path last written
		lastN   uint64 // reconciles counted at that write
		failing bool
	)
	write := func(force bool) {
		cfg := w.eng.Config()
		path := textfilePath(w.flag, cfg)
		if last != "" && path != last {
			if err := os.Remove(last); err != nil && !errors.Is(err, os.ErrNotExist) {
				w.log.Warn("old metrics textfile not removed", "path", last, "err", err)
			}
			last, failing = "", false
		}
		if path == "" {
			return
		}
		n := w.eng.Snapshot().Stats.Reconciles
		if !force && path == last && n == lastN {
			return // a watchdog beat, no new round
		}
		err := w.tf.Write(path)
		switch {
		case err != nil && !failing:
			w.log.Error("metrics textfile not written; retrying after each round", "err", err)
		case err == nil && failing:
			w.log.Info("metrics textfile written again", "path", path)
		}
		failing = err != nil
		last, lastN = path, n
		interval.Reset(cfg.ResyncInterval)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.rounds:
			write(false)
		case <-interval.C():
			write(true)
		}
	}
}
