package rebind_test

import (
	"context"
	"slices"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// TestWriteTimeIsCounted: a heal's configfs writes are counted, and their
// time is part of the reconcile time (the kernel's share, metrics
// nvmet_rebind_configfs_write_seconds_total / _reconcile_seconds_total).
func TestWriteTimeIsCounted(t *testing.T) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	k.LinkedPort("1", "192.0.2.1", "4420", "nqn.a", "nqn.b")
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

// reuser counts how the engine reads the devices and the addresses: a
// TableReader, as rdma.Live is.
type reuser struct {
	*fakeKernel
	full, reused, devices, addrs int
}

func (r *reuser) Devices() ([]rdma.Device, error) {
	r.devices++
	return r.fakeKernel.Devices()
}

func (r *reuser) Addrs() ([]rdma.Addr, error) {
	r.addrs++
	return r.fakeKernel.Addrs()
}

func (r *reuser) Read(prev []rdma.Device) rdma.Reading {
	addrs, aerr := r.fakeKernel.Addrs()
	devs, err := r.fakeKernel.Devices()
	if prev == nil {
		r.full++
		return rdma.Reading{Devices: devs, DevicesErr: err, Addrs: addrs, AddrsErr: aerr}
	}
	r.reused++
	for i := range devs {
		for j := range devs[i].Ports {
			devs[i].Ports[j].GIDs = nil // proves nothing was read; the engine must not need them
		}
	}
	for _, d := range prev {
		for i := range devs {
			if devs[i].Index == d.Index {
				for j := range devs[i].Ports {
					for _, p := range d.Ports {
						if p.Index == devs[i].Ports[j].Index {
							devs[i].Ports[j].GIDs = p.GIDs
						}
					}
				}
			}
		}
	}
	return rdma.Reading{Devices: devs, DevicesErr: err, Addrs: addrs, AddrsErr: aerr}
}

// TestVerificationReusesGIDTables: the observation that verifies a round's
// heals lists the devices reusing that round's GID tables (rdma.Live: no
// second read of thousands of sysfs files); the first one reads them. Each
// observation reads the devices and the addresses in one pass (Read: the
// netdevs and addresses rdma.Live reads to size the GID reads are the
// observation's), never apart.
func TestVerificationReusesGIDTables(t *testing.T) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	k.LinkedPort("1", "192.0.2.1", "4420", "nqn.a")
	r := &reuser{fakeKernel: k}
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: r, Store: j, Config: rebind.DefaultConfig()})
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 2, "veth0")
	items, err := e.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !k.Listening("nvmet_rdma", "1") {
		t.Fatal("not healed")
	}
	if r.full != 1 || r.reused != 1 {
		t.Errorf("readings: %d full, %d reusing GIDs; want 1 and 1", r.full, r.reused)
	}
	if r.devices != 0 || r.addrs != 0 {
		t.Errorf("devices listed %d times and addresses %d times apart from the readings; want 0: one pass reads both", r.devices, r.addrs)
	}
	if items[0].State != rebind.StateListening {
		t.Errorf("after the heal: %v (%s), want listening (judged with the reused GID table)", items[0].State, items[0].Reason)
	}
}

// countingStore records the size of each journal batch.
type countingStore struct {
	*state.Store
	puts, dels []int
}

func (c *countingStore) PutAll(ins []rebind.Intent) error {
	c.puts = append(c.puts, len(ins))
	return c.Store.PutAll(ins)
}
func (c *countingStore) DeleteAll(ks []rebind.Key) error {
	c.dels = append(c.dels, len(ks))
	return c.Store.DeleteAll(ks)
}

// TestSharersJournaledInOneBatch: the sharers of one iSER endpoint are
// journaled with one PutAll (the round's first heal alone, then every other
// heal's in one batch) and the round's entries dropped with one DeleteAll
// (one directory sync each), and the heal still ends with every sharer at 1
// and listening.
func TestSharersJournaledInOneBatch(t *testing.T) {
	k, ids, _ := sharedWorld(t, 3)
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &countingStore{Store: j}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: c, Config: rebind.DefaultConfig()})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x12, "veth0")
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !k.Listening("ib_isert", id) {
			t.Errorf("%s not listening after the heal", id)
		}
	}
	// The 3 sharers in one batch, the lone portal of sharedWorld (own)
	// in the other; all 4 removed at once.
	slices.Sort(c.puts)
	if !slices.Equal(c.puts, []int{1, 3}) || !slices.Equal(c.dels, []int{4}) {
		t.Errorf("journal batches: puts %v, deletes %v; want [1 3] and [4]", c.puts, c.dels)
	}
	if in, bad := j.Load(); len(in) != 0 || len(bad) != 0 {
		t.Errorf("journal after the heal: %v %v, want empty", in, bad)
	}
}
