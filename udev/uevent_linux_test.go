package udev

import (
	"bytes"
	"context"
	"errors"
	"github.com/nvmet-rebind/nvmet-rebind/udev/internal/hexfixture"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// readHex returns the datagrams of a testdata/*.hex file (see testdata/README.md).
func readHex(t testing.TB, name string) [][]byte {
	t.Helper()
	return hexfixture.Read(t, filepath.Join("testdata", name))
}

func TestParseUeventFixtures(t *testing.T) {
	t.Parallel()
	rxe := func(action string) Hint { return Hint{Source: SourceUevent, Reason: "infiniband " + action} }
	tests := []struct {
		file      string
		n         int
		want      []Hint
		wantEvent Event // the last datagram
	}{
		{
			file: "s1-uevents-rdma-link-add-rxe0.hex", n: 6,
			want: []Hint{rxe("add rxe0")},
			wantEvent: Event{Action: "add", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe0",
				Name: "rxe0", Seqnum: 731, Env: map[string]string{
					"ACTION": "add", "DEVPATH": "/devices/virtual/infiniband/rxe0", "SUBSYSTEM": "infiniband",
					"NAME": "rxe0", "SEQNUM": "731"}},
		},
		{
			file: "s2-uevents-rdma-link-delete-rxe0.hex", n: 4,
			want: []Hint{rxe("remove rxe0")},
			wantEvent: Event{Action: "remove", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe0",
				Name: "rxe0", Seqnum: 753, Env: map[string]string{
					"ACTION": "remove", "DEVPATH": "/devices/virtual/infiniband/rxe0", "SUBSYSTEM": "infiniband",
					"NAME": "rxe0", "SEQNUM": "753"}},
		},
		{
			file: "s3-uevents-rdma-link-add-siw0.hex", n: 2,
			want: []Hint{rxe("add siw0")},
			wantEvent: Event{Action: "add", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/siw0",
				Name: "siw0", Seqnum: 773, Env: map[string]string{
					"ACTION": "add", "DEVPATH": "/devices/virtual/infiniband/siw0", "SUBSYSTEM": "infiniband",
					"NAME": "siw0", "SEQNUM": "773"}},
		},
		{
			file: "s4-uevents-rdma-link-add-rxe0.hex", n: 4,
			want: []Hint{rxe("add rxe0")},
			wantEvent: Event{Action: "add", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe0",
				Name: "rxe0", Seqnum: 777, Env: map[string]string{
					"ACTION": "add", "DEVPATH": "/devices/virtual/infiniband/rxe0", "SUBSYSTEM": "infiniband",
					"NAME": "rxe0", "SEQNUM": "777"}},
		},
		{
			file: "s1r-uevents-rdma-dev-set-rxe0-name-rxe9.hex", n: 1,
			want: []Hint{rxe("move rxe9 (was rxe0)")},
			wantEvent: Event{Action: "move", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe9",
				DevpathOld: "/devices/virtual/infiniband/rxe0", Name: "rxe9", Seqnum: 748, Env: map[string]string{
					"ACTION": "move", "DEVPATH": "/devices/virtual/infiniband/rxe9", "SUBSYSTEM": "infiniband",
					"DEVPATH_OLD": "/devices/virtual/infiniband/rxe0", "NAME": "rxe9", "SEQNUM": "748"}},
		},
		{
			file: "s1r-uevents-rdma-dev-set-rxe9-name-rxe0.hex", n: 1,
			want: []Hint{rxe("move rxe0 (was rxe9)")},
			wantEvent: Event{Action: "move", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe0",
				DevpathOld: "/devices/virtual/infiniband/rxe9", Name: "rxe0", Seqnum: 749, Env: map[string]string{
					"ACTION": "move", "DEVPATH": "/devices/virtual/infiniband/rxe0", "SUBSYSTEM": "infiniband",
					"DEVPATH_OLD": "/devices/virtual/infiniband/rxe9", "NAME": "rxe0", "SEQNUM": "749"}},
		},
		{file: "s1r-uevents-rdma-link-set-rxe0-name-rxe9.hex", n: 0},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			dgrams := readHex(t, tt.file)
			if len(dgrams) != tt.n {
				t.Fatalf("%d datagrams, want %d", len(dgrams), tt.n)
			}
			var hints []Hint
			var last Event
			for i, d := range dgrams {
				ev, err := ParseUevent(d)
				if err != nil {
					t.Fatalf("datagram %d: %v", i+1, err)
				}
				last = ev
				if h, ok := Relevant(ev); ok {
					hints = append(hints, h)
				}
			}
			if diff := cmp.Diff(tt.want, hints); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
			if tt.n == 0 {
				return
			}
			if diff := cmp.Diff(tt.wantEvent, last); diff != "" {
				t.Errorf("last event (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseUeventSubsystems(t *testing.T) {
	t.Parallel()
	var got []string
	for _, d := range readHex(t, "s1-uevents-rdma-link-add-rxe0.hex") {
		ev, err := ParseUevent(d)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Action+" "+ev.Subsystem+" "+ev.Name)
	}
	want := []string{
		"add module crc32_pclmul",
		"add module crc32_generic",
		"add infiniband_verbs uverbs0",
		"add infiniband_mad umad0",
		"add infiniband_mad issm0",
		"add infiniband rxe0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestParseUeventNet(t *testing.T) {
	t.Parallel()
	msg := []byte("remove@/devices/virtual/net/veth0\x00ACTION=remove\x00DEVPATH=/devices/virtual/net/veth0\x00" +
		"SUBSYSTEM=net\x00INTERFACE=veth0\x00IFINDEX=4\x00SEQNUM=900\x00")
	ev, err := ParseUevent(msg)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := Relevant(ev)
	if diff := cmp.Diff(Hint{Source: SourceUevent, Reason: "net remove veth0"}, h); !ok || diff != "" {
		t.Errorf("Relevant ok=%v (-want +got):\n%s", ok, diff)
	}
}

func TestParseUeventMalformed(t *testing.T) {
	t.Parallel()
	good := "add@/devices/virtual/infiniband/rxe0\x00ACTION=add\x00DEVPATH=/devices/virtual/infiniband/rxe0\x00" +
		"SUBSYSTEM=infiniband\x00NAME=rxe0\x00SEQNUM=731\x00"
	if _, err := ParseUevent([]byte(good)); err != nil {
		t.Fatalf("control case: %v", err)
	}
	tests := map[string]string{
		"nil":                "",
		"NUL only":           "\x00",
		"no at":              "add/devices/x\x00ACTION=add\x00",
		"at after NUL":       "add\x00@/devices/x\x00",
		"no NUL":             "add@/devices/virtual/infiniband/rxe0",
		"not NUL-terminated": strings.TrimSuffix(good, "\x00"),
		"garbage":            "\xff\xfe\x00\x01@@@\x00==\x00",
		"unknown action":     strings.ReplaceAll(good, "add", "frob"),
		"two at":             "add@/a@b\x00ACTION=add\x00DEVPATH=/a@b\x00SUBSYSTEM=net\x00SEQNUM=1\x00",
		"env without equal":  strings.Replace(good, "NAME=rxe0", "NAMErxe0", 1),
		"empty env field":    strings.Replace(good, "NAME=rxe0\x00", "\x00", 1),
		"no subsystem":       strings.Replace(good, "SUBSYSTEM=infiniband\x00", "", 1),
		"no seqnum":          strings.Replace(good, "SEQNUM=731\x00", "", 1),
		"bad seqnum":         strings.Replace(good, "SEQNUM=731", "SEQNUM=x", 1),
		"action mismatch":    strings.Replace(good, "ACTION=add", "ACTION=remove", 1),
		"devpath mismatch":   strings.Replace(good, "DEVPATH=/devices/virtual/infiniband/rxe0", "DEVPATH=/x", 1),
		"relative devpath":   strings.ReplaceAll(good, "/devices/virtual/infiniband/rxe0", "rxe0"),
		"empty devpath":      strings.ReplaceAll(good, "/devices/virtual/infiniband/rxe0", ""),
		"libudev":            "libudev\x00" + strings.Repeat("\xfe", 40) + good,
		"huge":               good + strings.Repeat("X=y\x00", 4096),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := ParseUevent([]byte(in))
			if err == nil {
				t.Fatalf("ParseUevent(%q) = %+v, want an error", in, ev)
			}
			if !strings.HasPrefix(err.Error(), "uevent") {
				t.Errorf("error %q does not name the uevent", err)
			}
		})
	}
}

func FuzzParseUevent(f *testing.F) {
	files, err := filepath.Glob("testdata/*uevents*.hex")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		for _, d := range readHex(f, filepath.Base(file)) {
			f.Add(d)
		}
	}
	f.Add([]byte("add@/a@b\x00ACTION=add\x00DEVPATH=/a@b\x00SUBSYSTEM=net\x00SEQNUM=1\x00"))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe" + strings.Repeat("\x00", 40)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseUevent(b)
		if err != nil {
			return
		}
		head, _, _ := bytes.Cut(b, []byte{0})
		if string(head) != ev.Action+"@"+ev.Devpath {
			t.Errorf("header %q, event %s@%s", head, ev.Action, ev.Devpath)
		}
		if ev.Subsystem == "" || ev.Devpath == "" || ev.Devpath[0] != '/' || ev.Name == "" {
			t.Errorf("incomplete event %+v", ev)
		}
		if h, ok := Relevant(ev); ok && (h.Resync || h.Source != SourceUevent || h.Reason == "") {
			t.Errorf("Relevant(%+v) = %+v", ev, h)
		}
	})
}

// fakeConn replays a script of reads, then reports timeouts like the real
// socket with SO_RCVTIMEO.
type fakeConn struct {
	reads     chan fakeRead
	closeOnce sync.Once
	closed    chan struct{}
}

type fakeRead struct {
	msg []byte
	err error
}

func newFakeConn(reads ...fakeRead) *fakeConn {
	c := &fakeConn{reads: make(chan fakeRead, len(reads)), closed: make(chan struct{})}
	for _, r := range reads {
		c.reads <- r
	}
	return c
}

func datagrams(msgs [][]byte) []fakeRead {
	var out []fakeRead
	for _, m := range msgs {
		out = append(out, fakeRead{msg: m})
	}
	return out
}

func (c *fakeConn) ReadMsg() ([]byte, error) {
	select {
	case <-c.closed:
		return nil, errors.New("fake conn: read after close")
	default:
	}
	t := time.NewTimer(2 * time.Millisecond)
	defer t.Stop()
	select {
	case r := <-c.reads:
		return r.msg, r.err
	case <-t.C:
		return nil, os.ErrDeadlineExceeded
	}
}

func (c *fakeConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// fakeDialer hands out conns in order; an error entry fails that dial.
type fakeDialer struct {
	mu    sync.Mutex
	steps []any // *fakeConn or error
	calls int
}

func (d *fakeDialer) dial() (Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if len(d.steps) == 0 {
		return newFakeConn(), nil
	}
	s := d.steps[0]
	d.steps = d.steps[1:]
	if err, ok := s.(error); ok {
		return nil, err
	}
	return s.(*fakeConn), nil
}

func collector(t *testing.T) (chan Hint, func(Hint)) {
	hints := make(chan Hint, 256)
	return hints, func(h Hint) {
		select {
		case hints <- h:
		default:
			t.Errorf("poke would block on %+v", h)
		}
	}
}

func nextHints(t *testing.T, hints <-chan Hint, n int) []Hint {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	var got []Hint
	for len(got) < n {
		select {
		case h := <-hints:
			got = append(got, h)
		case <-timeout.C:
			t.Fatalf("timed out after %d of %d hints: %+v", len(got), n, got)
		}
	}
	return got
}

func waitReturn(t *testing.T, errc <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(within):
		t.Fatalf("watcher did not return within %v of cancel", within)
		return nil
	}
}

func TestWatchUeventsReconnectAfterENOBUFS(t *testing.T) {
	t.Parallel()
	first := newFakeConn(append(datagrams(readHex(t, "s1-uevents-rdma-link-add-rxe0.hex")),
		fakeRead{err: syscall.ENOBUFS})...)
	second := newFakeConn(datagrams(readHex(t, "s2-uevents-rdma-link-delete-rxe0.hex"))...)
	d := &fakeDialer{steps: []any{first, second}}
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- WatchUevents(ctx, poke, Options{Dial: d.dial, Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: time.Hour})
	}()

	got := nextHints(t, hints, 4)
	want := []Hint{
		{Source: SourceUevent, Reason: "uevent socket open", Resync: true},
		{Source: SourceUevent, Reason: "infiniband add rxe0"},
		{Source: SourceUevent, Reason: "resync after uevent socket: read: no buffer space available", Resync: true},
		{Source: SourceUevent, Reason: "infiniband remove rxe0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hints (-want +got):\n%s", diff)
	}
	select {
	case <-first.closed:
	default:
		t.Error("first conn not closed after ENOBUFS")
	}

	start := time.Now()
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents = %v, want context.Canceled", err)
	}
	t.Logf("returned %v after cancel", time.Since(start))
	select {
	case <-second.closed:
	default:
		t.Error("second conn not closed on return")
	}
	wantStats := Counts{Events: 10, Hints: 2, Errors: 1, Reconnects: 1, Resyncs: 2}
	if diff := cmp.Diff(wantStats, stats.Snapshot().Uevent); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if d.calls != 2 {
		t.Errorf("%d dials, want 2", d.calls)
	}
}

func TestWatchUeventsDialRetry(t *testing.T) {
	t.Parallel()
	dialErr := errors.New("uevent socket: connect: too many open files")
	conn := newFakeConn(datagrams(readHex(t, "s3-uevents-rdma-link-add-siw0.hex"))...)
	d := &fakeDialer{steps: []any{dialErr, dialErr, conn}}
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- WatchUevents(ctx, poke, Options{Dial: d.dial, Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	}()
	got := nextHints(t, hints, 2)
	want := []Hint{
		{Source: SourceUevent, Reason: "resync after " + dialErr.Error(), Resync: true},
		{Source: SourceUevent, Reason: "infiniband add siw0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hints (-want +got):\n%s", diff)
	}
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents = %v, want context.Canceled", err)
	}
	if got := stats.Snapshot().Uevent; got.Errors != 2 || got.Resyncs != 1 || got.Reconnects != 0 {
		t.Errorf("stats = %+v, want 2 errors, 1 resync, 0 reconnects", got)
	}
}

func TestWatchUeventsUnparsableWatchedEvent(t *testing.T) {
	t.Parallel()
	// go-udev splits the header at every '@': device-tree paths break it.
	msg := []byte("add@/devices/platform/soc@0/30be0000.ethernet/net/eth0\x00ACTION=add\x00" +
		"DEVPATH=/devices/platform/soc@0/30be0000.ethernet/net/eth0\x00SUBSYSTEM=net\x00INTERFACE=eth0\x00SEQNUM=5\x00")
	other := []byte("add@/devices/platform/soc@0/30a20000.i2c\x00ACTION=add\x00" +
		"DEVPATH=/devices/platform/soc@0/30a20000.i2c\x00SUBSYSTEM=platform\x00SEQNUM=6\x00")
	conn := newFakeConn(fakeRead{msg: other}, fakeRead{msg: msg})
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- WatchUevents(ctx, poke, Options{Dial: (&fakeDialer{steps: []any{conn}}).dial, Stats: &stats})
	}()
	got := nextHints(t, hints, 2)
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents = %v, want context.Canceled", err)
	}
	if !got[1].Resync || !strings.Contains(got[1].Reason, "soc@0/30be0000.ethernet/net/eth0") {
		t.Errorf("second hint = %+v, want a resync naming the net event", got[1])
	}
	if s := stats.Snapshot().Uevent; s.Errors != 2 || s.Resyncs != 2 || s.Events != 2 {
		t.Errorf("stats = %+v, want 2 events, 2 errors, 2 resyncs", s)
	}
}

func TestWatchUeventsCancelledBeforeDial(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := &fakeDialer{}
	_, poke := collector(t)
	if err := WatchUevents(ctx, poke, Options{Dial: d.dial}); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents = %v, want context.Canceled", err)
	}
	if d.calls != 0 {
		t.Errorf("%d dials after cancel", d.calls)
	}
}

// TestUeventSocketLive opens the real kernel uevent socket; it needs no
// privilege on a normal Linux host and skips where sockets are refused.
func TestUeventSocketLive(t *testing.T) {
	t.Parallel()
	conn, err := dialUevents(1 << 20)
	if err != nil {
		t.Skipf("cannot open the uevent socket here: %v", err)
	}
	uc, ok := conn.(*ueventConn)
	if !ok {
		t.Fatalf("dialUevents returned %T", conn)
	}
	n, err := unix.GetsockoptInt(int(uc.f.Fd()), unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Errorf("get SO_RCVBUF: %v", err)
	}
	t.Logf("SO_RCVBUF %d (asked 1 MiB; the kernel doubles it, rmem_max caps it without CAP_NET_ADMIN)", n)
	// A blocked read returns at once when interrupted: no polling.
	go func() { time.Sleep(50 * time.Millisecond); uc.Interrupt() }()
	if _, err := conn.ReadMsg(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read: %v", err)
	}
	if err := conn.Close(); err != nil {
		t.Errorf("close: %v", err)
	}

	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- WatchUevents(ctx, poke, Options{}) }()
	got := nextHints(t, hints, 1)
	if diff := cmp.Diff(Hint{Source: SourceUevent, Reason: "uevent socket open", Resync: true}, got[0]); diff != "" {
		t.Errorf("first hint (-want +got):\n%s", diff)
	}
	start := time.Now()
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchUevents = %v, want context.Canceled", err)
	}
	t.Logf("returned %v after cancel", time.Since(start))
}
