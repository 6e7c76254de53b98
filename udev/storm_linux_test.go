package udev

// Event storms (issue 5): 10,000 uevents in one burst, then ENOBUFS, through
// WatchUevents with a fake socket; with and without a reconciler consuming
// the pokes. See RELIABILITY.md.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

const stormSize = 10000

// stormDatagram builds a kernel uevent datagram.
func stormDatagram(seq int, action, subsystem, devpath string, extra ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=%s\x00", action, devpath, action, devpath, subsystem)
	for _, e := range extra {
		b.WriteString(e + "\x00")
	}
	fmt.Fprintf(&b, "SEQNUM=%d\x00", seq)
	return []byte(b.String())
}

// stormEvents returns n datagrams, about half of them relevant, with an
// infiniband remove/add of rxe0 at resetAt and resetAt+1, and how many are
// relevant.
func stormEvents(n, resetAt int) (msgs [][]byte, relevant int) {
	for i := range n {
		var m []byte
		switch {
		case i == resetAt:
			m = stormDatagram(i, "remove", "infiniband", "/devices/virtual/infiniband/rxe0", "NAME=rxe0")
		case i == resetAt+1:
			m = stormDatagram(i, "add", "infiniband", "/devices/virtual/infiniband/rxe0", "NAME=rxe0")
		case i%6 == 0:
			m = stormDatagram(i, "add", "infiniband", fmt.Sprintf("/devices/virtual/infiniband/rxe%d", i%50), fmt.Sprintf("NAME=rxe%d", i%50))
		case i%6 == 1:
			m = stormDatagram(i, "add", "infiniband_verbs", "/devices/virtual/infiniband_verbs/uverbs0")
		case i%6 == 2:
			m = stormDatagram(i, "move", "net", "/devices/virtual/net/veth9", "DEVPATH_OLD=/devices/virtual/net/veth8", "INTERFACE=veth9", "IFINDEX=9")
		case i%6 == 3:
			m = stormDatagram(i, "change", "infiniband", "/devices/virtual/infiniband/rxe1", "NAME=rxe1")
		case i%6 == 4:
			m = stormDatagram(i, "remove", "net", "/devices/virtual/net/veth7", "INTERFACE=veth7", "IFINDEX=7")
		default:
			m = stormDatagram(i, "add", "module", "/module/rdma_rxe")
		}
		ev, err := ParseUevent(m)
		if err != nil {
			panic(err)
		}
		if _, ok := Relevant(ev); ok {
			relevant++
		}
		msgs = append(msgs, m)
	}
	return msgs, relevant
}

// stormConn returns its datagrams as fast as they are read, then end.
type stormConn struct {
	msgs   [][]byte
	before func(i int) // runs before datagram i is returned
	end    error
	i      int
	done   chan struct{} // closed when end is returned
}

func (c *stormConn) ReadMsg() ([]byte, error) {
	switch {
	case c.i < len(c.msgs):
		if c.before != nil {
			c.before(c.i)
		}
		c.i++
		return c.msgs[c.i-1], nil
	case c.i == len(c.msgs):
		c.i++
		close(c.done)
		return nil, c.end
	}
	return nil, errors.New("storm conn: read after the end")
}

func (c *stormConn) Close() error { return nil }

// idleConn is a quiet socket: every read times out after a short wait.
type idleConn struct{ closed chan struct{} }

func (c idleConn) ReadMsg() ([]byte, error) {
	t := time.NewTimer(2 * time.Millisecond)
	defer t.Stop()
	select {
	case <-c.closed:
		return nil, errors.New("idle conn: closed")
	case <-t.C:
		return nil, fmt.Errorf("idle: %w", os.ErrDeadlineExceeded)
	}
}

func (c idleConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

// stormDialer hands out the storm first, then quiet sockets; redialed is
// closed on the second dial.
type stormDialer struct {
	mu       sync.Mutex
	storm    *stormConn
	dials    int
	redialed chan struct{}
}

func (d *stormDialer) dial() (Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	switch d.dials {
	case 1:
		return d.storm, nil
	case 2:
		close(d.redialed)
	}
	return idleConn{closed: make(chan struct{})}, nil
}

// hintRecorder is a poke func that never blocks: a non-blocking send into a
// buffered(1) channel, like the engine's Poke; it records every hint.
type hintRecorder struct {
	mu        sync.Mutex
	hints     []Hint
	ch        chan Hint
	delivered atomic.Int64
	coalesced atomic.Int64
	then      func()
}

func (r *hintRecorder) poke(h Hint) {
	r.mu.Lock()
	r.hints = append(r.hints, h)
	r.mu.Unlock()
	select {
	case r.ch <- h:
		r.delivered.Add(1)
	default:
		r.coalesced.Add(1)
	}
	if r.then != nil {
		r.then()
	}
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-c:
	case <-timeout.C:
		t.Fatalf("%s: not within 10 s — the watcher is blocked", what)
	}
}

// checkStormHints checks the recorded hints against the storm.
func checkStormHints(t *testing.T, r *hintRecorder, relevant int, stats *Stats) {
	t.Helper()
	r.mu.Lock()
	hints := append([]Hint(nil), r.hints...)
	r.mu.Unlock()
	var plain, resyncs int
	for _, h := range hints {
		if h.Resync {
			resyncs++
		} else {
			plain++
		}
	}
	if plain != relevant {
		t.Errorf("%d hints for %d relevant events", plain, relevant)
	}
	if resyncs != 2 {
		t.Errorf("%d resync hints, want 2 (first open, after ENOBUFS): %+v", resyncs, hints)
	}
	last := hints[len(hints)-1]
	if !last.Resync || !strings.Contains(last.Reason, "no buffer space") {
		t.Errorf("last hint %+v, want a resync after ENOBUFS", last)
	}
	if got := r.delivered.Load() + r.coalesced.Load(); got != int64(len(hints)) {
		t.Errorf("%d hints delivered or coalesced, %d poked", got, len(hints))
	}
	c := stats.Snapshot().Uevent
	if c.Events != stormSize || c.Hints != uint64(relevant) || c.Resyncs != 2 || c.Reconnects != 1 {
		t.Errorf("counts %+v, want %d events, %d hints, 2 resyncs, 1 reconnect", c, stormSize, relevant)
	}
	t.Logf("%d datagrams, %d relevant: %d pokes (%d resync), %d delivered, %d coalesced; counts %+v",
		stormSize, relevant, len(hints), resyncs, r.delivered.Load(), r.coalesced.Load(), c)
}

// TestUeventStormNobodyListening: nobody drains the pokes; the watcher must
// still read the whole burst, then reconnect and resync after ENOBUFS.
func TestUeventStormNobodyListening(t *testing.T) {
	t.Parallel()
	msgs, relevant := stormEvents(stormSize, -10)
	d := &stormDialer{storm: &stormConn{msgs: msgs, end: syscall.ENOBUFS, done: make(chan struct{})}, redialed: make(chan struct{})}
	r := &hintRecorder{ch: make(chan Hint, 1)}
	resynced := make(chan struct{})
	var once sync.Once
	r.then = func() {
		r.mu.Lock()
		n := len(r.hints)
		last := r.hints[n-1]
		r.mu.Unlock()
		if n > 1 && last.Resync {
			once.Do(func() { close(resynced) })
		}
	}
	var stats Stats
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- WatchUevents(ctx, r.poke, Options{Dial: d.dial, Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: time.Hour})
	}()
	waitClosed(t, d.storm.done, "storm read")
	waitClosed(t, d.redialed, "reconnect after ENOBUFS")
	waitClosed(t, resynced, "resync hint after ENOBUFS")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents returned %v", err)
	}
	checkStormHints(t, r, relevant, &stats)
	if r.delivered.Load() != 1 {
		t.Errorf("%d hints delivered into an undrained buffered(1) channel, want 1", r.delivered.Load())
	}
}

// TestUeventStormHealsReset: the same storm drives an engine's Run loop
// through Engine.Poke; the RDMA device is reset in the middle of the storm.
// Reconciles coalesce far below the number of events, and the reset is
// healed by the end.
func TestUeventStormHealsReset(t *testing.T) {
	t.Parallel()
	const nqn = "nqn.2024-01.lab:a"
	const iqn = "iqn.2024-01.lab:t"
	const portal = iqn + "/tpgt_1/192.0.2.1:3260"
	k := rdmatest.NewTargetPair(t, nqn, iqn)
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})

	const resetAt = stormSize / 2
	msgs, relevant := stormEvents(stormSize, resetAt)
	var reset atomic.Bool
	storm := &stormConn{msgs: msgs, end: syscall.ENOBUFS, done: make(chan struct{}), before: func(i int) {
		switch i {
		case resetAt:
			k.RemoveDevice("rxe0")
			reset.Store(true)
		case resetAt + 1:
			k.AddDevice("rxe0", 0x11, "veth0")
		}
	}}
	d := &stormDialer{storm: storm, redialed: make(chan struct{})}
	r := &hintRecorder{ch: make(chan Hint, 1), then: e.Poke}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beats := make(chan struct{}, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, func() {
			select {
			case beats <- struct{}{}:
			default:
			}
		})
	}()
	// Let the engine start and see a healthy target first.
	<-beats
	var stats Stats
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- WatchUevents(ctx, r.poke, Options{Dial: d.dial, Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: time.Hour})
	}()
	waitClosed(t, storm.done, "storm read")
	waitClosed(t, d.redialed, "reconnect after ENOBUFS")
	if !reset.Load() {
		t.Fatal("the reset was never injected")
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for !k.Listening("nvmet_rdma", "1") || !k.Listening("ib_isert", portal) {
		select {
		case <-beats:
		case <-timeout.C:
			t.Fatalf("the reset injected mid-storm was not healed within 10 s: %s", k)
		}
	}
	cancel()
	if err := <-watchErr; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents returned %v", err)
	}
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
	checkStormHints(t, r, relevant, &stats)
	st := e.Snapshot().Stats
	t.Logf("%d pokes into Engine.Poke → %d reconciles; rebinds %v", r.delivered.Load()+r.coalesced.Load(), st.Reconciles, st.Rebinds)
	if st.Reconciles*10 > stormSize {
		t.Errorf("%d reconciles for a burst of %d events: pokes are not coalesced", st.Reconciles, stormSize)
	}
	if st.Rebinds[rebind.ResultOK] < 2 {
		t.Errorf("rebinds %v: want the port and the portal rebound", st.Rebinds)
	}
	if m, bad := j.Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("journal left: %v %v", m, bad)
	}
}
