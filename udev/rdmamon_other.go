//go:build !linux

package udev

import (
	"errors"
	"fmt"
	"runtime"
)

func dialRDMAMonitor(int) (Conn, error) {
	return nil, fmt.Errorf("rdma monitor on %s: %w: %w", runtime.GOOS, ErrRDMAMonitorUnsupported, errors.ErrUnsupported)
}
