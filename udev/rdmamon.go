package udev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"
	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// ErrRDMAMonitorUnsupported is wrapped by WatchRDMAMonitor's error when the
// running kernel has no RDMA netlink monitor (before 6.12: its
// RDMA_NLDEV_CMD_SYS_GET answer has no RDMA_NLDEV_SYS_ATTR_MONITOR_MODE) or
// no RDMA netlink at all (ib_core not loaded). Uevents and rtnetlink still
// see every device and netdev change then.
var ErrRDMAMonitorUnsupported = errors.New("the RDMA netlink monitor is not available on this kernel")

// maxMonitorLen bounds a monitor datagram: one message of a few attributes
// (a device and a netdev name of at most 64 and 16 bytes) is under 200 bytes.
const maxMonitorLen = 8192

// WatchRDMAMonitor reads the kernel's RDMA netlink monitor (NETLINK_RDMA,
// group RDMA_NL_GROUP_NOTIFY, RDMA_NLDEV_CMD_MONITOR) and pokes a hint for
// every event: REGISTER, UNREGISTER, NETDEV_ATTACH, NETDEV_DETACH, RENAME,
// NETDEV_RENAME, and types added later. After opening the socket, and after
// every reconnect, it pokes a Resync hint. A datagram it cannot parse is
// counted and pokes a Resync hint. On a read error (ENOBUFS when the
// receive buffer overflowed, included) it closes the socket, reopens it,
// with backoff when that fails, and resyncs. poke must not block.
//
// Each dial first asks the kernel whether it has the monitor. It returns
// ctx.Err() (joined with a close error, if any) when ctx is done, or, once,
// an error wrapping ErrRDMAMonitorUnsupported when the kernel has no
// monitor (or no RDMA netlink); never otherwise.
func WatchRDMAMonitor(ctx context.Context, poke func(Hint), opts Options) error {
	o := opts.withDefaults()
	dial := o.DialRDMAMonitor
	if dial == nil {
		rcvbuf := o.ReceiveBuffer
		dial = func() (Conn, error) { return dialRDMAMonitor(rcvbuf) }
	}
	st := &o.Stats.rdmaMonitor
	s := stream{
		source: SourceRDMAMonitor,
		first:  "rdma monitor subscribed",
		poke:   poke,
		st:     st,
		b:      backoff.Backoff{Min: o.MinBackoff, Max: o.MaxBackoff},
	}
	return resubscribe(ctx, s, func(ctx context.Context, resync func()) error {
		conn, err := dial()
		if errors.Is(err, ErrRDMAMonitorUnsupported) {
			return fatal(err)
		}
		if err != nil {
			return notConnected(err)
		}
		resync()
		readErr := readMonitor(ctx, conn, poke, st)
		closeErr := conn.Close()
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), closeErr)
		}
		return errors.Join(readErr, closeErr)
	})
}

// readMonitor returns on the first read error, or nil when ctx is done.
// Device names are remembered by device index for the hints of a session.
func readMonitor(ctx context.Context, conn Conn, poke func(Hint), st *counters) error {
	if in, ok := conn.(interface{ Interrupt() }); ok {
		stop := context.AfterFunc(ctx, in.Interrupt)
		defer stop()
	}
	names := monitorNames{}
	for ctx.Err() == nil {
		msg, err := conn.ReadMsg()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return fmt.Errorf("rdma monitor socket: read: %w", err)
		}
		st.events.Add(1)
		hints, err := names.hints(msg)
		if err != nil {
			st.errors.Add(1)
			st.resyncs.Add(1)
			poke(Hint{Source: SourceRDMAMonitor, Reason: fmt.Sprintf("resync after %v", err), Resync: true})
			continue
		}
		for _, h := range hints {
			st.hints.Add(1)
			poke(h)
		}
	}
	return nil
}

// monitorNames maps a device index to the device's last name seen, so
// that a rename can say what the device was called before.
type monitorNames map[uint32]string

// maxMonitorNames bounds the map: indices are never reused, so a host that
// adds and deletes devices forever would otherwise grow it forever.
const maxMonitorNames = 1024

// hints parses one datagram (rdmanl.ParseMonitor) into one hint per event.
func (n monitorNames) hints(datagram []byte) ([]Hint, error) {
	if len(datagram) > maxMonitorLen {
		return nil, fmt.Errorf("rdma monitor: datagram of %d bytes exceeds %d", len(datagram), maxMonitorLen)
	}
	evs, err := rdmanl.ParseMonitor(datagram)
	if err != nil {
		return nil, err
	}
	hints := make([]Hint, 0, len(evs))
	for _, e := range evs {
		hints = append(hints, Hint{Source: SourceRDMAMonitor, Reason: n.reason(e)})
	}
	return hints, nil
}

// reason is "rdma monitor <event> <device> [port N] [<netdev>]", e.g.
// "rdma monitor netdev_attach rxe0 port 1 veth0", "rdma monitor rename
// rxe9 (was rxe0)", and updates the names.
func (n monitorNames) reason(e rdmanl.MonitorEvent) string {
	parts := []string{"rdma monitor", e.Type.String()}
	if e.HasDev {
		name := e.DevName
		if name == "" {
			name = n[e.DevIndex]
		}
		if name == "" {
			name = "index " + strconv.FormatUint(uint64(e.DevIndex), 10)
		}
		parts = append(parts, name)
		if old, ok := n[e.DevIndex]; ok && e.Type == rdmanl.MonitorRename && e.DevName != "" && old != e.DevName {
			parts = append(parts, "(was "+old+")")
		}
		switch {
		case e.Type == rdmanl.MonitorUnregister:
			delete(n, e.DevIndex)
		case e.DevName != "":
			if _, ok := n[e.DevIndex]; ok || len(n) < maxMonitorNames {
				n[e.DevIndex] = e.DevName
			}
		}
	}
	if e.Port != 0 {
		parts = append(parts, "port "+strconv.FormatUint(uint64(e.Port), 10))
	}
	switch {
	case e.Netdev != "":
		parts = append(parts, e.Netdev)
	case e.HasNetdev:
		parts = append(parts, "ifindex "+strconv.FormatUint(uint64(e.NetdevIndex), 10))
	}
	return strings.Join(parts, " ")
}
