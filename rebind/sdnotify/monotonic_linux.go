package sdnotify

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonicNow is CLOCK_MONOTONIC, the clock systemd compares MONOTONIC_USEC
// with (Go's time.Now carries a monotonic reading but does not expose it).
func monotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}
