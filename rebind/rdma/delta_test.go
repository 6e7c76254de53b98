package rdma

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// deltaWorld is a reading of the tables to mutate: carrierDevices (every
// kind of carrier), addresses on their netdevs and listeners on them.
func deltaWorld() ([]Device, []Addr, []CMID) {
	ip := netip.MustParseAddr
	addrs := []Addr{
		{Ifindex: 4, Netdev: "veth0.100", IP: ip("192.0.2.1"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
		{Ifindex: 5, Netdev: "mv0", IP: ip("198.51.100.1"), HWAddr: mac("ca:c7:db:1f:b0:0c")},
		{Ifindex: 8, Netdev: "bond0", IP: ip("203.0.113.5"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
		{Ifindex: 3, Netdev: "veth0", IP: ip("2001:db8::1"), HWAddr: mac("ea:b0:e5:de:8e:8a")},
		{Ifindex: 20, Netdev: "ib0", IP: ip("192.0.2.200"), HWAddr: ipoib(0x48, "fe80::c42:a103:55:1")},
		{Ifindex: 22, Netdev: "ib1.8001", IP: ip("192.0.2.201"), HWAddr: ipoib(0x149, "fe80::c42:a103:55:2")},
		{Ifindex: 7, Netdev: "veth2", IP: ip("203.0.113.1"), HWAddr: mac("9a:05:f2:48:9c:e7")},
		{Ifindex: 11, Netdev: "veth4", IP: ip("203.0.113.4"), HWAddr: mac("5a:00:00:00:00:04")},
		{Ifindex: 9, Netdev: "veth9", IP: ip("192.0.2.9")},
		{Ifindex: 30, Netdev: "bond1", IP: ip("192.0.2.77")},
	}
	var cmids []CMID
	for n, a := range addrs {
		devs := carrierDevices()
		d := devs[n%len(devs)]
		cmids = append(cmids,
			CMID{DevIndex: d.Index, DevName: d.Name, Port: 1, State: CMStateListen, Src: netip.AddrPortFrom(a.IP, 4420), KernName: "nvmet_rdma", CMIDN: uint32(2 * n)},
			CMID{DevIndex: d.Index, DevName: d.Name, Port: 1, State: CMStateListen, Src: netip.AddrPortFrom(a.IP, 3260), KernName: "ib_isert", CMIDN: uint32(2*n + 1)},
			CMID{DevIndex: d.Index, DevName: d.Name, Port: 1, State: CMStateConnect, Src: netip.AddrPortFrom(a.IP, 4420), KernName: "nvmet_rdma", CMIDN: uint32(100 + n)})
	}
	cmids = append(cmids, CMID{DevIndex: 0, DevName: "rxe0", State: CMStateListen, Src: netip.MustParseAddrPort("0.0.0.0:4420"), KernName: "nvmet_rdma"})
	return carrierDevices(), addrs, cmids
}

func cloneDevices(ds []Device) []Device {
	out := slices.Clone(ds)
	for i := range out {
		out[i].Ports = slices.Clone(out[i].Ports)
		for j := range out[i].Ports {
			out[i].Ports[j].GIDs = slices.Clone(out[i].Ports[j].GIDs)
		}
	}
	return out
}

// mutate changes one thing the way the kernel does: a reset (the device
// gone and back with a new index, its listeners gone), a rename, an
// address added, removed or moved, a GID entry gone or added, a port's
// netdev changed or its table unreadable, a listener gone or added, a
// host connection come.
func mutate(r *rand.Rand, devs []Device, addrs []Addr, cmids []CMID, nextIndex *uint32) ([]Device, []Addr, []CMID, string) {
	devs, addrs, cmids = cloneDevices(devs), slices.Clone(addrs), slices.Clone(cmids)
	pick := func(n int) int { return r.IntN(max(n, 1)) }
	switch r.IntN(11) {
	case 0:
		if len(devs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		i := pick(len(devs))
		old := devs[i].Index
		devs[i].Index = *nextIndex
		*nextIndex++
		cmids = slices.DeleteFunc(cmids, func(c CMID) bool { return c.DevIndex == old })
		return devs, addrs, cmids, fmt.Sprintf("reset %s", devs[i].Name)
	case 1:
		if len(devs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		i := pick(len(devs))
		devs[i].Name += "x"
		return devs, addrs, cmids, "rename " + devs[i].Name
	case 2:
		if len(devs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		if r.IntN(4) == 0 {
			return nil, addrs, cmids, "every device gone"
		}
		i := pick(len(devs))
		name := devs[i].Name
		devs = slices.Delete(devs, i, i+1)
		return devs, addrs, cmids, "remove " + name
	case 3:
		if len(addrs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		i := pick(len(addrs))
		a := addrs[i]
		addrs = slices.Delete(addrs, i, i+1)
		return devs, addrs, cmids, "delete address " + a.IP.String()
	case 4:
		if len(addrs) < 2 {
			return devs, addrs, cmids, "nothing"
		}
		i, j := pick(len(addrs)), pick(len(addrs))
		addrs[i].Netdev, addrs[i].Ifindex, addrs[i].HWAddr = addrs[j].Netdev, addrs[j].Ifindex, addrs[j].HWAddr
		return devs, addrs, cmids, "move address " + addrs[i].IP.String() + " to " + addrs[j].Netdev
	case 5:
		d := pick(len(devs))
		if len(devs) == 0 || len(devs[d].Ports) == 0 || len(devs[d].Ports[0].GIDs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		g := &devs[d].Ports[0].GIDs
		i := pick(len(*g))
		*g = slices.Delete(*g, i, i+1)
		return devs, addrs, cmids, fmt.Sprintf("GID entry %d of %s gone", i, devs[d].Name)
	case 6:
		d := pick(len(devs))
		if len(devs) == 0 || len(devs[d].Ports) == 0 || len(addrs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		a := addrs[pick(len(addrs))]
		p := &devs[d].Ports[0]
		p.GIDs = append(p.GIDs, GID{Index: uint32(100 + len(p.GIDs)), Raw: a.IP.As16(), Netdev: a.Netdev, Type: "RoCE v2"})
		return devs, addrs, cmids, fmt.Sprintf("GID of %s added to %s", a.IP, devs[d].Name)
	case 7:
		d := pick(len(devs))
		if len(devs) == 0 || len(devs[d].Ports) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		p := &devs[d].Ports[0]
		if r.IntN(2) == 0 {
			p.GIDsKnown, p.GIDs = false, nil
			return devs, addrs, cmids, "table of " + devs[d].Name + " unknown"
		}
		p.Netdev, p.NetdevIndex = "veth0", 3
		return devs, addrs, cmids, "port of " + devs[d].Name + " on veth0"
	case 8:
		if len(cmids) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		i := pick(len(cmids))
		c := cmids[i]
		cmids = slices.Delete(cmids, i, i+1)
		return devs, addrs, cmids, "listener " + c.Src.String() + " gone"
	case 9:
		if len(addrs) == 0 || len(devs) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		a, d := addrs[pick(len(addrs))], devs[pick(len(devs))]
		port := uint32(1)
		if r.IntN(4) == 0 {
			port = 0
		}
		cmids = append(cmids, CMID{DevIndex: d.Index, DevName: d.Name, Port: port, State: CMStateListen, Src: netip.AddrPortFrom(a.IP, 4420), KernName: "nvmet_rdma"})
		return devs, addrs, cmids, "listener " + a.IP.String() + " added on " + d.Name
	default:
		if len(cmids) == 0 {
			return devs, addrs, cmids, "nothing"
		}
		c := cmids[pick(len(cmids))]
		c.State, c.CMIDN = CMStateConnect, c.CMIDN+1000
		at := pick(len(cmids))
		cmids = slices.Insert(cmids, at, c)
		return devs, addrs, cmids, "a host connection"
	}
}

// An answer of the new index about an address:port the Delta does not
// touch, or about a device it does not name, is the old index's answer:
// random readings changed one thing at a time (and several at once).
func TestDeltaLeavesUntouchedAnswersAlone(t *testing.T) {
	owners := []string{"nvmet_rdma", "ib_isert", "", "other"}
	services := []uint16{4420, 3260, 4421}
	touched, untouched := 0, 0
	for seed := range 300 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		devs, addrs, cmids := deltaWorld()
		next := uint32(50)
		for round := range 6 {
			var what []string
			ndevs, naddrs, ncmids := devs, addrs, cmids
			for range 1 + r.IntN(3) {
				var w string
				ndevs, naddrs, ncmids, w = mutate(r, ndevs, naddrs, ncmids, &next)
				what = append(what, w)
			}
			old, cur := NewIndex(devs, addrs, cmids), NewIndex(ndevs, naddrs, ncmids)
			d := cur.Since(devs, addrs, cmids)
			ips := map[netip.Addr]bool{netip.IPv4Unspecified(): true, netip.MustParseAddr("192.0.2.250"): true}
			for _, a := range slices.Concat(addrs, naddrs) {
				ips[a.IP] = true
			}
			for ip := range ips {
				for _, svc := range services {
					ap := netip.AddrPortFrom(ip, svc)
					for _, o := range owners {
						if d.Touches(o, ap) {
							touched++
							continue
						}
						untouched++
						where := fmt.Sprintf("seed %d round %d (%v): %s %s", seed, round, what, o, ap)
						if oc, nc := old.Carrier(ip), cur.Carrier(ip); !sameCarrier(oc, nc) {
							t.Fatalf("%s: carrier %+v, was %+v, not touched", where, nc, oc)
						}
						if ol, nl := old.Listeners(o, ap), cur.Listeners(o, ap); !slices.EqualFunc(ol, nl, SameListener) {
							t.Fatalf("%s: listeners %+v, were %+v, not touched", where, nl, ol)
						}
						if ow, nw := old.Wildcard(o, ap), cur.Wildcard(o, ap); ow != nw || (ip.IsUnspecified() && (old.Devices() > 0) != (cur.Devices() > 0)) {
							t.Fatalf("%s: wildcard %v (devices %d), was %v (devices %d), not touched", where, nw, cur.Devices(), ow, old.Devices())
						}
					}
				}
			}
			for idx := range uint32(next) {
				if d.DeviceChanged(idx) {
					continue
				}
				od, ook := old.Device(idx)
				nd, nok := cur.Device(idx)
				if ook != nok || (ook && !sameIdentity(od, nd)) {
					t.Fatalf("seed %d round %d (%v): device %d %+v (%v), was %+v (%v), not named changed", seed, round, what, idx, nd, nok, od, ook)
				}
			}
			if !d.Empty() && slices.EqualFunc(devs, ndevs, Device.Equal) && slices.EqualFunc(addrs, naddrs, Addr.Equal) && sameListenerTables(cmids, ncmids) {
				t.Fatalf("seed %d round %d (%v): the same tables, a delta %+v", seed, round, what, d)
			}
			devs, addrs, cmids = ndevs, naddrs, ncmids
		}
	}
	if touched == 0 || untouched == 0 {
		t.Fatalf("touched %d, untouched %d: the test tests nothing", touched, untouched)
	}
	t.Logf("%d answers touched, %d untouched and checked", touched, untouched)
}

func sameCarrier(a, b Carrier) bool {
	return a.Held == b.Held && a.Addr.Equal(b.Addr) && a.HasDev == b.HasDev && a.FromGID == b.FromGID && a.Port == b.Port &&
		(!a.HasDev || sameIdentity(a.Dev, b.Dev))
}

func sameListenerTables(a, b []CMID) bool {
	l := func(s []CMID) []CMID {
		return slices.DeleteFunc(slices.Clone(s), func(c CMID) bool { return !c.Listening() })
	}
	return slices.EqualFunc(l(a), l(b), SameListener)
}

// A reset of one device of thousands of addresses touches that device's
// addresses and listeners only.
func TestDeltaOfAResetIsThatDevice(t *testing.T) {
	var devs []Device
	var addrs []Addr
	var cmids []CMID
	for d := range 2 {
		nd := fmt.Sprintf("veth%d", d)
		dev := Device{Index: uint32(d + 1), Name: fmt.Sprintf("rxe%d", d), Protocol: "roce", Ports: []Port{{Index: 1, Netdev: nd, NetdevIndex: uint32(10 + d), GIDsKnown: true}}}
		for i := range 50 {
			ip := netip.AddrFrom4([4]byte{10, byte(d), 0, byte(i)})
			dev.Ports[0].GIDs = append(dev.Ports[0].GIDs, GID{Index: uint32(i), Raw: ip.As16(), Netdev: nd, Type: "RoCE v2"})
			addrs = append(addrs, Addr{Ifindex: 10 + d, Netdev: nd, IP: ip})
			cmids = append(cmids, CMID{DevIndex: dev.Index, DevName: dev.Name, Port: 1, State: CMStateListen, Src: netip.AddrPortFrom(ip, 4420), KernName: "nvmet_rdma"})
		}
		devs = append(devs, dev)
	}
	ndevs := cloneDevices(devs)
	ndevs[1].Index = 3
	ncmids := slices.DeleteFunc(slices.Clone(cmids), func(c CMID) bool { return c.DevIndex == 2 })
	d := NewIndex(ndevs, addrs, ncmids).Since(devs, addrs, cmids)
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.IP, 4420)
		if got, want := d.Touches("nvmet_rdma", ap), a.Netdev == "veth1"; got != want {
			t.Errorf("%s on %s: touched %v, want %v", ap, a.Netdev, got, want)
		}
	}
	if !d.DeviceChanged(2) || !d.DeviceChanged(3) || d.DeviceChanged(1) {
		t.Errorf("devices changed: 1 %v 2 %v 3 %v, want false true true", d.DeviceChanged(1), d.DeviceChanged(2), d.DeviceChanged(3))
	}
}
