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
	deadline := time.Now().Add(10 * time.Second)
	for {
		free, gogc := read()
		if gogc > 100 && free < 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the last round: free heap %d bytes, GOGC %d; want the free heap returned and GOGC raised for the burst", free, gogc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}
