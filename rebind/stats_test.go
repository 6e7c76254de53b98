package rebind_test

import (
	"context"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// TestWriteTimeIsCounted: a heal's configfs writes are counted, and their
// time is part of the reconcile time (the kernel's share, metrics
// nvmet_rebind_configfs_write_seconds_total / _reconcile_seconds_total).
func TestWriteTimeIsCounted(t *testing.T) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	k.AddSubsystem("nqn.a")
	k.AddSubsystem("nqn.b")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	admin := configfs.NewWithOps(k.Root, k.Admin())
	for _, n := range []string{"nqn.a", "nqn.b"} {
		if err := admin.Relink("1", configfs.Link{Name: n, NQN: n}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Snapshot().Stats; st.Writes != 0 || st.WriteTime != 0 || st.ReconcileTime <= 0 {
		t.Fatalf("healthy round: %+v, want no writes and some reconcile time", st)
	}
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 2, "veth0")
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.Snapshot().Stats
	if st.Writes != 4 { // two unlinks, two links
		t.Errorf("writes = %d, want 4", st.Writes)
	}
	if st.WriteTime <= 0 || st.WriteTime > st.ReconcileTime {
		t.Errorf("write time %v, reconcile time %v: want 0 < write ≤ reconcile", st.WriteTime, st.ReconcileTime)
	}
}
