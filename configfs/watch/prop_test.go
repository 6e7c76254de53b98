package watch

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// script plays admin operations (and the model's own writes) chosen by
// next, comparing the model with fresh reads at the points next picks and
// at the end, then checks a trusted rescan agrees.
type script struct {
	w    *world
	next func(n int) int // a choice in [0, n)
	log  []string
	mark *mark // the last compare's token and answers (nil: none)
}

// mark is what the tree answered when Generation returned tok.
type mark struct {
	tok  uint64
	at   int // steps logged by then
	seen answered
}

// answered is a tree's answers, by object.
type answered struct {
	ports, portalsErr, subsystems string
	links, portals                map[string]string // by port ID, by portal ID
}

func answersOf(f *configfs.FS) answered {
	a := answered{links: map[string]string{}, portals: map[string]string{}}
	ports, err := f.Ports()
	a.ports = fmt.Sprintf("%+v %v", ports, err)
	for _, p := range ports {
		l, err := f.Links(p.ID)
		a.links[p.ID] = fmt.Sprintf("%v %v", l, err)
	}
	portals, err := f.Portals()
	a.portalsErr = fmt.Sprint(err)
	for _, p := range portals {
		a.portals[p.ID()] = fmt.Sprintf("%+v", p)
	}
	subs, err := f.Subsystems()
	a.subsystems = fmt.Sprintf("%q %v", subs, err)
	return a
}

var (
	propIQNs = []string{"iqn.2003-01.org.example:t1", "iqn.2003-01.org.example:t2", "iqn.2003-01.org.example:t3", "discovery_auth"}
	propTPGs = []string{"tpgt_1", "tpgt_2"}
	propNPs  = []string{"192.0.2.1:3260", "192.0.2.2:3260", "[2001:db8::1]:3260"}
	propNQNs = []string{"nqn.2014-08.org.example:a", "nqn.2014-08.org.example:b", "nqn.2014-08.org.example:c"}
)

func (s *script) pick(list []string) string { return list[s.next(len(list))] }

func (s *script) port() string { return fmt.Sprint(1 + s.next(4)) }

func (s *script) portal() string {
	return s.pick(propIQNs) + "/" + s.pick(propTPGs) + "/" + s.pick(propNPs)
}

// step does one operation; errors (the kernel refusing) are part of the
// game.
func (s *script) step() {
	w := s.w
	op := s.next(14)
	var what string
	switch op {
	case 0:
		id := s.port()
		what = "add port " + id
		if _, err := os.Lstat(w.path("nvmet/ports", id)); err != nil {
			w.k.AddPort(id, "rdma", "ipv4", fmt.Sprintf("192.0.2.%d", 1+s.next(3)), "4420")
		}
	case 1:
		id := s.port()
		what = "remove port " + id
		w.k.RemovePort(id)
	case 2:
		id, name, nqn := s.port(), s.pick(propNQNs), s.pick(propNQNs)
		what = "link " + id + " " + name + " -> " + nqn
		w.admin().Symlink(w.path("nvmet/subsystems", nqn), w.path("nvmet/ports", id, "subsystems", name))
	case 3:
		id, nqn := s.port(), s.pick(propNQNs)
		what = "unlink " + id + " " + nqn
		w.admin().Remove(w.path("nvmet/ports", id, "subsystems", nqn))
	case 4:
		id := s.port()
		attr := s.pick([]string{"addr_traddr", "addr_trsvcid", "addr_adrfam", "addr_trtype", "addr_treq"})
		v := s.pick([]string{"192.0.2.9", "4421", "ipv6", "tcp", "garbage"})
		what = "write " + id + " " + attr + "=" + v
		w.admin().WriteAttr(w.path("nvmet/ports", id, attr), v)
	case 5:
		p := s.portal()
		what = "add portal " + p
		iqn, tpg, np, _ := configfs.ParsePortalID(p)
		if _, err := os.Lstat(w.path("target/iscsi", iqn, tpg, "np", np)); err != nil {
			w.k.AddPortal(iqn, tpg, np)
		}
	case 6:
		p := s.portal()
		what = "remove portal " + p
		w.k.RemovePortal(p)
	case 7:
		p, on := s.portal(), s.next(2) == 1
		what = fmt.Sprintf("iser %s %v", p, on)
		w.iser(p, on)
	case 8:
		nqn := s.pick(propNQNs)
		what = "add subsystem " + nqn
		w.k.AddSubsystem(nqn)
	case 9:
		iqn := s.pick(propIQNs)
		what = "rmdir target " + iqn
		os.RemoveAll(w.path("target/iscsi", iqn))
	case 10:
		iqn, tpg := s.pick(propIQNs), s.pick(propTPGs)
		what = "rmdir tpg " + iqn + "/" + tpg
		os.RemoveAll(w.path("target/iscsi", iqn, tpg))
	case 11:
		id, nqn := s.port(), s.pick(propNQNs)
		switch s.next(3) {
		case 0:
			what = "model relink " + id + " " + nqn
			relink(w.m, id, configfs.Link{Name: nqn, NQN: nqn})
		case 1:
			what = "model unlink " + id + " " + nqn
			w.m.Unlink(id, configfs.Link{Name: nqn, NQN: nqn})
		default:
			p, on := s.portal(), s.next(2) == 1
			what = fmt.Sprintf("model iser %s %v", p, on)
			w.m.SetISER(p, on)
		}
	case 12:
		what = "a stray file in ports"
		os.WriteFile(w.path("nvmet/ports", s.pick([]string{"x", "1", "7"})), nil, 0o644)
	default:
		what = "compare"
		s.log = append(s.log, what)
		s.same()
		return
	}
	s.log = append(s.log, what)
}

func (s *script) same() {
	s.w.t.Helper()
	got, want := view(s.w.m), view(s.w.fsys)
	if got != want {
		s.w.t.Fatalf("after %q: model differs from a fresh read:\nmodel:\n%s\nfresh:\n%s", s.log, got, want)
	}
	s.generation()
}

// generation checks Generation against the last compare's: the same
// token means every answer is what it was then.
func (s *script) generation() {
	s.w.t.Helper()
	tok, ok := s.w.m.Generation()
	if !ok {
		s.mark = nil
		return
	}
	now := answersOf(s.w.fsys)
	if mk := s.mark; mk != nil && mk.tok == tok && !reflect.DeepEqual(mk.seen, now) {
		s.w.t.Fatalf("after %q, Generation is still %d (as after %q), yet the answers changed:\nthen %+v\nnow  %+v", s.log[mk.at:], tok, s.log[:mk.at], mk.seen, now)
	}
	s.mark = &mark{tok: tok, at: len(s.log), seen: now}
}

// run plays steps operations and checks the end state.
func (s *script) run(steps int) {
	for range steps {
		s.step()
	}
	s.same()
	s.w.m.Rescan()
	if st := s.w.m.Stats(); st.Disagreements != 0 {
		s.w.t.Fatalf("after %q: stats %+v: a rescan disagreed with the model:\n%s", s.log, st, s.w.logs)
	}
	s.same()
}

func TestPropertyRandomAdmin(t *testing.T) { propertyRandomAdmin(t, Options{RescanEvery: -1}) }

// TestPropertyRandomAdminIndexed: the same with every directory's
// children indexed by name (the path a large directory takes).
func TestPropertyRandomAdminIndexed(t *testing.T) {
	propertyRandomAdmin(t, Options{RescanEvery: -1, BigDir: 1})
}

func propertyRandomAdmin(t *testing.T, opts Options) {
	seqs := 300
	if testing.Short() {
		seqs = 50
	}
	base := t.TempDir()
	for i := range seqs {
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		root := filepath.Join(base, fmt.Sprint(i))
		os.Mkdir(root, 0o755)
		w := newWorld(t, root, basic, opts)
		s := &script{w: w, next: func(n int) int { return rng.IntN(n) }}
		s.run(10 + rng.IntN(40))
		w.m.Close()
		os.RemoveAll(root)
	}
}

func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 0, 13})
	f.Add([]byte{5, 0, 0, 0, 7, 0, 0, 0, 1, 13, 9, 0, 13, 5, 1, 1, 1})
	f.Add([]byte{11, 0, 0, 0, 2, 13, 11, 1, 1, 0, 13, 10, 1, 1, 13, 4, 2, 3, 3, 12, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return
		}
		w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: -1})
		next := func(n int) int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0]) % n
			data = data[1:]
			return v
		}
		s := &script{w: w, next: next}
		for len(data) > 0 {
			s.step()
		}
		s.run(0)
	})
}
