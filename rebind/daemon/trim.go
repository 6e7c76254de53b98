package daemon

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// The daemon's memory policy (trimMemory), unless GOGC or GOMEMLIMIT is
// set in the environment: then the Go runtime does as told and the
// daemon does nothing of its own.
//
// The daemon idles between rounds, and a round allocates more than the
// daemon keeps: a planned round at 4096 ports and 4096 portals about
// 25 MB, an idle resync whose inputs did not change (its plan kept) a
// megabyte or two, the periodic rescan tens of megabytes; the live heap
// is about 10 MB. Left to the runtime (GOGC=100), the pages of that
// garbage stay mapped until a GC and the scavenger return them, which at
// idle (a GC every 2 minutes) is slow: the idle RSS is a multiple of the
// live heap. So once the loop has been quiet for trimAfter after rounds
// that allocated trimMin or more, trimMemory collects and returns every
// free page to the system (debug.FreeOSMemory), and sets GOGC so that a
// burst as large fits the heap goal without a GC in its middle (the
// trim's GC takes its place) — for as long as such bursts come: once the
// loop is quiet after rounds that allocated little (idle resyncs, whose
// observation is carried), GOGC is 100 again, so that the periodic
// rescan's burst, minutes later, is paced by the runtime rather than by
// a goal sized for the start-up's (its RSS peak was 5× the live heap
// when it was not). The cost is a GC per trim and the page
// faults of the next round re-touching returned pages, in system time;
// BENCHMARKS.md ("Idle") has RSS and CPU with and without it
// (tests/idle-cost.sh 600 4096 4096 model; GOGC=100 in the environment
// turns the policy off).

// trimAfter is how long the loop must have been quiet (no round, no beat)
// before trimMemory trims; trimMin the least heap allocated since the
// last trim that makes one worth it; maxGCPercent bounds the GOGC it sets.
const (
	trimAfter    = 250 * time.Millisecond
	trimMin      = 1 << 20
	maxGCPercent = 400
)

// trimmer is the memory policy as a task: rounds is poked after each of
// the loop's rounds and beats.
type trimmer struct {
	rounds <-chan struct{}
	quiet  timer // nil: a time.Timer (tests fire their own)
}

func (t *trimmer) String() string { return "memory trim" }

func (t *trimmer) Run(ctx context.Context) error {
	quiet := t.quiet
	if quiet == nil {
		quiet = newTimer()
	}
	trimMemory(ctx, t.rounds, quiet)
	return nil
}

// trimMemory is the memory policy: once the loop has been quiet for
// trimAfter (quiet, reset at each of rounds, fires) after rounds that
// allocated trimMin or more, it collects and returns the free heap to the
// system, then sets GOGC to make the heap goal the live heap plus 1.25
// times what those rounds allocated (between 100 and maxGCPercent). A
// burst that allocates twice that before the loop is quiet again sets
// GOGC back to 100: the runtime's own pacing, for a heap that is growing;
// so does a quiet loop after rounds that allocated less than trimMin
// since it was last quiet: the bursts GOGC was raised for are over.
func trimMemory(ctx context.Context, rounds <-chan struct{}, quiet timer) {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (allocs, live uint64) {
		rtmetrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	last, _ := read() // allocations at the last trim
	lastQuiet := last // allocations when the loop was last found quiet
	var expect uint64 // the burst the GOGC set was made for; 0: GOGC is 100
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds:
			quiet.Reset(trimAfter)
			if expect != 0 {
				if allocs, _ := read(); allocs-last > 2*expect {
					debug.SetGCPercent(100)
					expect = 0
				}
			}
		case <-quiet.C():
			allocs, _ := read()
			burst, since := allocs-last, allocs-lastQuiet
			lastQuiet = allocs
			if expect != 0 && since < trimMin {
				debug.SetGCPercent(100) // the bursts it was raised for are over
				expect = 0
			}
			if burst < trimMin {
				continue
			}
			debug.FreeOSMemory()
			var live uint64
			last, live = read()
			lastQuiet = last
			expect = 0
			pct := 100
			if live > 0 {
				pct = int(min(max(100*burst*5/4/live, 100), maxGCPercent))
			}
			if pct > 100 {
				expect = burst
			}
			debug.SetGCPercent(pct)
		}
	}
}
