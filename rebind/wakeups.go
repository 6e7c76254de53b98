package rebind

import (
	"container/heap"
	"time"
)

// wakeups is the one owner of time: the endpoints whose decision depends
// on the clock or on memory a round changes (a heal under way or held by
// backoff, a grace, a GID-table recheck, a journal entry, a saved config's
// declaration while the boot window is open, a manual rebind), each with
// the time it must be decided again by itself (zero: none of its own).
// decide writes it — add for an endpoint it finds timed, forget for one it
// does not — and the loop reads it: Select decides every endpoint in it
// again, and Run wakes at next. Modelled on controller-runtime's work
// queue (AddAfter, Forget); the next wake is a heap's top, not a scan.
type wakeups struct {
	at map[epKey]time.Time
	h  wakeHeap // the non-zero times of at, and stale ones (dropped by next)
}

func newWakeups() *wakeups { return &wakeups{at: map[epKey]time.Time{}} }

// add makes k decided again every round, and by itself at t (non-zero).
func (w *wakeups) add(k epKey, t time.Time) {
	if old, ok := w.at[k]; ok && old.Equal(t) {
		return
	}
	w.at[k] = t
	if t.IsZero() {
		return
	}
	if len(w.h) > 2*len(w.at)+64 { // mostly stale: rebuild
		w.h = w.h[:0]
		for k, t := range w.at {
			if !t.IsZero() {
				w.h = append(w.h, wake{t, k})
			}
		}
		heap.Init(&w.h)
		return
	}
	heap.Push(&w.h, wake{t, k})
}

// forget drops k: only an event decides it again.
func (w *wakeups) forget(k epKey) { delete(w.at, k) }

// next is the earliest time an endpoint must be decided again by itself
// (zero: none).
func (w *wakeups) next() time.Time {
	for len(w.h) > 0 {
		top := w.h[0]
		if t, ok := w.at[top.k]; ok && t.Equal(top.t) {
			return top.t
		}
		heap.Pop(&w.h)
	}
	return time.Time{}
}

// clone is a copy for a plan that must not change w (plan, for tests and
// status).
func (w *wakeups) clone() *wakeups {
	c := newWakeups()
	for k, t := range w.at {
		c.add(k, t)
	}
	return c
}

// keys are the endpoints decided again every round.
func (w *wakeups) keys() map[epKey]time.Time { return w.at }

// clear forgets every endpoint (a plan of all decides them afresh).
func (w *wakeups) clear() {
	clear(w.at)
	w.h = w.h[:0]
}

type wake struct {
	t time.Time
	k epKey
}

type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].t.Before(h[j].t) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
