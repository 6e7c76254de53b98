package udev

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// dialRDMAMonitor asks the kernel whether it has the monitor, then opens a
// NETLINK_RDMA socket on Go's poller, joined to RDMA_NL_GROUP_NOTIFY (the
// kernel lets any user join it: NL_CFG_F_NONROOT_RECV, 6.12).
func dialRDMAMonitor(rcvbuf int) (Conn, error) {
	if err := checkRDMAMonitor(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_RDMA)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		// ib_core went away since the check.
		return nil, fmt.Errorf("rdma monitor socket: %w: %w", ErrRDMAMonitorUnsupported, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rdma monitor socket: open: %w", err)
	}
	if err := setupMonitorFd(fd, rcvbuf); err != nil {
		return nil, errors.Join(err, unix.Close(fd))
	}
	f := os.NewFile(uintptr(fd), "rdma-monitor")
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("rdma monitor socket: %w", err), f.Close())
	}
	return &monitorConn{f: f, raw: raw, buf: make([]byte, maxMonitorLen+1)}, nil
}

// checkRDMAMonitor returns an error wrapping ErrRDMAMonitorUnsupported
// when the kernel has no RDMA netlink or no monitor (RDMA_NLDEV_CMD_SYS_GET
// without RDMA_NLDEV_SYS_ATTR_MONITOR_MODE).
func checkRDMAMonitor() error {
	s, err := rdmanl.Open()
	if errors.Is(err, rdmanl.ErrUnsupported) {
		return fmt.Errorf("%w: %w", ErrRDMAMonitorUnsupported, err)
	}
	if err != nil {
		return err
	}
	// A fresh socket: no stale answer can carry the same sequence number.
	ok, err := rdmanl.MonitorSupported(s, 1)
	if err = errors.Join(err, s.Close()); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: the kernel's RDMA_NLDEV_CMD_SYS_GET answer has no RDMA_NLDEV_SYS_ATTR_MONITOR_MODE (the monitor came with Linux 6.12)", ErrRDMAMonitorUnsupported)
	}
	return nil
}

func setupMonitorFd(fd, rcvbuf int) error {
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("rdma monitor socket: bind: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, rdmanl.MonitorGroup); err != nil {
		return fmt.Errorf("rdma monitor socket: join group %d (RDMA_NL_GROUP_NOTIFY): %w", rdmanl.MonitorGroup, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf); err != nil {
		// Without CAP_NET_ADMIN: capped at net.core.rmem_max.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
			return fmt.Errorf("rdma monitor socket: set SO_RCVBUF %d: %w", rcvbuf, err)
		}
	}
	return nil
}

type monitorConn struct {
	f   *os.File
	raw interface {
		Read(func(fd uintptr) bool) error
	}
	buf []byte
}

// ReadMsg reads one datagram from the kernel; datagrams from other senders
// are dropped. A datagram longer than maxMonitorLen is returned cut to
// maxMonitorLen+1 bytes, which the parser rejects: it is reported, never
// silently cut.
func (c *monitorConn) ReadMsg() ([]byte, error) {
	for {
		var (
			n    int
			from unix.Sockaddr
			rerr error
		)
		err := c.raw.Read(func(fd uintptr) bool {
			// MSG_TRUNC: n is the datagram's length, even when longer
			// than the buffer.
			n, from, rerr = unix.Recvfrom(int(fd), c.buf, unix.MSG_TRUNC)
			return rerr != unix.EAGAIN && rerr != unix.EINTR
		})
		if err != nil {
			return nil, err // os.ErrDeadlineExceeded after Interrupt, os.ErrClosed
		}
		if rerr != nil {
			return nil, rerr // ENOBUFS: events were lost
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue
		}
		return append([]byte(nil), c.buf[:min(n, len(c.buf))]...), nil
	}
}

// Interrupt makes a blocked ReadMsg return os.ErrDeadlineExceeded.
func (c *monitorConn) Interrupt() { c.f.SetReadDeadline(time.Unix(1, 0)) }

func (c *monitorConn) Close() error { return c.f.Close() }
