//go:build !linux

package rdma

import (
	"errors"
	"fmt"
)

// Addrs fails with ErrUnsupported outside Linux.
func Addrs() ([]Addr, error) {
	return nil, fmt.Errorf("rtnetlink: address dump: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}
