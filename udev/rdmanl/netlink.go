// Package rdmanl is NETLINK_RDMA's framing and its monitor: netlink
// messages and attributes as the nldev family sends them, the reader of a
// dump's (or a doit's) answer, a request socket, and the
// RDMA_NLDEV_CMD_MONITOR multicast (ParseMonitor) with the question of
// whether the kernel sends it (MonitorSupported).
//
// udev watches the monitor through it; rebind/rdma builds its nldev dumps
// (devices, ports, cm_ids) on its framing and socket. Parsing is done by
// pure functions over recorded bytes; the socket lives in _linux.go. The
// package never logs and never decides anything.
package rdmanl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
)

// Netlink framing (include/uapi/linux/netlink.h). Spelled out here rather
// than taken from x/sys/unix so that the parsers build on every platform.
const (
	HdrLen     = 16 // struct nlmsghdr
	AttrHdrLen = 4  // struct nlattr

	NLMsgError   = 0x2
	NLMsgDone    = 0x3
	NLMsgOverrun = 0x4
	NLMsgMinType = 0x10 // types below are control messages

	NLMFRequest  = 0x001
	NLMFAck      = 0x004
	NLMFDumpIntr = 0x010
	NLMFDump     = 0x300 // NLM_F_ROOT|NLM_F_MATCH

	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// RDMA netlink, nldev client (include/uapi/rdma/rdma_netlink.h).
const rdmaNLNLDev = 5 // RDMA_NL_NLDEV; nlmsg_type = RDMA_NL_NLDEV<<10 | cmd

// The attributes of enum rdma_nldev_attr that both the monitor and the
// nldev dumps carry.
const (
	AttrDevIndex  = 1  // RDMA_NLDEV_ATTR_DEV_INDEX, u32
	AttrDevName   = 2  // RDMA_NLDEV_ATTR_DEV_NAME, string
	AttrPortIndex = 3  // RDMA_NLDEV_ATTR_PORT_INDEX, u32
	AttrNdevIndex = 50 // RDMA_NLDEV_ATTR_NDEV_INDEX, u32
	AttrNdevName  = 51 // RDMA_NLDEV_ATTR_NDEV_NAME, string
)

// Netlink headers and attribute values are in host byte order.
func get16(b []byte) uint16    { return binary.NativeEndian.Uint16(b) }
func get32(b []byte) uint32    { return binary.NativeEndian.Uint32(b) }
func get64(b []byte) uint64    { return binary.NativeEndian.Uint64(b) }
func put16(b []byte, v uint16) { binary.NativeEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }

// NLDevType is the nlmsg_type of the nldev command cmd.
func NLDevType(cmd uint16) uint16 { return rdmaNLNLDev<<10 | cmd }

func align4(n int) int { return (n + 3) &^ 3 }

// Msg is one netlink message; Data is the payload after the header and
// aliases the datagram it was cut from.
type Msg struct {
	Type  uint16 // nlmsg_type
	Flags uint16 // nlmsg_flags
	Seq   uint32 // nlmsg_seq
	Pid   uint32 // nlmsg_pid
	Data  []byte
}

// SplitMessages cuts one datagram into its netlink messages.
func SplitMessages(b []byte) ([]Msg, error) {
	var msgs []Msg
	for off := 0; off < len(b); {
		rest := len(b) - off
		if rest < HdrLen {
			return nil, fmt.Errorf("message at offset %d: %d bytes left, header needs %d", off, rest, HdrLen)
		}
		l := get32(b[off:])
		if l < HdrLen || uint64(l) > uint64(rest) {
			return nil, fmt.Errorf("message at offset %d: length %d out of range [%d, %d]", off, l, HdrLen, rest)
		}
		msgs = append(msgs, Msg{
			Type:  get16(b[off+4:]),
			Flags: get16(b[off+6:]),
			Seq:   get32(b[off+8:]),
			Pid:   get32(b[off+12:]),
			Data:  b[off+HdrLen : off+int(l) : off+int(l)],
		})
		off += align4(int(l))
	}
	return msgs, nil
}

// ForEachAttr calls fn for every attribute in b, with the type stripped of
// its flag bits. Nested tables in RDMA netlink carry no NLA_F_NESTED: the
// caller knows which ids are nested.
func ForEachAttr(b []byte, fn func(typ uint16, data []byte) error) error {
	for off := 0; off < len(b); {
		rest := len(b) - off
		if rest < AttrHdrLen {
			return fmt.Errorf("attribute at offset %d: %d trailing bytes", off, rest)
		}
		l := int(get16(b[off:]))
		typ := get16(b[off+2:]) & nlaTypeMask
		if l < AttrHdrLen || l > rest {
			return fmt.Errorf("attribute %d at offset %d: length %d out of range [%d, %d]", typ, off, l, AttrHdrLen, rest)
		}
		if err := fn(typ, b[off+AttrHdrLen:off+l:off+l]); err != nil {
			return err
		}
		off += align4(l)
	}
	return nil
}

// AttrU8 decodes attribute typ's value b as a u8.
func AttrU8(typ uint16, b []byte) (uint8, error) {
	if len(b) != 1 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 1", typ, len(b))
	}
	return b[0], nil
}

// AttrU32 decodes attribute typ's value b as a u32.
func AttrU32(typ uint16, b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 4", typ, len(b))
	}
	return get32(b), nil
}

// AttrU64 decodes attribute typ's value b as a u64.
func AttrU64(typ uint16, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 8", typ, len(b))
	}
	return get64(b), nil
}

// AttrString returns a NLA_NUL_STRING up to its first NUL.
func AttrString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// DumpReader collects the data messages of one dump answer of type Type,
// datagram by datagram, until NLMSG_DONE (or the NLMSG_ERROR of a doit).
type DumpReader struct {
	Type     uint16
	Seq      uint32
	CheckSeq bool // skip messages of other sequence numbers (stale answers)
	Msgs     []Msg
	Done     bool
	n        int // datagrams seen
}

// Add reads one answer datagram. A kernel's errno comes as a *KernelError.
func (d *DumpReader) Add(datagram []byte) error {
	i := d.n
	d.n++
	if len(datagram) == 0 {
		return fmt.Errorf("datagram %d: empty", i)
	}
	msgs, err := SplitMessages(datagram)
	if err != nil {
		return fmt.Errorf("datagram %d: %w", i, err)
	}
	for _, m := range msgs {
		if d.CheckSeq && m.Seq != d.Seq {
			continue
		}
		if d.Done {
			return fmt.Errorf("datagram %d: message type %#x after the end of the dump", i, m.Type)
		}
		if m.Flags&NLMFDumpIntr != 0 {
			// The kernel saw the table change under the dump.
			return fmt.Errorf("datagram %d: dump interrupted (NLM_F_DUMP_INTR): %w", i, syscall.EINTR)
		}
		switch {
		case m.Type == NLMsgDone:
			d.Done = true
			// The payload is an int; a dump's error comes here, not as NLMSG_ERROR.
			if len(m.Data) >= 4 {
				if e := int32(get32(m.Data)); e != 0 {
					return &KernelError{Errno: errno(e), Done: true}
				}
			}
		case m.Type == NLMsgError:
			d.Done = true
			if len(m.Data) < 4 {
				return fmt.Errorf("datagram %d: NLMSG_ERROR of %d bytes", i, len(m.Data))
			}
			if e := int32(get32(m.Data)); e != 0 {
				return &KernelError{Errno: errno(e)}
			}
		case m.Type == NLMsgOverrun:
			return fmt.Errorf("datagram %d: NLMSG_OVERRUN: %w", i, syscall.ENOBUFS)
		case m.Type < NLMsgMinType:
			// NLMSG_NOOP and unknown control messages carry nothing for us.
		case m.Type != d.Type:
			return fmt.Errorf("datagram %d: message type %#x, want %#x", i, m.Type, d.Type)
		default:
			d.Msgs = append(d.Msgs, m)
		}
	}
	return nil
}

// KernelError is the errno the kernel answered a request with, as opposed to
// a local syscall failure.
type KernelError struct {
	Errno syscall.Errno
	Done  bool // carried by NLMSG_DONE (a dump), not NLMSG_ERROR
}

func (e *KernelError) Error() string {
	if e.Done {
		return "kernel ended the dump with: " + e.Errno.Error()
	}
	return "kernel answered: " + e.Errno.Error()
}

func (e *KernelError) Unwrap() error { return e.Errno }

// IsKernelErrno reports whether err carries errno n answered by the kernel.
func IsKernelErrno(err error, n syscall.Errno) bool {
	var ke *KernelError
	return errors.As(err, &ke) && ke.Errno == n
}

func errno(e int32) syscall.Errno {
	if e < 0 {
		return syscall.Errno(-int64(e))
	}
	return syscall.Errno(e)
}

// ReadDump runs datagrams, answers only, through a DumpReader.
func ReadDump(datagrams [][]byte, typ uint16) ([]Msg, error) {
	d := DumpReader{Type: typ}
	for _, dg := range datagrams {
		if err := d.Add(dg); err != nil {
			return nil, err
		}
	}
	if !d.Done {
		return nil, fmt.Errorf("answer ends before NLMSG_DONE: %w", io.ErrUnexpectedEOF)
	}
	return d.Msgs, nil
}
