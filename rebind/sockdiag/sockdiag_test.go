package sockdiag

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

// msg builds a struct inet_diag_msg as the kernel sends it.
func msg(family, state uint8, ip netip.Addr, port uint16) []byte {
	b := make([]byte, msgLen)
	b[0], b[1] = family, state
	binary.BigEndian.PutUint16(b[4:6], port)
	if family == afInet {
		a := ip.As4()
		copy(b[8:12], a[:])
	} else {
		a := ip.As16()
		copy(b[8:24], a[:])
	}
	return b
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name      string
		b         []byte
		want      string
		listening bool
		err       string
	}{
		{"ipv4 listen", msg(afInet, tcpListen, netip.MustParseAddr("192.0.2.1"), 4420), "192.0.2.1:4420", true, ""},
		{"ipv6 listen", msg(afInet6, tcpListen, netip.MustParseAddr("2001:db8::1"), 4420), "[2001:db8::1]:4420", true, ""},
		{"ipv4-mapped unmapped", msg(afInet6, tcpListen, netip.MustParseAddr("::ffff:192.0.2.1"), 4420), "192.0.2.1:4420", true, ""},
		{"established", msg(afInet, 1, netip.MustParseAddr("192.0.2.1"), 4420), "192.0.2.1:4420", false, ""},
		{"short", make([]byte, msgLen-1), "", false, "71 bytes"},
		{"family", msg(7, tcpListen, netip.MustParseAddr("192.0.2.1"), 1), "", false, "address family 7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ap, l, err := parse(tt.b)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || ap.String() != tt.want || l != tt.listening {
				t.Fatalf("got %v %v %v, want %s %v", ap, l, err, tt.want, tt.listening)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	b := request{afInet6}.Serialize()
	if len(b) != reqLen || b[0] != afInet6 || b[1] != ipprotoTCP || binary.NativeEndian.Uint32(b[4:8]) != 1<<tcpListen {
		t.Fatalf("request % x", b)
	}
}
