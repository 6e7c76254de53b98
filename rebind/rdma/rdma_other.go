//go:build !linux

package rdma

import (
	"errors"
	"fmt"
)

// OpenRDMA fails with ErrUnsupported outside Linux.
func OpenRDMA() (*RDMA, error) {
	return nil, fmt.Errorf("open NETLINK_RDMA socket: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}
