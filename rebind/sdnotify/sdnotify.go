// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): one datagram per state change, sent to the unixgram socket
// named by $NOTIFY_SOCKET, and the watchdog interval from $WATCHDOG_USEC and
// $WATCHDOG_PID. Outside systemd (no $NOTIFY_SOCKET) every method is a no-op.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notifier sends notifications to the service manager. The zero value and a
// nil *Notifier are disabled notifiers: every method returns nil.
type Notifier struct {
	// addr is $NOTIFY_SOCKET: a path, or "@name" for the abstract namespace
	// (the net package maps the leading '@' to a NUL byte). Nil: disabled.
	addr *net.UnixAddr
	// watchdog is $WATCHDOG_USEC, when it is meant for this process.
	watchdog time.Duration
}

// New reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID. An unset or
// empty $NOTIFY_SOCKET gives a disabled notifier; an address other than an
// absolute path or an abstract "@name" (systemd 254 also passes "vsock:...")
// is an error, so that a daemon started with Type=notify fails at once
// rather than time out in "activating".
func New() (*Notifier, error) {
	return newFromEnv(os.Getenv, os.Getpid())
}

func newFromEnv(getenv func(string) string, pid int) (*Notifier, error) {
	sock := getenv("NOTIFY_SOCKET")
	if sock == "" {
		return &Notifier{}, nil
	}
	if !strings.HasPrefix(sock, "/") && !(strings.HasPrefix(sock, "@") && len(sock) > 1) {
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: only absolute paths and abstract @names are supported", sock)
	}
	n := &Notifier{addr: &net.UnixAddr{Name: sock, Net: "unixgram"}}
	if d, ok := parseWatchdog(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), pid); ok {
		n.watchdog = d
	}
	return n, nil
}

// parseWatchdog interprets $WATCHDOG_USEC and $WATCHDOG_PID for process pid:
// systemd sets both for the main process; an empty pid means "whoever reads
// it" (sd_watchdog_enabled(3)); a pid of another process, a missing, zero,
// negative or malformed interval disable the watchdog.
func parseWatchdog(usec, pidStr string, pid int) (time.Duration, bool) {
	if usec == "" {
		return 0, false
	}
	us, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || us <= 0 || us > int64(time.Duration(1<<63-1)/time.Microsecond) {
		return 0, false
	}
	if pidStr != "" {
		p, err := strconv.Atoi(pidStr)
		if err != nil || p != pid {
			return 0, false
		}
	}
	return time.Duration(us) * time.Microsecond, true
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// WatchdogInterval is $WATCHDOG_USEC when the service manager expects
// keep-alive pings from this process (WatchdogSec= in the unit), and false
// otherwise. Ping at no more than half of it.
func (n *Notifier) WatchdogInterval() (time.Duration, bool) {
	if !n.Enabled() || n.watchdog <= 0 {
		return 0, false
	}
	return n.watchdog, true
}

// Ready tells the service manager that start-up, or a reload, is complete.
func (n *Notifier) Ready() error { return n.send("READY=1") }

// Reloading tells the service manager that the configuration is being
// re-read. Type=notify-reload (systemd 253) requires MONOTONIC_USEC, the
// CLOCK_MONOTONIC time of the reload, in the same datagram; Ready ends it.
func (n *Notifier) Reloading() error {
	if !n.Enabled() {
		return nil
	}
	now, err := monotonicNow()
	if err != nil {
		return fmt.Errorf("sd_notify RELOADING: %w", err)
	}
	return n.send("RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(now.Microseconds(), 10))
}

// Stopping tells the service manager that the daemon is shutting down.
func (n *Notifier) Stopping() error { return n.send("STOPPING=1") }

// Watchdog is the keep-alive ping for WatchdogSec=.
func (n *Notifier) Watchdog() error { return n.send("WATCHDOG=1") }

// Status sets the one-line status shown by `systemctl status`. Newlines
// would end the assignment early, so they are replaced by spaces.
func (n *Notifier) Status(s string) error {
	return n.send("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
}

// send writes state as one datagram.
func (n *Notifier) send(state string) error {
	if !n.Enabled() {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", firstKey(state), err)
	}
	_, werr := c.Write([]byte(state))
	cerr := c.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("sd_notify %s: %w", firstKey(state), err)
	}
	return nil
}

func firstKey(state string) string {
	k, _, _ := strings.Cut(state, "=")
	return k
}
