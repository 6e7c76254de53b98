package daemon

import (
	"sync"
	"testing"
	"time"
)

// fakeTimer is a timer that fires only when the test says so, and only
// once armed (a Reset since it last fired or was stopped), as a
// time.Timer would.
type fakeTimer struct {
	c      chan time.Time
	armed  chan struct{} // holds one token while armed
	mu     sync.Mutex
	resets []time.Duration
}

func newFakeTimer() *fakeTimer {
	return &fakeTimer{c: make(chan time.Time), armed: make(chan struct{}, 1)}
}

func (f *fakeTimer) C() <-chan time.Time { return f.c }

func (f *fakeTimer) Reset(d time.Duration) {
	f.mu.Lock()
	f.resets = append(f.resets, d)
	f.mu.Unlock()
	select {
	case f.armed <- struct{}{}:
	default:
	}
}

func (f *fakeTimer) Stop() {
	select {
	case <-f.armed:
	default:
	}
}

// armedWith returns the durations the timer was armed with, in order.
func (f *fakeTimer) armedWith() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.resets...)
}

// fire delivers a tick once the timer is armed; it returns once the task
// took it.
func (f *fakeTimer) fire(t *testing.T) {
	t.Helper()
	select {
	case <-f.armed:
	case <-time.After(10 * time.Second):
		t.Fatal("fired a timer that is not armed (no Reset since it last fired)")
	}
	select {
	case f.c <- time.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("the timer fired and no one waited on it")
	}
}
