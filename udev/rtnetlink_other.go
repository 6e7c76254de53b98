//go:build !linux

package udev

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// WatchRtnetlink is only implemented on Linux.
func WatchRtnetlink(ctx context.Context, poke func(Hint), opts Options) error {
	return fmt.Errorf("rtnetlink on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
