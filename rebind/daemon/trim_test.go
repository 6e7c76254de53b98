package daemon

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"testing"
	"time"
)

// TestTrimMemory: after a round that made garbage and a quiet loop, the
// free heap goes back to the system and GOGC is sized for such a round;
// a loop that keeps beating is never trimmed.
func TestTrimMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/gogc:percent"}}
	read := func() (free, gogc uint64) {
		rtmetrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rounds := make(chan struct{})
	done := make(chan struct{})
	go func() { trimMemory(ctx, rounds); close(done) }()
	burst := func() {
		sink := make([][]byte, 0, 64)
		for range 64 {
			sink = append(sink, make([]byte, 256<<10)) // 16 MB of garbage
		}
		_ = sink
		rounds <- struct{}{}
	}
	// Beats closer than trimAfter: no trim in between.
	for range 4 {
		burst()
		time.Sleep(trimAfter / 4)
		if _, gogc := read(); gogc != 100 {
			t.Fatalf("GOGC %d while the loop was busy, want 100 (no trim)", gogc)
		}
	}
	// The trim: GOGC raised for the burst, and right then the free heap
	// back to the system (a few pages may be taken again meanwhile; the
	// scavenger alone returns 16 MB much more slowly).
	deadline := time.Now().Add(5 * time.Second)
	for {
		free, gogc := read()
		if gogc > 100 {
			if free > 4<<20 {
				t.Fatalf("trimmed (GOGC %d), yet %d bytes of free heap were kept", gogc, free)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the last round: GOGC %d, free heap %d bytes; want a trim", gogc, free)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}
