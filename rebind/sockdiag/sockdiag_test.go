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

func TestParseProcNet(t *testing.T) {
	// What the kernel prints (little-endian words): 192.0.2.1:4420 LISTEN,
	// 127.0.0.1:22 ESTABLISHED, and [2001:db8::1]:4420 LISTEN.
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 010200C0:1144 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0100007F:0016 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 20 4 30 10 -1\n"
	tcp6 := "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: B80D0120000000000000000001000000:1144 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0\n"
	if binary.NativeEndian.Uint32([]byte{1, 0, 0, 0}) != 1 {
		t.Skip("the fixture is little-endian")
	}
	got, err := parseProcNet("tcp", []byte(tcp))
	if err != nil || len(got) != 1 || got[0].String() != "192.0.2.1:4420" {
		t.Errorf("tcp: %v %v", got, err)
	}
	got, err = parseProcNet("tcp6", []byte(tcp6))
	if err != nil || len(got) != 1 || got[0].String() != "[2001:db8::1]:4420" {
		t.Errorf("tcp6: %v %v", got, err)
	}
	if _, err := parseProcNet("tcp", []byte("header\n   0: zz:1144 0 0A\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("garbage: %v", err)
	}
}
