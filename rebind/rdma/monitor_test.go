package rdma

import (
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"syscall"
	"testing"
)

// SYS_GET answers recorded in the test VM (udev/testdata/rdmamon-*/sys-get-doit-ack.hex).
const (
	sysGet612 = "300000000614000001000000ca00000005004200010000000500600000000000050067000100000005005d0001000000"
	sysGet73  = "300000000614000001000000a500000005004200010000000500600000000000050067000100000005005d0001000000"
	sysGet61  = "280000000614000001000000960000000500420001000000050060000000000005005d0001000000"
	sysGetAck = "240000000200000101000000ca0000000000000010000000061405000100000000000000"
	// NLMSG_ERROR -EOPNOTSUPP with the request echoed (a kernel without SYS_GET).
	sysGetRefused = "24000000020000000100000000000000a1ffffff10000000061405000100000000000000"
)

// sysConn answers every request with its datagrams, seq rewritten.
type sysConn struct {
	t     *testing.T
	ans   []string
	queue [][]byte
	reqs  int
}

func (c *sysConn) send(req []byte) error {
	c.reqs++
	if len(req) != nlmsgHdrLen || get16(req[4:]) != nldevType(nldevCmdSysGet) || get16(req[6:]) != nlmFRequest|nlmFAck {
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

func (c *sysConn) recv() ([]byte, error) {
	if len(c.queue) == 0 {
		return nil, os.ErrDeadlineExceeded
	}
	dg := c.queue[0]
	c.queue = c.queue[1:]
	return dg, nil
}

func (c *sysConn) close() error { return nil }

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
			r := &RDMA{conn: &sysConn{t: t, ans: tc.ans}}
			got, err := r.MonitorSupported()
			if err != nil || got != tc.want {
				t.Errorf("MonitorSupported = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	r := &RDMA{conn: &sysConn{t: t}}
	if _, err := r.MonitorSupported(); err == nil {
		t.Error("MonitorSupported without an answer: no error")
	}
	r.Close()
	if _, err := r.MonitorSupported(); err == nil {
		t.Error("MonitorSupported on a closed socket: no error")
	}
}

func TestParseMonitorOverrun(t *testing.T) {
	t.Parallel()
	b := make([]byte, nlmsgHdrLen)
	put32(b, nlmsgHdrLen)
	put16(b[4:], nlmsgOverrun)
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
