package rdmatest

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
)

// TB is what a System needs of its test (testing.TB has it): a temporary
// directory, and a way to fail the test when building the world fails.
type TB interface {
	TempDir() string
	Helper()
	Fatalf(format string, args ...any)
}

// System is the two fakes wired together, what tests of the engine use:
// the configfs tree (configfstest.Fake) binding its listeners through this
// RDMA kernel (also the engine's Kernel).
type System struct {
	*configfstest.Fake
	*Kernel

	tb TB // fails the test when LinkedPort or ISERPortal fails
}

// NewSystem makes both in a temporary directory of tb.
func NewSystem(tb TB) *System { return NewSystemAt(tb, tb.TempDir()) }

// NewSystemAt makes both with the configfs tree under root, an empty
// directory (e.g. on tmpfs for benchmarks).
func NewSystemAt(tb TB, root string) *System {
	r := New()
	return &System{configfstest.NewAt(root, r), r, tb}
}

// String summarises both sides, for test failure messages.
func (s *System) String() string { return s.Fake.String() + " | " + s.Kernel.String() }

// --- the world builder: what an admin sets up before a test ---
//
// Both build through the admin's operations (Fake.Admin): nothing goes to
// the write log, and the listeners come up as the kernel would make them.
// A failure fails the test.

// LinkedPort creates the subsystems nqns that are missing (in order), the
// rdma nvmet port id on ip:svc (addr_adrfam ipv4 or ipv6 from ip), then
// links the subsystems to it in order, as `ln -s` would: the port listens
// once its first link is made. Ports of other transports, ports without
// links or with addresses that do not parse are Fake.AddPort's.
func (s *System) LinkedPort(id, ip, svc string, nqns ...string) {
	s.tb.Helper()
	s.linkedPort("rdma", id, ip, svc, nqns...)
}

// TCPPort is LinkedPort for an nvmet TCP port: it listens (a TCP socket)
// once its first link is made, which fails the test while no netdev holds
// ip (AddPort and AdminLink build a port the kernel refused).
func (s *System) TCPPort(id, ip, svc string, nqns ...string) {
	s.tb.Helper()
	s.linkedPort("tcp", id, ip, svc, nqns...)
}

// AdminLink links subsystem nqn to port id as the admin's `ln -s` (or a
// saved config's restore) would, and returns the kernel's refusal.
func (s *System) AdminLink(id, nqn string) error {
	return configfs.NewWithOps(s.Root, s.Admin()).Relink(id, configfs.Link{Name: nqn, NQN: nqn})
}

// AdminUnlink removes the link of subsystem nqn from port id as the
// admin's `rm` would.
func (s *System) AdminUnlink(id, nqn string) error {
	return configfs.NewWithOps(s.Root, s.Admin()).Unlink(id, configfs.Link{Name: nqn, NQN: nqn})
}

func (s *System) linkedPort(trtype, id, ip, svc string, nqns ...string) {
	s.tb.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		s.tb.Fatalf("rdmatest: nvmet port %s: %v", id, err)
	}
	adrfam := "ipv4"
	if a.Is6() && !a.Is4In6() {
		adrfam = "ipv6"
	}
	for _, nqn := range nqns {
		s.AddSubsystem(nqn) // a no-op when it exists
	}
	s.AddPort(id, trtype, adrfam, ip, svc)
	admin := configfs.NewWithOps(s.Root, s.Admin())
	for _, nqn := range nqns {
		if err := admin.Relink(id, configfs.Link{Name: nqn, NQN: nqn}); err != nil {
			s.tb.Fatalf("rdmatest: %v", err)
		}
	}
}

// ISERPortal creates the LIO portal target/iscsi/<iqn>/<tpg>/np/<np> and
// sets its iser to 1, as `echo 1 > iser` would: the np listens (or joins
// the np other portals share). It returns the portal's id, iqn/tpg/np.
func (s *System) ISERPortal(iqn, tpg, np string) string {
	s.tb.Helper()
	id := iqn + "/" + tpg + "/" + np
	s.AddPortal(iqn, tpg, np)
	if err := configfs.NewWithOps(s.Root, s.Admin()).SetISER(id, true); err != nil {
		s.tb.Fatalf("rdmatest: %v", err)
	}
	return id
}

// NewTargetPair is the world most engine tests start from: rxe0 (node GUID
// 0x11) on veth0 holding 192.0.2.1, nvmet port 1 on 192.0.2.1:4420 linked
// to subsystem nqn, and a LIO portal 192.0.2.1:3260 of target iqn
// (tpgt_1) with iser=1 — both listening. The links are made as an admin
// would, so the write log starts empty.
func NewTargetPair(tb TB, nqn, iqn string) *System {
	tb.Helper()
	s := NewSystem(tb)
	s.AddAddr("veth0", "192.0.2.1")
	s.AddDevice("rxe0", 0x11, "veth0")
	s.LinkedPort("1", "192.0.2.1", "4420", nqn)
	s.ISERPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	return s
}

// NewScaleWorld is the world the benchmarks measure, under root (an empty
// directory: tmpfs for benchmarks): n nvmet ports (1–8 of 8 subsystems
// each) and n LIO iSER portals of one target, on n addresses (ScaleIP),
// all listening; 1 % of the addresses (every 100th, from the first) on
// rxe1/veth1, the device the benchmarks reset, the rest on rxe0/veth0.
// Port i+1 and portal iqn.2024-01.lab:t/tpgt_1/<ScaleIP(i)>:3260 are on
// ScaleIP(i).
func NewScaleWorld(tb TB, root string, n int) *System {
	tb.Helper()
	s := NewSystemAt(tb, root)
	s.AddDevice("rxe0", 1, "veth0")
	s.AddDevice("rxe1", 2, "veth1")
	var nqns []string
	for i := range 8 {
		nqns = append(nqns, fmt.Sprintf("nqn.2024-01.lab:s%d", i))
		s.AddSubsystem(nqns[i])
	}
	for i := range n {
		ip := ScaleIP(i)
		if i%100 == 0 {
			s.AddAddr("veth1", ip)
		} else {
			s.AddAddr("veth0", ip)
		}
		s.LinkedPort(fmt.Sprint(i+1), ip, "4420", nqns[:i%8+1]...)
		s.ISERPortal("iqn.2024-01.lab:t", "tpgt_1", ip+":3260")
	}
	return s
}

// ScaleIP is the i-th address of NewScaleWorld.
func ScaleIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", i/62500, i/250%250, i%250+1) }

// WriteClock records when the code under test first wrote to configfs
// since its last Reset, and how many writes it made (ClockWrites).
type WriteClock struct {
	mu     sync.Mutex
	first  time.Time
	writes int
}

// ClockWrites makes the fake's Fault hook a WriteClock (every write is
// let through).
func (s *System) ClockWrites() *WriteClock {
	c := &WriteClock{}
	s.Fault = func(int, configfstest.Write) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.first.IsZero() {
			c.first = time.Now()
		}
		c.writes++
		return nil
	}
	return c
}

// Reset forgets the writes so far.
func (c *WriteClock) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.first, c.writes = time.Time{}, 0
}

// Since returns the first write's delay after start, the writes since
// Reset, and whether there was one.
func (c *WriteClock) Since(start time.Time) (time.Duration, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first.Sub(start), c.writes, !c.first.IsZero()
}
