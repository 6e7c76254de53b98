package rdmanl

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// rdmaTimeout bounds the wait for each answer datagram, so that a call
	// can never hang on a kernel that does not answer.
	rdmaTimeout = 5 * time.Second
	// rdmaRecvBuf is the initial receive buffer; larger datagrams are
	// measured with MSG_PEEK|MSG_TRUNC first and never cut.
	rdmaRecvBuf = 64 << 10
)

// Open opens a NETLINK_RDMA socket for requests and their answers. On a
// kernel without RDMA netlink (ib_core not loaded, or not built) the error
// wraps ErrUnsupported.
func Open() (*Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("open NETLINK_RDMA socket: %w: %w", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("rdma netlink: open socket: %w", err)
	}
	c := &Socket{fd: fd, buf: make([]byte, rdmaRecvBuf)}
	tv := unix.NsecToTimeval(rdmaTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return nil, errors.Join(fmt.Errorf("rdma netlink: set socket timeout: %w", err), c.Close())
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, errors.Join(fmt.Errorf("rdma netlink: bind: %w", err), c.Close())
	}
	return c, nil
}

// Socket is a bound NETLINK_RDMA socket with SO_RCVTIMEO set. It is not
// safe for concurrent use.
type Socket struct {
	fd  int
	buf []byte
}

// Close closes the socket.
func (c *Socket) Close() error { return unix.Close(c.fd) }

// Send sends one request to the kernel.
func (c *Socket) Send(req []byte) error {
	for {
		err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Recv returns the next datagram from the kernel in a fresh slice, waiting
// a bounded time; datagrams from other senders are dropped.
func (c *Socket) Recv() ([]byte, error) {
	deadline := time.Now().Add(rdmaTimeout)
	for {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no answer within %v: %w", rdmaTimeout, os.ErrDeadlineExceeded)
		}
		n, _, err := unix.Recvfrom(c.fd, c.buf, unix.MSG_PEEK|unix.MSG_TRUNC)
		if err == nil && n > len(c.buf) {
			c.buf = make([]byte, n)
		}
		if err == nil {
			var from unix.Sockaddr
			n, from, err = unix.Recvfrom(c.fd, c.buf, 0)
			if err == nil {
				if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
					continue // not from the kernel
				}
				return bytes.Clone(c.buf[:n]), nil
			}
		}
		switch {
		case errors.Is(err, unix.EINTR):
			// A signal: with SO_RCVTIMEO set, recvfrom returns EINTR even
			// under SA_RESTART. Try again within the overall bound.
		case errors.Is(err, unix.EAGAIN):
			return nil, fmt.Errorf("no answer within %v: %w", rdmaTimeout, os.ErrDeadlineExceeded)
		default:
			// ENOBUFS: the socket dropped datagrams; the dump is run again.
			return nil, err
		}
	}
}
