package rdmatest

import (
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
)

// System is the two fakes wired together, what tests of the engine use:
// the configfs tree (configfstest.Fake) binding its listeners through this
// RDMA kernel (also the engine's Kernel).
type System struct {
	*configfstest.Fake
	*Kernel
}

// NewSystem makes both in a temporary directory of tb.
func NewSystem(tb interface{ TempDir() string }) *System { return NewSystemAt(tb.TempDir()) }

// NewSystemAt makes both with the configfs tree under root, an empty
// directory (e.g. on tmpfs for benchmarks).
func NewSystemAt(root string) *System {
	r := New()
	return &System{configfstest.NewAt(root, r), r}
}

// String summarises both sides, for test failure messages.
func (s *System) String() string { return s.Fake.String() + " | " + s.Kernel.String() }

// NewTargetPair is the world most engine tests start from: rxe0 (node GUID
// 0x11) on veth0 holding 192.0.2.1, nvmet port 1 on 192.0.2.1:4420 linked
// to subsystem nqn, and a LIO portal 192.0.2.1:3260 of target iqn
// (tpgt_1) with iser=1 — both listening. The links are made as an admin
// would, so the write log starts empty.
func NewTargetPair(tb interface {
	TempDir() string
	Fatal(...any)
}, nqn, iqn string) *System {
	s := NewSystem(tb)
	s.AddAddr("veth0", "192.0.2.1")
	s.AddDevice("rxe0", 0x11, "veth0")
	s.AddSubsystem(nqn)
	s.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	s.AddPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	admin := configfs.NewWithOps(s.Root, s.Admin())
	if err := admin.Relink("1", configfs.Link{Name: nqn, NQN: nqn}); err != nil {
		tb.Fatal(err)
	}
	if err := admin.SetISER(iqn+"/tpgt_1/192.0.2.1:3260", true); err != nil {
		tb.Fatal(err)
	}
	return s
}
