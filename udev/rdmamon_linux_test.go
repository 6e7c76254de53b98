package udev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// monitorMsg builds an RDMA_NLDEV_CMD_MONITOR message as nldev.c does
// (rdma_nl_notify_event): attrs are (type, value) pairs, value a uint32, a
// uint8 or a string (NUL added).
func monitorMsg(typ uint16, attrs ...any) []byte {
	var body []byte
	for i := 0; i < len(attrs); i += 2 {
		var v []byte
		switch x := attrs[i+1].(type) {
		case uint32:
			v = binary.NativeEndian.AppendUint32(nil, x)
		case uint8:
			v = []byte{x}
		case string:
			v = append([]byte(x), 0)
		}
		a := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
		a = binary.NativeEndian.AppendUint16(a, uint16(attrs[i].(int)))
		a = append(a, v...)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		body = append(body, a...)
	}
	h := binary.NativeEndian.AppendUint32(nil, uint32(16+len(body)))
	h = binary.NativeEndian.AppendUint16(h, typ)
	h = append(h, make([]byte, 10)...)
	return append(h, body...)
}

const monitorType = 5<<10 | 28 // RDMA_NL_NLDEV<<10 | RDMA_NLDEV_CMD_MONITOR

// The recorded events of 7.3 (RENAME and NETDEV_RENAME included), and
// messages no recording has, built from nldev.c: keyed by device index
// through a rename.
func TestRDMAMonitorHints(t *testing.T) {
	t.Parallel()
	var dgs [][]byte
	for _, f := range []string{
		"monitor-rdma-link-add-rxe0.hex",
		"monitor-rdma-dev-set-rxe0-name-rxe9.hex",
		"monitor-ip-link-set-veth0-name-veth9.hex",
		"monitor-ip-link-set-veth9-name-veth0.hex",
	} {
		dgs = append(dgs, readHex(t, "rdmamon-7.3/"+f)...)
	}
	dgs = append(dgs,
		// Not recorded (rxe sends no NETDEV_DETACH): netdev_detach
		// without a netdev left on the port (fill_mon_netdev_association).
		monitorMsg(monitorType, 1, uint32(0), 2, "rxe9", 3, uint32(1), 102, uint8(3)),
		// Not recorded: netdev_rename of a netdev in another namespace
		// than the device's (fill_mon_netdev_rename puts nothing).
		monitorMsg(monitorType, 102, uint8(5)),
		// Not recorded: netdev_attach of a netdev in another namespace
		// (fill_mon_netdev_association puts nothing either).
		monitorMsg(monitorType, 102, uint8(2)),
		// Not recorded: a type this code does not know, device without a name.
		monitorMsg(monitorType, 1, uint32(0), 102, uint8(9)),
		// Not recorded: netdev_attach without NDEV_NAME.
		monitorMsg(monitorType, 1, uint32(7), 3, uint32(2), 50, uint32(12), 102, uint8(2)),
	)
	dgs = append(dgs, readHex(t, "rdmamon-7.3/monitor-rdma-dev-set-rxe9-name-rxe0.hex")...)
	dgs = append(dgs, readHex(t, "rdmamon-7.3/monitor-rdma-link-delete-rxe0.hex")...)
	want := []string{
		"rdma monitor register rxe0",
		"rdma monitor netdev_attach rxe0 port 1 veth0",
		"rdma monitor rename rxe9 (was rxe0)",
		"rdma monitor netdev_rename veth9",
		"rdma monitor netdev_rename veth0",
		"rdma monitor netdev_detach rxe9 port 1",
		"rdma monitor netdev_rename",
		"rdma monitor netdev_attach",
		"rdma monitor event 9 rxe9",
		"rdma monitor netdev_attach index 7 port 2 ifindex 12",
		"rdma monitor rename rxe0 (was rxe9)",
		"rdma monitor unregister rxe0",
	}
	names := monitorNames{}
	var got []string
	for i, dg := range dgs {
		hs, err := names.hints(dg)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		for _, h := range hs {
			if h.Source != SourceRDMAMonitor || h.Resync || h.Configfs {
				t.Errorf("hint %+v", h)
			}
			got = append(got, h.Reason)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	if _, ok := names[0]; ok {
		t.Errorf("device 0 still named after its unregister: %v", names)
	}
}

func TestParseRDMAMonitorErrors(t *testing.T) {
	t.Parallel()
	good := readHex(t, "rdmamon-6.12/monitor-rdma-link-add-rxe0.hex")[0]
	for _, tc := range []struct {
		name string
		dg   []byte
		is   error
	}{
		{"empty", nil, nil},
		{"short header", good[:10], nil},
		{"length beyond the datagram", append(binary.NativeEndian.AppendUint32(nil, 200), good[4:]...), nil},
		{"attribute beyond the message", good[:len(good)-4], nil},
		{"no EVENT_TYPE", monitorMsg(monitorType, 1, uint32(0), 2, "rxe0"), nil},
		{"EVENT_TYPE of 4 bytes", monitorMsg(monitorType, 102, uint32(0)), nil},
		{"DEV_INDEX of 1 byte", monitorMsg(monitorType, 1, uint8(0), 102, uint8(0)), nil},
		{"another nldev command", monitorMsg(5<<10|1, 1, uint32(0), 102, uint8(0)), nil},
		{"NLMSG_ERROR", monitorMsg(2, 1, uint32(0)), nil},
		{"NLMSG_OVERRUN", monitorMsg(4), syscall.ENOBUFS},
		{"only NLMSG_NOOP", monitorMsg(1), nil},
		{"too long", append(bytes.Clone(good), make([]byte, maxMonitorLen)...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := monitorNames{}.hints(tc.dg)
			if err == nil || hs != nil {
				t.Fatalf("hints = %v, %v; want an error", hs, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if !strings.HasPrefix(err.Error(), "rdma monitor") {
				t.Errorf("error %q does not name the rdma monitor", err)
			}
		})
	}
	// Two messages in one datagram, a NOOP between them: two events.
	two := append(append(bytes.Clone(good), monitorMsg(1)...), good...)
	if evs, err := rdmanl.ParseMonitor(two); err != nil || len(evs) != 2 {
		t.Errorf("two messages: %v, %v", evs, err)
	}
}

// monitorDialer hands out conns in order, then quiet ones; nil entries
// fail the dial with dialErr.
type monitorDialer struct {
	mu      sync.Mutex
	conns   []Conn
	dialErr error
	dials   int
}

func (d *monitorDialer) dial() (Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	if len(d.conns) == 0 {
		return idleConn{closed: make(chan struct{})}, nil
	}
	c := d.conns[0]
	d.conns = d.conns[1:]
	if c == nil {
		return nil, d.dialErr
	}
	return c, nil
}

// The recorded datagrams, one the parser rejects (a Resync hint, no
// reconnect), then ENOBUFS: reconnect and resync.
func TestWatchRDMAMonitor(t *testing.T) {
	t.Parallel()
	var msgs [][]byte
	msgs = append(msgs, readHex(t, "rdmamon-6.12/monitor-rdma-link-add-rxe0.hex")...)
	msgs = append(msgs, []byte("garbage"))
	msgs = append(msgs, readHex(t, "rdmamon-6.12/monitor-rdma-link-delete-rxe0.hex")...)
	storm := &stormConn{msgs: msgs, end: syscall.ENOBUFS, done: make(chan struct{})}
	d := &monitorDialer{conns: []Conn{nil, storm}, dialErr: errors.New("dial: boom")}
	want := []Hint{
		{Source: SourceRDMAMonitor, Reason: "resync after dial: boom", Resync: true},
		{Source: SourceRDMAMonitor, Reason: "rdma monitor register rxe0"},
		{Source: SourceRDMAMonitor, Reason: "rdma monitor netdev_attach rxe0 port 1 veth0"},
		{Source: SourceRDMAMonitor, Reason: "resync after rdma monitor: message at offset 0: 7 bytes left, header needs 16", Resync: true},
		{Source: SourceRDMAMonitor, Reason: "rdma monitor unregister rxe0"},
		{Source: SourceRDMAMonitor, Reason: "resync after rdma monitor socket: read: no buffer space available", Resync: true},
	}
	enough := make(chan struct{})
	var once sync.Once
	r := &hintRecorder{ch: make(chan Hint, 1)}
	r.then = func() {
		r.mu.Lock()
		n := len(r.hints)
		r.mu.Unlock()
		if n >= len(want) {
			once.Do(func() { close(enough) })
		}
	}
	st := new(Stats)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchRDMAMonitor(ctx, r.poke, Options{Stats: st, DialRDMAMonitor: d.dial, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	}()
	waitClosed(t, enough, fmt.Sprintf("%d hints", len(want)))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchRDMAMonitor = %v, want context.Canceled", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if diff := cmp.Diff(want, r.hints[:min(len(r.hints), len(want))]); diff != "" {
		t.Errorf("hints (-want +got):\n%s", diff)
	}
	c := st.Snapshot().RDMAMonitor
	// errors: the failed dial, the garbage, the ENOBUFS session end.
	if c.Events != 4 || c.Hints != 3 || c.Errors < 3 || c.Reconnects < 1 || c.Resyncs < 3 {
		t.Errorf("counts %+v", c)
	}
}

// A kernel without the monitor: one error, no retry, no hint.
func TestWatchRDMAMonitorUnsupported(t *testing.T) {
	t.Parallel()
	d := &monitorDialer{conns: []Conn{nil}, dialErr: fmt.Errorf("%w: no MONITOR_MODE", ErrRDMAMonitorUnsupported)}
	r := &hintRecorder{ch: make(chan Hint, 1)}
	errc := make(chan error, 1)
	go func() { errc <- WatchRDMAMonitor(context.Background(), r.poke, Options{DialRDMAMonitor: d.dial}) }()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrRDMAMonitorUnsupported) {
			t.Errorf("WatchRDMAMonitor = %v, want ErrRDMAMonitorUnsupported", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchRDMAMonitor did not return")
	}
	if d.dials != 1 || len(r.hints) != 0 {
		t.Errorf("%d dials, hints %v; want 1 dial and no hint", d.dials, r.hints)
	}
}

// FuzzRDMAMonitor: no datagram crashes the parser; every result is either
// hints that name the source or an error, the same every time.
func FuzzRDMAMonitor(f *testing.F) {
	files, err := filepath.Glob("testdata/rdmamon-*/*.hex")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		rel, _ := filepath.Rel("testdata", p)
		for _, dg := range readHex(f, rel) {
			f.Add(dg)
		}
	}
	// Shapes no recording has (TestRDMAMonitorHints).
	f.Add(monitorMsg(monitorType, 1, uint32(0), 2, "rxe9", 3, uint32(1), 102, uint8(3)))
	f.Add(monitorMsg(monitorType, 102, uint8(5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		names := monitorNames{}
		hs, err := names.hints(data)
		if err != nil {
			if hs != nil {
				t.Fatalf("hints and error: %v", err)
			}
			return
		}
		if len(hs) == 0 {
			t.Fatal("no hint and no error")
		}
		for _, h := range hs {
			if h.Source != SourceRDMAMonitor || h.Resync || !strings.HasPrefix(h.Reason, "rdma monitor ") {
				t.Fatalf("hint %+v", h)
			}
		}
		again, err := monitorNames{}.hints(data)
		if err != nil || len(again) != len(hs) {
			t.Fatalf("second parse: %v, %v", again, err)
		}
	})
}
