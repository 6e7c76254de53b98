// Package sockdiag lists the kernel's TCP sockets in LISTEN through
// NETLINK_SOCK_DIAG (inet_diag), kernel sockets included: nvmet-tcp's
// listener is one (KERNEL.md, "NVMe/TCP at boot"). It asks the kernel for
// the LISTEN state only, so a target with thousands of connected queues
// sends no more than its listeners. Where the kernel has no TCP sock_diag
// (tcp_diag not loaded and not loadable: module autoloading off, or not
// built), it reads /proc/net/tcp and tcp6 instead.
package sockdiag

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The wire format (linux/inet_diag.h, linux/sock_diag.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	tcpListen        = 10 // TCP_LISTEN
	reqLen           = 56 // struct inet_diag_req_v2
	msgLen           = 72 // struct inet_diag_msg
	afInet           = 2
	afInet6          = 10
	ipprotoTCP       = 6
)

// request is a struct inet_diag_req_v2 asking for one family's TCP
// sockets in LISTEN.
type request struct{ family uint8 }

func (r request) Len() int { return reqLen }

func (r request) Serialize() []byte {
	b := make([]byte, reqLen)
	b[0], b[1] = r.family, ipprotoTCP
	binary.NativeEndian.PutUint32(b[4:8], 1<<tcpListen) // idiag_states
	return b                                            // the socket id is zero: every socket
}

// parse reads one struct inet_diag_msg: the socket's local address and
// port, and whether it is in LISTEN.
func parse(b []byte) (ap netip.AddrPort, listening bool, err error) {
	if len(b) < msgLen {
		return netip.AddrPort{}, false, fmt.Errorf("sock_diag: message of %d bytes, want at least %d", len(b), msgLen)
	}
	family, state := b[0], b[1]
	port := binary.BigEndian.Uint16(b[4:6]) // idiag_sport, network order
	var ip netip.Addr
	switch family {
	case afInet:
		ip = netip.AddrFrom4([4]byte(b[8:12]))
	case afInet6:
		ip = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
	default:
		return netip.AddrPort{}, false, fmt.Errorf("sock_diag: address family %d, want AF_INET or AF_INET6", family)
	}
	return netip.AddrPortFrom(ip, port), state == tcpListen, nil
}

// parseProcNet reads /proc/net/tcp or tcp6 text: the local address:port
// of every socket in LISTEN (st 0A). The kernel prints an address as its
// 32-bit words, each in host byte order (little-endian on every
// architecture Debian builds this for but s390x, ppc64 and the like:
// native order is what is undone), and the port in hex.
func parseProcNet(name string, b []byte) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue // the header, the last newline
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("%s line %d: %d fields", name, i+1, len(f))
		}
		if f[3] != "0A" {
			continue
		}
		ha, hp, ok := strings.Cut(f[1], ":")
		raw, err := hex.DecodeString(ha)
		if !ok || err != nil || (len(raw) != 4 && len(raw) != 16) {
			return nil, fmt.Errorf("%s line %d: local address %q", name, i+1, f[1])
		}
		port, err := strconv.ParseUint(hp, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: local port %q", name, i+1, f[1])
		}
		for w := 0; w < len(raw); w += 4 {
			binary.BigEndian.PutUint32(raw[w:w+4], binary.NativeEndian.Uint32(raw[w:w+4]))
		}
		ip, _ := netip.AddrFromSlice(raw)
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	return out, nil
}
