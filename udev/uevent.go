package udev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"
)

// Conn is the kernel uevent socket, small enough to fake.
type Conn interface {
	// ReadMsg returns one datagram. When nothing arrived within a short poll
	// interval it returns an error matching os.ErrDeadlineExceeded, so that
	// the reader can notice a cancelled context.
	ReadMsg() ([]byte, error)
	Close() error
}

// WatchUevents reads kernel uevents and pokes a hint for each relevant one
// (see Relevant). After opening the socket, and after every reconnect, it
// pokes a Resync hint. On a read error (ENOBUFS when the receive buffer
// overflowed, included) it closes the socket, reopens it, with backoff when
// that fails, and resyncs. poke must not block.
//
// It returns ctx.Err() (joined with a close error, if any) when ctx is done,
// or an error wrapping errors.ErrUnsupported on systems without uevents;
// never otherwise.
func WatchUevents(ctx context.Context, poke func(Hint), opts Options) error {
	o := opts.withDefaults()
	if o.Dial == nil {
		rcvbuf := o.ReceiveBuffer
		o.Dial = func() (Conn, error) { return dialUevents(rcvbuf) }
	}
	st := &o.Stats.uevent
	s := stream{
		source: SourceUevent,
		first:  "uevent socket open",
		poke:   poke,
		st:     st,
		b:      backoff.Backoff{Min: o.MinBackoff, Max: o.MaxBackoff},
	}
	return resubscribe(ctx, s, func(ctx context.Context, resync func()) error {
		conn, err := o.Dial()
		if errors.Is(err, errors.ErrUnsupported) {
			return fatal(err)
		}
		if err != nil {
			return notConnected(err)
		}
		resync()
		readErr := readUevents(ctx, conn, poke, st)
		closeErr := conn.Close()
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), closeErr)
		}
		return errors.Join(readErr, closeErr)
	})
}

// readUevents returns on the first read error, or nil when ctx is done.
func readUevents(ctx context.Context, conn Conn, poke func(Hint), st *counters) error {
	// A connection that can interrupt its blocked read is woken on cancel
	// (the real socket); others return os.ErrDeadlineExceeded by themselves.
	if in, ok := conn.(interface{ Interrupt() }); ok {
		stop := context.AfterFunc(ctx, in.Interrupt)
		defer stop()
	}
	for ctx.Err() == nil {
		msg, err := conn.ReadMsg()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return fmt.Errorf("uevent socket: read: %w", err)
		}
		st.events.Add(1)
		ev, err := ParseUevent(msg)
		if err != nil {
			st.errors.Add(1)
			// An event of a watched subsystem that we cannot parse (go-udev
			// rejects values containing '=') must not be lost.
			if watchedSubsystem(msg) {
				st.resyncs.Add(1)
				poke(Hint{Source: SourceUevent, Reason: fmt.Sprintf("resync after %v", err), Resync: true})
			}
			continue
		}
		if h, ok := Relevant(ev); ok {
			st.hints.Add(1)
			poke(h)
		}
	}
	return nil
}

func watchedSubsystem(msg []byte) bool {
	return bytes.Contains(msg, []byte("\x00SUBSYSTEM=infiniband\x00")) ||
		bytes.Contains(msg, []byte("\x00SUBSYSTEM=net\x00")) ||
		bytes.Contains(msg, []byte("\x00SUBSYSTEM=block\x00"))
}
