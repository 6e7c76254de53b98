package daemon

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"testing"
	"time"
)

// memStats reads what the memory policy changes: the free heap not yet
// returned to the system, GOGC, the GCs forced by the program (a trim is
// one: debug.FreeOSMemory) and the heap allocated so far.
func memStats() (free, gogc, forced, allocs uint64) {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/gogc:percent"},
		{Name: "/gc/cycles/forced:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64()
}

var sink [][]byte

// garbage allocates about n bytes that are garbage when it returns.
func garbage(n int) {
	for range n / (256 << 10) {
		sink = append(sink, make([]byte, 256<<10))
	}
	sink = nil
}

// TestTrimMemory drives the policy with quiet and release timers it fires
// by hand, so no load on the machine can make rounds look quiet or a
// quiet loop busy: a quiet loop after rounds that allocated little is not
// collected; rounds re-arm the quiet timer and never collect; the quiet
// after a burst collects once (GOGC sized for the burst, the pages kept)
// and arms the release, which returns the free heap to the system — at
// once when the loop is quiet, at the next quiet when rounds are running;
// a burst twice as large before the next quiet sets GOGC back to 100, and
// so does a quiet loop after rounds that allocated little.
func TestTrimMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Unbuffered: a round returns once the policy took it, and once the
	// next returns, the policy is done with the one before.
	rounds := make(chan struct{})
	quiet, release := newFakeTimer(), newFakeTimer()
	done := make(chan struct{})
	go func() { trimMemory(ctx, rounds, quiet, release, releaseAfter); close(done) }()
	round := func() {
		t.Helper()
		select {
		case rounds <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatal("the memory policy does not take rounds")
		}
	}
	_, _, forced0, _ := memStats()

	// Quiet after rounds that allocated less than trimMin: nothing.
	round()
	quiet.fire(t)
	round()
	if _, gogc, forced, _ := memStats(); forced != forced0 || gogc != 100 {
		t.Fatalf("quiet after rounds that allocated little: %d forced GCs, GOGC %d; want none, 100", forced-forced0, gogc)
	}

	// Rounds with garbage, closer than trimAfter (the timer is not
	// fired): each re-arms the quiet timer, none collects.
	_, _, _, before := memStats()
	for range 4 {
		garbage(12 << 20)
		round()
	}
	round()
	if _, gogc, forced, _ := memStats(); forced != forced0 || gogc != 100 {
		t.Fatalf("while the loop was busy: %d forced GCs, GOGC %d; want none, 100", forced-forced0, gogc)
	}

	// Quiet: the collection, once, GOGC raised for the burst; the pages
	// are kept (most of the burst is free heap still mapped) and the
	// release armed.
	quiet.fire(t) // taken: the policy is done with the rounds before
	if got := quiet.armedWith(); len(got) != 7 || slices.ContainsFunc(got, func(d time.Duration) bool { return d != trimAfter }) {
		t.Fatalf("quiet timer armed with %v for 7 rounds, want trimAfter (%v) each time", got, trimAfter)
	}
	_, _, _, after := memStats()
	round()
	free, gogc, forced, _ := memStats()
	switch {
	case forced != forced0+1:
		t.Fatalf("quiet after a %d MB burst: %d forced GCs, want 1 (the collection)", (after-before)>>20, forced-forced0)
	case gogc <= 100:
		t.Fatalf("collected, yet GOGC is %d, want it raised for the burst", gogc)
	case !slices.Equal(release.armedWith(), []time.Duration{releaseAfter}):
		t.Fatalf("release armed with %v, want %v once", release.armedWith(), releaseAfter)
	}

	// The release, the loop quiet: the free heap back to the system. Not
	// all of it: the GC's work buffers are freed by the background
	// sweeper after it returns, a few MB under -race on two loaded cores
	// (a GC alone left 16 to 34 MB of a 32 MB burst free where the
	// release left 0 to 5 MB): so, at most a quarter of the burst.
	quiet.fire(t)
	release.fire(t)
	round()
	if freed, _, f, _ := memStats(); f != forced+1 || freed > (after-before)/4 || freed >= free {
		t.Fatalf("released: %d forced GCs more, %d bytes of free heap kept (%d before) after a %d-byte burst; want 1, at most a quarter, less", f-forced, freed, free, after-before)
	}
	forced++

	// A burst more than twice the last, before the loop is quiet again:
	// the runtime's own pacing (GOGC 100), and still no collection.
	garbage(int(2*(after-before)) + 8<<20)
	round()
	round()
	if _, gogc, f, _ := memStats(); gogc != 100 || f != forced {
		t.Fatalf("after a burst twice the last: GOGC %d, %d forced GCs more; want 100 and none", gogc, f-forced)
	}

	// Quiet: collected, GOGC raised again for that burst. The release
	// fires while rounds run: it waits for the next quiet.
	quiet.fire(t)
	round()
	_, gogc, forced, _ = memStats()
	if gogc <= 100 || forced != forced0+3 {
		t.Fatalf("quiet after the second burst: GOGC %d, %d forced GCs; want it raised, 3", gogc, forced-forced0)
	}
	release.fire(t)
	round()
	if _, _, f, _ := memStats(); f != forced {
		t.Fatalf("release while rounds run: %d forced GCs more, want none until the loop is quiet", f-forced)
	}
	// Then rounds that allocate little and a quiet loop (an idle
	// resync): the release that was due, GOGC back to 100, no collection
	// — the next large burst (a rescan, minutes later) is paced by the
	// runtime.
	quiet.fire(t)
	round()
	if _, gogc, f, _ := memStats(); gogc != 100 || f != forced+1 {
		t.Fatalf("quiet after an idle round: GOGC %d, %d forced GCs more; want 100 and 1 (the release due)", gogc, f-forced)
	}
	cancel()
	<-done
}

// The trimmer task's own timers are time.Timers: a burst, then a quiet
// loop, is collected within trimAfter (here: eventually).
func TestTrimmerTimer(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rounds := make(chan struct{})
	done := make(chan struct{})
	tr := &trimmer{rounds: rounds}
	go func() {
		defer close(done)
		if err := tr.Run(ctx); err != nil {
			t.Errorf("%v: %v", tr, err)
		}
	}()
	rounds <- struct{}{} // taken: the policy counts allocations from here
	_, _, forced0, _ := memStats()
	garbage(8 << 20)
	rounds <- struct{}{}
	waitFor(t, "a trim", func() bool { _, _, forced, _ := memStats(); return forced > forced0 })
	cancel()
	<-done
}
