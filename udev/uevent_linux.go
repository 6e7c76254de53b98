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

// pollInterval bounds a blocking read so that a cancelled context is noticed.
const pollInterval = 200 * time.Millisecond

// dialUevents opens go-udev's UEventConn on the kernel group. go-udev does
// not create the socket with SOCK_CLOEXEC, sets no receive buffer and no
// timeout; its exported Fd lets us fix all three.
func dialUevents(rcvbuf int) (Conn, error) {
	c := &udevnl.UEventConn{}
	if err := c.Connect(udevnl.KernelEvent); err != nil {
		return nil, fmt.Errorf("uevent socket: connect: %w", err)
	}
	if err := setupUeventFd(c.Fd, rcvbuf); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return ueventConn{c}, nil
}

func setupUeventFd(fd, rcvbuf int) error {
	unix.CloseOnExec(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf); err != nil {
		// Without CAP_NET_ADMIN: capped at net.core.rmem_max.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
			return fmt.Errorf("uevent socket: set SO_RCVBUF %d: %w", rcvbuf, err)
		}
	}
	tv := unix.NsecToTimeval(pollInterval.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("uevent socket: set SO_RCVTIMEO: %w", err)
	}
	return nil
}

type ueventConn struct{ c *udevnl.UEventConn }

func (u ueventConn) ReadMsg() ([]byte, error) {
	for {
		msg, err := u.c.ReadMsg()
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return nil, fmt.Errorf("uevent socket: %w", os.ErrDeadlineExceeded)
		case err != nil:
			return nil, err
		}
		return msg, nil
	}
}

func (u ueventConn) Close() error { return u.c.Close() }
