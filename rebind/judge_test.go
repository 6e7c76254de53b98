package rebind

import (
	"net/netip"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

func TestJudge(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.1")
	ep := Endpoint{KindNvmet, netip.AddrPortFrom(ip, 4420)}
	gid := []rdma.GID{{Index: 0, Raw: ip.As16(), Netdev: "veth0"}}
	rxe0 := rdma.Device{Index: 3, Name: "rxe0", NodeGUID: 0x11, Protocol: "roce", Ports: []rdma.Port{{Index: 1, Netdev: "veth0", GIDs: gid, GIDsKnown: true}}}
	rxe1 := rdma.Device{Index: 4, Name: "rxe1", NodeGUID: 0x22, Protocol: "roce", Ports: []rdma.Port{{Index: 1, Netdev: "veth1", GIDsKnown: true}}}
	unknownTable := rdma.Device{Index: 5, Name: "rxe5", Protocol: "roce", Ports: []rdma.Port{{Index: 1, NetdevIndex: 2, Netdev: "veth0"}}}
	addr := []rdma.Addr{{Ifindex: 2, Netdev: "veth0", IP: ip}}
	listen := func(dev rdma.Device, owner string) rdma.CMID {
		return rdma.CMID{DevIndex: dev.Index, DevName: dev.Name, Port: 1, State: rdma.CMStateListen, Src: ep.Addr, KernName: owner}
	}
	tests := []struct {
		name       string
		devs       []rdma.Device
		addrs      []rdma.Addr
		cmids      []rdma.CMID
		unknown    bool
		want       State
		entry      string
		guid       uint64
		carriedBy  string
		carrierGID bool
	}{
		{name: "listening on the carrier", devs: []rdma.Device{rxe0}, addrs: addr, cmids: []rdma.CMID{listen(rxe0, "nvmet_rdma")},
			want: StateListening, entry: "rxe0", guid: 0x11, carriedBy: "rxe0", carrierGID: true},
		{name: "no LISTEN entry: dead", devs: []rdma.Device{rxe0}, addrs: addr, want: StateDead, carriedBy: "rxe0", carrierGID: true},
		{name: "another owner's listener is not this one's", devs: []rdma.Device{rxe0}, addrs: addr, cmids: []rdma.CMID{listen(rxe0, "ib_isert")},
			want: StateDead, carriedBy: "rxe0", carrierGID: true},
		{name: "no owner name (old kernels): taken as any owner's", devs: []rdma.Device{rxe0}, addrs: addr, cmids: []rdma.CMID{listen(rxe0, "")},
			want: StateListening, entry: "rxe0", guid: 0x11, carriedBy: "rxe0", carrierGID: true},
		{name: "on a device that no longer carries the address: stranded", devs: []rdma.Device{rxe0, rxe1}, addrs: addr, cmids: []rdma.CMID{listen(rxe1, "nvmet_rdma")},
			want: StateStranded, entry: "rxe1", guid: 0x22, carriedBy: "rxe0", carrierGID: true},
		{name: "address on no netdev: an entry is alive (nothing better to bind)", devs: []rdma.Device{rxe1}, cmids: []rdma.CMID{listen(rxe1, "nvmet_rdma")},
			want: StateListening, entry: "rxe1", guid: 0x22},
		{name: "carrier from the netdev fallback (GID table unknown): an entry is alive", devs: []rdma.Device{unknownTable, rxe1}, addrs: addr,
			cmids: []rdma.CMID{listen(rxe1, "nvmet_rdma")}, want: StateListening, entry: "rxe1", guid: 0x22, carriedBy: "rxe5"},
		{name: "cm_id table unreadable: unknown", devs: []rdma.Device{rxe0}, addrs: addr, unknown: true, want: StateUnknown, carriedBy: "rxe0", carrierGID: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := judge(ep, !tt.unknown, rdma.NewIndex(tt.devs, tt.addrs, tt.cmids))
			if v.State != tt.want || v.EntryName != tt.entry || v.EntryGUID != tt.guid || v.Carrier.Dev != tt.carriedBy && tt.carriedBy != "" || v.Carrier.FromGID != tt.carrierGID {
				t.Errorf("judge = %v on %q (GUID %#x), carried by %q (from a GID: %v); want %v on %q (%#x), carried by %q (%v)",
					v.State, v.EntryName, v.EntryGUID, v.Carrier.Dev, v.Carrier.FromGID, tt.want, tt.entry, tt.guid, tt.carriedBy, tt.carrierGID)
			}
		})
	}
}

// Every object's endpoint is judged once per observation, and the plan
// reads that verdict: a plan of an observation whose verdict says dead
// heals, whatever the tables it was judged from say now.
func TestPlanReadsTheObservationsVerdict(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.1")
	ep := Endpoint{KindNvmet, netip.AddrPortFrom(ip, 4420)}
	rxe0 := rdma.Device{Index: 3, Name: "rxe0", Protocol: "roce", Ports: []rdma.Port{{Index: 1, Netdev: "veth0", GIDs: []rdma.GID{{Raw: ip.As16(), Netdev: "veth0"}}, GIDsKnown: true}}}
	obs := prepared(Observed{Now: t0, Devices: []rdma.Device{rxe0}, Addrs: []rdma.Addr{{Ifindex: 2, Netdev: "veth0", IP: ip}},
		Ports: []configfsPort{nvmetPort("1", "192.0.2.1", "4420", "nqn.a")}, Subsystems: map[string]bool{"nqn.a": true}, LinksUnread: map[string]bool{}})
	if got := obs.verdict(ep).State; got != StateDead || len(obs.eps.list) != 1 {
		t.Fatalf("endpoints %+v, want the one endpoint dead", obs.eps.list)
	}
	p := Plan(obs, NewMemory(), DefaultConfig())
	if len(p.Heals) != 1 || p.Heals[0].Action != ActRebindPort {
		t.Fatalf("heals %+v, want the rebind of port 1", p.Heals)
	}
	obs.entry(ep).v.State = StateListening
	if p := Plan(obs, NewMemory(), DefaultConfig()); len(p.Heals) != 0 || p.Items[0].State != StateListening {
		t.Errorf("a plan judged again instead of reading the verdict: heals %+v, items %+v", p.Heals, p.Items)
	}
}
