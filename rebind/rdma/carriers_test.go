package rdma

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mac(s string) []byte {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

// ipoib returns a 20-byte IPoIB hardware address: QPN then the port GID.
func ipoib(qpn uint32, gid string) []byte {
	g := raw16(gid)
	return append([]byte{byte(qpn >> 24), byte(qpn >> 16), byte(qpn >> 8), byte(qpn)}, g[:]...)
}

func roce(i uint32, ip, ndev, typ string) GID {
	return GID{Index: i, Raw: raw16(ip), Netdev: ndev, Type: typ}
}

func hwGID(i uint32, hw string, ndev string) GID {
	var raw [16]byte
	copy(raw[:], mac(hw))
	return GID{Index: i, Raw: raw, Netdev: ndev, Type: "IB/RoCE v1"}
}

// carrierDevices: rxe0 on veth0 (VLAN, macvlan, bond and IPv6 above it),
// siw0 on veth2 as 6.1 shows it (no netdev on the entry), siw1 on veth4 as
// 6.12 shows it, mlx5_0 (IB, two ports), rxe8 with an unknown table on
// veth9, and two devices rxe6/rxe5 that both carry 192.0.2.77 on bond1,
// listed out of index order.
func carrierDevices() []Device {
	const ll0 = "fe80::e8b0:e5ff:fede:8e8a"
	return []Device{
		{Index: 6, Name: "rxe6", Protocol: "roce", Ports: []Port{{Index: 1, Netdev: "veth6", GIDsKnown: true,
			GIDs: []GID{roce(0, "::ffff:192.0.2.77", "bond1", "RoCE v2")}}}},
		{Index: 0, Name: "rxe0", Protocol: "roce", Ports: []Port{{Index: 1, NetdevIndex: 3, Netdev: "veth0", GIDsKnown: true,
			GIDs: []GID{
				roce(0, ll0, "veth0", "IB/RoCE v1"), roce(1, ll0, "veth0", "RoCE v2"),
				roce(2, ll0, "veth0.100", "RoCE v2"),
				roce(3, "::ffff:192.0.2.1", "veth0.100", "IB/RoCE v1"), roce(4, "::ffff:192.0.2.1", "veth0.100", "RoCE v2"),
				roce(6, "::ffff:198.51.100.1", "mv0", "RoCE v2"),
				roce(7, "::ffff:203.0.113.5", "bond0", "RoCE v2"),
				roce(9, "2001:db8::1", "veth0", "RoCE v2"),
			}}}},
		{Index: 1, Name: "siw0", Protocol: "iw", NodeType: 4, Ports: []Port{{Index: 1, NetdevIndex: 7, Netdev: "veth2", GIDsKnown: true,
			GIDs: []GID{hwGID(0, "9a:05:f2:48:9c:e7", "")}}}},
		{Index: 2, Name: "mlx5_0", Protocol: "ib", Ports: []Port{
			{Index: 1, Netdev: "ib0", GIDsKnown: true, GIDs: []GID{{Index: 0, Raw: raw16("fe80::c42:a103:55:1"), Type: "IB/RoCE v1"}}},
			{Index: 2, Netdev: "ib1", GIDsKnown: true, GIDs: []GID{{Index: 0, Raw: raw16("fe80::c42:a103:55:2"), Type: "IB/RoCE v1"}}},
		}},
		{Index: 3, Name: "rxe8", Protocol: "roce", Ports: []Port{{Index: 1, NetdevIndex: 9, Netdev: "veth9"}}},
		{Index: 4, Name: "siw1", Protocol: "iw", NodeType: 4, Ports: []Port{{Index: 1, NetdevIndex: 11, Netdev: "veth4", GIDsKnown: true,
			GIDs: []GID{hwGID(0, "5a:00:00:00:00:04", "veth4")}}}},
		{Index: 5, Name: "rxe5", Protocol: "roce", Ports: []Port{
			{Index: 2, Netdev: "veth5", GIDsKnown: true, GIDs: []GID{roce(0, "::ffff:192.0.2.77", "bond1", "RoCE v2")}},
			{Index: 1, Netdev: "veth5", GIDsKnown: true, GIDs: []GID{roce(0, "::ffff:192.0.2.77", "bond1", "RoCE v2")}},
		}},
	}
}

func TestCarriersOf(t *testing.T) {
	t.Parallel()
	devs := carrierDevices()
	c := IndexCarriers(devs)
	ip := netip.MustParseAddr
	tests := []struct {
		name     string
		addr     Addr
		wantDev  string
		wantPort uint32
		wantHow  string
	}{
		{name: "VLAN upper",
			addr:    Addr{Ifindex: 4, Netdev: "veth0.100", IP: ip("192.0.2.1"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "macvlan upper",
			addr:    Addr{Ifindex: 5, Netdev: "mv0", IP: ip("198.51.100.1"), HWAddr: mac("ca:c7:db:1f:b0:0c")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "bond upper",
			addr:    Addr{Ifindex: 8, Netdev: "bond0", IP: ip("203.0.113.5"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "IPv6 on the port's netdev",
			addr:    Addr{Ifindex: 3, Netdev: "veth0", IP: ip("2001:db8::1"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "IPv6 link-local with a zone, on the VLAN",
			addr:    Addr{Ifindex: 4, Netdev: "veth0.100", IP: ip("fe80::e8b0:e5ff:fede:8e8a%veth0.100")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "IPv4-mapped form of the address",
			addr:    Addr{Ifindex: 4, Netdev: "veth0.100", IP: ip("::ffff:192.0.2.1")},
			wantDev: "rxe0", wantPort: 1, wantHow: "gid"},
		{name: "VLAN's address seen on the parent netdev: not carried",
			addr: Addr{Ifindex: 3, Netdev: "veth0", IP: ip("192.0.2.1"), HWAddr: mac("ea:b0:e5:de:8e:8a")}},
		{name: "address of the port's netdev but not in the table yet",
			addr: Addr{Ifindex: 3, Netdev: "veth0", IP: ip("192.0.2.9"), HWAddr: mac("ea:b0:e5:de:8e:8a")}},
		{name: "IPoIB parent",
			addr:    Addr{Ifindex: 20, Netdev: "ib0", IP: ip("192.0.2.200"), HWAddr: ipoib(0x00000048, "fe80::c42:a103:55:1")},
			wantDev: "mlx5_0", wantPort: 1, wantHow: "gid"},
		{name: "IPoIB child of port 2",
			addr:    Addr{Ifindex: 22, Netdev: "ib1.8001", IP: ip("192.0.2.201"), HWAddr: ipoib(0x00000149, "fe80::c42:a103:55:2")},
			wantDev: "mlx5_0", wantPort: 2, wantHow: "gid"},
		{name: "IPoIB address with a GID no port has",
			addr: Addr{Ifindex: 23, Netdev: "ib7", IP: ip("192.0.2.202"), HWAddr: ipoib(0x48, "fe80::c42:a103:55:9")}},
		{name: "IPoIB address never matches a RoCE entry",
			addr: Addr{Ifindex: 24, Netdev: "veth0", IP: ip("2001:db8::1"), HWAddr: ipoib(0x48, "fe80::e8b0:e5ff:fede:8e8a")}},
		{name: "iWARP 6.1: the netdev's MAC",
			addr:    Addr{Ifindex: 7, Netdev: "veth2", IP: ip("203.0.113.1"), HWAddr: mac("9a:05:f2:48:9c:e7")},
			wantDev: "siw0", wantPort: 1, wantHow: "gid"},
		{name: "iWARP 6.1: a VLAN keeps the MAC",
			addr:    Addr{Ifindex: 12, Netdev: "veth2.200", IP: ip("203.0.113.2"), HWAddr: mac("9a:05:f2:48:9c:e7")},
			wantDev: "siw0", wantPort: 1, wantHow: "gid"},
		{name: "iWARP 6.1: a macvlan has its own MAC",
			addr: Addr{Ifindex: 13, Netdev: "mv2", IP: ip("203.0.113.3"), HWAddr: mac("9a:05:f2:48:9c:e8")}},
		{name: "iWARP 6.12: entry 0's netdev",
			addr:    Addr{Ifindex: 11, Netdev: "veth4", IP: ip("198.51.100.4")},
			wantDev: "siw1", wantPort: 1, wantHow: "gid"},
		{name: "fallback by ifindex",
			addr:    Addr{Ifindex: 9, Netdev: "renamed9", IP: ip("198.51.100.9")},
			wantDev: "rxe8", wantPort: 1, wantHow: "netdev"},
		{name: "fallback by name",
			addr:    Addr{Netdev: "veth9", IP: ip("198.51.100.9")},
			wantDev: "rxe8", wantPort: 1, wantHow: "netdev"},
		{name: "no fallback for a known table",
			addr: Addr{Ifindex: 3, Netdev: "veth0", IP: ip("198.51.100.10")}},
		{name: "netdev no device carries",
			addr: Addr{Ifindex: 30, Netdev: "eth9", IP: ip("198.18.0.1"), HWAddr: mac("52:54:00:12:34:56")}},
		{name: "two devices: the lower index, then the lower port",
			addr:    Addr{Ifindex: 40, Netdev: "bond1", IP: ip("192.0.2.77"), HWAddr: mac("5a:00:00:00:00:05")},
			wantDev: "rxe5", wantPort: 1, wantHow: "gid"},
		{name: "invalid address",
			addr: Addr{Netdev: "veth0.100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dev, port, how, ok := c.Of(tt.addr)
			type result struct {
				Dev  string
				Port uint32
				How  string
				OK   bool
			}
			want := result{tt.wantDev, tt.wantPort, tt.wantHow, tt.wantDev != ""}
			if diff := cmp.Diff(want, result{dev.Name, port, how, ok}); diff != "" {
				t.Errorf("Of(%+v) (-want +got):\n%s", tt.addr, diff)
			}
		})
	}
}

func TestCarriersOfWholeDevice(t *testing.T) {
	t.Parallel()
	devs := carrierDevices()
	dev, _, _, ok := IndexCarriers(devs).Of(Addr{Netdev: "mv0", IP: netip.MustParseAddr("198.51.100.1")})
	if !ok {
		t.Fatal("Of: not carried")
	}
	if diff := cmp.Diff(devs[1], dev); diff != "" {
		t.Errorf("Of: device (-want +got):\n%s", diff)
	}
}

// An unknown table earlier in the device order wins over a known one
// later: rdma_cm would try that port first.
func TestCarriersOfFallbackOrder(t *testing.T) {
	t.Parallel()
	devs := []Device{
		{Index: 1, Name: "rxe1", Ports: []Port{{Index: 1, Netdev: "veth0", GIDsKnown: true,
			GIDs: []GID{roce(0, "::ffff:192.0.2.1", "veth0", "RoCE v2")}}}},
		{Index: 0, Name: "rxe0", Ports: []Port{{Index: 1, Netdev: "veth0"}}},
	}
	a := Addr{Netdev: "veth0", IP: netip.MustParseAddr("192.0.2.1")}
	dev, port, how, ok := IndexCarriers(devs).Of(a)
	if dev.Name != "rxe0" || port != 1 || how != "netdev" || !ok {
		t.Errorf("Of = %s/%d %q %v, want rxe0/1 netdev", dev.Name, port, how, ok)
	}
	devs[1].Index = 2
	dev, port, how, ok = IndexCarriers(devs).Of(a)
	if dev.Name != "rxe1" || port != 1 || how != "gid" || !ok {
		t.Errorf("Of = %s/%d %q %v, want rxe1/1 gid", dev.Name, port, how, ok)
	}
}

func TestCarriersZero(t *testing.T) {
	t.Parallel()
	if _, _, how, ok := (Carriers{}).Of(Addr{Netdev: "veth0", IP: netip.MustParseAddr("192.0.2.1")}); ok || how != "" {
		t.Errorf("zero Carriers: Of = %q, %v; want nothing", how, ok)
	}
}

func BenchmarkCarriersOf(b *testing.B) {
	var gids []GID
	for i := range 1000 {
		gids = append(gids, roce(uint32(i), netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String(), "veth0.100", "RoCE v2"))
	}
	c := IndexCarriers([]Device{{Name: "rxe0", Ports: []Port{{Index: 1, GIDsKnown: true, GIDs: gids}}}})
	a := Addr{Ifindex: 4, Netdev: "veth0.100", IP: netip.MustParseAddr("10.0.3.200"), HWAddr: mac("ea:b0:e5:de:8e:8a")}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, ok := c.Of(a); !ok {
			b.Fatal("not carried")
		}
	}
}
