//go:build linux

package sockdiag

import (
	"net"
	"net/netip"
	"slices"
	"testing"
)

// The running kernel lists a listener this test opens, and not once it
// is closed, nor a connected socket.
func TestTCPListenersLive(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	ap := netip.MustParseAddrPort(ln.Addr().String())
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	got, err := TCPListeners()
	if err != nil {
		t.Skipf("no sock_diag here: %v", err)
	}
	if !slices.Contains(got, ap) {
		t.Errorf("%v not among the listeners %v", ap, got)
	}
	if slices.Contains(got, local) {
		t.Errorf("the connected socket %v listed as a listener", local)
	}
	ln.Close()
	got, err = TCPListeners()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, ap) {
		t.Errorf("%v still listed after Close", ap)
	}
	if !slices.IsSortedFunc(got, func(a, b netip.AddrPort) int { return a.Compare(b) }) {
		t.Errorf("not sorted: %v", got)
	}
}

// The /proc fallback sees what sock_diag sees on this host.
func TestProcNetLive(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	got, err := procNet()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, ap) {
		t.Errorf("%v not among /proc/net/tcp's listeners %v", ap, got)
	}
}
