package rebind_test

import (
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// Every heal of an object is kept in its history, the last
// rebind.HistoryLen of them, oldest first; a snapshot once published keeps
// the history it had.
func TestHistoryKeepsTheLastHeals(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	port := rebind.Key{Kind: rebind.KindNvmet, ID: "1"}
	if h := e.Snapshot().History[port]; len(h) != 0 {
		t.Fatalf("history of a healthy port: %d heals, want none", len(h))
	}
	var third rebind.Snapshot
	var ats []time.Time
	for i := range rebind.HistoryLen + 3 {
		w.clk.advance(time.Minute)
		w.reset()
		w.reconcile(e)
		s := e.Snapshot()
		h := s.History[port]
		if len(h) != min(i+1, rebind.HistoryLen) {
			t.Fatalf("round %d: history of %d heals, want %d", i, len(h), min(i+1, rebind.HistoryLen))
		}
		ats = append(ats, h[len(h)-1].At)
		if i == 2 {
			third = s
		}
	}
	h := e.Snapshot().History[port]
	if len(h) != rebind.HistoryLen {
		t.Fatalf("history: %d heals, want %d", len(h), rebind.HistoryLen)
	}
	for i, o := range h {
		if want := ats[len(ats)-rebind.HistoryLen+i]; !o.At.Equal(want) || o.Action != rebind.ActRebindPort || o.Result != rebind.ResultOK {
			t.Errorf("history[%d] = %v %v at %v, want rebind ok at %v", i, o.Action, o.Result, o.At, want)
		}
	}
	if n := len(third.History[port]); n != 3 {
		t.Errorf("the third round's snapshot now has %d heals, want the 3 it published", n)
	}
	if n := len(e.Snapshot().History[rebind.Key{Kind: rebind.KindLIO, ID: portal}]); n != rebind.HistoryLen {
		t.Errorf("portal history: %d heals, want %d", n, rebind.HistoryLen)
	}
}
