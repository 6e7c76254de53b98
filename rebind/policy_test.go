package rebind

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

type configfsPort = configfs.Port

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func nvmetPort(id, ip, svc string, nqns ...string) configfs.Port {
	p := configfs.Port{ID: id, Trtype: "rdma", Adrfam: "ipv4", Traddr: ip, Trsvcid: svc}
	for _, n := range nqns {
		p.Links = append(p.Links, configfs.Link{Name: n, NQN: n})
	}
	return p
}

func TestGate(t *testing.T) {
	ep := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.1:4420")}
	k := Key{KindNvmet, "1"}
	rxe1 := rdma.Device{Index: 7, Name: "rxe1", NodeGUID: 0x22}
	carried := Carried{Netdev: "veth0", Held: true, Dev: rxe1.Name, Index: rxe1.Index, GUID: rxe1.NodeGUID, Port: 1, FromGID: true, HasDev: true}
	dead := Verdict{State: StateDead, Carrier: carried}
	stranded := Verdict{State: StateStranded, Carrier: carried, EntryName: "rxe0", EntryDev: 3}
	type want struct {
		why       string // substring; "" = runs now
		until     time.Time
		clockFree bool
		gaveUp    bool
	}
	tests := []struct {
		name   string
		v      Verdict
		obs    func(*Observed)
		mem    func(*Memory)
		cfg    func(*Config)
		expect want
	}{
		{name: "dead, carried, nothing in memory: runs", v: dead},
		{name: "addresses unknown", v: dead, obs: func(o *Observed) { o.AddrsErr = errors.New("dump failed") },
			expect: want{why: "addresses unknown", clockFree: true}},
		{name: "address on no netdev", v: Verdict{State: StateDead},
			expect: want{why: "to appear on a netdev", clockFree: true}},
		{name: "no GID entry yet, 30 ms after an event: looked at again at 50 ms", v: Verdict{State: StateDead, Carrier: Carried{Held: true, Netdev: "veth0"}},
			obs:    func(o *Observed) { o.EventAt = o.Now.Add(-30 * time.Millisecond) },
			expect: want{why: "no GID table entry yet", until: t0.Add(20 * time.Millisecond)}},
		{name: "no GID entry, the rechecks over: the resync looks again", v: Verdict{State: StateDead, Carrier: Carried{Held: true}},
			obs:    func(o *Observed) { o.EventAt = o.Now.Add(-time.Minute) },
			expect: want{why: "no GID table entry yet"}},
		{name: "stranded with pin_device: left where it is", v: stranded, cfg: func(c *Config) { c.PinDevice = true },
			expect: want{why: "pin_device = true: left on rxe0", clockFree: true}},
		{name: "give-up timer ran out", v: dead, mem: func(m *Memory) { m.DeadSince[ep] = t0.Add(-11 * time.Minute) },
			expect: want{why: "gave up", gaveUp: true, clockFree: true}},
		{name: "give-up timer off", v: dead, mem: func(m *Memory) { m.DeadSince[ep] = t0.Add(-11 * time.Minute) }, cfg: func(c *Config) { c.GiveUpAfter = 0 }},
		{name: "a manual rebind lifts give-up and backoff", v: dead,
			mem: func(m *Memory) {
				m.DeadSince[ep] = t0.Add(-time.Hour)
				m.NextTry[ep] = t0.Add(time.Second)
				m.Forced[k] = true
			}},
		{name: "the device it listened on is still registered: removal grace from dead-since", v: dead,
			mem:    func(m *Memory) { m.AliveOn[ep] = rxe1.Index + 1; m.DeadSince[ep] = t0.Add(-2 * time.Second) },
			expect: want{why: "removal is probably in progress", until: t0.Add(3 * time.Second)}},
		{name: "removal grace over", v: dead, mem: func(m *Memory) { m.AliveOn[ep] = rxe1.Index + 1; m.DeadSince[ep] = t0.Add(-6 * time.Second) }},
		{name: "came back under a new index: no grace", v: dead, mem: func(m *Memory) { m.AliveOn[ep] = 4 }},
		{name: "stranded: the kernel's own repair first", v: stranded,
			expect: want{why: "for the kernel's own repair", until: t0.Add(strandedGrace)}},
		{name: "stranded past the grace", v: stranded, mem: func(m *Memory) { m.DeadSince[ep] = t0.Add(-strandedGrace) }},
		{name: "pinned to another GUID", v: dead, cfg: func(c *Config) { c.PinDevice = true }, mem: func(m *Memory) { m.Pins[k] = 0x11 },
			expect: want{why: "pinned: was on node GUID"}},
		{name: "pinned to this GUID", v: dead, cfg: func(c *Config) { c.PinDevice = true }, mem: func(m *Memory) { m.Pins[k] = 0x22 }},
		{name: "backoff", v: dead, mem: func(m *Memory) { m.NextTry[ep] = t0.Add(400 * time.Millisecond) },
			expect: want{why: "retry in 400ms", until: t0.Add(400 * time.Millisecond)}},
		{name: "backoff over", v: dead, mem: func(m *Memory) { m.NextTry[ep] = t0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := Observed{Now: t0}
			mem := NewMemory()
			cfg := DefaultConfig()
			for _, f := range []func(){func() {
				if tt.obs != nil {
					tt.obs(&obs)
				}
			}, func() {
				if tt.mem != nil {
					tt.mem(&mem)
				}
			}, func() {
				if tt.cfg != nil {
					tt.cfg(&cfg)
				}
			}} {
				f()
			}
			h := gate(ep, []Key{k}, tt.v, &obs, mem, cfg)
			if tt.expect.why == "" {
				if h != nil {
					t.Fatalf("held: %+v, want it to run now", *h)
				}
				return
			}
			if h == nil {
				t.Fatalf("runs now, want held: %q", tt.expect.why)
			}
			if !strings.Contains(h.why, tt.expect.why) || !h.until.Equal(tt.expect.until) || h.clockFree != tt.expect.clockFree || h.gaveUp != tt.expect.gaveUp {
				t.Errorf("hold %+v, want %+v", *h, tt.expect)
			}
		})
	}
}

func TestDeadSince(t *testing.T) {
	ep := Endpoint{KindLIO, netip.MustParseAddrPort("192.0.2.1:3260")}
	seen := NewMemory()
	seen.DeadSince[ep] = t0.Add(-time.Minute)
	tests := []struct {
		name string
		mem  Memory
		st   State
		want time.Time
	}{
		{"first seen dead: now", NewMemory(), StateDead, t0},
		{"first seen stranded: now", NewMemory(), StateStranded, t0},
		{"seen before: kept", seen, StateDead, t0.Add(-time.Minute)},
		{"listening: none", seen, StateListening, time.Time{}},
		{"unknown: none", seen, StateUnknown, time.Time{}},
		{"nothing expected: none", seen, StateNone, time.Time{}},
	}
	for _, tt := range tests {
		if got := deadSince(tt.mem, ep, tt.st, t0); !got.Equal(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNextBackoff(t *testing.T) {
	tests := []struct {
		last time.Duration
		r    Result
		want time.Duration
		wait bool
	}{
		{0, ResultRefused, backoffMin, true},
		{backoffMin, ResultUnverified, 2 * backoffMin, true},
		{backoffMax, ResultError, backoffMax, true},
		{time.Second, ResultOK, 0, false},
		{time.Second, ResultNone, 0, false},
	}
	for _, tt := range tests {
		if d, wait := nextBackoff(tt.last, tt.r); d != tt.want || wait != tt.wait {
			t.Errorf("nextBackoff(%v, %v) = %v, %v; want %v, %v", tt.last, tt.r, d, wait, tt.want, tt.wait)
		}
	}
}

func TestNextLook(t *testing.T) {
	ep := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.1:4420")}
	other := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.2:4420")}
	later, sooner := t0.Add(time.Second), t0.Add(100*time.Millisecond)
	waits := func(ts ...time.Time) *wakeups {
		w := newWakeups()
		for i, t := range ts {
			w.add(Endpoint{KindLIO, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 3260)}.key(), t)
		}
		return w
	}
	items := waits(later, sooner, time.Time{})
	tests := []struct {
		name string
		pl   Planned
		ran  map[Endpoint]bool
		dry  bool
		want time.Time
	}{
		{"nothing waits: the next event or resync", Planned{wake: waits(time.Time{})}, nil, false, time.Time{}},
		{"the earliest retry", Planned{wake: items}, nil, false, sooner},
		{"a heal due that the round did not run: now", Planned{wake: items, Heals: []Heal{{Endpoint: other, Action: ActToggleISER}}}, map[Endpoint]bool{ep: true}, false, t0},
		{"a heal the round ran: its retry", Planned{wake: items, Heals: []Heal{{Endpoint: ep, Action: ActRebindPort}}}, map[Endpoint]bool{ep: true}, false, sooner},
		{"a journal drop waits for the resync", Planned{wake: waits(), Heals: []Heal{{Action: ActDropJournal}}}, nil, false, time.Time{}},
		{"a dry run never runs heals", Planned{wake: items, Heals: []Heal{{Endpoint: other, Action: ActRebindPort}}}, nil, true, sooner},
	}
	for _, tt := range tests {
		if got := nextLook(tt.pl, tt.ran, t0, tt.dry); !got.Equal(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestWakeups: the queue's next wake follows adds and forgets, and a
// time moved for the same endpoint leaves no stale wake behind.
func TestWakeups(t *testing.T) {
	k := func(i int) epKey {
		return Endpoint{KindNvmet, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 4420)}.key()
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newWakeups()
	if !w.next().IsZero() {
		t.Fatal("an empty queue wakes")
	}
	w.add(k(1), at(300))
	w.add(k(2), at(100))
	w.add(k(3), time.Time{}) // every round, no time of its own
	if got := w.next(); !got.Equal(at(100)) {
		t.Fatalf("next %v, want +100ms", got)
	}
	w.add(k(2), at(500)) // moved later: its old wake is stale
	if got := w.next(); !got.Equal(at(300)) {
		t.Fatalf("after a move, next %v, want +300ms", got)
	}
	w.forget(k(1))
	if got := w.next(); !got.Equal(at(500)) {
		t.Fatalf("after a forget, next %v, want +500ms", got)
	}
	c := w.clone()
	c.forget(k(2))
	if !c.next().IsZero() || !w.next().Equal(at(500)) || len(w.keys()) != 2 {
		t.Fatalf("a clone is not its own: clone next %v, queue next %v, %d keys", c.next(), w.next(), len(w.keys()))
	}
	for i := range 1000 { // churn: the heap stays bounded
		w.add(k(2), at(600+i))
	}
	if len(w.h) > 2*len(w.at)+65 {
		t.Fatalf("%d heap entries for %d endpoints", len(w.h), len(w.at))
	}
	w.clear()
	if !w.next().IsZero() || len(w.keys()) != 0 {
		t.Fatal("clear left wakes")
	}
}
