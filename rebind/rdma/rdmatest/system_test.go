package rdmatest_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

// tree is everything the engine reads of a System's configfs side, and
// both fakes' summaries.
func tree(t *testing.T, s *rdmatest.System) string {
	t.Helper()
	f := s.FS()
	ports, err := f.Ports()
	must(t, err)
	portals, err := f.Portals()
	must(t, err)
	subs, err := f.Subsystems()
	must(t, err)
	var links [][]configfs.Link // in creation order, which Ports leaves out
	for _, p := range ports {
		p, err := f.Port(p.ID)
		must(t, err)
		links = append(links, p.Links)
	}
	return fmt.Sprintf("ports %+v\nlinks %+v\nportals %+v\nsubsystems %q\n%s", ports, links, portals, subs, s)
}

// The builder makes the world the admin's steps make, listening, with
// nothing in the write log.
func TestWorldBuilderIsTheAdminsSteps(t *testing.T) {
	const nqnA, nqnB, iqn = "nqn.2024-01.lab:a", "nqn.2024-01.lab:b", "iqn.2024-01.lab:t"
	kernel := func(s *rdmatest.System) {
		s.AddAddr("veth0", "192.0.2.1")
		s.AddAddr("veth0", "2001:db8::1")
		s.AddDevice("rxe0", 0x11, "veth0")
	}
	hand := rdmatest.NewSystem(t)
	kernel(hand)
	hand.AddSubsystem(nqnA)
	hand.AddSubsystem(nqnB)
	hand.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	hand.AddPort("2", "rdma", "ipv6", "2001:db8::1", "4420")
	hand.AddPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	hand.AddPortal(iqn+"-2", "tpgt_1", "192.0.2.1:3260")
	admin := configfs.NewWithOps(hand.Root, hand.Admin())
	must(t, admin.Relink("1", configfs.Link{Name: nqnA, NQN: nqnA}))
	must(t, admin.Relink("1", configfs.Link{Name: nqnB, NQN: nqnB}))
	must(t, admin.Relink("2", configfs.Link{Name: nqnB, NQN: nqnB}))
	must(t, admin.SetISER(iqn+"/tpgt_1/192.0.2.1:3260", true))
	must(t, admin.SetISER(iqn+"-2/tpgt_1/192.0.2.1:3260", true))

	built := rdmatest.NewSystem(t)
	kernel(built)
	built.LinkedPort("1", "192.0.2.1", "4420", nqnA, nqnB)
	built.LinkedPort("2", "2001:db8::1", "4420", nqnB) // nqnB exists: no error
	if id := built.ISERPortal(iqn, "tpgt_1", "192.0.2.1:3260"); id != iqn+"/tpgt_1/192.0.2.1:3260" {
		t.Errorf("ISERPortal returned %q", id)
	}
	built.ISERPortal(iqn+"-2", "tpgt_1", "192.0.2.1:3260") // joins the shared np

	if diff := cmp.Diff(tree(t, hand), tree(t, built)); diff != "" {
		t.Errorf("built world (-by hand +built):\n%s", diff)
	}
	p, err := built.FS().Port("2")
	must(t, err)
	if p.Adrfam != "ipv6" || p.Trtype != "rdma" {
		t.Errorf("port 2: %+v, want rdma ipv6", p)
	}
	for _, l := range [][2]string{{"nvmet_rdma", "1"}, {"nvmet_rdma", "2"}, {"ib_isert", iqn + "/tpgt_1/192.0.2.1:3260"}, {"ib_isert", iqn + "-2/tpgt_1/192.0.2.1:3260"}} {
		if got := built.ListeningOn(l[0], l[1]); got != "rxe0" {
			t.Errorf("%s %s listening on %q, want rxe0: %s", l[0], l[1], got, built)
		}
	}
	if log := built.LogStrings(); len(log) != 0 {
		t.Errorf("the builder's writes were logged as the code's: %q", log)
	}
	if diff := cmp.Diff(tree(t, rdmatest.NewTargetPair(t, nqnA, iqn)), tree(t, pair(t, nqnA, iqn))); diff != "" {
		t.Errorf("NewTargetPair (-built +by hand):\n%s", diff)
	}
}

// pair is NewTargetPair's world by hand.
func pair(t *testing.T, nqn, iqn string) *rdmatest.System {
	s := rdmatest.NewSystem(t)
	s.AddAddr("veth0", "192.0.2.1")
	s.AddDevice("rxe0", 0x11, "veth0")
	s.AddSubsystem(nqn)
	s.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	s.AddPortal(iqn, "tpgt_1", "192.0.2.1:3260")
	admin := configfs.NewWithOps(s.Root, s.Admin())
	must(t, admin.Relink("1", configfs.Link{Name: nqn, NQN: nqn}))
	must(t, admin.SetISER(iqn+"/tpgt_1/192.0.2.1:3260", true))
	return s
}

// fatalTB records the failure and stops the builder, as t.Fatalf would.
type fatalTB struct {
	*testing.T
	msg string
}

type stopped struct{}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func (f *fatalTB) fails(build func()) string {
	f.msg = ""
	func() {
		defer func() {
			if r := recover(); r != nil && r != (stopped{}) {
				panic(r)
			}
		}()
		build()
	}()
	return f.msg
}

// A step the kernel refuses fails the test, saying which.
func TestWorldBuilderFailsTheTest(t *testing.T) {
	tb := &fatalTB{T: t}
	s := rdmatest.NewSystem(tb)
	s.AddAddr("veth0", "192.0.2.1") // no RDMA device carries it
	for _, tt := range []struct {
		build func()
		want  string
	}{
		{func() { s.LinkedPort("1", "192.0.2.1", "4420", "nqn.a") }, `rdmatest: nvmet port 1: relink "nqn.a": symlink`},
		{func() { s.LinkedPort("2", "not-an-ip", "4420", "nqn.a") }, "rdmatest: nvmet port 2: ParseAddr"},
		{func() { s.ISERPortal("iqn.2024-01.lab:t", "tpgt_1", "192.0.2.1:3260") }, "rdmatest: lio portal iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260: write iser=1"},
	} {
		if got := tb.fails(tt.build); len(got) < len(tt.want) || got[:len(tt.want)] != tt.want {
			t.Errorf("failure %q, want it to start with %q", got, tt.want)
		}
	}
}
