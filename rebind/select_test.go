package rebind

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// The property that makes the selection safe: after any sequence of rounds,
// planning the endpoints Select picks (carrying the last decisions of the
// others) decides exactly what planning every endpoint decides — the same
// status items, heals and endpoint states. Rounds here go as the loop's
// do: memory changes only through Learn, learnOutcomes, forced and
// restarted, and the world between two rounds changes at random (devices
// reset and come back on other indexes, addresses move, listeners die or
// strand, ports and portals are created, changed and removed, the journal
// and saved configs come and go, the clock moves across graces, backoffs,
// the give-up timer and the boot window).
func TestSelectionPlansWhatAFullPlanPlans(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 150
	}
	selections := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		g := newGenWorld(r)
		cfg := g.config()
		mem := NewMemory()
		var base *Baseline
		for round := range 12 {
			obs := prepared(g.observe())
			sel := Select(&obs, mem, base)
			got := plan(obs, mem, cfg, sel)
			want := plan(obs, mem, cfg, All())
			if !got.carried && !got.fresh {
				selections++
			}
			if diff := diffPlans(want, got); diff != "" {
				t.Fatalf("seed %d round %d: the selection's plan (%d endpoints) differs from the full plan (-full +selection):\n%s\nworld: %s",
					seed, round, sel.Size(), diff, g)
			}
			// As the loop: outcomes of some heals, then Learn of the plan.
			var outcomes []Outcome
			for _, h := range got.Heals {
				if h.Action.heals() && r.IntN(3) == 0 {
					outcomes = append(outcomes, Outcome{Endpoint: h.Endpoint, Keys: h.Keys, Result: Result(r.IntN(5))})
				}
			}
			if len(outcomes) > 0 {
				mem = learnOutcomes(mem, outcomes, obs.Now)
				// The loop plans its verification against this round's.
				obs2 := prepared(g.observe())
				sel2 := Select(&obs2, mem, baseline(obs, got))
				got = plan(obs2, mem, cfg, sel2)
				if diff := diffPlans(plan(obs2, mem, cfg, All()), got); diff != "" {
					t.Fatalf("seed %d round %d (verification): the selection's plan differs from the full plan (-full +selection):\n%s", seed, round, diff)
				}
				obs = obs2
			}
			mem, _ = Learn(mem, got.endpoints(), got.Items, obs.Now)
			// Learn is idempotent (the loop learns a carried plan once):
			// the same decisions, later, teach nothing more.
			if again, pins := Learn(mem, got.endpoints(), got.Items, obs.Now.Add(time.Minute)); pins || !reflect.DeepEqual(again, mem) {
				t.Fatalf("seed %d round %d: learning the same plan again changed memory (pins %v):\n%s", seed, round, pins, cmp.Diff(mem, again, cmpopts.EquateEmpty()))
			}
			base = baseline(obs, got)
			switch r.IntN(10) {
			case 0:
				if len(got.Items) > 0 {
					it := got.Items[r.IntN(len(got.Items))]
					mem = mem.forced(it.Key, it.Endpoint)
				}
			case 1:
				cfg = g.config()
				mem, base = mem.restarted(), nil // a reload: the loop selects all
			}
			g.change()
		}
	}
	if selections == 0 {
		t.Fatal("no plan of a selection: the test tests nothing")
	}
}

// TestGeneratorChangesEveryInput: the random worlds of the property tests
// change every input the engine declares (inputs.go), so that a new
// input without a generator of its changes fails here.
func TestGeneratorChangesEveryInput(t *testing.T) {
	changed := map[string]int{}
	for seed := range 40 {
		g := newGenWorld(rand.New(rand.NewPCG(uint64(seed), 7)))
		prev := g.observe()
		for range 12 {
			g.change()
			obs := g.observe()
			for _, in := range inputs {
				if !in.same(&obs, &prev) {
					changed[in.name]++
				}
			}
			prev = obs
		}
	}
	for _, in := range inputs {
		if changed[in.name] == 0 {
			t.Errorf("input %q: the generator never changes it (genWorld.change)", in.name)
		}
	}
}

func diffPlans(want, got Planned) string {
	opts := cmp.Options{cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.AddrPort{}, netip.Addr{}), cmp.Comparer(func(a, b error) bool {
		return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error())
	})}
	if d := cmp.Diff(want.Items, got.Items, opts); d != "" {
		return "items: " + d
	}
	if d := cmp.Diff(want.Heals, got.Heals, opts); d != "" {
		return "heals: " + d
	}
	byEndpoint := func(a, b EndpointState) int { return compareEndpoints(a.Endpoint, b.Endpoint) }
	return cmp.Diff(slices.SortedFunc(want.endpoints(), byEndpoint), slices.SortedFunc(got.endpoints(), byEndpoint), opts)
}

// genWorld is a small random world: two or three RDMA devices over three
// netdevs, five addresses, ports and portals on them.
type genWorld struct {
	r         *rand.Rand
	now       time.Time
	devs      []rdma.Device
	nextIndex uint32
	addrs     map[string]string // ip → netdev (absent: on no netdev)
	listen    map[string]int    // "owner ip:port" → device index it listens on (-1: none)
	ports     []configfs.Port
	portals   []configfs.Portal
	journal   map[Key]Intent
	declared  []Declared
	bootUntil time.Time
	eventAt   time.Time
	listErr   error
	addrErr   error
	tcpListen map[string]bool // "ip|svc" of a TCP port: a socket in LISTEN (while the port has links)
	tcpErr    error
	configfs  ConfigfsSight // what the root showed
}

var (
	genIPs     = []string{"192.0.2.1", "192.0.2.2", "198.51.100.1", "2001:db8::1", "10.0.0.1"}
	genNetdevs = []string{"veth0", "veth1", "veth2"}
	genNQNs    = []string{"nqn.a", "nqn.b", "nqn.c"}
)

func newGenWorld(r *rand.Rand) *genWorld {
	g := &genWorld{r: r, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), addrs: map[string]string{}, listen: map[string]int{}, journal: map[Key]Intent{}, tcpListen: map[string]bool{}}
	for i := range 2 + r.IntN(2) {
		g.addDevice(genNetdevs[i])
	}
	for _, ip := range genIPs {
		if r.IntN(5) > 0 {
			g.addrs[ip] = genNetdevs[r.IntN(len(genNetdevs))]
		}
	}
	for i := range 1 + r.IntN(6) {
		g.ports = append(g.ports, g.port(fmt.Sprint(i+1)))
	}
	for range r.IntN(5) {
		g.portals = append(g.portals, g.portal())
	}
	slices.SortFunc(g.portals, func(a, b configfs.Portal) int { return strings.Compare(a.ID(), b.ID()) })
	g.portals = slices.CompactFunc(g.portals, func(a, b configfs.Portal) bool { return a.ID() == b.ID() })
	g.bootUntil = g.now.Add(time.Duration(r.IntN(20)) * time.Second)
	for _, l := range g.listenerKeys() {
		if r.IntN(4) > 0 {
			g.listen[l] = g.carrierIndex(l)
		}
	}
	for _, p := range g.ports {
		if p.Trtype == "tcp" && r.IntN(3) > 0 {
			g.tcpListen[net(p.Traddr, p.Trsvcid)] = true
		}
	}
	return g
}

func (g *genWorld) config() Config {
	cfg := DefaultConfig()
	cfg.GiveUpAfter = []time.Duration{0, 3 * time.Second, time.Minute}[g.r.IntN(3)]
	cfg.PinDevice = g.r.IntN(4) == 0
	if g.r.IntN(3) == 0 {
		cfg.Watch = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	}
	return cfg
}

func (g *genWorld) addDevice(netdev string) {
	d := rdma.Device{Index: g.nextIndex, Name: "rxe" + netdev[len(netdev)-1:], NodeGUID: uint64(0x10 + g.r.IntN(3)), Protocol: "roce",
		Ports: []rdma.Port{{Index: 1, Netdev: netdev, GIDsKnown: g.r.IntN(8) > 0}}}
	g.nextIndex++
	g.devs = append(g.devs, d)
}

func (g *genWorld) port(id string) configfs.Port {
	p := configfs.Port{ID: id, Trtype: "rdma", Adrfam: "ipv4", Traddr: genIPs[g.r.IntN(len(genIPs))], Trsvcid: []string{"4420", "4421"}[g.r.IntN(2)]}
	if netip.MustParseAddr(p.Traddr).Is6() {
		p.Adrfam = "ipv6"
	}
	switch g.r.IntN(12) {
	case 0, 4, 5:
		p.Trtype = "tcp"
	case 1:
		p.Traddr = "0.0.0.0"
	case 2:
		p.Err = errors.New("garbage in addr_trsvcid")
	case 3:
		p.Traddr = "not-an-ip"
	}
	for _, n := range genNQNs {
		if g.r.IntN(2) == 0 {
			p.Links = append(p.Links, configfs.Link{Name: n, NQN: n})
		}
	}
	return p
}

func (g *genWorld) portal() configfs.Portal {
	ap := netip.AddrPortFrom(netip.MustParseAddr(genIPs[g.r.IntN(len(genIPs))]), 3260)
	np := ap.String()
	p := configfs.Portal{IQN: fmt.Sprintf("iqn.2024-01.lab:t%d", g.r.IntN(4)), TPG: "tpgt_1", NP: np, Addr: ap, ISER: g.r.IntN(4) > 0}
	if g.r.IntN(15) == 0 {
		p.Err = errors.New("iser unreadable")
	}
	return p
}

// listenerKeys are the listeners the objects could have.
func (g *genWorld) listenerKeys() []string {
	var ks []string
	for _, p := range g.ports {
		ks = append(ks, "nvmet_rdma "+net(p.Traddr, p.Trsvcid))
	}
	for _, p := range g.portals {
		ks = append(ks, "ib_isert "+p.Addr.String())
	}
	return ks
}

func net(ip, svc string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip + ":" + svc
	}
	return netip.AddrPortFrom(a, 0).Addr().String() + "|" + svc
}

// carrierIndex is the index of the device whose netdev holds the address
// of listener l, or of a random device (a stranded listener).
func (g *genWorld) carrierIndex(l string) int {
	if len(g.devs) == 0 {
		return -1
	}
	return int(g.devs[g.r.IntN(len(g.devs))].Index)
}

func (g *genWorld) observe() Observed {
	obs := Observed{Now: g.now, BootUntil: g.bootUntil, EventAt: g.eventAt, Subsystems: map[string]bool{}, LinksUnread: map[string]bool{},
		Journal: map[Key]Intent{}, ListenersErr: g.listErr, AddrsErr: g.addrErr, TCPErr: g.tcpErr, Configfs: g.configfs}
	if g.tcpErr == nil {
		for _, p := range g.ports {
			if ap, err := p.Addr(); err == nil && p.Trtype == "tcp" && len(p.Links) > 0 && g.tcpListen[net(p.Traddr, p.Trsvcid)] {
				obs.TCP = append(obs.TCP, ap)
			}
		}
		slices.SortFunc(obs.TCP, netip.AddrPort.Compare)
		obs.TCP = slices.Compact(obs.TCP)
	}
	for _, n := range genNQNs[:2] {
		obs.Subsystems[n] = true
	}
	for _, d := range g.devs {
		d.Ports = slices.Clone(d.Ports)
		if d.Ports[0].GIDsKnown {
			for ip, nd := range g.addrs {
				if nd == d.Ports[0].Netdev {
					d.Ports[0].GIDs = append(d.Ports[0].GIDs, rdma.GID{Index: uint32(len(d.Ports[0].GIDs)), Raw: netip.MustParseAddr(ip).As16(), Netdev: nd})
				}
			}
			slices.SortFunc(d.Ports[0].GIDs, func(a, b rdma.GID) int { return netip.AddrFrom16(a.Raw).Compare(netip.AddrFrom16(b.Raw)) })
		}
		obs.Devices = append(obs.Devices, d)
	}
	for _, ip := range genIPs {
		if nd, ok := g.addrs[ip]; ok {
			obs.Addrs = append(obs.Addrs, rdma.Addr{Ifindex: slices.Index(genNetdevs, nd) + 2, Netdev: nd, IP: netip.MustParseAddr(ip)})
		}
	}
	devName := func(idx int) string {
		for _, d := range g.devs {
			if int(d.Index) == idx {
				return d.Name
			}
		}
		return ""
	}
	if g.listErr == nil {
		for _, p := range g.ports {
			if idx, ok := g.listen["nvmet_rdma "+net(p.Traddr, p.Trsvcid)]; ok && idx >= 0 && devName(idx) != "" && len(p.Links) > 0 {
				if ap, err := p.Addr(); err == nil {
					obs.Listeners = append(obs.Listeners, rdma.CMID{DevIndex: uint32(idx), DevName: devName(idx), Port: 1, State: rdma.CMStateListen, Src: ap, KernName: "nvmet_rdma"})
				}
			}
		}
		for _, p := range g.portals {
			if idx, ok := g.listen["ib_isert "+p.Addr.String()]; ok && idx >= 0 && devName(idx) != "" && p.ISER {
				obs.Listeners = append(obs.Listeners, rdma.CMID{DevIndex: uint32(idx), DevName: devName(idx), Port: 1, State: rdma.CMStateListen, Src: p.Addr, KernName: "ib_isert"})
			}
		}
	}
	for _, p := range g.ports {
		p.Links = slices.Clone(p.Links)
		obs.Ports = append(obs.Ports, p)
	}
	obs.Portals = slices.Clone(g.portals)
	for k, in := range g.journal {
		obs.Journal[k] = in
	}
	obs.Declared = slices.Clone(g.declared)
	// As observe reads: the links of a port whose listener is alive (and
	// that no journal entry or saved config names) are not read.
	obs = prepared(obs)
	for i, p := range obs.Ports {
		ep, ok := obs.portEndpoint(i)
		_, journaled := obs.Journal[Key{KindNvmet, p.ID}]
		if ok && p.Err == nil && !journaled && !slices.ContainsFunc(obs.Declared, func(d Declared) bool { return d.ID == p.ID }) &&
			obs.verdict(ep).State == StateListening {
			obs.Ports[i].Links = nil
			obs.LinksUnread[p.ID] = true
		}
	}
	return obs
}

// change moves the world on by one random event and the clock.
func (g *genWorld) change() {
	r := g.r
	g.now = g.now.Add([]time.Duration{0, 30 * time.Millisecond, 700 * time.Millisecond, 3 * time.Second, 6 * time.Second, time.Minute}[r.IntN(6)])
	for range 1 + r.IntN(3) {
		switch r.IntN(16) {
		case 0: // a device reset: gone, back under a new index
			if len(g.devs) > 0 {
				i := r.IntN(len(g.devs))
				nd := g.devs[i].Ports[0].Netdev
				g.devs = slices.Delete(g.devs, i, i+1)
				if r.IntN(3) > 0 {
					g.addDevice(nd)
				}
				g.eventAt = g.now
			}
		case 1: // an address moves or goes
			ip := genIPs[r.IntN(len(genIPs))]
			if r.IntN(3) == 0 {
				delete(g.addrs, ip)
			} else {
				g.addrs[ip] = genNetdevs[r.IntN(len(genNetdevs))]
			}
			g.eventAt = g.now
		case 2, 3: // a listener dies, comes back or strands
			ks := g.listenerKeys()
			if len(ks) > 0 {
				k := ks[r.IntN(len(ks))]
				if r.IntN(2) == 0 {
					delete(g.listen, k)
				} else {
					g.listen[k] = g.carrierIndex(k)
				}
			}
		case 4: // a port's links change
			if len(g.ports) > 0 {
				p := &g.ports[r.IntN(len(g.ports))]
				if len(p.Links) > 0 && r.IntN(2) == 0 {
					p.Links = p.Links[:len(p.Links)-1]
				} else {
					n := genNQNs[r.IntN(len(genNQNs))]
					if !slices.Contains(p.Links, configfs.Link{Name: n, NQN: n}) {
						p.Links = append(slices.Clone(p.Links), configfs.Link{Name: n, NQN: n})
					}
				}
			}
		case 5: // a port is created, re-addressed or removed
			switch {
			case len(g.ports) > 0 && r.IntN(3) == 0:
				g.ports = slices.Delete(slices.Clone(g.ports), 0, 1)
			case len(g.ports) > 0 && r.IntN(2) == 0:
				i := r.IntN(len(g.ports))
				g.ports[i] = g.port(g.ports[i].ID)
			default:
				g.ports = append(g.ports, g.port(fmt.Sprint(10+r.IntN(50))))
				slices.SortFunc(g.ports, func(a, b configfs.Port) int { return configfs.ComparePortIDs(a.ID, b.ID) })
				g.ports = slices.CompactFunc(g.ports, func(a, b configfs.Port) bool { return a.ID == b.ID })
			}
		case 6: // a portal is created, flips iser or is removed
			switch {
			case len(g.portals) > 0 && r.IntN(3) == 0:
				i := r.IntN(len(g.portals))
				g.portals = slices.Delete(slices.Clone(g.portals), i, i+1)
			case len(g.portals) > 0 && r.IntN(2) == 0:
				i := r.IntN(len(g.portals))
				g.portals[i].ISER = !g.portals[i].ISER
			default:
				g.portals = append(g.portals, g.portal())
				slices.SortFunc(g.portals, func(a, b configfs.Portal) int { return strings.Compare(a.ID(), b.ID()) })
				g.portals = slices.CompactFunc(g.portals, func(a, b configfs.Portal) bool { return a.ID() == b.ID() })
			}
		case 7: // a journal entry appears (a crash mid-heal) or goes
			if len(g.journal) > 0 && r.IntN(2) == 0 {
				clear(g.journal)
			} else if len(g.ports) > 0 {
				p := g.ports[r.IntN(len(g.ports))]
				ap, _ := p.Addr()
				g.journal[Key{KindNvmet, p.ID}] = Intent{Kind: KindNvmet, ID: p.ID, Address: ap.String(), Links: []configfs.Link{{Name: "nqn.a", NQN: "nqn.a"}, {Name: "nqn.c", NQN: "nqn.c"}}}
			} else if len(g.portals) > 0 {
				p := g.portals[r.IntN(len(g.portals))]
				g.journal[Key{KindLIO, p.ID()}] = Intent{Kind: KindLIO, ID: p.ID(), Address: p.Addr.String(), ISER: true}
			}
		case 8: // a saved config declares something
			g.declared = nil
			if len(g.ports) > 0 && r.IntN(2) == 0 {
				p := g.ports[r.IntN(len(g.ports))]
				ap, _ := p.Addr()
				g.declared = append(g.declared, Declared{Source: "config.json", Kind: KindNvmet, ID: p.ID, Addr: ap, NQNs: []string{"nqn.a", "nqn.b", "nqn.x"}})
			}
			if r.IntN(3) == 0 {
				g.declared = append(g.declared, Declared{Source: "config.json", Kind: KindNvmet, ID: "99", Addr: netip.MustParseAddrPort("192.0.2.9:4420")})
			}
		case 9: // the cm_id table or the addresses become unreadable, or readable again
			if r.IntN(3) == 0 {
				g.listErr = []error{errors.New("rdma netlink gone"), errors.New("cm_id dump: EINTR")}[r.IntN(2)]
			} else {
				g.listErr = nil
			}
			if r.IntN(6) == 0 {
				g.addrErr = errors.New("rtnetlink dump failed")
			} else {
				g.addrErr = nil
			}
		case 10: // a TCP socket goes or comes, sock_diag fails or works again
			if ps := slices.DeleteFunc(slices.Clone(g.ports), func(p configfs.Port) bool { return p.Trtype != "tcp" }); len(ps) > 0 {
				k := net(ps[r.IntN(len(ps))].Traddr, ps[r.IntN(len(ps))].Trsvcid)
				g.tcpListen[k] = !g.tcpListen[k]
			}
			if r.IntN(4) == 0 {
				g.tcpErr = errors.New("sock_diag: EPERM")
			} else {
				g.tcpErr = nil
			}
			// LIO's module loaded or unloaded meanwhile: the root's sight.
			g.configfs = ConfigfsSight{Probed: true, Root: "/sys/kernel/config", Mounted: true, Nvmet: true, LIO: r.IntN(2) == 0}
		default: // heals that worked: listeners where their address is carried
			for _, k := range g.listenerKeys() {
				if r.IntN(2) == 0 {
					g.listen[k] = g.carrierOf(k)
				}
			}
			for _, p := range g.ports {
				if _, held := g.addrs[p.Traddr]; p.Trtype == "tcp" && held && r.IntN(2) == 0 {
					g.tcpListen[net(p.Traddr, p.Trsvcid)] = true
				}
			}
		}
	}
}

// carrierOf is the index of the device whose netdev holds listener k's
// address (-1: none).
func (g *genWorld) carrierOf(k string) int {
	for ip, nd := range g.addrs {
		for _, d := range g.devs {
			if d.Ports[0].Netdev == nd && (containsIP(k, ip)) {
				return int(d.Index)
			}
		}
	}
	return -1
}

func containsIP(k, ip string) bool {
	a := netip.MustParseAddr(ip).String()
	return slices.ContainsFunc([]string{" " + a + "|", " " + a + ":", " [" + a + "]:"}, func(s string) bool { return strings.Contains(k, s) })
}

func (g *genWorld) String() string {
	return fmt.Sprintf("now %s, devices %v, addrs %v, listen %v, ports %v, portals %v, journal %v, declared %v, listErr %v",
		g.now.Format(time.TimeOnly), g.devs, g.addrs, g.listen, g.ports, g.portals, g.journal, g.declared, g.listErr)
}

func TestSelect(t *testing.T) {
	ip1, ip2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	ep1 := Endpoint{KindNvmet, netip.AddrPortFrom(ip1, 4420)}
	ep2 := Endpoint{KindNvmet, netip.AddrPortFrom(ip2, 4420)}
	epL := Endpoint{KindLIO, netip.AddrPortFrom(ip1, 3260)}
	rxe0 := rdma.Device{Index: 1, Name: "rxe0", Protocol: "roce", Ports: []rdma.Port{{Index: 1, Netdev: "veth0", GIDsKnown: true,
		GIDs: []rdma.GID{{Raw: ip1.As16(), Netdev: "veth0"}, {Index: 1, Raw: ip2.As16(), Netdev: "veth0"}}}}}
	listen := func(ep Endpoint) rdma.CMID {
		return rdma.CMID{DevIndex: 1, DevName: "rxe0", Port: 1, State: rdma.CMStateListen, Src: ep.Addr, KernName: ep.Owner()}
	}
	world := func() Observed {
		return Observed{Now: t0, Devices: []rdma.Device{rxe0}, Subsystems: map[string]bool{"nqn.a": true}, LinksUnread: map[string]bool{},
			Addrs:     []rdma.Addr{{Ifindex: 2, Netdev: "veth0", IP: ip1}, {Ifindex: 2, Netdev: "veth0", IP: ip2}},
			Ports:     []configfs.Port{nvmetPort("1", "192.0.2.1", "4420", "nqn.a"), nvmetPort("2", "192.0.2.2", "4420", "nqn.a")},
			Portals:   []configfs.Portal{{IQN: "iqn.2024-01.lab:t", TPG: "tpgt_1", NP: "192.0.2.1:3260", Addr: epL.Addr, ISER: true}},
			Listeners: []rdma.CMID{listen(ep1), listen(ep2), listen(epL)}}
	}
	tests := []struct {
		name   string
		change func(*Observed, *Memory)
		all    bool
		want   []Endpoint
	}{
		{name: "nothing changed: nothing to decide", change: func(*Observed, *Memory) {}},
		{name: "a port's links changed: its endpoint", change: func(o *Observed, _ *Memory) {
			o.Ports[1].Links = nil
		}, want: []Endpoint{ep2}},
		{name: "a port moved to another address: both endpoints", change: func(o *Observed, _ *Memory) {
			o.Ports[0].Traddr = "192.0.2.2"
		}, want: []Endpoint{ep1, ep2}},
		{name: "a port removed: its endpoint", change: func(o *Observed, _ *Memory) {
			o.Ports = o.Ports[1:]
		}, want: []Endpoint{ep1}},
		{name: "a portal set to iser=0: its endpoint", change: func(o *Observed, _ *Memory) {
			o.Portals[0].ISER = false
		}, want: []Endpoint{epL}},
		{name: "a listener gone: its endpoint", change: func(o *Observed, _ *Memory) {
			o.Listeners = o.Listeners[1:]
		}, want: []Endpoint{ep1}},
		{name: "a manual rebind: the object's endpoint", change: func(_ *Observed, m *Memory) {
			m.Forced[Key{KindNvmet, "2"}] = true
		}, want: []Endpoint{ep2}},
		{name: "a journal entry: the object's endpoint", change: func(o *Observed, _ *Memory) {
			o.Journal = map[Key]Intent{{KindLIO, "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"}: {}}
		}, want: []Endpoint{epL}},
		{name: "the cm_id table unreadable: all", change: func(o *Observed, _ *Memory) {
			o.ListenersErr, o.Listeners = errors.New("gone"), nil
		}, all: true},
		{name: "a saved config changed: all", change: func(o *Observed, _ *Memory) {
			o.Declared = []Declared{{Kind: KindNvmet, ID: "1"}}
		}, all: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, mem := prepared(world()), NewMemory()
			base := baseline(obs, plan(obs, mem, DefaultConfig(), All()))
			next := world()
			tt.change(&next, &mem)
			next = prepared(next)
			sel := Select(&next, mem, base)
			if tt.all != (sel.Size() < 0) {
				t.Fatalf("selects all: %v, want %v", sel.Size() < 0, tt.all)
			}
			if tt.all {
				return
			}
			var got []Endpoint
			for _, ep := range []Endpoint{ep1, ep2, epL} {
				if sel.all || sel.prev == nil || sel.decides()[ep.key()] {
					got = append(got, ep)
				}
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("selected (-want +got):\n%s", diff)
			}
		})
	}
	if Select(&Observed{}, NewMemory(), nil).Size() >= 0 {
		t.Error("no baseline must select all")
	}
}

// TestChangedVerdicts: the entries whose verdict differs between two
// observations, side by side, or by key when the order differs.
func TestChangedVerdicts(t *testing.T) {
	ep := func(i int) Endpoint {
		return Endpoint{KindNvmet, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 4420)}
	}
	live, dead := Verdict{State: StateListening, EntryDev: 1}, Verdict{State: StateDead}
	moved := Verdict{State: StateListening, EntryDev: 2}
	index := func(vs ...Verdict) endpointIndex {
		x := endpointIndex{at: map[epKey]int32{}}
		for i, v := range vs {
			x.at[ep(i).key()] = int32(i)
			x.list = append(x.list, endpointEntry{ep: ep(i), v: v, first: -1, last: -1})
		}
		return x
	}
	reversed := index(live, live, dead, live)
	reversed.list = []endpointEntry{reversed.list[3], reversed.list[2], reversed.list[1], reversed.list[0]}
	for i, e := range reversed.list {
		reversed.at[e.ep.key()] = int32(i)
	}
	tests := []struct {
		name string
		x, y endpointIndex
		want []int32
	}{
		{"the same verdicts", index(live, live, live, live), index(live, live, live, live), nil},
		{"moved to another device", index(moved, live, live, live), index(live, live, live, live), []int32{0}},
		{"lists apart, same order", index(live, dead, live, live), index(live, live, live, live), []int32{1}},
		{"lists apart, another order", reversed, index(live, live, live, live), []int32{1}},
		{"an endpoint the baseline did not have", index(live, live, live, live, dead), index(live, live, live, live), []int32{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := changedVerdicts(&tt.x, &tt.y)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("changed %v, want %v", got, tt.want)
			}
		})
	}
}
