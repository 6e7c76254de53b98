package rebind_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// BenchmarkEventToFirstWrite measures, with the real Run loop, the time
// from an event (Poke after rxe1 reset: 1 % of n ports and n portals on
// it) to the engine's first configfs write (its journal entry is written
// before it), p50 and p99 over b.N events, on the tmpfs fake tree. tree=full
// reads all of configfs at every observation (run --no-watch); tree=model
// reads it through the inotify model (configfs/watch), as the daemon does.
func BenchmarkEventToFirstWrite(b *testing.B) {
	for _, tree := range []string{"full", "model", "model-exhaustive"} {
		for _, n := range []int{256, 1024, 4096} {
			b.Run(fmt.Sprintf("tree=%s/%d", tree, n), func(b *testing.B) {
				k := bigWorld(b, n)
				var t rebind.Tree = k.FS()
				if tree != "full" {
					m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					t = m
				}
				eventToFirstWrite(b, k, t, tree == "model-exhaustive")
			})
		}
	}
}

// runLoop starts the engine's Run loop over tree (resync: an hour) and
// returns it with a channel beaten after every round, once the first round
// is done.
func runLoop(b *testing.B, k *fakeKernel, tree rebind.Tree, exhaustive bool) (*rebind.Engine, chan struct{}) {
	j, err := state.Open(stateDir(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg := rebind.DefaultConfig()
	cfg.ResyncInterval = time.Hour
	e := rebind.New(rebind.Options{Tree: tree, Kernel: k, Store: j, Config: cfg, Exhaustive: exhaustive})
	beats := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go e.Run(ctx, func() {
		select {
		case beats <- struct{}{}:
		default:
		}
	})
	<-beats
	return e, beats
}

// reportPercentiles reports p50 and p99 of lat in µs.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func eventToFirstWrite(b *testing.B, k *fakeKernel, tree rebind.Tree, exhaustive bool) {
	clk := k.ClockWrites()
	e, beats := runLoop(b, k, tree, exhaustive)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		clk.Reset()
		k.RemoveDevice("rxe1")
		k.AddDevice("rxe1", 2, "veth1") // a new index: a real return
		drain(beats)
		b.StartTimer()
		start := time.Now()
		e.Poke()
		portal := "iqn.2024-01.lab:t/tpgt_1/" + ipOf(0) + ":3260"
		for !k.Listening("nvmet_rdma", "1") || !k.Listening("ib_isert", portal) {
			select {
			case <-beats:
			case <-time.After(30 * time.Second):
				b.Fatalf("not healed 30 s after the event: nvmet port 1 listening %v, portal %s listening %v",
					k.Listening("nvmet_rdma", "1"), portal, k.Listening("ib_isert", portal))
			}
		}
		b.StopTimer()
		lat = append(lat, firstWrite(b, e, beats, clk, start))
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkEventBurst: one port; every reset is announced by 1 or 100
// pokes at once (a uevent/rtnetlink storm); writes/burst shows the
// coalescing, p50/p99 the time from the first poke to the first write.
func BenchmarkEventBurst(b *testing.B) {
	for _, burst := range []int{1, 100} {
		b.Run(map[int]string{1: "single", 100: "burst=100"}[burst], func(b *testing.B) {
			k := newFakeKernel(b)
			k.AddAddr("veth0", "192.0.2.1")
			k.AddDevice("rxe0", 1, "veth0")
			k.LinkedPort("1", "192.0.2.1", "4420", "nqn.a")
			clk := k.ClockWrites()
			e, beats := runLoop(b, k, k.FS(), false)
			lat := make([]time.Duration, 0, b.N)
			totalWrites := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				clk.Reset()
				k.RemoveDevice("rxe0")
				k.AddDevice("rxe0", 1, "veth0") // a new index: a real return
				drain(beats)
				b.StartTimer()
				start := time.Now()
				for p := 0; p < burst; p++ {
					e.Poke()
				}
				for !k.Listening("nvmet_rdma", "1") {
					<-beats
				}
				b.StopTimer()
				// Let any coalesced extra reconcile run before counting.
				e.Poke()
				<-beats
				d, n, _ := clk.Since(start)
				lat = append(lat, d)
				totalWrites += n
				b.StartTimer()
			}
			b.StopTimer()
			reportPercentiles(b, lat)
			b.ReportMetric(float64(totalWrites)/float64(b.N), "writes/burst")
		})
	}
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// BenchmarkEventToFirstWriteLayout: the layouts real targets have, through
// the inotify model as the daemon reads configfs: one port with 1,000
// subsystems, and 256 targets sharing one iSER portal. Each reset is
// removal, a round that sees the listener dead (the outage), then the
// return: p50/p99 from the return's Poke to the first configfs write (the
// first unlink, the first iser=0), which waits on the round's observe,
// plan and journal entry. The heal's writes after it are not timed.
func BenchmarkEventToFirstWriteLayout(b *testing.B) {
	for _, layout := range []string{"subsystems=1000", "sharers=256"} {
		b.Run(layout, func(b *testing.B) {
			var k *fakeKernel
			owner, id := "nvmet_rdma", "1"
			if layout == "sharers=256" {
				var ids []string
				k, ids, _ = sharedWorld(b, 256)
				owner, id = "ib_isert", ids[0]
			} else {
				k = newFakeKernel(b)
				k.AddAddr("veth0", "192.0.2.1")
				k.AddDevice("rxe0", 0x11, "veth0")
				var nqns []string
				for i := range 1000 {
					nqns = append(nqns, fmt.Sprintf("nqn.2024-01.io.e2e:vol-%d", i+1))
				}
				k.LinkedPort("1", "192.0.2.1", "4420", nqns...)
			}
			m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			clk := k.ClockWrites()
			e, beats := runLoop(b, k, m, false)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				k.RemoveDevice("rxe0")
				drain(beats)
				e.Poke() // the outage's round: the listener is dead
				<-beats
				clk.Reset()
				k.AddDevice("rxe0", 0x11, "veth0")
				drain(beats)
				b.StartTimer()
				start := time.Now()
				e.Poke()
				for !k.Listening(owner, id) {
					select {
					case <-beats:
					case <-time.After(30 * time.Second):
						b.Fatalf("%s %s not healed 30 s after the event", owner, id)
					}
				}
				b.StopTimer()
				lat = append(lat, firstWrite(b, e, beats, clk, start))
				b.StartTimer()
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}

// firstWrite lets the healing round finish (before the next reset) and
// returns the time from start to its first configfs write.
func firstWrite(b *testing.B, e *rebind.Engine, beats chan struct{}, clk *rdmatest.WriteClock, start time.Time) time.Duration {
	e.Poke()
	<-beats
	d, _, ok := clk.Since(start)
	if !ok {
		b.Fatal("healed without a configfs write")
	}
	return d
}
