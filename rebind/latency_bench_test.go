package rebind_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// BenchmarkEventToFirstWrite measures, with the real Run loop, the time
// from an event (Poke after a device reset) to the engine's first configfs
// write, and reports the median and p99 over b.N events. With burst > 1,
// every reset is announced by that many pokes at once (a uevent/rtnetlink
// storm) and writes-per-burst shows the coalescing.
func BenchmarkEventToFirstWrite(b *testing.B) {
	for _, burst := range []int{1, 100} {
		b.Run(map[int]string{1: "single", 100: "burst=100"}[burst], func(b *testing.B) {
			k := newFakeKernel(b)
			k.AddAddr("veth0", "192.0.2.1")
			k.AddDevice("rxe0", 1, "veth0")
			k.AddSubsystem("nqn.a")
			k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
			if err := configfs.NewWithOps(k.Root, k.Admin()).Relink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var first time.Time
			writes := 0
			k.Fault = func(int, configfstest.Write) error {
				mu.Lock()
				if first.IsZero() {
					first = time.Now()
				}
				writes++
				mu.Unlock()
				return nil
			}
			j, err := state.Open(stateDir(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg := rebind.DefaultConfig()
			cfg.ResyncInterval = time.Hour
			e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: cfg})
			beats := make(chan struct{}, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go e.Run(ctx, func() {
				select {
				case beats <- struct{}{}:
				default:
				}
			})
			<-beats
			lat := make([]time.Duration, 0, b.N)
			totalWrites := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				mu.Lock()
				first, writes = time.Time{}, 0
				mu.Unlock()
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
				mu.Lock()
				lat = append(lat, first.Sub(start))
				totalWrites += writes
				mu.Unlock()
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
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
