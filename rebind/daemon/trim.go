package daemon

import (
	"cmp"
	"context"
	"runtime"
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
// 17 MB, an idle resync whose inputs did not change (its plan kept) a
// megabyte or two, the periodic rescan tens of megabytes. Left to the
// runtime (GOGC=100), two things go wrong. A collection starts wherever
// the heap reaches its goal, often in the middle of the next event's
// round, whose first write then waits for the collector's assists; and
// the pages of the garbage stay mapped until the scavenger returns them,
// which at idle (a GC every 2 minutes) is slow: the idle RSS is a
// multiple of the live heap. So, in two steps after a burst of rounds
// that allocated trimMin or more:
//
//   - collect: once the loop has been quiet for trimAfter, a GC — the
//     burst's garbage is collected while nothing waits for the loop — and
//     GOGC set so that a burst as large fits the heap goal without a GC in
//     its middle, for as long as such bursts come: once the loop is quiet
//     after rounds that allocated little (idle resyncs, whose observation
//     is carried), GOGC is 100 again, so that the periodic rescan's burst,
//     minutes later, is paced by the runtime rather than by a goal sized
//     for the start-up's (its RSS peak was 5× the live heap when it was
//     not). The pages stay mapped: a reset seconds after the last (a flap,
//     a health recovery retried, one port after the other) allocates into
//     them instead of faulting fresh ones in.
//   - release: once the loop has allocated little for releaseAfter since
//     the collection, every free page goes back to the system
//     (debug.FreeOSMemory): the idle RSS is the live heap's.
//
// The cost is a GC per burst, one more at the release, and the page
// faults of the first round after a release; BENCHMARKS.md ("Idle", and
// the event path in the daemon's regime: BenchmarkEventToFirstWriteDaemon)
// has RSS, CPU and latency with it (tests/idle-cost.sh 600 4096 4096
// model; GOGC=100 in the environment turns the policy off).

// trimAfter is how long the loop must have been quiet (no round, no beat)
// before a burst is collected; releaseAfter how long after that the free
// pages are returned if no burst came meanwhile; trimMin the least heap
// allocated since the last collection that makes one worth it;
// maxGCPercent bounds the GOGC the policy sets.
const (
	trimAfter    = 250 * time.Millisecond
	trimMin      = 1 << 20
	maxGCPercent = 400
)

const releaseAfter = 10 * time.Second

// trimmer is the memory policy as a task: rounds is poked after each of
// the loop's rounds and beats.
type trimmer struct {
	rounds         <-chan struct{}
	quiet, release timer // nil: time.Timers (tests fire their own)
	// releaseAfter: 0 is releaseAfter (a benchmark shortens it)
	releaseAfter time.Duration
}

func (t *trimmer) String() string { return "memory trim" }

func (t *trimmer) Run(ctx context.Context) error {
	quiet, release := t.quiet, t.release
	if quiet == nil {
		quiet = newTimer()
	}
	if release == nil {
		release = newTimer()
	}
	trimMemory(ctx, t.rounds, quiet, release, cmp.Or(t.releaseAfter, releaseAfter))
	return nil
}

// trimMemory is the memory policy: once the loop has been quiet for
// trimAfter (quiet, reset at each of rounds, fires) after rounds that
// allocated trimMin or more, it collects and sets GOGC to make the heap
// goal the live heap plus 1.25 times what those rounds allocated (between
// 100 and maxGCPercent), and arms release for releaseAfter; when release
// fires with no burst collected since, it returns the free heap to the
// system — then, or at the next quiet if rounds are running (a release
// is a GC: not while rounds follow each other; it can still land in one
// long round, whose start the policy does not see, BENCHMARKS.md). A
// burst that allocates twice the GOGC's before the loop is
// quiet again sets GOGC back to 100: the runtime's own pacing, for a heap
// that is growing; so does a quiet loop after rounds that allocated less
// than trimMin since it was last quiet: the bursts GOGC was raised for
// are over.
func trimMemory(ctx context.Context, rounds <-chan struct{}, quiet, release timer, releaseAfter time.Duration) {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (allocs, live uint64) {
		rtmetrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	last, _ := read() // allocations at the last collection
	lastQuiet := last // allocations when the loop was last found quiet
	var expect uint64 // the burst the GOGC set was made for; 0: GOGC is 100
	idle := true      // no round since the loop was last found quiet
	due := false      // release fired while rounds ran: release at the next quiet
	defer quiet.Stop()
	defer release.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds:
			quiet.Reset(trimAfter)
			idle = false
			if expect != 0 {
				if allocs, _ := read(); allocs-last > 2*expect {
					debug.SetGCPercent(100)
					expect = 0
				}
			}
		case <-release.C():
			if !idle {
				due = true // not in the middle of rounds: at the next quiet
				continue
			}
			debug.FreeOSMemory()
		case <-quiet.C():
			idle = true
			if due {
				due = false
				debug.FreeOSMemory()
			}
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
			runtime.GC()
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
			due = false
			release.Reset(releaseAfter)
		}
	}
}
