package main

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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

func TestWaitEntries(t *testing.T) {
	d := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(d, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if rc := waitEntries([]string{"-dir", d, "-n", "2", "-timeout", "1s"}); rc != 0 {
		t.Fatalf("two entries, -n 2: exit %d, want 0", rc)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		os.WriteFile(filepath.Join(d, "c"), nil, 0o644)
	}()
	if rc := waitEntries([]string{"-dir", d, "-n", "3", "-timeout", "5s"}); rc != 0 {
		t.Fatalf("a third entry made after 50 ms, -n 3: exit %d, want 0", rc)
	}
	if rc := waitEntries([]string{"-dir", d, "-n", "4", "-timeout", "100ms"}); rc != 1 {
		t.Fatalf("three entries, -n 4: exit %d, want 1 (timeout)", rc)
	}
}
