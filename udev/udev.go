// Package udev turns the kernel's event streams into hints for the reconciler:
// kobject uevents (NETLINK_KOBJECT_UEVENT, kernel group: SUBSYSTEM=infiniband and
// SUBSYSTEM=net add/remove/move), rtnetlink address and link changes, and,
// on kernels ≥ 6.12, the RDMA netlink monitor (NETLINK_RDMA, group
// RDMA_NL_GROUP_NOTIFY: RDMA device register/unregister/rename and port
// netdev attach/detach).
//
// A hint only says "look again"; this package never decides anything. Every
// stream resubscribes after an error and then pokes a Resync hint, because
// events may have been lost in between. The watchers share one reconnect
// policy, the unexported resubscribe (resubscribe.go): backoff between
// attempts, reset after a healthy session, the counting and the Resync hint.
// The package does not log: what went wrong is reported in Hint.Reason and
// counted in Stats.
package udev

import (
	"fmt"
	"path"
	"strconv"
	"sync/atomic"
	"time"
)

// Hint sources.
const (
	SourceUevent      = "uevent"
	SourceRtnetlink   = "rtnetlink"
	SourceRDMAMonitor = "rdma-monitor"
)

// Hint pokes the reconciler. It carries no state to act on: the reconciler
// always reads the full observed state.
type Hint struct {
	Source string // SourceUevent, SourceRtnetlink or SourceRDMAMonitor
	Reason string // for humans: "infiniband add rxe0", "resync after uevent socket: read: no buffer space available"
	Resync bool   // events may have been lost (a (re)connect or an unparsable event)
	// Configfs: a module whose configfs tree the daemon reads was loaded
	// or unloaded (the tree appears or vanishes without inotify events).
	Configfs bool
	// Disk: a block device was added or changed: boot completion may be
	// waiting for it (a namespace's or a storage object's device path).
	Disk bool
}

// Event is one kernel uevent datagram: "ACTION@DEVPATH\0KEY=VALUE\0...".
type Event struct {
	Action     string            // ACTION: add, remove, move, change, ...
	Subsystem  string            // SUBSYSTEM: infiniband, net, ...
	Devpath    string            // DEVPATH below /sys: /devices/virtual/infiniband/rxe0
	DevpathOld string            // DEVPATH_OLD, set on move (rename)
	Name       string            // kobject name, the last element of DEVPATH: rxe0, veth0
	Seqnum     uint64            // SEQNUM
	Env        map[string]string // every KEY=VALUE pair
}

// maxUeventLen bounds a datagram: the kernel builds the environment in a
// 2048-byte buffer (UEVENT_BUFFER_SIZE) and prefixes "ACTION@DEVPATH\0".
const maxUeventLen = 8192

// newEvent validates what the kernel always sends (ACTION and DEVPATH
// repeating the header, SUBSYSTEM, SEQNUM) and builds an Event.
func newEvent(action, devpath string, env map[string]string) (Event, error) {
	obj := action + "@" + devpath
	if devpath == "" || devpath[0] != '/' {
		return Event{}, fmt.Errorf("uevent %q: devpath is not absolute", obj)
	}
	if got, ok := env["ACTION"]; !ok || got != action {
		return Event{}, fmt.Errorf("uevent %q: ACTION=%q does not match the header", obj, got)
	}
	if got, ok := env["DEVPATH"]; !ok || got != devpath {
		return Event{}, fmt.Errorf("uevent %q: DEVPATH=%q does not match the header", obj, got)
	}
	sub := env["SUBSYSTEM"]
	if sub == "" {
		return Event{}, fmt.Errorf("uevent %q: no SUBSYSTEM", obj)
	}
	seq, err := strconv.ParseUint(env["SEQNUM"], 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("uevent %q: SEQNUM: %w", obj, err)
	}
	return Event{
		Action:     action,
		Subsystem:  sub,
		Devpath:    devpath,
		DevpathOld: env["DEVPATH_OLD"],
		Name:       path.Base(devpath),
		Seqnum:     seq,
		Env:        env,
	}, nil
}

// ConfigfsModules are the modules whose configfs trees the daemon reads
// (uevent names: dashes become underscores).
var ConfigfsModules = map[string]bool{
	"configfs": true, "nvmet": true, "nvmet_rdma": true,
	"target_core_mod": true, "iscsi_target_mod": true, "ib_isert": true,
}

// Relevant reports whether e can change where listeners may bind: an RDMA
// device (SUBSYSTEM=infiniband) or a netdev (SUBSYSTEM=net) added, removed or
// renamed; or whether it changes configfs without an inotify event: one of
// ConfigfsModules loaded or unloaded (SUBSYSTEM=module, Hint.Configfs).
// infiniband_verbs, infiniband_mad, other modules and the rest are not. A
// block device added or changed is too, as a Disk hint (boot completion
// may be waiting for it).
func Relevant(e Event) (Hint, bool) {
	switch e.Subsystem {
	case "infiniband", "net":
	case "block":
		if e.Action == "add" || e.Action == "change" {
			return Hint{Source: SourceUevent, Reason: "block " + e.Action + " " + e.Name, Disk: true}, true
		}
		return Hint{}, false
	case "module":
		if (e.Action == "add" || e.Action == "remove") && ConfigfsModules[e.Name] {
			return Hint{Source: SourceUevent, Reason: "module " + e.Action + " " + e.Name, Configfs: true}, true
		}
		return Hint{}, false
	default:
		return Hint{}, false
	}
	switch e.Action {
	case "add", "remove", "move":
	default:
		return Hint{}, false
	}
	reason := e.Subsystem + " " + e.Action + " " + e.Name
	if e.DevpathOld != "" {
		reason += " (was " + path.Base(e.DevpathOld) + ")"
	}
	return Hint{Source: SourceUevent, Reason: reason}, true
}

// Options tunes WatchUevents, WatchRtnetlink and WatchRDMAMonitor. The zero
// value is usable.
type Options struct {
	// Stats, if set, is where the watcher counts; share one between watchers.
	Stats *Stats
	// MinBackoff and MaxBackoff bound the wait before reconnecting after a
	// failed dial or a short-lived connection (default 100 ms and 5 s).
	// A connection that lived MaxBackoff or longer reconnects at once.
	MinBackoff, MaxBackoff time.Duration
	// ReceiveBuffer is the socket receive buffer in bytes (default 16 MiB).
	// SO_RCVBUFFORCE is tried first; without CAP_NET_ADMIN the kernel caps
	// SO_RCVBUF at net.core.rmem_max.
	ReceiveBuffer int
	// Dial opens the uevent socket (default: go-udev's UEventConn in
	// KernelEvent mode). Tests inject recorded datagrams here.
	Dial func() (Conn, error)
	// DialRDMAMonitor opens the RDMA netlink monitor socket (default: ask
	// the kernel whether it has the monitor, then join
	// RDMA_NL_GROUP_NOTIFY). An error wrapping ErrRDMAMonitorUnsupported
	// ends WatchRDMAMonitor. Tests inject recorded datagrams here.
	DialRDMAMonitor func() (Conn, error)
}

func (o Options) withDefaults() Options {
	if o.Stats == nil {
		o.Stats = new(Stats)
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.ReceiveBuffer <= 0 {
		o.ReceiveBuffer = 16 << 20
	}
	return o
}

// Stats counts what the watchers saw. The zero value is ready; it is safe
// for concurrent use.
type Stats struct {
	uevent, rtnetlink, rdmaMonitor counters
}

type counters struct {
	events, hints, errors, reconnects, resyncs atomic.Uint64
}

// Counts is a snapshot of one source's counters.
type Counts struct {
	Events     uint64 // uevent and rdma monitor datagrams read, rtnetlink updates received
	Hints      uint64 // relevant (non-resync) hints poked
	Errors     uint64 // failed dials/subscriptions, read errors, unparsable datagrams, error callbacks
	Reconnects uint64 // sockets reopened (uevent, rdma monitor) or subscriptions renewed (rtnetlink)
	Resyncs    uint64 // Resync hints poked, including the one after the first connect
}

// StatsSnapshot holds the counts of each source.
type StatsSnapshot struct {
	Uevent      Counts
	Rtnetlink   Counts
	RDMAMonitor Counts
}

// Snapshot returns the current counts.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{Uevent: s.uevent.load(), Rtnetlink: s.rtnetlink.load(), RDMAMonitor: s.rdmaMonitor.load()}
}

func (c *counters) load() Counts {
	return Counts{
		Events:     c.events.Load(),
		Hints:      c.hints.Load(),
		Errors:     c.errors.Load(),
		Reconnects: c.reconnects.Load(),
		Resyncs:    c.resyncs.Load(),
	}
}
