package udev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fakeSub is one scripted subscription: it sends updates, then waits for
// gate (if set), then fails the way it is told, then behaves like
// vishvananda/netlink: the channel closes once done is closed.
type fakeSub[U any] struct {
	updates []U
	gate    chan struct{}
	fail    string // "", "callback", "close", "subscribe"
	err     error  // for "callback" and "subscribe"
}

type fakeRtnl struct {
	wg        sync.WaitGroup
	mu        sync.Mutex
	addrs     []fakeSub[netlink.AddrUpdate]
	links     []fakeSub[netlink.LinkUpdate]
	addrCalls int
	linkCalls int
	badOpts   []string
	listing   []bool // ListExisting of each link subscription
}

func runFake[U any](f *fakeRtnl, s fakeSub[U], ch chan<- U, done <-chan struct{}, cb func(error)) error {
	if s.fail == "subscribe" {
		return s.err
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(ch)
		for _, u := range s.updates {
			select {
			case ch <- u:
			case <-done:
				return
			}
		}
		if s.gate != nil {
			select {
			case <-s.gate:
			case <-done:
				return
			}
		}
		switch s.fail {
		case "close":
			return
		case "callback":
			cb(s.err)
		}
		<-done
	}()
	return nil
}

func (f *fakeRtnl) subscriber() rtnlSubscriber {
	return rtnlSubscriber{
		addr: func(ch chan<- netlink.AddrUpdate, done <-chan struct{}, o netlink.AddrSubscribeOptions) error {
			f.mu.Lock()
			f.addrCalls++
			if o.ErrorCallback == nil || o.ReceiveBufferSize == 0 {
				f.badOpts = append(f.badOpts, "addr")
			}
			var s fakeSub[netlink.AddrUpdate]
			if len(f.addrs) > 0 {
				s, f.addrs = f.addrs[0], f.addrs[1:]
			}
			f.mu.Unlock()
			return runFake(f, s, ch, done, o.ErrorCallback)
		},
		link: func(ch chan<- netlink.LinkUpdate, done <-chan struct{}, o netlink.LinkSubscribeOptions) error {
			f.mu.Lock()
			f.linkCalls++
			if o.ErrorCallback == nil || o.ReceiveBufferSize == 0 {
				f.badOpts = append(f.badOpts, "link")
			}
			f.listing = append(f.listing, o.ListExisting)
			var s fakeSub[netlink.LinkUpdate]
			if len(f.links) > 0 {
				s, f.links = f.links[0], f.links[1:]
			}
			f.mu.Unlock()
			return runFake(f, s, ch, done, o.ErrorCallback)
		},
	}
}

func TestWatchRtnetlinkResubscribe(t *testing.T) {
	t.Parallel()
	testResubscribe(t, netlink.ErrDumpInterrupted)
}

// An overrun rtnetlink socket (ENOBUFS, events lost) resubscribes and
// resyncs the same way.
func TestWatchRtnetlinkENOBUFS(t *testing.T) {
	t.Parallel()
	testResubscribe(t, unix.ENOBUFS)
}

func testResubscribe(t *testing.T, cbErr error) {
	gate := make(chan struct{})
	f := &fakeRtnl{
		addrs: []fakeSub[netlink.AddrUpdate]{
			{updates: []netlink.AddrUpdate{{
				LinkAddress: net.IPNet{IP: net.IPv4(192, 0, 2, 1), Mask: net.CIDRMask(24, 32)},
				LinkIndex:   4, NewAddr: true,
			}}},
			{fail: "close"},
		},
		links: []fakeSub[netlink.LinkUpdate]{
			{
				updates: []netlink.LinkUpdate{{
					Header: unix.NlMsghdr{Type: unix.RTM_NEWLINK},
					Link:   &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0", Index: 4, OperState: netlink.OperUp}},
				}},
				gate: gate, fail: "callback", err: cbErr,
			},
			{},
			{updates: []netlink.LinkUpdate{{
				Header: unix.NlMsghdr{Type: unix.RTM_DELLINK},
				Link:   &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0", Index: 4}},
			}}},
		},
	}
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- watchRtnetlink(ctx, poke, Options{Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: time.Hour}, f.subscriber())
	}()

	got := nextHints(t, hints, 3)
	if diff := cmp.Diff(Hint{Source: SourceRtnetlink, Reason: "rtnetlink subscribed", Resync: true}, got[0]); diff != "" {
		t.Errorf("first hint (-want +got):\n%s", diff)
	}
	var reasons []string
	for _, h := range got[1:] {
		reasons = append(reasons, h.Reason)
	}
	wantReasons := map[string]bool{"address new 192.0.2.1/24 ifindex 4": true, "link new veth0 ifindex 4 up": true}
	for _, r := range reasons {
		if !wantReasons[r] {
			t.Errorf("unexpected hint %q, want %v", r, wantReasons)
		}
	}
	close(gate) // now the link subscription reports an interrupted dump

	got = nextHints(t, hints, 3)
	want := []Hint{
		{Source: SourceRtnetlink, Reason: "resync after rtnetlink link subscription: " + cbErr.Error(), Resync: true},
		{Source: SourceRtnetlink, Reason: "resync after rtnetlink address subscription: closed", Resync: true},
		{Source: SourceRtnetlink, Reason: "link del veth0 ifindex 4 unknown"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hints after failures (-want +got):\n%s", diff)
	}

	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("watchRtnetlink = %v, want context.Canceled", err)
	}
	stopped := make(chan struct{})
	go func() { f.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		t.Error("subscription goroutines still running after return")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrCalls != 3 || f.linkCalls != 3 {
		t.Errorf("subscriptions: %d addr, %d link, want 3 each", f.addrCalls, f.linkCalls)
	}
	if len(f.badOpts) > 0 {
		t.Errorf("subscribed without ErrorCallback or buffer size: %v", f.badOpts)
	}
	if diff := cmp.Diff([]bool{true, true, true}, f.listing); diff != "" {
		t.Errorf("ListExisting (-want +got):\n%s", diff)
	}
	wantStats := Counts{Events: 3, Hints: 3, Errors: 2, Reconnects: 2, Resyncs: 3}
	if diff := cmp.Diff(wantStats, stats.Snapshot().Rtnetlink); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestWatchRtnetlinkSubscribeFails(t *testing.T) {
	t.Parallel()
	f := &fakeRtnl{
		// The address subscription works, the link one fails twice: the
		// address subscription of each failed session must be torn down.
		links: []fakeSub[netlink.LinkUpdate]{
			{fail: "subscribe", err: unix.EMFILE},
			{fail: "subscribe", err: unix.EMFILE},
		},
	}
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- watchRtnetlink(ctx, poke, Options{Stats: &stats, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}, f.subscriber())
	}()
	got := nextHints(t, hints, 1)
	want := Hint{Source: SourceRtnetlink, Reason: "resync after rtnetlink link subscription: too many open files", Resync: true}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("hint (-want +got):\n%s", diff)
	}
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("watchRtnetlink = %v, want context.Canceled", err)
	}
	f.wg.Wait()
	if s := stats.Snapshot().Rtnetlink; s.Errors != 2 || s.Resyncs != 1 {
		t.Errorf("stats = %+v, want 2 errors, 1 resync", s)
	}
}

func TestWatchRtnetlinkListingNotPermitted(t *testing.T) {
	t.Parallel()
	f := &fakeRtnl{
		links: []fakeSub[netlink.LinkUpdate]{
			{fail: "subscribe", err: unix.EPERM},
			{fail: "subscribe", err: unix.EPERM},
		},
	}
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- watchRtnetlink(ctx, poke, Options{MinBackoff: time.Millisecond}, f.subscriber())
	}()
	got := nextHints(t, hints, 1)
	want := Hint{Source: SourceRtnetlink, Reason: "resync after rtnetlink link subscription: operation not permitted", Resync: true}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("hint (-want +got):\n%s", diff)
	}
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("watchRtnetlink = %v, want context.Canceled", err)
	}
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	// With CAP_NET_ADMIN, SO_RCVBUFFORCE goes first, then the listing;
	// without it (a normal user) the listing goes at once.
	if n := len(f.listing); n != 3 || f.listing[2] {
		t.Errorf("ListExisting per link subscription = %v, want it dropped after EPERM", f.listing)
	}
}

func TestIgnorable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("Wrong sender portid 4242, expected 0"), true},
		{fmt.Errorf("rtnetlink link subscription: %w", errors.New("Wrong sender portid 4242, expected 0")), false},
		{errors.New("Receive failed: no buffer space available"), false},
		{netlink.ErrDumpInterrupted, false},
		{errors.New("error message: no buffer space available"), false},
	}
	for _, tt := range tests {
		if got := ignorable(tt.err); got != tt.want {
			t.Errorf("ignorable(%q) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestWatchRtnetlinkLive subscribes for real; it needs no privilege on a
// normal Linux host and skips where netlink is refused.
func TestWatchRtnetlinkLive(t *testing.T) {
	t.Parallel()
	if _, err := netlink.LinkByName("lo"); err != nil {
		t.Skipf("no rtnetlink here: %v", err)
	}
	var stats Stats
	hints, poke := collector(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- WatchRtnetlink(ctx, poke, Options{Stats: &stats}) }()
	first := nextHints(t, hints, 1)[0]
	if !first.Resync || first.Source != SourceRtnetlink {
		t.Errorf("first hint = %+v, want a rtnetlink resync", first)
	}
	if first.Reason == "rtnetlink subscribed" {
		// The listing of existing links includes lo.
		timeout := time.After(5 * time.Second)
		for found := false; !found; {
			select {
			case h := <-hints:
				found = strings.HasPrefix(h.Reason, "link new lo ")
			case <-timeout:
				t.Fatal("no hint for lo from the link listing")
			}
		}
	} else {
		t.Logf("subscribed without the listing: %s", first.Reason)
	}
	start := time.Now()
	cancel()
	if err := waitReturn(t, errc, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchRtnetlink = %v, want context.Canceled", err)
	}
	t.Logf("returned %v after cancel; stats %+v", time.Since(start), stats.Snapshot().Rtnetlink)
}
