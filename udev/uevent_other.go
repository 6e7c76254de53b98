//go:build !linux

package udev

import (
	"errors"
	"fmt"
	"runtime"
)

// ParseUevent is only implemented on Linux: go-udev builds nowhere else.
func ParseUevent(b []byte) (Event, error) {
	return Event{}, fmt.Errorf("uevent: parse on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func dialUevents(int) (Conn, error) {
	return nil, fmt.Errorf("uevent socket on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
