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

// NetdevsAndAddrs fails with ErrUnsupported outside Linux.
func NetdevsAndAddrs() ([]Netdev, []Addr, error) {
	_, err := Addrs()
	return nil, nil, err
}
