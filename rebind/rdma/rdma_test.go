package rdma

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// fakeConn answers requests with recorded datagrams, their sequence numbers
// rewritten to the request's, as the kernel would.
type fakeConn struct {
	t       *testing.T
	answers map[string][][]byte // request key → answer datagrams
	queue   [][]byte
	sent    []string
	// hooks on the n-th request (0-based): the datagrams to queue instead.
	tamper func(n int, seq uint32, ans [][]byte) [][]byte
}

func reqKey(cmd uint16, dev uint32, withDev bool) string {
	if !withDev {
		return fmt.Sprintf("%d", cmd)
	}
	return fmt.Sprintf("%d/%d", cmd, dev)
}

func newFakeConn(t *testing.T, files map[string]string) *fakeConn {
	f := &fakeConn{t: t, answers: map[string][][]byte{}}
	for key, file := range files {
		f.answers[key] = answers(t, file)
	}
	return f
}

// withSeq returns a copy of datagram with every message's seq set to seq.
func withSeq(datagram []byte, seq uint32) []byte {
	b := bytes.Clone(datagram)
	for off := 0; off+rdmanl.HdrLen <= len(b); {
		put32(b[off+8:], seq)
		l := int(get32(b[off:]))
		if l < rdmanl.HdrLen {
			break
		}
		off += (l + 3) &^ 3 // NLMSG_ALIGN
	}
	return b
}

func (f *fakeConn) Send(req []byte) error {
	if len(req) < rdmanl.HdrLen || get16(req[6:]) != rdmanl.NLMFRequest|rdmanl.NLMFDump {
		f.t.Errorf("request %x is not a dump request", req)
		return syscall.EINVAL
	}
	cmd := get16(req[4:]) & 0x3ff
	seq := get32(req[8:])
	key := reqKey(cmd, 0, false)
	if len(req) == 24 {
		key = reqKey(cmd, get32(req[20:]), true)
	}
	ans, ok := f.answers[key]
	if !ok {
		// What the kernel does for a missing device index.
		ans = answers(f.t, "s2-nldev-res-cm-id-get-dump-missing-dev.hex")
	}
	var out [][]byte
	for _, dg := range ans {
		out = append(out, withSeq(dg, seq))
	}
	if f.tamper != nil {
		out = f.tamper(len(f.sent), seq, out)
	}
	f.sent = append(f.sent, key)
	f.queue = append(f.queue, out...)
	return nil
}

func (f *fakeConn) Recv() ([]byte, error) {
	if len(f.queue) == 0 {
		return nil, fmt.Errorf("fake: nothing queued: %w", os.ErrDeadlineExceeded)
	}
	dg := f.queue[0]
	f.queue = f.queue[1:]
	return dg, nil
}

func (f *fakeConn) Close() error { return nil }

// s4Conn is the S4 state: siw0 (index 1) and the re-added rxe0 (index 2).
func s4Conn(t *testing.T) *fakeConn {
	return newFakeConn(t, map[string]string{
		reqKey(nldevCmdGet, 0, false):          "s4-nldev-get-dump.hex",
		reqKey(nldevCmdPortGet, 1, true):       "s4-nldev-port-get-dump-siw0.hex",
		reqKey(nldevCmdPortGet, 2, true):       "s4-nldev-port-get-dump-rxe0.hex",
		reqKey(nldevCmdResCMIDGet, 1, true):    "s4-nldev-res-cm-id-get-dump-siw0.hex",
		reqKey(nldevCmdResCMIDGet, 2, true):    "s4-nldev-res-cm-id-get-dump-rxe0.hex",
		reqKey(nldevCmdResCMIDGet, 0, true):    "s1m-nldev-res-cm-id-get-dump-rxe0.hex",
		reqKey(nldevCmdPortGet, 0, true):       "s1-nldev-port-get-dump-rxe0.hex",
		reqKey(nldevCmdResCMIDGet, 1000, true): "s2-nldev-res-cm-id-get-dump-missing-dev.hex",
	})
}

func TestRDMADevicesAndCMIDs(t *testing.T) {
	t.Parallel()
	fc := s4Conn(t)
	r := &RDMA{conn: fc, seq: 1<<32 - 2} // the sequence number wraps
	devs, err := r.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Index: 1, Name: "siw0", NodeGUID: 0xa4210cfffe81d762, NodeType: 4, Protocol: "iw",
			Ports: []Port{{Index: 1, State: PortActive, PhysState: 5, NetdevIndex: 6, Netdev: "veth2"}}},
		{Index: 2, Name: "rxe0", NodeGUID: 0x80dd69fffe0d1e0b, NodeType: 1, Protocol: "roce",
			Ports: []Port{{Index: 1, State: PortActive, PhysState: 5, NetdevIndex: 4, Netdev: "veth0"}}},
	}
	if diff := cmp.Diff(want, devs); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
	// Device 7 vanished (-EINVAL): skipped, no error.
	ids, err := r.CMIDs(append(devs, Device{Index: 7, Name: "gone0"}))
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []CMID{
		{DevIndex: 1, DevName: "siw0", State: CMStateListen, PS: psTCP, Src: ap("0.0.0.0:4430"), CMIDN: 0, KernName: "nvmet_rdma"},
		{DevIndex: 1, DevName: "siw0", Port: 1, State: CMStateListen, PS: psTCP, Src: ap("198.51.100.1:4420"), Dst: ap("0.0.0.0:0"), CMIDN: 1, KernName: "nvmet_rdma"},
		{DevIndex: 2, DevName: "rxe0", State: CMStateListen, PS: psTCP, Src: ap("0.0.0.0:4430"), CMIDN: 0, KernName: "nvmet_rdma"},
	}
	if diff := cmp.Diff(wantIDs, ids, cmpOpts()); diff != "" {
		t.Errorf("CMIDs (-want +got):\n%s", diff)
	}
	wantSent := []string{"1", "5/1", "5/2", "11/1", "11/2", "11/7"}
	if diff := cmp.Diff(wantSent, fc.sent); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if len(fc.queue) != 0 {
		t.Errorf("%d datagrams left unread", len(fc.queue))
	}
}

func TestRDMAVanishedBeforePortDump(t *testing.T) {
	t.Parallel()
	fc := s4Conn(t)
	delete(fc.answers, reqKey(nldevCmdPortGet, 1, true)) // siw0 gone after the GET dump
	devs, err := (&RDMA{conn: fc}).Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "rxe0" {
		t.Errorf("Devices = %+v, want only rxe0", devs)
	}
}

func TestRDMADump(t *testing.T) {
	t.Parallel()
	dev0 := []Device{{Index: 0, Name: "rxe0"}}
	tests := []struct {
		name     string
		tamper   func(n int, seq uint32, ans [][]byte) [][]byte
		wantN    int   // cm_ids
		wantSent int   // requests
		wantErr  error // nil: none
	}{
		{name: "multi-datagram dump", wantN: 44, wantSent: 1},
		{
			name: "stale answer of an abandoned request first",
			tamper: func(_ int, seq uint32, ans [][]byte) [][]byte {
				var stale [][]byte
				for _, dg := range ans[:1] {
					stale = append(stale, withSeq(dg, seq-1))
				}
				return append(stale, ans...)
			},
			wantN: 44, wantSent: 1,
		},
		{
			name: "interrupted once, then whole",
			tamper: func(n int, _ uint32, ans [][]byte) [][]byte {
				if n == 0 {
					ans[1] = withFlags(ans[1], rdmanl.NLMFDumpIntr)
				}
				return ans
			},
			wantN: 44, wantSent: 2,
		},
		{
			name: "always interrupted",
			tamper: func(_ int, _ uint32, ans [][]byte) [][]byte {
				ans[0] = withFlags(ans[0], rdmanl.NLMFDumpIntr)
				return ans
			},
			wantSent: dumpAttempts, wantErr: syscall.EINTR,
		},
		{
			name: "no NLMSG_DONE: receive times out",
			tamper: func(_ int, _ uint32, ans [][]byte) [][]byte {
				return ans[:len(ans)-1]
			},
			wantSent: 1, wantErr: os.ErrDeadlineExceeded,
		},
		{
			name: "other kernel error is not a vanished device",
			tamper: func(_ int, _ uint32, ans [][]byte) [][]byte {
				done := bytes.Clone(ans[len(ans)-1])
				e := -int32(syscall.EPERM)
				put32(done[16:], uint32(e))
				return [][]byte{done}
			},
			wantSent: 1, wantErr: syscall.EPERM,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := s4Conn(t)
			fc.tamper = tt.tamper
			ids, err := (&RDMA{conn: fc}).CMIDs(dev0)
			if len(fc.sent) != tt.wantSent {
				t.Errorf("%d requests, want %d", len(fc.sent), tt.wantSent)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("CMIDs: err %v, want %v", err, tt.wantErr)
				}
				t.Logf("error: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("CMIDs: %v", err)
			}
			if len(ids) != tt.wantN {
				t.Errorf("CMIDs = %d entries, want %d", len(ids), tt.wantN)
			}
		})
	}
}

func TestRDMAClosedFake(t *testing.T) {
	t.Parallel()
	r := &RDMA{conn: s4Conn(t)}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CMIDs([]Device{{}}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("CMIDs after Close: err %v, want os.ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
