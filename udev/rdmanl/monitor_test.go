package rdmanl

import (
	"bytes"
	"encoding/hex"
	"errors"
	"github.com/nvmet-rebind/nvmet-rebind/udev/internal/hexfixture"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readUdevHex reads a recording of udev's, ../testdata/<name> (the monitor
// is udev's stream): one datagram per non-comment line.
func readUdevHex(t testing.TB, name string) [][]byte {
	t.Helper()
	return hexfixture.Read(t, filepath.Join("..", "testdata", name))
}

// SYS_GET answers recorded in the test VM (udev/testdata/rdmamon-*/sys-get-doit-ack.hex).
const (
	sysGet612 = "300000000614000001000000ca00000005004200010000000500600000000000050067000100000005005d0001000000"
	sysGet73  = "300000000614000001000000a500000005004200010000000500600000000000050067000100000005005d0001000000"
	sysGet61  = "280000000614000001000000960000000500420001000000050060000000000005005d0001000000"
	sysGetAck = "240000000200000101000000ca0000000000000010000000061405000100000000000000"
	// NLMSG_ERROR -EOPNOTSUPP with the request echoed (a kernel without SYS_GET).
	sysGetRefused = "24000000020000000100000000000000a1ffffff10000000061405000100000000000000"
)

// withSeq returns a copy of datagram with every message's seq set to seq.
func withSeq(datagram []byte, seq uint32) []byte {
	b := bytes.Clone(datagram)
	for off := 0; off+HdrLen <= len(b); {
		put32(b[off+8:], seq)
		l := int(get32(b[off:]))
		if l < HdrLen {
			break
		}
		off += align4(l)
	}
	return b
}

// sysConn answers every request with its datagrams, seq rewritten; with
// closed set it fails every call with os.ErrClosed.
type sysConn struct {
	t      *testing.T
	ans    []string
	queue  [][]byte
	reqs   int
	closed bool
}

func (c *sysConn) Send(req []byte) error {
	if c.closed {
		return os.ErrClosed
	}
	c.reqs++
	if len(req) != HdrLen || get16(req[4:]) != NLDevType(nldevCmdSysGet) || get16(req[6:]) != NLMFRequest|NLMFAck {
		c.t.Errorf("request %x is not a SYS_GET doit with ACK", req)
	}
	for _, h := range c.ans {
		b, err := hex.DecodeString(h)
		if err != nil {
			c.t.Fatal(err)
		}
		c.queue = append(c.queue, withSeq(b, get32(req[8:])))
	}
	return nil
}

func (c *sysConn) Recv() ([]byte, error) {
	if c.closed {
		return nil, os.ErrClosed
	}
	if len(c.queue) == 0 {
		return nil, os.ErrDeadlineExceeded
	}
	dg := c.queue[0]
	c.queue = c.queue[1:]
	return dg, nil
}

func (c *sysConn) Close() error { c.closed = true; return nil }

func TestMonitorSupported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ans  []string
		want bool
	}{
		{"6.12", []string{sysGet612, sysGetAck}, true},
		{"7.3", []string{sysGet73, sysGetAck}, true},
		{"6.1", []string{sysGet61, sysGetAck}, false},
		{"no SYS_GET", []string{sysGetRefused}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MonitorSupported(&sysConn{t: t, ans: tc.ans}, 1)
			if err != nil || got != tc.want {
				t.Errorf("MonitorSupported = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	c := &sysConn{t: t}
	if _, err := MonitorSupported(c, 1); err == nil {
		t.Error("MonitorSupported without an answer: no error")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := MonitorSupported(c, 2); !errors.Is(err, os.ErrClosed) {
		t.Errorf("MonitorSupported on a closed socket: %v, want os.ErrClosed", err)
	}
}

func TestParseMonitorOverrun(t *testing.T) {
	t.Parallel()
	b := make([]byte, HdrLen)
	put32(b, HdrLen)
	put16(b[4:], NLMsgOverrun)
	if _, err := ParseMonitor(b); !errors.Is(err, syscall.ENOBUFS) {
		t.Errorf("ParseMonitor(NLMSG_OVERRUN) = %v, want ENOBUFS", err)
	}
}

// The 6.13+ events as Debian's 7.3.4 sent them
// (udev/testdata/rdmamon-7.3/monitor-rdma-dev-set-rxe0-name-rxe9.hex and
// monitor-ip-link-set-veth0-name-veth9.hex): RENAME carries the device's
// index and new name; NETDEV_RENAME only the netdev's ifindex and new name.
func TestParseMonitorRecordedRenames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dg string
		want     MonitorEvent
	}{
		{"rename", "2c0000001c140000000000000000000008000100000000000900020072786539000000000500660004000000",
			MonitorEvent{Type: MonitorRename, HasDev: true, DevIndex: 0, DevName: "rxe9"}},
		{"netdev_rename", "2c0000001c140000000000000000000008003200030000000a00330076657468390000000500660005000000",
			MonitorEvent{Type: MonitorNetdevRename, HasNetdev: true, NetdevIndex: 3, Netdev: "veth9"}},
	} {
		b, err := hex.DecodeString(tc.dg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseMonitor(b)
		if err != nil || !reflect.DeepEqual(got, []MonitorEvent{tc.want}) {
			t.Errorf("%s: ParseMonitor = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestErrno(t *testing.T) {
	t.Parallel()
	if got := errno(-22); got != syscall.EINVAL {
		t.Errorf("errno(-22) = %v", got)
	}
	if got := errno(-1 << 31); got == 0 {
		t.Errorf("errno(MinInt32) = 0")
	}
}

// Recorded on Debian's 6.12 and 7.3 (udev/testdata/rdmamon-6.12/README.md,
// udev/testdata/rdmamon-7.3/README.md).
func TestParseRDMAMonitorFixtures(t *testing.T) {
	t.Parallel()
	dev := func(typ MonitorEventType, idx uint32, name string) MonitorEvent {
		return MonitorEvent{Type: typ, HasDev: true, DevIndex: idx, DevName: name}
	}
	register := func(idx uint32) MonitorEvent { return dev(MonitorRegister, idx, "rxe0") }
	unregister := func(idx uint32) MonitorEvent { return dev(MonitorUnregister, idx, "rxe0") }
	attach := func(idx uint32) MonitorEvent {
		return MonitorEvent{Type: MonitorNetdevAttach, HasDev: true, DevIndex: idx, DevName: "rxe0", Port: 1, HasNetdev: true, NetdevIndex: 3, Netdev: "veth0"}
	}
	// NETDEV_RENAME names only the netdev (fill_mon_netdev_rename): no
	// device index, no port.
	netdevRename := func(name string) MonitorEvent {
		return MonitorEvent{Type: MonitorNetdevRename, HasNetdev: true, NetdevIndex: 3, Netdev: name}
	}
	for _, tc := range []struct {
		file string
		want [][]MonitorEvent // per datagram
	}{
		{"rdmamon-6.12/monitor-rdma-link-add-rxe0.hex", [][]MonitorEvent{{register(0)}, {attach(0)}}},
		{"rdmamon-6.12/monitor-rdma-link-delete-rxe0.hex", [][]MonitorEvent{{unregister(0)}}},
		{"rdmamon-6.12/monitor-rdma-link-add-rxe0-again.hex", [][]MonitorEvent{{register(1)}, {attach(1)}}},
		{"rdmamon-6.12/monitor-ip-link-del-veth0.hex", [][]MonitorEvent{{unregister(1)}}},
		{"rdmamon-6.12/monitor-rdma-dev-set-rxe0-name-rxe9.hex", nil},
		{"rdmamon-6.12/monitor-ip-link-set-veth0-name-veth9.hex", nil},
		{"rdmamon-6.1/monitor-rdma-link-add-rxe0.hex", nil},

		{"rdmamon-7.3/monitor-rdma-link-add-rxe0.hex", [][]MonitorEvent{{register(0)}, {attach(0)}}},
		{"rdmamon-7.3/monitor-rdma-dev-set-rxe0-name-rxe9.hex", [][]MonitorEvent{{dev(MonitorRename, 0, "rxe9")}}},
		{"rdmamon-7.3/monitor-rdma-dev-set-rxe9-name-rxe0.hex", [][]MonitorEvent{{dev(MonitorRename, 0, "rxe0")}}},
		{"rdmamon-7.3/monitor-ip-link-set-veth0-name-veth9.hex", [][]MonitorEvent{{netdevRename("veth9")}}},
		{"rdmamon-7.3/monitor-ip-link-set-veth9-name-veth0.hex", [][]MonitorEvent{{netdevRename("veth0")}}},
		{"rdmamon-7.3/monitor-ip-link-set-veth0-down.hex", nil},
		{"rdmamon-7.3/monitor-ip-link-set-veth0-name-veth9-while-down.hex", [][]MonitorEvent{{netdevRename("veth9")}}},
		{"rdmamon-7.3/monitor-ip-link-set-veth9-name-veth0-while-down.hex", [][]MonitorEvent{{netdevRename("veth0")}}},
		{"rdmamon-7.3/monitor-ip-link-set-veth0-up.hex", nil},
		{"rdmamon-7.3/monitor-rdma-link-delete-rxe0.hex", [][]MonitorEvent{{unregister(0)}}},
		{"rdmamon-7.3/monitor-rdma-link-add-rxe0-again.hex", [][]MonitorEvent{{register(1)}, {attach(1)}}},
		{"rdmamon-7.3/monitor-ip-link-del-veth0.hex", [][]MonitorEvent{{unregister(1)}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var got [][]MonitorEvent
			for i, dg := range readUdevHex(t, tc.file) {
				evs, err := ParseMonitor(dg)
				if err != nil {
					t.Fatalf("datagram %d: %v", i, err)
				}
				got = append(got, evs)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseMonitor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMonitorModeFixtures(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]bool{
		"rdmamon-6.12/sys-get-doit-ack.hex": true,
		"rdmamon-7.3/sys-get-doit-ack.hex":  true,
		"rdmamon-6.1/sys-get-doit-ack.hex":  false,
	} {
		dgs := readUdevHex(t, file)
		got, err := ParseMonitorMode(dgs[1:]) // the first is the request
		if err != nil || got != want {
			t.Errorf("%s: ParseMonitorMode = %v, %v; want %v", file, got, err, want)
		}
	}
}
