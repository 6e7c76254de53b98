//go:build !linux

package kernel

import (
	"errors"
	"fmt"
)

// RDMA is a NETLINK_RDMA socket; it exists only on Linux.
type RDMA struct{}

// OpenRDMA fails with ErrUnsupported outside Linux.
func OpenRDMA() (*RDMA, error) {
	return nil, fmt.Errorf("rdma netlink: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}

// Close does nothing outside Linux.
func (*RDMA) Close() error { return nil }

// Devices fails with ErrUnsupported outside Linux.
func (*RDMA) Devices() ([]Device, error) {
	return nil, fmt.Errorf("rdma netlink: device dump: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}

// CMIDs fails with ErrUnsupported outside Linux.
func (*RDMA) CMIDs(devs []Device) ([]CMID, error) {
	return nil, fmt.Errorf("rdma netlink: cm_id dump: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}
