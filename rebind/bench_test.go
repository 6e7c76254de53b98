package rebind_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// bigWorld is rdmatest.NewScaleWorld on a tmpfs when there is one.
func bigWorld(b testing.TB, n int) *fakeKernel { return rdmatest.NewScaleWorld(b, stateDir(b), n) }

func benchEngine(b *testing.B, k *fakeKernel) *rebind.Engine {
	j, err := state.Open(stateDir(b))
	if err != nil {
		b.Fatal(err)
	}
	return rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})
}

// BenchmarkObservePlan: one full observe + plan of n ports and n portals,
// all healthy (what every resync costs).
func BenchmarkObservePlan(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("ports=%d+portals=%d", n, n), func(b *testing.B) {
			k := bigWorld(b, n)
			e := benchEngine(b, k)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				items, _, err := e.PlanNow()
				if err != nil || len(items) != 2*n {
					b.Fatalf("%d items, %v", len(items), err)
				}
			}
		})
	}
}

// modelEngine is an engine on k through the inotify model of configfs, as
// the daemon runs it.
func modelEngine(b *testing.B, k *fakeKernel) *rebind.Engine {
	m, err := watch.New(k.FS(), watch.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	j, err := state.Open(stateDir(b))
	if err != nil {
		b.Fatal(err)
	}
	return rebind.New(rebind.Options{Tree: m, Kernel: k, Store: j, Config: rebind.DefaultConfig()})
}

// BenchmarkObservePlanModel: the same through the inotify model of
// configfs (the daemon's event path: nothing changed in configfs).
func BenchmarkObservePlanModel(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("ports=%d+portals=%d", n, n), func(b *testing.B) {
			e := modelEngine(b, bigWorld(b, n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				items, _, err := e.PlanNow()
				if err != nil || len(items) != 2*n {
					b.Fatalf("%d items, %v", len(items), err)
				}
			}
		})
	}
}

// BenchmarkSteadyRound: one round of the Run loop's resync when nothing
// changed (n ports and n portals, all alive; configfs through the inotify
// model): what an idle daemon spends every resync interval.
func BenchmarkSteadyRound(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("ports=%d+portals=%d", n, n), func(b *testing.B) {
			e := modelEngine(b, bigWorld(b, n))
			if _, err := e.Reconcile(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				items, err := e.Reconcile(context.Background())
				if err != nil || len(items) != 2*n {
					b.Fatalf("%d items, %v", len(items), err)
				}
			}
		})
	}
}

// BenchmarkReconcileOnePercentDead: a full reconcile where 1% of the
// listeners (ports and portals) are dead and get rebound.
func BenchmarkReconcileOnePercentDead(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("ports=%d+portals=%d", n, n), func(b *testing.B) {
			k := bigWorld(b, n)
			e := benchEngine(b, k)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				// rxe1 resets: the 1% of ports and portals on it die.
				k.RemoveDevice("rxe1")
				k.AddDevice("rxe1", 2, "veth1")
				b.StartTimer()
				if _, err := e.Reconcile(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if !k.Listening("nvmet_rdma", "1") {
				b.Fatal("not healed")
			}
		})
	}
}

var ipOf = rdmatest.ScaleIP

// BenchmarkSharedPortalHeal: n targets share one iSER portal (Cinder's
// layout); the device resets and one reconcile heals the shared listener
// (journal n entries, n zeros, n ones, verify once). ns/op is that round.
func BenchmarkSharedPortalHeal(b *testing.B) {
	for _, n := range []int{256, 1024} {
		b.Run(fmt.Sprintf("sharers=%d", n), func(b *testing.B) {
			k, ids, _ := sharedWorld(b, n)
			healEachReset(b, k, sharedEngine(b, k, newClock(), nil, stateDir(b)), "ib_isert", ids[n-1])
		})
	}
}

// BenchmarkManySubsystemsHeal: one port with n subsystems linked (a port
// per address, a subsystem per volume); the device resets and one
// reconcile through the inotify model heals it (journal, n unlinks, n
// links, verify). ns/op is that round.
func BenchmarkManySubsystemsHeal(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("subsystems=%d", n), func(b *testing.B) {
			k := newFakeKernel(b)
			k.AddAddr("veth0", "192.0.2.1")
			k.AddDevice("rxe0", 0x11, "veth0")
			var nqns []string
			for i := range n {
				nqns = append(nqns, fmt.Sprintf("nqn.2024-01.lab:vol-%04d", i))
			}
			k.LinkedPort("1", "192.0.2.1", "4420", nqns...)
			healEachReset(b, k, modelEngine(b, k), "nvmet_rdma", "1")
		})
	}
}

// healEachReset times one reconcile per reset of rxe0 (on veth0, GUID
// 0x11): each must heal id's listener (owner's) in that one round.
func healEachReset(b *testing.B, k *fakeKernel, e *rebind.Engine, owner, id string) {
	if _, err := e.Reconcile(context.Background()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		k.RemoveDevice("rxe0")
		k.AddDevice("rxe0", 0x11, "veth0")
		b.StartTimer()
		if _, err := e.Reconcile(context.Background()); err != nil {
			b.Fatal(err)
		}
		if !k.Listening(owner, id) {
			b.Fatal("not healed in one round")
		}
	}
}
