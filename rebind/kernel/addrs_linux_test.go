package kernel

import (
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
	t.Logf("%d addresses", len(addrs))
}
