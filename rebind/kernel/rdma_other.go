//go:build !linux

package kernel

import (
	"errors"
	"fmt"
)

// OpenRDMA fails with ErrUnsupported outside Linux.
func OpenRDMA() (*RDMA, error) {
	return nil, fmt.Errorf("open NETLINK_RDMA socket: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}
