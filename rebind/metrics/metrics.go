// Package metrics exposes the engine's state to Prometheus: over HTTP
// (Serve) and as a file for node_exporter's textfile collector (Textfile).
// Values are read from the engine at scrape or write time.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

const ns = "nvmet_rebind"

// Collector reads an engine and the event sources' counters.
type Collector struct {
	eng    *rebind.Engine
	events *udev.Stats
	config func() ConfigState // the daemon's (SetConfigState); nil: none

	reloadRefused, savedUnreadable *prometheus.Desc

	listeners, givenUp, rebinds, latency, pending, reconciles, resyncs, reconnects, eventsSeen *prometheus.Desc
	reconcileTime, writeTime, writes, unchanged                                                *prometheus.Desc
}

// NewCollector returns a collector over eng and the event stats (may be nil).
func NewCollector(eng *rebind.Engine, events *udev.Stats) *Collector {
	return &Collector{
		eng: eng, events: events,
		listeners:       prometheus.NewDesc(ns+"_listeners", "Listeners by kind (nvmet: nvmet-rdma, nvmet-tcp, lio: iSER) and state: managed, alive, dead, stranded (LISTEN on a device that no longer carries the address), unknown (managed and expected ones only for the last four).", []string{"kind", "state"}, nil),
		givenUp:         prometheus.NewDesc(ns+"_listeners_given_up", "Managed listeners dead or stranded for more than give_up_after: no longer healed until a reload or `nvmet-rebind rebind`.", []string{"kind"}, nil),
		rebinds:         prometheus.NewDesc(ns+"_rebinds_total", "Rebind attempts by result: ok, refused (address/device not ready), unverified (no LISTEN after), error.", []string{"result"}, nil),
		latency:         prometheus.NewDesc(ns+"_last_relisten_seconds", "Time from the first write of the last successful rebind to LISTEN verified.", nil, nil),
		pending:         prometheus.NewDesc(ns+"_pending_retries", "Listeners waiting for a backoff retry.", nil, nil),
		reconciles:      prometheus.NewDesc(ns+"_reconciles_total", "Reconciles run.", nil, nil),
		unchanged:       prometheus.NewDesc(ns+"_reconciles_unchanged_total", "Reconciles that observed exactly what the last one had, with nothing waiting on a timer, and kept its plan (counted in reconciles_total too).", nil, nil),
		resyncs:         prometheus.NewDesc(ns+"_event_source_resyncs_total", "Full resyncs requested by an event source (socket (re)opened, overrun, unparsable event).", []string{"source"}, nil),
		reconnects:      prometheus.NewDesc(ns+"_event_source_reconnects_total", "Event source reconnects after an error (ENOBUFS included).", []string{"source"}, nil),
		eventsSeen:      prometheus.NewDesc(ns+"_events_total", "Kernel events received.", []string{"source"}, nil),
		reconcileTime:   prometheus.NewDesc(ns+"_reconcile_seconds_total", "Time spent reconciling (observe, plan, act, verify).", nil, nil),
		writeTime:       prometheus.NewDesc(ns+"_configfs_write_seconds_total", "Part of the reconcile time spent inside configfs writes (the kernel binding or unbinding listeners).", nil, nil),
		writes:          prometheus.NewDesc(ns+"_configfs_writes_total", "configfs writes made (unlink, link, iser).", nil, nil),
		reloadRefused:   prometheus.NewDesc(ns+"_config_reload_refused", "1 when the last reload was refused (the daemon runs on its previous config; `nvmet-rebind check` names why), 0 after a good one.", nil, nil),
		savedUnreadable: prometheus.NewDesc(ns+"_saved_config_unreadable", "1 when a saved config [boot] names is missing, unreadable, malformed or has a bad entry (what it declares is not completed), until a reload reads it whole.", nil, nil),
	}
}

// ConfigState is what the daemon knows of its config that the engine does
// not: a reload refused, a saved config found unreadable at its start.
type ConfigState struct {
	ReloadRefused, SavedUnreadable bool
}

// SetConfigState makes the collector read the daemon's config state (f
// must be safe to call from a scrape); without it both metrics are the
// engine's alone.
func (c *Collector) SetConfigState(f func() ConfigState) { c.config = f }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.listeners, c.givenUp, c.rebinds, c.latency, c.pending, c.reconciles, c.resyncs, c.reconnects, c.eventsSeen, c.reconcileTime, c.writeTime, c.writes, c.unchanged, c.reloadRefused, c.savedUnreadable} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.eng.Snapshot()
	counts := map[[2]string]float64{}
	givenUp := map[string]float64{}
	for _, k := range []string{"nvmet", "nvmet-tcp", "lio"} {
		for _, s := range []string{"managed", "alive", "dead", "stranded", "unknown"} {
			counts[[2]string{k, s}] = 0
		}
		givenUp[k] = 0
	}
	for _, it := range snap.Items {
		if !it.Managed {
			continue
		}
		k := it.Endpoint.Kind.String() // nvmet (RDMA), nvmet-tcp or lio
		counts[[2]string{k, "managed"}]++
		h := it.Health()
		if h == rebind.HealthNone {
			continue
		}
		if it.GaveUp {
			givenUp[k]++
		}
		counts[[2]string{k, h.String()}]++
	}
	for key, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.listeners, prometheus.GaugeValue, v, key[0], key[1])
	}
	for k, v := range givenUp {
		ch <- prometheus.MustNewConstMetric(c.givenUp, prometheus.GaugeValue, v, k)
	}
	for _, r := range rebind.Results {
		ch <- prometheus.MustNewConstMetric(c.rebinds, prometheus.CounterValue, float64(snap.Stats.Rebinds[r]), r.String())
	}
	ch <- prometheus.MustNewConstMetric(c.latency, prometheus.GaugeValue, snap.Stats.LastLatency.Seconds())
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(snap.Stats.PendingRetries))
	ch <- prometheus.MustNewConstMetric(c.reconciles, prometheus.CounterValue, float64(snap.Stats.Reconciles))
	ch <- prometheus.MustNewConstMetric(c.reconcileTime, prometheus.CounterValue, snap.Stats.ReconcileTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.unchanged, prometheus.CounterValue, float64(snap.Stats.Unchanged))
	ch <- prometheus.MustNewConstMetric(c.writeTime, prometheus.CounterValue, snap.Stats.WriteTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(snap.Stats.Writes))
	var cs ConfigState
	if c.config != nil {
		cs = c.config()
	}
	cs.SavedUnreadable = cs.SavedUnreadable || snap.Sight.Saved != nil
	ch <- prometheus.MustNewConstMetric(c.reloadRefused, prometheus.GaugeValue, b2f(cs.ReloadRefused))
	ch <- prometheus.MustNewConstMetric(c.savedUnreadable, prometheus.GaugeValue, b2f(cs.SavedUnreadable))
	if c.events != nil {
		s := c.events.Snapshot()
		for src, n := range map[string]udev.Counts{udev.SourceUevent: s.Uevent, udev.SourceRtnetlink: s.Rtnetlink, udev.SourceRDMAMonitor: s.RDMAMonitor} {
			ch <- prometheus.MustNewConstMetric(c.resyncs, prometheus.CounterValue, float64(n.Resyncs), src)
			ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(n.Reconnects), src)
			ch <- prometheus.MustNewConstMetric(c.eventsSeen, prometheus.CounterValue, float64(n.Events), src)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler returns the /metrics handler for a registry holding c and the
// process/Go collectors.
func Handler(c *Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Textfile writes the collector's metrics in the Prometheus text format for
// node_exporter's textfile collector. Only the nvmet_rebind_* metrics: the
// Go and process collectors of the HTTP endpoint are left out, because
// node_exporter exports go_* and process_* metrics of its own, and a textfile
// repeating those names makes its whole scrape fail.
type Textfile struct{ reg *prometheus.Registry }

// NewTextfile returns a writer of c's metrics.
func NewTextfile(c *Collector) *Textfile {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return &Textfile{reg: reg}
}

// Write replaces path atomically: prometheus.WriteToTextfile writes a
// temporary file in the same directory (named path plus a random suffix, so
// not *.prom: node_exporter never reads it half-written), makes it 0644 so
// node_exporter's user can read it, and renames it over path.
func (t *Textfile) Write(path string) error {
	if err := prometheus.WriteToTextfile(path, t.reg); err != nil {
		return fmt.Errorf("metrics textfile %s: %w", path, err)
	}
	return nil
}

// CheckTextfile refuses a path node_exporter's textfile collector would
// never read: it reads *.prom files, and its directory is absolute.
func CheckTextfile(path string) error {
	switch {
	case !filepath.IsAbs(path):
		return fmt.Errorf("metrics textfile %q: not an absolute path", path)
	case !strings.HasSuffix(path, ".prom") || filepath.Base(path) == ".prom":
		return fmt.Errorf("metrics textfile %q: must end in .prom (node_exporter's textfile collector reads only *.prom)", path)
	}
	return nil
}

// CheckAddr refuses a listen address that is not loopback unless allowed:
// the metrics tell which storage addresses exist and which are dead.
func CheckAddr(addr string, allowPublic bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics listen address %q: %w (use e.g. 127.0.0.1:9767)", addr, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && ip.IsLoopback()) || allowPublic {
		return nil
	}
	return fmt.Errorf("metrics listen address %q is not loopback; use 127.0.0.1 or [::1]", addr)
}

// Serve serves /metrics on addr until ctx is done.
func Serve(ctx context.Context, addr string, c *Collector) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(c))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics %s: %w", addr, err)
	}
	return nil
}
