package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
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
	// dumpAttempts bounds the retries of a dump that the kernel marked
	// interrupted or that lost datagrams (ENOBUFS).
	dumpAttempts = 3
)

// RDMA is a NETLINK_RDMA socket for the nldev dumps. Its methods are safe for
// concurrent use; they are serialized.
type RDMA struct {
	mu  sync.Mutex
	fd  int // -1 once closed
	seq uint32
	buf []byte
}

// OpenRDMA opens a NETLINK_RDMA socket. On a kernel without RDMA netlink
// (ib_core not loaded, or not built) the error wraps ErrUnsupported.
func OpenRDMA() (*RDMA, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("open NETLINK_RDMA socket: %w: %w", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("rdma netlink: open socket: %w", err)
	}
	tv := unix.NsecToTimeval(rdmaTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return nil, errors.Join(fmt.Errorf("rdma netlink: set socket timeout: %w", err), closeFD(fd))
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, errors.Join(fmt.Errorf("rdma netlink: bind: %w", err), closeFD(fd))
	}
	return &RDMA{fd: fd, seq: uint32(time.Now().UnixNano()), buf: make([]byte, rdmaRecvBuf)}, nil
}

func closeFD(fd int) error {
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("rdma netlink: close socket: %w", err)
	}
	return nil
}

// Close closes the socket. Further calls fail with os.ErrClosed.
func (r *RDMA) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil
	}
	fd := r.fd
	r.fd = -1
	return closeFD(fd)
}

// Devices dumps the RDMA devices (RDMA_NLDEV_CMD_GET), then the ports of
// each (RDMA_NLDEV_CMD_PORT_GET with its DEV_INDEX). A device that vanished
// between the two dumps is left out.
func (r *RDMA) Devices() ([]Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs, err := r.dump(nldevCmdGet, 0, false)
	if err != nil {
		return nil, fmt.Errorf("rdma netlink: device dump: %w", err)
	}
	devs, err := parseDevices(msgs)
	if err != nil {
		return nil, fmt.Errorf("rdma netlink: device dump: %w", err)
	}
	out := devs[:0]
	for _, d := range devs {
		msgs, err := r.dump(nldevCmdPortGet, d.Index, true)
		if isKernelErrno(err, unix.EINVAL) {
			// The dump of a missing device index ends with -EINVAL.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rdma netlink: port dump of device %d (%s): %w", d.Index, d.Name, err)
		}
		if d.Ports, err = parsePorts(msgs, d.Index, true); err != nil {
			return nil, fmt.Errorf("rdma netlink: port dump of device %d (%s): %w", d.Index, d.Name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// CMIDs dumps the rdma_cm identifiers of each device in devs
// (RDMA_NLDEV_CMD_RES_CM_ID_GET, which requires a DEV_INDEX). A device that
// vanished since devs were read answers -EINVAL and contributes nothing: its
// listeners are gone with it.
func (r *RDMA) CMIDs(devs []Device) ([]CMID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []CMID
	for _, d := range devs {
		msgs, err := r.dump(nldevCmdResCMIDGet, d.Index, true)
		if isKernelErrno(err, unix.EINVAL) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rdma netlink: cm_id dump of device %d (%s): %w", d.Index, d.Name, err)
		}
		got, err := parseCMIDs(msgs, d.Index, true)
		if err != nil {
			return nil, fmt.Errorf("rdma netlink: cm_id dump of device %d (%s): %w", d.Index, d.Name, err)
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// dump runs one nldev dump, again when the kernel reports it interrupted or
// datagrams were dropped. The caller holds r.mu.
func (r *RDMA) dump(cmd uint16, dev uint32, withDev bool) ([]nlMsg, error) {
	if r.fd < 0 {
		return nil, fmt.Errorf("socket: %w", os.ErrClosed)
	}
	var err error
	for range dumpAttempts {
		var msgs []nlMsg
		msgs, err = r.dumpOnce(cmd, dev, withDev)
		if err == nil {
			return msgs, nil
		}
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.ENOBUFS) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%d attempts: %w", dumpAttempts, err)
}

func (r *RDMA) dumpOnce(cmd uint16, dev uint32, withDev bool) ([]nlMsg, error) {
	// Answers to an earlier, abandoned request may still be queued: they
	// carry an older sequence number and are skipped.
	r.seq++
	req := newRequest(cmd, r.seq, dev, withDev)
	for {
		err := unix.Sendto(r.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("send request: %w", err)
		}
	}
	d := dumpReader{typ: nldevType(cmd), seq: r.seq, checkSeq: true}
	for !d.done {
		dg, err := r.recv()
		if err != nil {
			return nil, err
		}
		if err := d.add(dg); err != nil {
			return nil, err
		}
	}
	return d.msgs, nil
}

// recv returns the next datagram from the kernel, in a fresh slice.
func (r *RDMA) recv() ([]byte, error) {
	deadline := time.Now().Add(rdmaTimeout)
	for {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("receive: no answer within %v: %w", rdmaTimeout, os.ErrDeadlineExceeded)
		}
		n, _, err := unix.Recvfrom(r.fd, r.buf, unix.MSG_PEEK|unix.MSG_TRUNC)
		if err == nil && n > len(r.buf) {
			r.buf = make([]byte, n)
		}
		if err == nil {
			var from unix.Sockaddr
			n, from, err = unix.Recvfrom(r.fd, r.buf, 0)
			if err == nil {
				if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
					continue // not from the kernel
				}
				return bytes.Clone(r.buf[:n]), nil
			}
		}
		switch {
		case errors.Is(err, unix.EINTR):
			// A signal: with SO_RCVTIMEO set, recvfrom returns EINTR even
			// under SA_RESTART. Try again within the overall bound.
		case errors.Is(err, unix.EAGAIN):
			return nil, fmt.Errorf("receive: no answer within %v: %w", rdmaTimeout, os.ErrDeadlineExceeded)
		default:
			// ENOBUFS: the socket dropped datagrams; dump retries.
			return nil, fmt.Errorf("receive: %w", err)
		}
	}
}
