package rdmatest

import "github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"

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
