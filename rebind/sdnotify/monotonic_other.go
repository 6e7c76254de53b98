//go:build !linux

package sdnotify

import (
	"errors"
	"time"
)

func monotonicNow() (time.Duration, error) {
	return 0, errors.New("CLOCK_MONOTONIC is only read on Linux")
}
