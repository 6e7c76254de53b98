package rebind

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestLearn(t *testing.T) {
	ep := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.1:4420")}
	gone := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.9:4420")}
	k, kGone := Key{KindNvmet, "1"}, Key{KindNvmet, "9"}
	items := []Item{{Key: k, Endpoint: ep}}
	was := func(f func(*Memory)) Memory { m := NewMemory(); f(&m); return m }
	tests := []struct {
		name        string
		mem         Memory
		es          EndpointState
		want        Memory
		pinsChanged bool
	}{
		{name: "first seen dead: dead-since now", mem: NewMemory(), es: EndpointState{Endpoint: ep, State: StateDead},
			want: was(func(m *Memory) { m.DeadSince[ep] = t0 })},
		{name: "still stranded: dead-since kept", mem: was(func(m *Memory) { m.DeadSince[ep] = t0.Add(-time.Minute) }),
			es:   EndpointState{Endpoint: ep, State: StateStranded},
			want: was(func(m *Memory) { m.DeadSince[ep] = t0.Add(-time.Minute) })},
		{name: "back: device remembered, pin saved, backoff and forced cleared",
			mem: was(func(m *Memory) {
				m.DeadSince[ep], m.NextTry[ep], m.Backoff[ep], m.Forced[k] = t0, t0, time.Second, true
			}),
			es:          EndpointState{Endpoint: ep, Keys: []Key{k}, State: StateListening, DevIndex: 4, GUID: 0x22},
			want:        was(func(m *Memory) { m.AliveOn[ep], m.Pins[k] = 5, 0x22 }),
			pinsChanged: true},
		{name: "unknown: no dead-since, backoff kept", mem: was(func(m *Memory) { m.DeadSince[ep], m.Backoff[ep] = t0, time.Second }),
			es: EndpointState{Endpoint: ep, State: StateUnknown}, want: was(func(m *Memory) { m.Backoff[ep] = time.Second })},
		{name: "objects and endpoints gone are forgotten",
			mem: was(func(m *Memory) {
				m.AliveOn[gone], m.Pins[kGone], m.Forced[kGone] = 1, 0x11, true
			}),
			es: EndpointState{Endpoint: ep, State: StateNone}, want: NewMemory(), pinsChanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.mem.clone()
			got, pins := Learn(tt.mem, slices.Values([]EndpointState{tt.es}), items, t0)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("memory (-want +got):\n%s", diff)
			}
			if pins != tt.pinsChanged {
				t.Errorf("pins changed %v, want %v", pins, tt.pinsChanged)
			}
			if diff := cmp.Diff(before, tt.mem, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("Learn wrote into the memory it was given (-before +after):\n%s", diff)
			}
		})
	}
}

func TestLearnOutcomes(t *testing.T) {
	ep := Endpoint{KindLIO, netip.MustParseAddrPort("192.0.2.1:3260")}
	k := Key{KindLIO, "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"}
	mem := NewMemory()
	mem.Forced[k] = true
	m1 := learnOutcomes(mem, []Outcome{{Endpoint: ep, Keys: []Key{k}, Result: ResultRefused}}, t0)
	if m1.Backoff[ep] != backoffMin || !m1.NextTry[ep].Equal(t0.Add(backoffMin)) || m1.Forced[k] {
		t.Errorf("after a refused bind: backoff %v, next %v, forced %v; want %v, %v, false", m1.Backoff[ep], m1.NextTry[ep], m1.Forced[k], backoffMin, t0.Add(backoffMin))
	}
	if !mem.Forced[k] {
		t.Error("learnOutcomes wrote into the memory it was given")
	}
	m2 := learnOutcomes(m1, []Outcome{{Endpoint: ep, Result: ResultUnverified}}, t0.Add(time.Second))
	if m2.Backoff[ep] != 2*backoffMin {
		t.Errorf("second failure: backoff %v, want %v", m2.Backoff[ep], 2*backoffMin)
	}
	m3 := learnOutcomes(m2, []Outcome{{Endpoint: ep, Result: ResultOK}}, t0.Add(2*time.Second))
	if _, ok := m3.Backoff[ep]; ok || len(m3.NextTry) > 0 {
		t.Errorf("after a heal: backoff %v, next %v; want none", m3.Backoff, m3.NextTry)
	}
}

func TestRestartedAndForced(t *testing.T) {
	ep := Endpoint{KindNvmet, netip.MustParseAddrPort("192.0.2.1:4420")}
	k := Key{KindNvmet, "1"}
	mem := NewMemory()
	mem.DeadSince[ep], mem.NextTry[ep], mem.Backoff[ep], mem.AliveOn[ep], mem.Pins[k] = t0, t0, time.Second, 1, 0x11
	r := mem.restarted()
	if len(r.DeadSince)+len(r.NextTry)+len(r.Backoff) != 0 || r.AliveOn[ep] != 1 || r.Pins[k] != 0x11 {
		t.Errorf("restarted: %+v; want the timers cleared, the device and pins kept", r)
	}
	f := mem.forced(k, ep)
	if !f.Forced[k] || len(f.DeadSince)+len(f.NextTry)+len(f.Backoff) != 0 {
		t.Errorf("forced: %+v; want the object forced and its endpoint's timers cleared", f)
	}
	if len(mem.DeadSince) != 1 || mem.Forced[k] {
		t.Error("restarted or forced wrote into the memory they were given")
	}
}
