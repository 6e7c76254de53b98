package udev

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// envRDMAMonitorRecord runs TestRDMAMonitorRecord: the folder (in the test
// VM) to write the recording into. tests/rdmamon_test.go sets it when the
// host's NVMET_REBIND_RDMAMON_RECORD names a folder, and copies the files
// out through the console.
const envRDMAMonitorRecord = "NVMET_REBIND_RDMAMON_RECORD"

// recordSteps are the commands TestRDMAMonitorRecord runs, in order, on
// one monitor socket (veth0/veth1 exist and are up before the first), and
// the file each one's datagrams go to.
var recordSteps = []struct {
	file string
	args []string
}{
	{"monitor-rdma-link-add-rxe0.hex", []string{"rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "veth0"}},
	{"monitor-rdma-dev-set-rxe0-name-rxe9.hex", []string{"rdma", "dev", "set", "rxe0", "name", "rxe9"}},
	{"monitor-rdma-dev-set-rxe9-name-rxe0.hex", []string{"rdma", "dev", "set", "rxe9", "name", "rxe0"}},
	{"monitor-ip-link-set-veth0-name-veth9.hex", []string{"ip", "link", "set", "veth0", "name", "veth9"}},
	{"monitor-ip-link-set-veth9-name-veth0.hex", []string{"ip", "link", "set", "veth9", "name", "veth0"}},
	{"monitor-ip-link-set-veth0-down.hex", []string{"ip", "link", "set", "veth0", "down"}},
	{"monitor-ip-link-set-veth0-name-veth9-while-down.hex", []string{"ip", "link", "set", "veth0", "name", "veth9"}},
	{"monitor-ip-link-set-veth9-name-veth0-while-down.hex", []string{"ip", "link", "set", "veth9", "name", "veth0"}},
	{"monitor-ip-link-set-veth0-up.hex", []string{"ip", "link", "set", "veth0", "up"}},
	{"monitor-rdma-link-delete-rxe0.hex", []string{"rdma", "link", "delete", "rxe0"}},
	{"monitor-rdma-link-add-rxe0-again.hex", []string{"rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "veth0"}},
	{"monitor-ip-link-del-veth0.hex", []string{"ip", "link", "del", "veth0"}},
}

// TestRDMAMonitorRecord records the kernel's RDMA_NL_GROUP_NOTIFY
// datagrams for recordSteps (and a SYS_GET exchange) as testdata .hex
// files in the format of testdata/rdmamon-6.12 (README.md there). Only in
// the test VM: NVMET_REBIND_RDMAMON_RECORD=dir go test ./tests -run
// TestRDMAMonitor (udev/testdata/rdmamon-7.3/README.md).
func TestRDMAMonitorRecord(t *testing.T) {
	dir := os.Getenv(envRDMAMonitorRecord)
	if dir == "" {
		t.Skip(envRDMAMonitorRecord + "=dir records in the test VM (udev/testdata/rdmamon-7.3/README.md)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	kernel := unix.ByteSliceToString(u.Release[:])
	origin := fmt.Sprintf("# NETLINK_RDMA (protocol 20), kernel %s; recorded by udev TestRDMAMonitorRecord in the test VM (tests/rdmamon_test.go)\n", kernel)
	sh := shell(t)
	vethPair(t, sh)

	// SYS_GET doit with ACK, on a socket of its own.
	{
		fd := recordSocket(t, false)
		req := make([]byte, 16)
		binary.NativeEndian.PutUint32(req[0:], 16)
		binary.NativeEndian.PutUint16(req[4:], 5<<10|6)
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
		binary.NativeEndian.PutUint32(req[8:], 1)
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("# RDMA_NLDEV_CMD_SYS_GET doit with NLM_F_ACK (is the monitor supported?)\n")
		b.WriteString(origin)
		b.WriteString("# read with recvfrom(2) into a 65536-byte buffer on a socket bound with no multicast group\n")
		fmt.Fprintf(&b, "# request (user to kernel), %d bytes: %s\n%x\n", len(req), decodeRecorded(req), req)
		for i := 1; ; i++ {
			dg, from := recordRecv(t, fd, 5*time.Second)
			if dg == nil {
				t.Fatal("SYS_GET: no answer")
			}
			fmt.Fprintf(&b, "# response %d (kernel to user, from portid %d), %d bytes, 1 message(s): %s\n%x\n", i, from, len(dg), decodeRecorded(dg), dg)
			if binary.NativeEndian.Uint16(dg[4:]) == unix.NLMSG_ERROR {
				break
			}
		}
		unix.Close(fd)
		writeRecorded(t, dir, "sys-get-doit-ack.hex", b.String())
	}

	fd := recordSocket(t, true)
	defer unix.Close(fd)
	for _, step := range recordSteps {
		args := step.args
		// Nothing may be pending from the step before.
		for {
			dg, from := recordRecv(t, fd, 200*time.Millisecond)
			if dg == nil {
				break
			}
			t.Errorf("before %v: datagram from %d: %s", args, from, decodeRecorded(dg))
		}
		cmd := strings.Join(args, " ")
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		exit := "0"
		if err != nil {
			exit = err.Error()
		}
		var dgs []string
		for {
			dg, from := recordRecv(t, fd, 1500*time.Millisecond)
			if dg == nil {
				break
			}
			dgs = append(dgs, fmt.Sprintf("# datagram %d (from portid %d), %d bytes: %s\n%x\n", len(dgs)+1, from, len(dg), decodeRecorded(dg), dg))
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# RDMA_NL_GROUP_NOTIFY multicast during: %s\n", cmd)
		b.WriteString(origin)
		b.WriteString("# socket bound, then NETLINK_ADD_MEMBERSHIP group 4 (RDMA_NL_GROUP_NOTIFY); every datagram that arrived while the command ran, until 1.5 s without one, read with recvfrom(2) into a 65536-byte buffer\n")
		fmt.Fprintf(&b, "# during: %s   (exit: %s)\n", cmd, exit)
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				fmt.Fprintf(&b, "# output: %s\n", l)
			}
		}
		fmt.Fprintf(&b, "# %d datagram(s)\n", len(dgs))
		b.WriteString(strings.Join(dgs, ""))
		writeRecorded(t, dir, step.file, b.String())
		t.Logf("%s (exit %s): %d datagram(s)", cmd, exit, len(dgs))
	}
}

// recordSocket is a blocking NETLINK_RDMA socket, bound; joined to
// RDMA_NL_GROUP_NOTIFY when monitor.
func recordSocket(t *testing.T, monitor bool) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	if monitor {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, 4); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// recordRecv reads one datagram, or nil after wait without one.
func recordRecv(t *testing.T, fd int, wait time.Duration) ([]byte, uint32) {
	t.Helper()
	tv := unix.NsecToTimeval(wait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return nil, 0
		}
		if err != nil {
			t.Fatalf("recvfrom: %v", err)
		}
		var pid uint32
		if sa, ok := from.(*unix.SockaddrNetlink); ok {
			pid = sa.Pid
		}
		return append([]byte(nil), buf[:n]...), pid
	}
}

func writeRecorded(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordedAttrs names the attributes the recording decodes: name, and
// 's' string, 'b' u8, 'w' u32.
var recordedAttrs = map[uint16]struct {
	name string
	kind byte
}{
	1: {"DEV_INDEX", 'w'}, 2: {"DEV_NAME", 's'}, 3: {"PORT_INDEX", 'w'},
	50: {"NDEV_INDEX", 'w'}, 51: {"NDEV_NAME", 's'}, 102: {"EVENT_TYPE", 'b'},
	66: {"SYS_ATTR_NETNS_MODE", 'b'}, 93: {"SYS_ATTR_COPY_ON_FORK", 'b'},
	96: {"SYS_ATTR_PRIVILEGED_QKEY_MODE", 'b'}, 103: {"SYS_ATTR_MONITOR_MODE", 'b'},
}

var recordedEvents = []string{"REGISTER", "UNREGISTER", "NETDEV_ATTACH", "NETDEV_DETACH", "RENAME", "NETDEV_RENAME"}

// decodeRecorded is the comment line of one datagram's first message, in
// the words of testdata/rdmamon-6.12.
func decodeRecorded(dg []byte) string {
	if len(dg) < 16 {
		return fmt.Sprintf("short datagram (%d bytes)", len(dg))
	}
	ln := binary.NativeEndian.Uint32(dg[0:])
	typ := binary.NativeEndian.Uint16(dg[4:])
	flags := binary.NativeEndian.Uint16(dg[6:])
	seq := binary.NativeEndian.Uint32(dg[8:])
	pid := binary.NativeEndian.Uint32(dg[12:])
	if int(ln) != len(dg) {
		return fmt.Sprintf("message length %d in a datagram of %d bytes", ln, len(dg))
	}
	if typ == unix.NLMSG_ERROR && len(dg) >= 20 {
		e := int32(binary.NativeEndian.Uint32(dg[16:]))
		what := "(ACK)"
		if e != 0 {
			what = "(" + unix.ErrnoName(unix.Errno(-e)) + ")"
		}
		return fmt.Sprintf("NLMSG_ERROR len %d flags %#x seq %d error %d %s, %d bytes of the request echoed", ln, flags, seq, e, what, len(dg)-20)
	}
	cmd := map[uint16]string{6: "SYS_GET", 28: "MONITOR"}[typ&0x3ff]
	s := fmt.Sprintf("%#x NLDEV<<10|%s(%d) len %d flags %#x seq %d portid %d: ", typ, cmd, typ&0x3ff, ln, flags, seq, pid)
	if typ>>10 != 5 {
		s = fmt.Sprintf("type %#x len %d flags %#x seq %d portid %d: ", typ, ln, flags, seq, pid)
	}
	var parts []string
	for b := dg[16:]; len(b) >= 4; {
		al := int(binary.NativeEndian.Uint16(b[0:]))
		at := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if al < 4 || al > len(b) {
			parts = append(parts, fmt.Sprintf("bad attribute length %d", al))
			break
		}
		v := b[4:al]
		a, ok := recordedAttrs[at]
		name := fmt.Sprintf("attr(%d)", at)
		if ok {
			name = fmt.Sprintf("%s(%d)", a.name, at)
		}
		switch {
		case ok && a.kind == 's':
			parts = append(parts, fmt.Sprintf("%s='%s'", name, strings.TrimRight(string(v), "\x00")))
		case ok && a.kind == 'w' && len(v) == 4:
			parts = append(parts, fmt.Sprintf("%s=%d", name, binary.NativeEndian.Uint32(v)))
		case ok && a.kind == 'b' && len(v) == 1:
			p := fmt.Sprintf("%s=%d", name, v[0])
			if at == 102 && int(v[0]) < len(recordedEvents) {
				p += " (" + recordedEvents[v[0]] + ")"
			}
			parts = append(parts, p)
		default:
			parts = append(parts, fmt.Sprintf("%s=%s", name, hex.EncodeToString(v)))
		}
		n := (al + 3) &^ 3
		if n > len(b) {
			break
		}
		b = b[n:]
	}
	return s + strings.Join(parts, " ")
}

// The recorder's decode is the comment before every datagram of the
// committed recordings (so a new recording reads like the old ones, and a
// hand edit of a datagram without its comment is caught).
func TestRecordedComments(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/rdmamon-*/*.hex")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for _, p := range files {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		for i, line := range strings.Split(string(text), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				prev = line
				continue
			}
			dg, err := hex.DecodeString(line)
			if err != nil {
				t.Fatalf("%s:%d: %v", p, i+1, err)
			}
			if want := decodeRecorded(dg); !strings.HasSuffix(prev, ": "+want) && !strings.HasSuffix(prev, ": "+strings.TrimSpace(want)) {
				t.Errorf("%s:%d: comment %q does not end with the decode %q", p, i+1, prev, want)
			}
			prev = ""
		}
	}
}
