//go:build !linux

package rdmanl

import (
	"errors"
	"fmt"
)

// Socket is a NETLINK_RDMA socket; outside Linux there is none.
type Socket struct{}

// Open fails with ErrUnsupported outside Linux.
func Open() (*Socket, error) {
	return nil, fmt.Errorf("open NETLINK_RDMA socket: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}

func (*Socket) Close() error          { return errors.ErrUnsupported }
func (*Socket) Send([]byte) error     { return errors.ErrUnsupported }
func (*Socket) Recv() ([]byte, error) { return nil, errors.ErrUnsupported }
