package udev

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"
)

// stream is one event source as resubscribe sees it.
type stream struct {
	source string // Hint.Source of the Resync hints
	first  string // Hint.Reason of the Resync hint after the first connect
	poke   func(Hint)
	st     *counters
	// b spaces the attempts. A session that lived b.Max or longer was
	// healthy: the next one starts at once and b starts over.
	b backoff.Backoff

	// Tests replace these; nil means time.Now and wait.
	now  func() time.Time
	wait func(context.Context, time.Duration) bool
}

// resubscribe is the reconnect policy of both watchers. It runs session
// again and again until ctx is done. A session connects, calls resync once
// connected, reads until it fails and returns why. resync counts a resync
// and pokes a Resync hint: s.first the first time, else "resync after" the
// error that ended the previous attempt, since events may have been lost in
// between.
//
// What a session returns decides what happens next:
//   - fatal(err): resubscribe returns err.
//   - notConnected(err): nothing was opened; count an error and retry after
//     the next, longer backoff.
//   - anything else, nil included: the session ended; count an error and a
//     reconnect, and retry at once if it was healthy (see stream.b), else
//     after the next backoff.
//
// It returns ctx.Err(), or the session's error when that wraps ctx.Err()
// (to join a close error), once ctx is done; a fatal error; never otherwise.
func resubscribe(ctx context.Context, s stream, session func(ctx context.Context, resync func()) error) error {
	if s.now == nil {
		s.now = time.Now
	}
	if s.wait == nil {
		s.wait = wait
	}
	reason := s.first
	resync := func() {
		s.st.resyncs.Add(1)
		s.poke(Hint{Source: s.source, Reason: reason, Resync: true})
	}
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start := s.now()
		err := session(ctx, resync)
		var fe fatalError
		if errors.As(err, &fe) {
			return fe.err
		}
		var nc notConnectedError
		if errors.As(err, &nc) {
			s.st.errors.Add(1)
			reason = fmt.Sprintf("resync after %v", nc.err)
			if !s.wait(ctx, s.b.Next()) {
				return ctx.Err()
			}
			continue
		}
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return err
			}
			return ctx.Err()
		}
		if err == nil {
			err = fmt.Errorf("%s session: ended without an error", s.source)
		}
		s.st.errors.Add(1)
		s.st.reconnects.Add(1)
		reason = fmt.Sprintf("resync after %v", err)
		if s.now().Sub(start) >= s.b.Max {
			s.b.Reset()
		} else if !s.wait(ctx, s.b.Next()) {
			return ctx.Err()
		}
	}
}

// fatal marks a session error after which retrying is pointless.
func fatal(err error) error { return fatalError{err} }

type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// notConnected marks a session error from before anything was opened.
func notConnected(err error) error { return notConnectedError{err} }

type notConnectedError struct{ err error }

func (e notConnectedError) Error() string { return e.err.Error() }
func (e notConnectedError) Unwrap() error { return e.err }

// wait returns false when ctx is done first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
