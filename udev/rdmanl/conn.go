package rdmanl

import "errors"

// ErrUnsupported is wrapped by Open's error when the running kernel (or the
// platform) has no RDMA netlink.
var ErrUnsupported = errors.New("rdma netlink is not available on this kernel (is ib_core loaded?)")

// Conn is a netlink socket: the seam between the request logic and the
// kernel (*Socket, or a fake in tests).
type Conn interface {
	Send(req []byte) error
	// Recv returns the next datagram from the kernel in a fresh slice,
	// waiting a bounded time.
	Recv() ([]byte, error)
	Close() error
}
