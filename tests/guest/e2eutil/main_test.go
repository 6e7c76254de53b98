package main

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// The /proc/net/tcp reader finds a listener this test opens (IPv4 and
// IPv6 where the host has it), and not once it is closed.
func TestTCPListening(t *testing.T) {
	for _, tt := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		ln, err := net.Listen(tt.network, tt.addr)
		if err != nil {
			t.Logf("%s: %v", tt.network, err)
			continue
		}
		ap := netip.MustParseAddrPort(ln.Addr().String())
		port := ln.Addr().(*net.TCPAddr).Port
		ok, err := tcpListening(ap.Addr(), itoa(port))
		if err != nil || !ok {
			t.Errorf("%v: listening %v, %v", ap, ok, err)
		}
		ln.Close()
		if ok, _ := tcpListening(ap.Addr(), itoa(port)); ok {
			t.Errorf("%v still listening after Close", ap)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// wait-count counts bound listeners only: a wildcard's per-device children
// carry no port index and other states are connections.
func TestBound(t *testing.T) {
	one := 1
	ids := []cmID{
		{State: "LISTEN", Port: &one},
		{State: "LISTEN"},
		{State: "CONNECT", Port: &one},
		{State: "LISTEN", Port: &one},
	}
	if got := bound(ids); got != 2 {
		t.Errorf("bound = %d, want 2", got)
	}
}
