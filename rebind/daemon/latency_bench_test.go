package daemon

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// BenchmarkEventToFirstWriteDaemon is rebind's BenchmarkEventToFirstWrite
// (tree=model: rxe1, 1 % of 4,096 ports and 4,096 portals, resets; the
// time from the event to the first configfs write) with what the daemon
// runs around its loop — the reconciler task and the memory policy
// (trimmer, as Run starts them unless GOGC or GOMEMLIMIT is set) — and
// the resets a gap apart, as a target sees them, rather than back to
// back: what the daemon's own regime makes of the collector's pauses.
// p50 and p99 in µs. Three regimes: resets a second apart (the free pages
// of the last burst still mapped: a flap, recoveries retried), a reset
// after the policy returned the free pages (releaseAfter, 10 s, of quiet;
// here shortened to fit in the gap): the first reset after idle, and
// resets back to back (the next reset as soon as the last heal's round is
// done: the policy never finds the loop quiet).
func BenchmarkEventToFirstWriteDaemon(b *testing.B) {
	for _, regime := range []struct {
		name    string
		release time.Duration
		gap     time.Duration
	}{{"resets-1s-apart", releaseAfter, time.Second}, {"after-release", 300 * time.Millisecond, time.Second},
		{"back-to-back", releaseAfter, 0}} {
		gap, release := regime.gap, regime.release
		b.Run("4096/"+regime.name, func(b *testing.B) {
			k := rdmatest.NewScaleWorld(b, benchDir(b), 4096)
			m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			st, err := state.Open(benchDir(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg := rebind.DefaultConfig()
			cfg.ResyncInterval = time.Hour
			eng := rebind.New(rebind.Options{Tree: m, Kernel: k, Store: st, Config: cfg})
			trims, beats := newTrigger(), newTrigger()
			r := newReconciler(eng, func(string) {}, trims, beats)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for _, t := range []task{r, &trimmer{rounds: trims, releaseAfter: release}} {
				wg.Add(1)
				go func() { defer wg.Done(); t.Run(ctx) }()
			}
			<-r.Ready()
			clk := k.ClockWrites()
			portal := "iqn.2024-01.lab:t/tpgt_1/" + rdmatest.ScaleIP(0) + ":3260"
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				time.Sleep(gap)
				clk.Reset()
				k.RemoveDevice("rxe1")
				k.AddDevice("rxe1", 2, "veth1") // a new index: a real return
				drainTrigger(beats)
				b.StartTimer()
				start := time.Now()
				eng.Poke()
				for !k.Listening("nvmet_rdma", "1") || !k.Listening("ib_isert", portal) {
					select {
					case <-beats:
					case <-time.After(30 * time.Second):
						b.Fatal("not healed 30 s after the event")
					}
				}
				b.StopTimer()
				if gap == 0 {
					eng.Poke() // let the round finish before the next reset, as rebind's benchmark does
					<-beats
				}
				d, _, ok := clk.Since(start)
				if !ok {
					b.Fatal("healed without a configfs write")
				}
				lat = append(lat, d)
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// benchDir is a directory on tmpfs when there is one (fsync costs there
// are not what is measured), else the test's.
func benchDir(tb testing.TB) string {
	if d, err := os.MkdirTemp("/dev/shm", "nvmet-rebind-bench-"); err == nil {
		tb.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return tb.TempDir()
}

func drainTrigger(t trigger) {
	select {
	case <-t:
	default:
	}
}
