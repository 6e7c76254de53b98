package rdma

import (
	"bytes"
	"testing"
)

func TestAddrs(t *testing.T) {
	addrs, err := Addrs()
	if err != nil {
		t.Fatalf("Addrs: %v", err)
	}
	for _, a := range addrs {
		if !a.IP.IsValid() || a.IP.Is4In6() || a.Ifindex <= 0 {
			t.Errorf("bad address %+v", a)
		}
		if a.IP.IsLoopback() && a.IP.Is4() && a.Netdev != "lo" {
			t.Errorf("loopback address %v on %q, want lo", a.IP, a.Netdev)
		}
	}
	// Addresses of one link carry its hardware address (the netlink
	// package leaves an all-zero one, lo's, nil), each in its own copy.
	hw := map[int][]byte{}
	for _, a := range addrs {
		prev, seen := hw[a.Ifindex]
		hw[a.Ifindex] = a.HWAddr
		if !seen {
			continue
		}
		if !bytes.Equal(prev, a.HWAddr) {
			t.Errorf("ifindex %d: hardware addresses %x and %x", a.Ifindex, prev, a.HWAddr)
		}
		if len(prev) > 0 && &prev[0] == &a.HWAddr[0] {
			t.Errorf("ifindex %d: hardware address shared between addresses, want copies", a.Ifindex)
		}
	}
	t.Logf("%d addresses", len(addrs))
}
