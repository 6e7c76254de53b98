package rdma

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// dumpAttempts bounds the runs of a dump that the kernel marked interrupted
// (NLM_F_DUMP_INTR) or that lost datagrams (ENOBUFS).
const dumpAttempts = 3

// RDMA is a NETLINK_RDMA socket for the nldev dumps (OpenRDMA). Its methods
// are safe for concurrent use; they are serialized.
type RDMA struct {
	mu   sync.Mutex
	conn rdmanl.Conn // nil once closed
	seq  uint32
}

// OpenRDMA opens a NETLINK_RDMA socket (rdmanl.Open). On a kernel without
// RDMA netlink (ib_core not loaded, or not built) the error wraps
// ErrUnsupported.
func OpenRDMA() (*RDMA, error) {
	s, err := rdmanl.Open()
	if err != nil {
		return nil, err
	}
	return &RDMA{conn: s, seq: uint32(time.Now().UnixNano())}, nil
}

// Close closes the socket. Further calls fail with os.ErrClosed.
func (r *RDMA) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil
	}
	c := r.conn
	r.conn = nil
	if err := c.Close(); err != nil {
		return fmt.Errorf("rdma netlink: close socket: %w", err)
	}
	return nil
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
		if rdmanl.IsKernelErrno(err, syscall.EINVAL) {
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
		if rdmanl.IsKernelErrno(err, syscall.EINVAL) {
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
func (r *RDMA) dump(cmd uint16, dev uint32, withDev bool) ([]rdmanl.Msg, error) {
	if r.conn == nil {
		return nil, fmt.Errorf("socket: %w", os.ErrClosed)
	}
	var err error
	for range dumpAttempts {
		var msgs []rdmanl.Msg
		if msgs, err = r.dumpOnce(cmd, dev, withDev); err == nil {
			return msgs, nil
		}
		if !errors.Is(err, syscall.EINTR) && !errors.Is(err, syscall.ENOBUFS) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%d attempts: %w", dumpAttempts, err)
}

func (r *RDMA) dumpOnce(cmd uint16, dev uint32, withDev bool) ([]rdmanl.Msg, error) {
	// Answers to an earlier, abandoned request may still be queued: they
	// carry an older sequence number and are skipped.
	r.seq++
	if err := r.conn.Send(newRequest(cmd, r.seq, dev, withDev)); err != nil {
		return nil, fmt.Errorf("send request: %w", err)
	}
	d := rdmanl.DumpReader{Type: rdmanl.NLDevType(cmd), Seq: r.seq, CheckSeq: true}
	for !d.Done {
		dg, err := r.conn.Recv()
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		if err := d.Add(dg); err != nil {
			return nil, err
		}
	}
	return d.Msgs, nil
}
