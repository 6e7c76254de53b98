package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"syscall"
)

// Netlink framing (include/uapi/linux/netlink.h). Spelled out here rather
// than taken from x/sys/unix so that the parsers build on every platform.
const (
	nlmsgHdrLen = 16 // struct nlmsghdr
	nlaHdrLen   = 4  // struct nlattr

	nlmsgError   = 0x2
	nlmsgDone    = 0x3
	nlmsgOverrun = 0x4
	nlmsgMinType = 0x10 // types below are control messages

	nlmFRequest  = 0x001
	nlmFDumpIntr = 0x010
	nlmFDump     = 0x300 // NLM_F_ROOT|NLM_F_MATCH

	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// RDMA netlink, nldev client (include/uapi/rdma/rdma_netlink.h).
const (
	rdmaNLNLDev = 5 // RDMA_NL_NLDEV; nlmsg_type = RDMA_NL_NLDEV<<10 | cmd

	nldevCmdGet        = 1  // RDMA_NLDEV_CMD_GET
	nldevCmdPortGet    = 5  // RDMA_NLDEV_CMD_PORT_GET
	nldevCmdResCMIDGet = 11 // RDMA_NLDEV_CMD_RES_CM_ID_GET
)

// enum rdma_nldev_attr.
const (
	attrDevIndex      = 1  // u32
	attrDevName       = 2  // string
	attrPortIndex     = 3  // u32
	attrNodeGUID      = 6  // u64
	attrPortState     = 12 // u8
	attrPortPhysState = 13 // u8
	attrDevNodeType   = 14 // u8
	attrResState      = 27 // u8
	attrResPID        = 28 // u32
	attrResKernName   = 29 // string
	attrResCMID       = 30 // nested table, no NLA_F_NESTED
	attrResCMIDEntry  = 31 // nested, no NLA_F_NESTED
	attrResPS         = 32 // u32
	attrResSrcAddr    = 33 // struct __kernel_sockaddr_storage
	attrResDstAddr    = 34 // struct __kernel_sockaddr_storage
	attrNdevIndex     = 50 // u32
	attrNdevName      = 51 // string
	attrResCMIDN      = 63 // u32
	attrDevProtocol   = 67 // string
)

// Address families as the Linux kernel numbers them in sockaddr_storage.
const (
	afInet  = 2
	afInet6 = 10
)

// Netlink headers and attribute values are in host byte order.
func get16(b []byte) uint16    { return binary.NativeEndian.Uint16(b) }
func get32(b []byte) uint32    { return binary.NativeEndian.Uint32(b) }
func get64(b []byte) uint64    { return binary.NativeEndian.Uint64(b) }
func put16(b []byte, v uint16) { binary.NativeEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }

func nldevType(cmd uint16) uint16 { return rdmaNLNLDev<<10 | cmd }

func align4(n int) int { return (n + 3) &^ 3 }

// nlMsg is one netlink message; data is the payload after the header and
// aliases the datagram it was cut from.
type nlMsg struct {
	typ   uint16
	flags uint16
	seq   uint32
	pid   uint32
	data  []byte
}

// splitMessages cuts one datagram into its netlink messages.
func splitMessages(b []byte) ([]nlMsg, error) {
	var msgs []nlMsg
	for off := 0; off < len(b); {
		rest := len(b) - off
		if rest < nlmsgHdrLen {
			return nil, fmt.Errorf("message at offset %d: %d bytes left, header needs %d", off, rest, nlmsgHdrLen)
		}
		l := get32(b[off:])
		if l < nlmsgHdrLen || uint64(l) > uint64(rest) {
			return nil, fmt.Errorf("message at offset %d: length %d out of range [%d, %d]", off, l, nlmsgHdrLen, rest)
		}
		msgs = append(msgs, nlMsg{
			typ:   get16(b[off+4:]),
			flags: get16(b[off+6:]),
			seq:   get32(b[off+8:]),
			pid:   get32(b[off+12:]),
			data:  b[off+nlmsgHdrLen : off+int(l) : off+int(l)],
		})
		off += align4(int(l))
	}
	return msgs, nil
}

// forEachAttr calls fn for every attribute in b, with the type stripped of
// its flag bits. Nested tables in RDMA netlink carry no NLA_F_NESTED: the
// caller knows which ids are nested.
func forEachAttr(b []byte, fn func(typ uint16, data []byte) error) error {
	for off := 0; off < len(b); {
		rest := len(b) - off
		if rest < nlaHdrLen {
			return fmt.Errorf("attribute at offset %d: %d trailing bytes", off, rest)
		}
		l := int(get16(b[off:]))
		typ := get16(b[off+2:]) & nlaTypeMask
		if l < nlaHdrLen || l > rest {
			return fmt.Errorf("attribute %d at offset %d: length %d out of range [%d, %d]", typ, off, l, nlaHdrLen, rest)
		}
		if err := fn(typ, b[off+nlaHdrLen:off+l:off+l]); err != nil {
			return err
		}
		off += align4(l)
	}
	return nil
}

func attrU8(typ uint16, b []byte) (uint8, error) {
	if len(b) != 1 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 1", typ, len(b))
	}
	return b[0], nil
}

func attrU32(typ uint16, b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 4", typ, len(b))
	}
	return get32(b), nil
}

func attrU64(typ uint16, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("attribute %d: %d bytes, want 8", typ, len(b))
	}
	return get64(b), nil
}

// attrString returns a NLA_NUL_STRING up to its first NUL.
func attrString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// attrSockaddr decodes a struct __kernel_sockaddr_storage: family in host
// order, port and address in network order. Families other than AF_INET and
// AF_INET6 (AF_IB, AF_UNSPEC) give the invalid AddrPort. IPv4-mapped IPv6
// addresses are unmapped; a nonzero IPv6 scope id becomes the numeric zone.
func attrSockaddr(typ uint16, b []byte) (netip.AddrPort, error) {
	if len(b) < 2 {
		return netip.AddrPort{}, fmt.Errorf("attribute %d: sockaddr of %d bytes", typ, len(b))
	}
	switch get16(b) {
	case afInet:
		if len(b) < 8 {
			return netip.AddrPort{}, fmt.Errorf("attribute %d: AF_INET sockaddr of %d bytes, want 8", typ, len(b))
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), nil
	case afInet6:
		if len(b) < 28 {
			return netip.AddrPort{}, fmt.Errorf("attribute %d: AF_INET6 sockaddr of %d bytes, want 28", typ, len(b))
		}
		ip := netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		if scope := get32(b[24:]); scope != 0 && ip.Is6() {
			ip = ip.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:])), nil
	default:
		return netip.AddrPort{}, nil
	}
}

// dumpReader collects the data messages of one dump answer of type typ,
// datagram by datagram, until NLMSG_DONE (or the NLMSG_ERROR of a doit).
type dumpReader struct {
	typ      uint16
	seq      uint32
	checkSeq bool // skip messages of other sequence numbers (stale answers)
	msgs     []nlMsg
	done     bool
	n        int // datagrams seen
}

func (d *dumpReader) add(datagram []byte) error {
	i := d.n
	d.n++
	if len(datagram) == 0 {
		return fmt.Errorf("datagram %d: empty", i)
	}
	msgs, err := splitMessages(datagram)
	if err != nil {
		return fmt.Errorf("datagram %d: %w", i, err)
	}
	for _, m := range msgs {
		if d.checkSeq && m.seq != d.seq {
			continue
		}
		if d.done {
			return fmt.Errorf("datagram %d: message type %#x after the end of the dump", i, m.typ)
		}
		if m.flags&nlmFDumpIntr != 0 {
			// The kernel saw the table change under the dump.
			return fmt.Errorf("datagram %d: dump interrupted (NLM_F_DUMP_INTR): %w", i, syscall.EINTR)
		}
		switch {
		case m.typ == nlmsgDone:
			d.done = true
			// The payload is an int; a dump's error comes here, not as NLMSG_ERROR.
			if len(m.data) >= 4 {
				if e := int32(get32(m.data)); e != 0 {
					return &kernelError{errno: errno(e), done: true}
				}
			}
		case m.typ == nlmsgError:
			d.done = true
			if len(m.data) < 4 {
				return fmt.Errorf("datagram %d: NLMSG_ERROR of %d bytes", i, len(m.data))
			}
			if e := int32(get32(m.data)); e != 0 {
				return &kernelError{errno: errno(e)}
			}
		case m.typ == nlmsgOverrun:
			return fmt.Errorf("datagram %d: NLMSG_OVERRUN: %w", i, syscall.ENOBUFS)
		case m.typ < nlmsgMinType:
			// NLMSG_NOOP and unknown control messages carry nothing for us.
		case m.typ != d.typ:
			return fmt.Errorf("datagram %d: message type %#x, want %#x", i, m.typ, d.typ)
		default:
			d.msgs = append(d.msgs, m)
		}
	}
	return nil
}

// kernelError is the errno the kernel answered a request with, as opposed to
// a local syscall failure.
type kernelError struct {
	errno syscall.Errno
	done  bool // carried by NLMSG_DONE (a dump), not NLMSG_ERROR
}

func (e *kernelError) Error() string {
	if e.done {
		return "kernel ended the dump with: " + e.errno.Error()
	}
	return "kernel answered: " + e.errno.Error()
}

func (e *kernelError) Unwrap() error { return e.errno }

// isKernelErrno reports whether err carries errno n answered by the kernel.
func isKernelErrno(err error, n syscall.Errno) bool {
	var ke *kernelError
	return errors.As(err, &ke) && ke.errno == n
}

func errno(e int32) syscall.Errno {
	if e < 0 {
		return syscall.Errno(-int64(e))
	}
	return syscall.Errno(e)
}

// readDump runs datagrams, answers only, through a dumpReader.
func readDump(datagrams [][]byte, typ uint16) ([]nlMsg, error) {
	d := dumpReader{typ: typ}
	for _, dg := range datagrams {
		if err := d.add(dg); err != nil {
			return nil, err
		}
	}
	if !d.done {
		return nil, fmt.Errorf("answer ends before NLMSG_DONE: %w", io.ErrUnexpectedEOF)
	}
	return d.msgs, nil
}

// newRequest builds a dump request of the nldev command cmd (flags
// NLM_F_REQUEST|NLM_F_DUMP, nlmsg_pid 0), with RDMA_NLDEV_ATTR_DEV_INDEX when
// withDev is set.
func newRequest(cmd uint16, seq uint32, dev uint32, withDev bool) []byte {
	n := nlmsgHdrLen
	if withDev {
		n += nlaHdrLen + 4
	}
	b := make([]byte, n)
	put32(b[0:], uint32(n))
	put16(b[4:], nldevType(cmd))
	put16(b[6:], nlmFRequest|nlmFDump)
	put32(b[8:], seq)
	if withDev {
		put16(b[16:], nlaHdrLen+4)
		put16(b[18:], attrDevIndex)
		put32(b[20:], dev)
	}
	return b
}

// ParseDevices decodes the answer datagrams of an RDMA_NLDEV_CMD_GET dump
// (or of a GET doit with NLM_F_ACK) into devices, without ports.
func ParseDevices(datagrams [][]byte) ([]Device, error) {
	return parseDump(datagrams, nldevCmdGet, "device dump", parseDevices)
}

// parseDump reads a dump's answer datagrams and decodes its messages,
// naming the dump in errors.
func parseDump[T any](datagrams [][]byte, cmd uint16, what string, parse func([]nlMsg) ([]T, error)) ([]T, error) {
	msgs, err := readDump(datagrams, nldevType(cmd))
	if err == nil {
		var out []T
		if out, err = parse(msgs); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("rdma netlink: %s: %w", what, err)
}

func parseDevices(msgs []nlMsg) ([]Device, error) {
	var devs []Device
	for i, m := range msgs {
		d, err := parseDevice(m.data)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func parseDevice(b []byte) (Device, error) {
	var (
		d                 Device
		haveIdx, haveName bool
	)
	err := forEachAttr(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case attrDevIndex:
			d.Index, err = attrU32(typ, v)
			haveIdx = true
		case attrDevName:
			d.Name = attrString(v)
			haveName = true
		case attrNodeGUID:
			d.NodeGUID, err = attrU64(typ, v)
		case attrDevNodeType:
			d.NodeType, err = attrU8(typ, v)
		case attrDevProtocol:
			d.Protocol = attrString(v)
		}
		return err
	})
	if err != nil {
		return Device{}, err
	}
	if !haveIdx || !haveName {
		return Device{}, fmt.Errorf("device without DEV_INDEX or DEV_NAME")
	}
	return d, nil
}

// ParsePorts decodes the answer datagrams of an RDMA_NLDEV_CMD_PORT_GET dump.
func ParsePorts(datagrams [][]byte) ([]Port, error) {
	return parseDump(datagrams, nldevCmdPortGet, "port dump", func(m []nlMsg) ([]Port, error) { return parsePorts(m, 0, false) })
}

// parsePorts decodes PORT_GET messages; with checkDev every message must
// belong to device dev.
func parsePorts(msgs []nlMsg, dev uint32, checkDev bool) ([]Port, error) {
	var ports []Port
	for i, m := range msgs {
		var (
			p                 Port
			idx               uint32
			haveIdx, havePort bool
		)
		err := forEachAttr(m.data, func(typ uint16, v []byte) error {
			var err error
			switch typ {
			case attrDevIndex:
				idx, err = attrU32(typ, v)
				haveIdx = true
			case attrPortIndex:
				p.Index, err = attrU32(typ, v)
				havePort = true
			case attrPortState:
				p.State, err = attrU8(typ, v)
			case attrPortPhysState:
				p.PhysState, err = attrU8(typ, v)
			case attrNdevIndex:
				p.NetdevIndex, err = attrU32(typ, v)
			case attrNdevName:
				p.Netdev = attrString(v)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if !haveIdx || !havePort {
			return nil, fmt.Errorf("message %d: port without DEV_INDEX or PORT_INDEX", i)
		}
		if checkDev && idx != dev {
			return nil, fmt.Errorf("message %d: port of device %d, asked for device %d", i, idx, dev)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// ParseCMIDs decodes the answer datagrams of an RDMA_NLDEV_CMD_RES_CM_ID_GET
// dump. A dump of a missing device index answers NLMSG_DONE with -EINVAL:
// the error then satisfies errors.Is(err, syscall.EINVAL).
func ParseCMIDs(datagrams [][]byte) ([]CMID, error) {
	return parseDump(datagrams, nldevCmdResCMIDGet, "cm_id dump", func(m []nlMsg) ([]CMID, error) { return parseCMIDs(m, 0, false) })
}

// parseCMIDs decodes RES_CM_ID_GET messages: DEV_INDEX, DEV_NAME and one
// RES_CM_ID table each (a table too large for one message continues in the
// next, which repeats DEV_INDEX and DEV_NAME). With checkDev every message
// must belong to device dev.
func parseCMIDs(msgs []nlMsg, dev uint32, checkDev bool) ([]CMID, error) {
	var ids []CMID
	for i, m := range msgs {
		var (
			idx               uint32
			name              string
			table             []byte
			haveIdx, haveName bool
		)
		err := forEachAttr(m.data, func(typ uint16, v []byte) error {
			var err error
			switch typ {
			case attrDevIndex:
				idx, err = attrU32(typ, v)
				haveIdx = true
			case attrDevName:
				name = attrString(v)
				haveName = true
			case attrResCMID:
				if table != nil {
					return fmt.Errorf("second RES_CM_ID table")
				}
				table = v
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if !haveIdx || !haveName {
			return nil, fmt.Errorf("message %d: cm_id table without DEV_INDEX or DEV_NAME", i)
		}
		if checkDev && idx != dev {
			return nil, fmt.Errorf("message %d: cm_id table of device %d, asked for device %d", i, idx, dev)
		}
		n := 0
		err = forEachAttr(table, func(typ uint16, v []byte) error {
			if typ != attrResCMIDEntry {
				return nil
			}
			c, err := parseCMIDEntry(v)
			if err != nil {
				return fmt.Errorf("entry %d: %w", n, err)
			}
			n++
			c.DevIndex, c.DevName = idx, name
			ids = append(ids, c)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("message %d (device %d): %w", i, idx, err)
		}
	}
	return ids, nil
}

func parseCMIDEntry(b []byte) (CMID, error) {
	var (
		c         CMID
		haveState bool
	)
	err := forEachAttr(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case attrPortIndex:
			c.Port, err = attrU32(typ, v)
		case attrResState:
			c.State, err = attrU8(typ, v)
			haveState = true
		case attrResPS:
			c.PS, err = attrU32(typ, v)
		case attrResSrcAddr:
			c.Src, err = attrSockaddr(typ, v)
		case attrResDstAddr:
			c.Dst, err = attrSockaddr(typ, v)
		case attrResCMIDN:
			c.CMIDN, err = attrU32(typ, v)
		case attrResKernName:
			c.KernName = attrString(v)
		case attrResPID:
			c.PID, err = attrU32(typ, v)
		}
		return err
	})
	if err != nil {
		return CMID{}, err
	}
	if !haveState {
		return CMID{}, fmt.Errorf("cm_id without RES_STATE")
	}
	return c, nil
}
