package udev

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rtnlSubscriber is the seam over vishvananda/netlink's subscriptions.
type rtnlSubscriber struct {
	addr func(chan<- netlink.AddrUpdate, <-chan struct{}, netlink.AddrSubscribeOptions) error
	link func(chan<- netlink.LinkUpdate, <-chan struct{}, netlink.LinkSubscribeOptions) error
}

// WatchRtnetlink subscribes to rtnetlink address (IPv4, IPv6) and link
// changes, existing ones listed first, and pokes a hint for each. After
// subscribing, and after every resubscription, it pokes a Resync hint. When
// an update channel closes or the error callback reports a possible loss
// (ENOBUFS, netlink.ErrDumpInterrupted, an error message, an unparsable
// update) it drops both subscriptions, subscribes again, with backoff when
// that fails or keeps failing, and resyncs. poke must not block. opts.Dial
// is not used.
//
// Without CAP_NET_ADMIN vishvananda/netlink v1.3.1 cannot list existing
// links and addresses (EPERM); the watcher then subscribes without the
// listing and relies on its Resync hint.
//
// It returns ctx.Err() when ctx is done, never otherwise.
func WatchRtnetlink(ctx context.Context, poke func(Hint), opts Options) error {
	return watchRtnetlink(ctx, poke, opts, rtnlSubscriber{
		addr: netlink.AddrSubscribeWithOptions,
		link: netlink.LinkSubscribeWithOptions,
	})
}

func watchRtnetlink(ctx context.Context, poke func(Hint), opts Options, sub rtnlSubscriber) error {
	o := opts.withDefaults()
	st := &o.Stats.rtnetlink
	so := subOptions{
		rcvbuf: o.ReceiveBuffer,
		// vishvananda/netlink leaks the socket when setting the buffer
		// fails, so only ask for SO_RCVBUFFORCE with CAP_NET_ADMIN.
		force:        hasNetAdmin(),
		listExisting: true,
	}
	s := stream{
		source: SourceRtnetlink,
		first:  "rtnetlink subscribed",
		poke:   poke,
		st:     st,
		b:      backoff.Backoff{Min: o.MinBackoff, Max: o.MaxBackoff},
	}
	// A failed subscription is not marked notConnected: it counts as a
	// renewal, like a session that ended at once.
	return resubscribe(ctx, s, func(ctx context.Context, resync func()) error {
		err := rtnlSession(ctx, poke, so, sub, st, resync)
		if errors.Is(err, unix.EPERM) {
			switch {
			case so.force:
				// CAP_NET_ADMIN in a user namespace is not enough.
				so.force = false
			case so.listExisting:
				// vishvananda/netlink v1.3.1 sends the listing request to
				// the multicast group, which needs CAP_NET_ADMIN. The
				// Resync hint already makes the reconciler read everything.
				so.listExisting = false
			}
		}
		return err
	})
}

type subOptions struct {
	rcvbuf              int
	force, listExisting bool
}

// ignorable reports error callbacks after which no update was lost:
// vishvananda/netlink drops a message from another socket and goes on. Any
// root process listing links or addresses the way vishvananda/netlink does
// sends its request to the multicast group, so this happens in normal use.
func ignorable(err error) bool {
	return strings.HasPrefix(err.Error(), "Wrong sender portid")
}

// rtnlSession runs one pair of subscriptions until one fails or ctx is done,
// and returns only once both subscription goroutines have ended. It calls
// resync once both are subscribed.
func rtnlSession(ctx context.Context, poke func(Hint), so subOptions, sub rtnlSubscriber, st *counters, resync func()) error {
	done := make(chan struct{})
	errc := make(chan error, 1)
	onError := func(kind string, err error) {
		if ignorable(err) {
			st.errors.Add(1)
			return
		}
		select {
		case errc <- fmt.Errorf("rtnetlink %s subscription: %w", kind, err):
		default:
		}
	}
	var addrs chan netlink.AddrUpdate
	var links chan netlink.LinkUpdate
	defer func() {
		close(done)
		// The subscription goroutines send blocking; drain until they close.
		for addrs != nil || links != nil {
			select {
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
				}
			case _, ok := <-links:
				if !ok {
					links = nil
				}
			}
		}
	}()

	a := make(chan netlink.AddrUpdate, 64)
	if err := sub.addr(a, done, netlink.AddrSubscribeOptions{
		ErrorCallback:          func(err error) { onError("address", err) },
		ListExisting:           so.listExisting,
		ReceiveBufferSize:      so.rcvbuf,
		ReceiveBufferForceSize: so.force,
	}); err != nil {
		return fmt.Errorf("rtnetlink address subscription: %w", err)
	}
	addrs = a
	l := make(chan netlink.LinkUpdate, 64)
	if err := sub.link(l, done, netlink.LinkSubscribeOptions{
		ErrorCallback:          func(err error) { onError("link", err) },
		ListExisting:           so.listExisting,
		ReceiveBufferSize:      so.rcvbuf,
		ReceiveBufferForceSize: so.force,
	}); err != nil {
		return fmt.Errorf("rtnetlink link subscription: %w", err)
	}
	links = l

	resync()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			// netlink.ErrDumpInterrupted lands here too: the listing may be
			// inconsistent, so retry it like any other failure.
			return err
		case u, ok := <-addrs:
			if !ok {
				addrs = nil
				return errors.New("rtnetlink address subscription: closed")
			}
			st.events.Add(1)
			st.hints.Add(1)
			poke(Hint{Source: SourceRtnetlink, Reason: addrReason(u)})
		case u, ok := <-links:
			if !ok {
				links = nil
				return errors.New("rtnetlink link subscription: closed")
			}
			st.events.Add(1)
			st.hints.Add(1)
			poke(Hint{Source: SourceRtnetlink, Reason: linkReason(u)})
		}
	}
}

func addrReason(u netlink.AddrUpdate) string {
	verb := "del"
	if u.NewAddr {
		verb = "new"
	}
	return fmt.Sprintf("address %s %s ifindex %d", verb, u.LinkAddress.String(), u.LinkIndex)
}

func linkReason(u netlink.LinkUpdate) string {
	verb := "new"
	if u.Header.Type == unix.RTM_DELLINK {
		verb = "del"
	}
	if u.Link == nil || u.Link.Attrs() == nil {
		return fmt.Sprintf("link %s ifindex %d", verb, u.Index)
	}
	a := u.Link.Attrs()
	return fmt.Sprintf("link %s %s ifindex %d %s", verb, a.Name, a.Index, a.OperState)
}

// hasNetAdmin reports whether CAP_NET_ADMIN is effective (needed for
// SO_RCVBUFFORCE). In a user namespace it may be true while the kernel still
// refuses with EPERM; the watcher then falls back to SO_RCVBUF.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) != 0
}
