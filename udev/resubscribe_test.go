package udev

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"

	"github.com/google/go-cmp/cmp"
)

// attempt is one scripted session.
type attempt struct {
	connect bool          // call resync
	lived   time.Duration // advance the fake clock by this much
	err     error
}

// harness drives resubscribe with a fake clock and a wait that only
// records. Its fields are written by the resubscribe goroutine; read them
// after blocked is closed or resubscribe returned.
type harness struct {
	attempts []attempt
	clock    time.Time
	calls    int
	waits    []time.Duration
	hints    []Hint
	st       counters
	// After the attempts, the session connects, closes blocked and
	// returns ctx.Err() once ctx is done.
	blocked chan struct{}
}

const (
	testMin = time.Millisecond
	testMax = 8 * time.Millisecond
)

func newHarness(attempts ...attempt) *harness {
	return &harness{attempts: attempts, clock: time.Unix(1000, 0), blocked: make(chan struct{})}
}

func (h *harness) stream() stream {
	return stream{
		source: "test",
		first:  "test open",
		poke:   func(x Hint) { h.hints = append(h.hints, x) },
		st:     &h.st,
		b:      backoff.Backoff{Min: testMin, Max: testMax},
		now:    func() time.Time { return h.clock },
		wait: func(ctx context.Context, d time.Duration) bool {
			h.waits = append(h.waits, d)
			return ctx.Err() == nil
		},
	}
}

func (h *harness) session(ctx context.Context, resync func()) error {
	h.calls++
	if h.calls <= len(h.attempts) {
		a := h.attempts[h.calls-1]
		if a.connect {
			resync()
		}
		h.clock = h.clock.Add(a.lived)
		return a.err
	}
	resync()
	close(h.blocked)
	<-ctx.Done()
	return ctx.Err()
}

// start runs resubscribe in a goroutine and returns its result channel.
func (h *harness) start(ctx context.Context, s stream) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- resubscribe(ctx, s, h.session) }()
	return errc
}

func returned(t *testing.T, errc <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(within):
		t.Fatalf("resubscribe did not return within %v", within)
		return nil
	}
}

func resyncs(reasons ...string) []Hint {
	var out []Hint
	for _, r := range reasons {
		out = append(out, Hint{Source: "test", Reason: r, Resync: true})
	}
	return out
}

func TestResubscribe(t *testing.T) {
	t.Parallel()
	e := func(i int) error { return fmt.Errorf("test socket: read %d: boom", i) }
	ended := func(i int, lived time.Duration) attempt { return attempt{connect: true, lived: lived, err: e(i)} }
	ms := time.Millisecond
	tests := []struct {
		name      string
		attempts  []attempt
		wantWaits []time.Duration
		wantHints []Hint
		want      Counts
	}{
		{
			name:      "connects",
			wantHints: resyncs("test open"),
			want:      Counts{Resyncs: 1},
		},
		{
			name:      "short sessions double the backoff up to max",
			attempts:  []attempt{ended(1, 0), ended(2, ms), ended(3, 0), ended(4, 7*ms), ended(5, 0)},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 4 * ms, 8 * ms, 8 * ms},
			wantHints: resyncs("test open", "resync after "+e(1).Error(), "resync after "+e(2).Error(),
				"resync after "+e(3).Error(), "resync after "+e(4).Error(), "resync after "+e(5).Error()),
			want: Counts{Errors: 5, Reconnects: 5, Resyncs: 6},
		},
		{
			name:      "a healthy session reconnects at once and resets the backoff",
			attempts:  []attempt{ended(1, 0), ended(2, 0), ended(3, testMax), ended(4, 0), ended(5, time.Hour)},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 1 * ms},
			wantHints: resyncs("test open", "resync after "+e(1).Error(), "resync after "+e(2).Error(),
				"resync after "+e(3).Error(), "resync after "+e(4).Error(), "resync after "+e(5).Error()),
			want: Counts{Errors: 5, Reconnects: 5, Resyncs: 6},
		},
		{
			name: "failed opens back off without a reconnect; the last error is the reason",
			attempts: []attempt{
				{err: notConnected(e(1)), lived: time.Hour}, // a slow failed open is no healthy session
				{err: notConnected(e(2))},
				{err: notConnected(e(3))},
			},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 4 * ms},
			wantHints: resyncs("resync after " + e(3).Error()),
			want:      Counts{Errors: 3, Resyncs: 1},
		},
		{
			name:      "a lost connection, then failed opens",
			attempts:  []attempt{ended(1, 0), {err: notConnected(e(2))}, {err: notConnected(e(3))}},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 4 * ms},
			wantHints: resyncs("test open", "resync after "+e(3).Error()),
			want:      Counts{Errors: 3, Reconnects: 1, Resyncs: 2},
		},
		{
			name:      "a healthy session, then a failed open starts the backoff over",
			attempts:  []attempt{ended(1, 0), ended(2, 0), ended(3, testMax), {err: notConnected(e(4))}},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 1 * ms},
			wantHints: resyncs("test open", "resync after "+e(1).Error(), "resync after "+e(2).Error(),
				"resync after "+e(4).Error()),
			want: Counts{Errors: 4, Reconnects: 3, Resyncs: 4},
		},
		{
			// rtnetlink: a failed subscription is a renewal.
			name:      "an unmarked failure before connecting counts a reconnect",
			attempts:  []attempt{{err: e(1)}, {err: e(2)}},
			wantWaits: []time.Duration{1 * ms, 2 * ms},
			wantHints: resyncs("resync after " + e(2).Error()),
			want:      Counts{Errors: 2, Reconnects: 2, Resyncs: 1},
		},
		{
			name:      "a session ending without an error still resubscribes",
			attempts:  []attempt{{connect: true}},
			wantWaits: []time.Duration{1 * ms},
			wantHints: resyncs("test open", "resync after test session: ended without an error"),
			want:      Counts{Errors: 1, Reconnects: 1, Resyncs: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(tt.attempts...)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := h.start(ctx, h.stream())
			select {
			case <-h.blocked:
			case err := <-errc:
				t.Fatalf("resubscribe returned %v before ctx was done", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the session after the script never ran")
			}
			cancel()
			if err := returned(t, errc, time.Second); err != context.Canceled {
				t.Errorf("resubscribe = %v, want context.Canceled", err)
			}
			if h.calls != len(tt.attempts)+1 {
				t.Errorf("%d sessions, want %d", h.calls, len(tt.attempts)+1)
			}
			if diff := cmp.Diff(tt.wantWaits, h.waits); diff != "" {
				t.Errorf("backoff waits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantHints, h.hints); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, h.st.load()); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResubscribeFatal(t *testing.T) {
	t.Parallel()
	unsupported := fmt.Errorf("test socket on plan9: %w", errors.ErrUnsupported)
	h := newHarness(attempt{connect: true, err: errors.New("read: boom")}, attempt{err: notConnected(errors.New("dial: boom"))},
		attempt{err: fatal(unsupported)})
	err := returned(t, h.start(t.Context(), h.stream()), 5*time.Second)
	if err != unsupported {
		t.Errorf("resubscribe = %v, want the unwrapped %v", err, unsupported)
	}
	if h.calls != 3 {
		t.Errorf("%d sessions, want 3", h.calls)
	}
	if diff := cmp.Diff([]time.Duration{testMin, 2 * testMin}, h.waits); diff != "" {
		t.Errorf("backoff waits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Counts{Errors: 2, Reconnects: 1, Resyncs: 1}, h.st.load()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestResubscribeCancel(t *testing.T) {
	t.Parallel()
	closeErr := errors.New("test socket: close: boom")
	tests := []struct {
		name string
		// session runs with cancel in reach; it may also close entered.
		session  func(ctx context.Context, cancel context.CancelFunc, resync func()) error
		realWait bool // a real backoff of an hour, closing entered when it starts
		wantErr  []error
		want     Counts
	}{
		{
			name: "during a session",
			session: func(ctx context.Context, cancel context.CancelFunc, resync func()) error {
				resync()
				cancel()
				return ctx.Err()
			},
			wantErr: []error{context.Canceled},
			want:    Counts{Resyncs: 1},
		},
		{
			name: "a session's cleanup error is kept",
			session: func(ctx context.Context, cancel context.CancelFunc, resync func()) error {
				resync()
				cancel()
				return errors.Join(ctx.Err(), closeErr)
			},
			wantErr: []error{context.Canceled, closeErr},
			want:    Counts{Resyncs: 1},
		},
		{
			name: "a failure racing the cancel is not counted",
			session: func(ctx context.Context, cancel context.CancelFunc, resync func()) error {
				resync()
				cancel()
				return errors.New("test socket: read: boom")
			},
			wantErr: []error{context.Canceled},
			want:    Counts{Resyncs: 1},
		},
		{
			name: "during the backoff after a lost connection",
			session: func(ctx context.Context, cancel context.CancelFunc, resync func()) error {
				resync()
				return errors.New("test socket: read: boom")
			},
			realWait: true,
			wantErr:  []error{context.Canceled},
			want:     Counts{Errors: 1, Reconnects: 1, Resyncs: 1},
		},
		{
			name: "during the backoff after a failed open",
			session: func(ctx context.Context, cancel context.CancelFunc, resync func()) error {
				return notConnected(errors.New("test socket: dial: boom"))
			},
			realWait: true,
			wantErr:  []error{context.Canceled},
			want:     Counts{Errors: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s := h.stream()
			entered := make(chan struct{})
			if tt.realWait {
				s.b = backoff.Backoff{Min: time.Hour, Max: time.Hour}
				s.wait = func(ctx context.Context, d time.Duration) bool {
					close(entered)
					return wait(ctx, d)
				}
			}
			calls := 0
			errc := make(chan error, 1)
			go func() {
				errc <- resubscribe(ctx, s, func(ctx context.Context, resync func()) error {
					calls++
					return tt.session(ctx, cancel, resync)
				})
			}()
			if tt.realWait {
				select {
				case <-entered:
				case <-time.After(5 * time.Second):
					t.Fatal("resubscribe never backed off")
				}
				cancel()
			}
			err := returned(t, errc, time.Second)
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("resubscribe = %v, want it to match %v", err, want)
				}
			}
			if calls != 1 {
				t.Errorf("%d sessions, want 1", calls)
			}
			if diff := cmp.Diff(tt.want, h.st.load()); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResubscribeCancelledBefore(t *testing.T) {
	t.Parallel()
	h := newHarness()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := returned(t, h.start(ctx, h.stream()), time.Second); err != context.Canceled {
		t.Errorf("resubscribe = %v, want context.Canceled", err)
	}
	if h.calls != 0 || len(h.hints) != 0 {
		t.Errorf("%d sessions, hints %v after cancel", h.calls, h.hints)
	}
}
