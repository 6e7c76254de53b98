package udev

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	udevnl "github.com/pilebones/go-udev/netlink"
	"golang.org/x/sys/unix"
)

// ParseUevent parses one kernel uevent datagram with go-udev's parser and
// checks what the kernel always sends. Messages from the udev daemon
// ("libudev\0" header) are rejected: only kernel events are expected.
func ParseUevent(b []byte) (Event, error) {
	switch {
	case len(b) == 0:
		return Event{}, errors.New("uevent: empty datagram")
	case len(b) > maxUeventLen:
		return Event{}, fmt.Errorf("uevent: datagram of %d bytes exceeds %d", len(b), maxUeventLen)
	case bytes.HasPrefix(b, []byte("libudev\x00")):
		return Event{}, errors.New("uevent: udev daemon message, expected a kernel event")
	case b[len(b)-1] != 0:
		return Event{}, errors.New("uevent: datagram not NUL-terminated")
	case bytes.IndexByte(b, '@') < 0 || bytes.IndexByte(b, '@') > bytes.IndexByte(b, 0):
		return Event{}, errors.New("uevent: no ACTION@DEVPATH header")
	}
	head := string(b[:bytes.IndexByte(b, 0)])
	u, err := udevnl.ParseUEvent(b)
	if err != nil {
		return Event{}, fmt.Errorf("uevent %q: %w", head, err)
	}
	return newEvent(string(u.Action), u.KObj, u.Env)
}

// dialUevents opens go-udev's UEventConn on the kernel group, then moves
// the socket onto Go's poller: go-udev creates it blocking, without
// SOCK_CLOEXEC and without a receive buffer size. A blocking read would
// need a timeout to notice cancellation (a wakeup every interval while
// idle); on the poller, cancellation interrupts the read and an idle
// daemon does not wake up at all.
func dialUevents(rcvbuf int) (Conn, error) {
	c := &udevnl.UEventConn{}
	if err := c.Connect(udevnl.KernelEvent); err != nil {
		return nil, fmt.Errorf("uevent socket: connect: %w", err)
	}
	if err := setupUeventFd(c.Fd, rcvbuf); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	f := os.NewFile(uintptr(c.Fd), "uevent")
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("uevent socket: %w", err), f.Close())
	}
	return &ueventConn{f: f, raw: raw, buf: make([]byte, maxUeventLen+1)}, nil
}

func setupUeventFd(fd, rcvbuf int) error {
	unix.CloseOnExec(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf); err != nil {
		// Without CAP_NET_ADMIN: capped at net.core.rmem_max.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
			return fmt.Errorf("uevent socket: set SO_RCVBUF %d: %w", rcvbuf, err)
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("uevent socket: set non-blocking: %w", err)
	}
	return nil
}

type ueventConn struct {
	f   *os.File
	raw interface {
		Read(func(fd uintptr) bool) error
	}
	buf []byte
}

// ReadMsg reads one datagram. A datagram larger than any uevent is
// reported, not silently cut.
func (u *ueventConn) ReadMsg() ([]byte, error) {
	var n int
	var rerr error
	err := u.raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), u.buf, 0)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err != nil {
		return nil, err // os.ErrDeadlineExceeded after Interrupt, os.ErrClosed
	}
	if rerr != nil {
		return nil, rerr
	}
	if n > maxUeventLen {
		return nil, fmt.Errorf("uevent socket: datagram larger than %d bytes", maxUeventLen)
	}
	return append([]byte(nil), u.buf[:n]...), nil
}

// Interrupt makes a blocked ReadMsg return os.ErrDeadlineExceeded.
func (u *ueventConn) Interrupt() { u.f.SetReadDeadline(time.Unix(1, 0)) }

func (u *ueventConn) Close() error { return u.f.Close() }
