package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a unixgram socket at addr (a path or "@name") and points
// NOTIFY_SOCKET at it.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", addr)
	return c
}

// recv reads one datagram.
func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatalf("read datagram: %v", err)
	}
	return string(b[:n])
}

func newNotifier(t *testing.T) *Notifier {
	t.Helper()
	n, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

func TestDatagrams(t *testing.T) {
	for _, sock := range []string{"path", "abstract"} {
		t.Run(sock, func(t *testing.T) {
			addr := filepath.Join(t.TempDir(), "notify")
			if sock == "abstract" {
				addr = fmt.Sprintf("@nvmet-rebind-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
			}
			c := listen(t, addr)
			n := newNotifier(t)
			if !n.Enabled() {
				t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
			}
			for _, tc := range []struct {
				name string
				send func() error
				want string
			}{
				{"ready", n.Ready, "READY=1"},
				{"watchdog", n.Watchdog, "WATCHDOG=1"},
				{"stopping", n.Stopping, "STOPPING=1"},
				{"status", func() error { return n.Status("2 listeners dead: port 1\nport 2") }, "STATUS=2 listeners dead: port 1 port 2"},
			} {
				if err := tc.send(); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if got := recv(t, c); got != tc.want {
					t.Errorf("%s: datagram %q, want %q", tc.name, got, tc.want)
				}
			}
		})
	}
}

func TestReloadingCarriesMonotonicUsec(t *testing.T) {
	c := listen(t, filepath.Join(t.TempDir(), "notify"))
	n := newNotifier(t)
	before, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Reloading(); err != nil {
		t.Fatalf("Reloading: %v", err)
	}
	after, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	got := recv(t, c)
	first, rest, ok := strings.Cut(got, "\n")
	if !ok || first != "RELOADING=1" {
		t.Fatalf("datagram %q: want RELOADING=1, a newline and MONOTONIC_USEC in one datagram", got)
	}
	v, ok := strings.CutPrefix(rest, "MONOTONIC_USEC=")
	if !ok {
		t.Fatalf("datagram %q: second line is not MONOTONIC_USEC=", got)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("MONOTONIC_USEC %q: %v", v, err)
	}
	// CLOCK_MONOTONIC, not wall time: between the two readings around the
	// call (a wall-clock value would be decades past them).
	if us < before.Microseconds() || us > after.Microseconds() {
		t.Errorf("MONOTONIC_USEC=%d, want within [%d, %d]", us, before.Microseconds(), after.Microseconds())
	}
}

func TestDisabled(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "1000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	for name, n := range map[string]*Notifier{"from env": newNotifier(t), "zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			if n.Enabled() {
				t.Error("Enabled() = true")
			}
			for _, err := range []error{n.Ready(), n.Reloading(), n.Stopping(), n.Watchdog(), n.Status("x")} {
				if err != nil {
					t.Errorf("disabled notifier returned %v, want nil", err)
				}
			}
			if d, ok := n.WatchdogInterval(); ok {
				t.Errorf("WatchdogInterval() = %v, true without NOTIFY_SOCKET", d)
			}
		})
	}
}

func TestUnsupportedSocket(t *testing.T) {
	for _, s := range []string{"vsock:2:1234", "relative/path", "@"} {
		t.Run(s, func(t *testing.T) {
			t.Setenv("NOTIFY_SOCKET", s)
			if n, err := New(); err == nil {
				t.Errorf("New() = %+v, nil; want an error for NOTIFY_SOCKET=%q", n, s)
			}
		})
	}
}

func TestSendErrorNamesState(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	err := newNotifier(t).Ready()
	if err == nil || !strings.Contains(err.Error(), "sd_notify READY") {
		t.Errorf("Ready() to a missing socket = %v, want an error naming READY", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name      string
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"ours", "90000000", self, 90 * time.Second, true},
		{"no pid", "30000000", "", 30 * time.Second, true},
		{"missing", "", "", 0, false},
		{"missing with pid", "", self, 0, false},
		{"other pid", "90000000", "1", 0, false},
		{"bad pid", "90000000", "me", 0, false},
		{"bad usec", "90s", self, 0, false},
		{"zero", "0", self, 0, false},
		{"negative", "-5", self, 0, false},
		{"overflow", "99999999999999999999", self, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen(t, filepath.Join(t.TempDir(), "notify"))
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			got, ok := newNotifier(t).WatchdogInterval()
			if got != tc.want || ok != tc.ok {
				t.Errorf("WatchdogInterval() = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseWatchdogHugeButValid(t *testing.T) {
	t.Parallel()
	// The largest interval that still fits a time.Duration.
	max := strconv.FormatInt(int64(time.Duration(1<<63-1)/time.Microsecond), 10)
	if _, ok := parseWatchdog(max, "", 7); !ok {
		t.Errorf("parseWatchdog(%s) = false", max)
	}
}
