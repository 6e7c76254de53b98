package rdma

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// loadHex reads a testdata/*.hex fixture: one datagram per non-comment line.
func loadHex(tb testing.TB, name string) [][]byte {
	tb.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		tb.Skip("fixtures were recorded on little-endian x86_64; this host is big-endian")
	}
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			tb.Fatalf("%s:%d: %v", name, n, err)
		}
		out = append(out, b)
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return out
}

// answers returns the kernel's datagrams of an nldev fixture (all but the request).
func answers(tb testing.TB, name string) [][]byte {
	tb.Helper()
	d := loadHex(tb, name)
	if len(d) < 2 {
		tb.Fatalf("%s: %d datagrams, want a request and at least one answer", name, len(d))
	}
	return d[1:]
}

func cmpOpts() cmp.Options {
	return cmp.Options{
		cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

const psTCP = 0x106

// s1CMIDs are the four S1 listeners of rxe0 (index 0) under the name dev.
func s1CMIDs(dev string) []CMID {
	return []CMID{
		{DevIndex: 0, DevName: dev, Port: 1, State: CMStateListen, PS: psTCP, Src: ap("192.0.2.1:4420"), Dst: ap("0.0.0.0:0"), CMIDN: 0, KernName: "nvmet_rdma"},
		{DevIndex: 0, DevName: dev, Port: 1, State: CMStateListen, PS: psTCP, Src: ap("[2001:db8::1]:4420"), Dst: ap("[::]:0"), CMIDN: 1, KernName: "nvmet_rdma"},
		{DevIndex: 0, DevName: dev, Port: 0, State: CMStateListen, PS: psTCP, Src: ap("0.0.0.0:4430"), CMIDN: 2, KernName: "nvmet_rdma"},
		{DevIndex: 0, DevName: dev, Port: 1, State: CMStateListen, PS: psTCP, Src: ap("192.0.2.1:3260"), Dst: ap("0.0.0.0:0"), CMIDN: 3, KernName: "ib_isert"},
	}
}

func TestParseCMIDs(t *testing.T) {
	t.Parallel()

	s1c := append(s1CMIDs("rxe0"),
		CMID{Port: 1, State: CMStateConnect, PS: psTCP, Src: ap("192.0.2.1:52247"), Dst: ap("192.0.2.1:4420"), CMIDN: 4, KernName: "nvme_rdma"},
		CMID{Port: 1, State: CMStateConnect, PS: psTCP, Src: ap("192.0.2.1:4420"), Dst: ap("192.0.2.1:52247"), CMIDN: 5, KernName: "nvmet_rdma"},
		CMID{Port: 1, State: CMStateConnect, PS: psTCP, Src: ap("192.0.2.1:49089"), Dst: ap("192.0.2.1:4420"), CMIDN: 6, KernName: "nvme_rdma"},
		CMID{Port: 1, State: CMStateConnect, PS: psTCP, Src: ap("192.0.2.1:4420"), Dst: ap("192.0.2.1:49089"), CMIDN: 7, KernName: "nvmet_rdma"},
	)
	for i := 4; i < len(s1c); i++ {
		s1c[i].DevName = "rxe0"
	}
	s1u := append(s1CMIDs("rxe0"),
		CMID{DevName: "rxe0", Port: 1, State: CMStateListen, PS: psTCP, Src: ap("192.0.2.1:7471"), Dst: ap("0.0.0.0:0"), CMIDN: 8, PID: 300},
		CMID{DevName: "rxe0", Port: 0, State: CMStateListen, PS: psTCP, Src: ap("[::]:7472"), CMIDN: 9, PID: 301},
	)
	s1m := s1CMIDs("rxe0")
	for n := uint32(10); n < 50; n++ {
		s1m = append(s1m, CMID{
			DevName: "rxe0", Port: 1, State: CMStateListen, PS: psTCP,
			Src: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(7000+n-10)), Dst: ap("0.0.0.0:0"),
			CMIDN: n, PID: 350,
		})
	}
	siw := []CMID{
		{DevIndex: 1, DevName: "siw0", Port: 0, State: CMStateListen, PS: psTCP, Src: ap("0.0.0.0:4430"), CMIDN: 0, KernName: "nvmet_rdma"},
		{DevIndex: 1, DevName: "siw0", Port: 1, State: CMStateListen, PS: psTCP, Src: ap("198.51.100.1:4420"), Dst: ap("0.0.0.0:0"), CMIDN: 1, KernName: "nvmet_rdma"},
	}

	tests := []struct {
		file    string
		want    []CMID
		wantErr error
	}{
		{file: "s1-nldev-res-cm-id-get-dump-rxe0.hex", want: s1CMIDs("rxe0")},
		{file: "s1r-nldev-res-cm-id-get-dump-rxe9.hex", want: s1CMIDs("rxe9")},
		{file: "s1c-nldev-res-cm-id-get-dump-rxe0.hex", want: s1c},
		{file: "s1u-nldev-res-cm-id-get-dump-rxe0.hex", want: s1u},
		{file: "s1m-nldev-res-cm-id-get-dump-rxe0.hex", want: s1m},
		{file: "s3-nldev-res-cm-id-get-dump-siw0.hex", want: siw},
		{file: "s4-nldev-res-cm-id-get-dump-siw0.hex", want: siw},
		{file: "s4-nldev-res-cm-id-get-dump-rxe0.hex", want: []CMID{
			{DevIndex: 2, DevName: "rxe0", Port: 0, State: CMStateListen, PS: psTCP, Src: ap("0.0.0.0:4430"), CMIDN: 0, KernName: "nvmet_rdma"},
		}},
		{file: "s2-nldev-res-cm-id-get-dump-missing-dev.hex", wantErr: syscall.EINVAL},
		{file: "s2-nldev-res-cm-id-get-dump-missing-dev-extack.hex", wantErr: syscall.EINVAL},
		{file: "s1-nldev-res-cm-id-get-dump-no-dev-index.hex", wantErr: syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCMIDs(answers(t, tt.file))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseCMIDs: err %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("ParseCMIDs returned %d entries with an error", len(got))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCMIDs: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts()); diff != "" {
				t.Errorf("ParseCMIDs (-want +got):\n%s", diff)
			}
			for _, c := range got {
				if c.Src.Addr().Is4In6() || c.Dst.Addr().Is4In6() {
					t.Errorf("cm_id %d: IPv4-mapped address %v -> %v", c.CMIDN, c.Src, c.Dst)
				}
			}
		})
	}
}

func TestParseCMIDsShape(t *testing.T) {
	t.Parallel()
	// The S1 wildcard child: plain IPv4 wildcard, no port, no destination.
	got, err := ParseCMIDs(answers(t, "s1-nldev-res-cm-id-get-dump-rxe0.hex"))
	if err != nil {
		t.Fatal(err)
	}
	w := got[2]
	if !w.Src.Addr().Is4() || !w.Src.Addr().IsUnspecified() || w.Port != 0 || w.Dst.IsValid() || !w.Listening() {
		t.Errorf("wildcard child = %+v, want 0.0.0.0 listener without port and destination", w)
	}
	if !got[1].Src.Addr().Is6() || got[1].Src.Addr().Is4In6() {
		t.Errorf("entry 1 source %v is not plain IPv6", got[1].Src)
	}
	// S1m: the table continues in a second datagram.
	m := answers(t, "s1m-nldev-res-cm-id-get-dump-rxe0.hex")
	if len(m) != 3 {
		t.Fatalf("s1m: %d answer datagrams, want 3", len(m))
	}
	ids, err := ParseCMIDs(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 44 {
		t.Errorf("s1m: %d cm_ids, want 44", len(ids))
	}
	// The same answer with all three datagrams in one (multi-message datagram).
	one := bytes.Join(m, nil)
	ids2, err := ParseCMIDs([][]byte{one})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids, ids2, cmpOpts()); diff != "" {
		t.Errorf("one datagram vs three (-three +one):\n%s", diff)
	}
}

func TestParseDevices(t *testing.T) {
	t.Parallel()
	rxe0 := Device{Index: 0, Name: "rxe0", NodeGUID: 0x80dd69fffe0d1e0b, NodeType: 1, Protocol: "roce"}
	rxe9 := rxe0
	rxe9.Name = "rxe9"
	siw0 := Device{Index: 1, Name: "siw0", NodeGUID: 0xa4210cfffe81d762, NodeType: 4, Protocol: "iw"}
	rxe0b := rxe0
	rxe0b.Index = 2

	tests := []struct {
		file    string
		want    []Device
		wantErr error
	}{
		{file: "s1-nldev-get-dump.hex", want: []Device{rxe0}},
		{file: "s1-nldev-get-doit-ack-rxe0.hex", want: []Device{rxe0}},
		{file: "s1r-nldev-get-dump.hex", want: []Device{rxe9}},
		{file: "s2-nldev-get-dump.hex", want: nil},
		{file: "s3-nldev-get-dump.hex", want: []Device{siw0}},
		{file: "s4-nldev-get-dump.hex", want: []Device{siw0, rxe0b}},
		{file: "s2-nldev-get-doit-ack-missing-dev.hex", wantErr: syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParseDevices(answers(t, tt.file))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseDevices: err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDevices: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseDevices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePorts(t *testing.T) {
	t.Parallel()
	veth0 := Port{Index: 1, State: PortActive, PhysState: 5, NetdevIndex: 4, Netdev: "veth0"}
	veth2 := Port{Index: 1, State: PortActive, PhysState: 5, NetdevIndex: 6, Netdev: "veth2"}
	tests := []struct {
		file    string
		want    []Port
		wantErr error
	}{
		{file: "s1-nldev-port-get-dump-rxe0.hex", want: []Port{veth0}},
		{file: "s1r-nldev-port-get-dump-rxe9.hex", want: []Port{veth0}},
		{file: "s3-nldev-port-get-dump-siw0.hex", want: []Port{veth2}},
		{file: "s4-nldev-port-get-dump-siw0.hex", want: []Port{veth2}},
		{file: "s4-nldev-port-get-dump-rxe0.hex", want: []Port{veth0}},
		{file: "s2-nldev-port-get-dump-missing-dev.hex", wantErr: syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePorts(answers(t, tt.file))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParsePorts: err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePorts: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePorts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDeviceChecks(t *testing.T) {
	t.Parallel()
	// The parsers insist on their own message type.
	if _, err := ParseDevices(answers(t, "s1-nldev-res-get-dump.hex")); err == nil {
		t.Error("ParseDevices accepted a RES_GET dump")
	}
	if _, err := ParseCMIDs(answers(t, "s1-nldev-port-get-dump-rxe0.hex")); err == nil {
		t.Error("ParseCMIDs accepted a PORT_GET dump")
	}
	if _, err := ParsePorts(answers(t, "s1-nldev-get-dump.hex")); err == nil {
		t.Error("ParsePorts accepted a GET dump")
	}
	// parsePorts and parseCMIDs check the device they were asked about.
	msgs, err := rdmanl.ReadDump(answers(t, "s4-nldev-port-get-dump-rxe0.hex"), rdmanl.NLDevType(nldevCmdPortGet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePorts(msgs, 1, true); err == nil {
		t.Error("parsePorts accepted ports of device 2 for device 1")
	}
	msgs, err = rdmanl.ReadDump(answers(t, "s4-nldev-res-cm-id-get-dump-rxe0.hex"), rdmanl.NLDevType(nldevCmdResCMIDGet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseCMIDs(msgs, 2, true); err != nil {
		t.Errorf("parseCMIDs for device 2: %v", err)
	}
	if _, err := parseCMIDs(msgs, 0, true); err == nil {
		t.Error("parseCMIDs accepted cm_ids of device 2 for device 0")
	}
}

// withFlags returns a copy of the first message of datagram with flags or-ed in.
func withFlags(datagram []byte, flags uint16) []byte {
	b := bytes.Clone(datagram)
	put16(b[6:], get16(b[6:])|flags)
	return b
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	s1 := answers(t, "s1-nldev-res-cm-id-get-dump-rxe0.hex")
	data, done := s1[0], s1[1]

	overrun := bytes.Clone(done)
	put16(overrun[4:], rdmanl.NLMsgOverrun)
	badLen := bytes.Clone(data)
	put32(badLen[0:], uint32(len(data)+4))
	shortLen := bytes.Clone(data)
	put32(shortLen[0:], 8)
	// The first attribute (DEV_INDEX) claims 3 bytes, less than its header.
	badAttr := bytes.Clone(data)
	put16(badAttr[16:], 3)
	// The RES_CM_ID table (after DEV_INDEX 8 + DEV_NAME 12) claims more than the message.
	badTable := bytes.Clone(data)
	put16(badTable[16+8+12:], 0xffff)
	// DEV_INDEX of 2 bytes instead of 4.
	shortU32 := bytes.Clone(data)
	put16(shortU32[16:], 6)
	// A stray request datagram.
	req := loadHex(t, "s1-nldev-res-cm-id-get-dump-rxe0.hex")[0]

	tests := []struct {
		name      string
		datagrams [][]byte
		wantErr   error
	}{
		{name: "no answer", datagrams: nil, wantErr: io.ErrUnexpectedEOF},
		{name: "no NLMSG_DONE", datagrams: [][]byte{data}, wantErr: io.ErrUnexpectedEOF},
		{name: "empty datagram", datagrams: [][]byte{{}, done}},
		{name: "message after NLMSG_DONE", datagrams: [][]byte{data, done, data}},
		{name: "NLMSG_DONE twice", datagrams: [][]byte{done, done}},
		{name: "dump interrupted", datagrams: [][]byte{withFlags(data, rdmanl.NLMFDumpIntr), done}, wantErr: syscall.EINTR},
		{name: "overrun", datagrams: [][]byte{data, overrun}, wantErr: syscall.ENOBUFS},
		{name: "nlmsg_len beyond datagram", datagrams: [][]byte{badLen, done}},
		{name: "nlmsg_len below header", datagrams: [][]byte{shortLen, done}},
		{name: "attribute shorter than its header", datagrams: [][]byte{badAttr, done}},
		{name: "nested table beyond message", datagrams: [][]byte{badTable, done}},
		{name: "u32 of 2 bytes", datagrams: [][]byte{shortU32, done}},
		{name: "request in the answer", datagrams: [][]byte{req, done}},
		{name: "short NLMSG_ERROR", datagrams: [][]byte{{16, 0, 0, 0, rdmanl.NLMsgError, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCMIDs(tt.datagrams)
			if err == nil {
				t.Fatalf("ParseCMIDs = %d entries, want an error", len(got))
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("ParseCMIDs: err %v, want %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "rdma netlink: cm_id dump: ") {
				t.Errorf("error %q does not name the dump", err)
			}
		})
	}
}

// TestParseTruncated cuts every answer datagram of every nldev fixture at
// every length: each cut must give an error (never a panic, never a shorter
// table taken for the whole one).
func TestParseTruncated(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*-nldev-*.hex")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ans := answers(t, name)
			for i := range ans {
				for cut := 0; cut < len(ans[i]); cut++ {
					d := make([][]byte, len(ans))
					copy(d, ans)
					d[i] = ans[i][:cut]
					if _, err := ParseCMIDs(d); err == nil {
						t.Fatalf("ParseCMIDs: datagram %d cut at %d of %d bytes: no error", i, cut, len(ans[i]))
					}
					if _, err := ParseDevices(d); err == nil {
						t.Fatalf("ParseDevices: datagram %d cut at %d of %d bytes: no error", i, cut, len(ans[i]))
					}
					if _, err := ParsePorts(d); err == nil {
						t.Fatalf("ParsePorts: datagram %d cut at %d of %d bytes: no error", i, cut, len(ans[i]))
					}
				}
			}
		})
	}
}

func TestRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file    string
		cmd     uint16
		dev     uint32
		withDev bool
	}{
		{file: "s1-nldev-get-dump.hex", cmd: nldevCmdGet},
		{file: "s4-nldev-get-dump.hex", cmd: nldevCmdGet},
		{file: "s1-nldev-port-get-dump-rxe0.hex", cmd: nldevCmdPortGet, dev: 0, withDev: true},
		{file: "s3-nldev-port-get-dump-siw0.hex", cmd: nldevCmdPortGet, dev: 1, withDev: true},
		{file: "s4-nldev-port-get-dump-rxe0.hex", cmd: nldevCmdPortGet, dev: 2, withDev: true},
		{file: "s1-nldev-res-cm-id-get-dump-rxe0.hex", cmd: nldevCmdResCMIDGet, dev: 0, withDev: true},
		{file: "s2-nldev-res-cm-id-get-dump-missing-dev.hex", cmd: nldevCmdResCMIDGet, dev: 0, withDev: true},
		{file: "s4-nldev-res-cm-id-get-dump-rxe0.hex", cmd: nldevCmdResCMIDGet, dev: 2, withDev: true},
		{file: "s4-nldev-res-cm-id-get-dump-siw0.hex", cmd: nldevCmdResCMIDGet, dev: 1, withDev: true},
		{file: "s1-nldev-res-cm-id-get-dump-no-dev-index.hex", cmd: nldevCmdResCMIDGet},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			want := loadHex(t, tt.file)[0]
			got := newRequest(tt.cmd, 0x01020304, tt.dev, tt.withDev)
			// seq and pid differ from one recording to the next.
			for _, b := range [][]byte{want, got} {
				if len(b) >= rdmanl.HdrLen {
					clear(b[8:16])
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("request (-recorded +built):\n%s", diff)
			}
		})
	}
}
