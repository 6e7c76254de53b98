package rdma

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// RDMA netlink, nldev client (include/uapi/rdma/rdma_netlink.h).
const (
	nldevCmdGet        = 1  // RDMA_NLDEV_CMD_GET
	nldevCmdPortGet    = 5  // RDMA_NLDEV_CMD_PORT_GET
	nldevCmdResCMIDGet = 11 // RDMA_NLDEV_CMD_RES_CM_ID_GET
)

// enum rdma_nldev_attr; DEV_INDEX, DEV_NAME, PORT_INDEX, NDEV_INDEX and
// NDEV_NAME are rdmanl's (the monitor carries them too).
const (
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
func put16(b []byte, v uint16) { binary.NativeEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }

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

// newRequest builds a dump request of the nldev command cmd (flags
// NLM_F_REQUEST|NLM_F_DUMP, nlmsg_pid 0), with RDMA_NLDEV_ATTR_DEV_INDEX when
// withDev is set.
func newRequest(cmd uint16, seq uint32, dev uint32, withDev bool) []byte {
	n := rdmanl.HdrLen
	if withDev {
		n += rdmanl.AttrHdrLen + 4
	}
	b := make([]byte, n)
	put32(b[0:], uint32(n))
	put16(b[4:], rdmanl.NLDevType(cmd))
	put16(b[6:], rdmanl.NLMFRequest|rdmanl.NLMFDump)
	put32(b[8:], seq)
	if withDev {
		put16(b[16:], rdmanl.AttrHdrLen+4)
		put16(b[18:], rdmanl.AttrDevIndex)
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
func parseDump[T any](datagrams [][]byte, cmd uint16, what string, parse func([]rdmanl.Msg) ([]T, error)) ([]T, error) {
	msgs, err := rdmanl.ReadDump(datagrams, rdmanl.NLDevType(cmd))
	if err == nil {
		var out []T
		if out, err = parse(msgs); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("rdma netlink: %s: %w", what, err)
}

func parseDevices(msgs []rdmanl.Msg) ([]Device, error) {
	var devs []Device
	for i, m := range msgs {
		d, err := parseDevice(m.Data)
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
	err := rdmanl.ForEachAttr(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case rdmanl.AttrDevIndex:
			d.Index, err = rdmanl.AttrU32(typ, v)
			haveIdx = true
		case rdmanl.AttrDevName:
			d.Name = rdmanl.AttrString(v)
			haveName = true
		case attrNodeGUID:
			d.NodeGUID, err = rdmanl.AttrU64(typ, v)
		case attrDevNodeType:
			d.NodeType, err = rdmanl.AttrU8(typ, v)
		case attrDevProtocol:
			d.Protocol = rdmanl.AttrString(v)
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
	return parseDump(datagrams, nldevCmdPortGet, "port dump", func(m []rdmanl.Msg) ([]Port, error) { return parsePorts(m, 0, false) })
}

// parsePorts decodes PORT_GET messages; with checkDev every message must
// belong to device dev.
func parsePorts(msgs []rdmanl.Msg, dev uint32, checkDev bool) ([]Port, error) {
	var ports []Port
	for i, m := range msgs {
		var (
			p                 Port
			idx               uint32
			haveIdx, havePort bool
		)
		err := rdmanl.ForEachAttr(m.Data, func(typ uint16, v []byte) error {
			var err error
			switch typ {
			case rdmanl.AttrDevIndex:
				idx, err = rdmanl.AttrU32(typ, v)
				haveIdx = true
			case rdmanl.AttrPortIndex:
				p.Index, err = rdmanl.AttrU32(typ, v)
				havePort = true
			case attrPortState:
				p.State, err = rdmanl.AttrU8(typ, v)
			case attrPortPhysState:
				p.PhysState, err = rdmanl.AttrU8(typ, v)
			case rdmanl.AttrNdevIndex:
				p.NetdevIndex, err = rdmanl.AttrU32(typ, v)
			case rdmanl.AttrNdevName:
				p.Netdev = rdmanl.AttrString(v)
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
	return parseDump(datagrams, nldevCmdResCMIDGet, "cm_id dump", func(m []rdmanl.Msg) ([]CMID, error) { return parseCMIDs(m, 0, false) })
}

// parseCMIDs decodes RES_CM_ID_GET messages: DEV_INDEX, DEV_NAME and one
// RES_CM_ID table each (a table too large for one message continues in the
// next, which repeats DEV_INDEX and DEV_NAME). With checkDev every message
// must belong to device dev.
func parseCMIDs(msgs []rdmanl.Msg, dev uint32, checkDev bool) ([]CMID, error) {
	var ids []CMID
	for i, m := range msgs {
		var (
			idx               uint32
			name              string
			table             []byte
			haveIdx, haveName bool
		)
		err := rdmanl.ForEachAttr(m.Data, func(typ uint16, v []byte) error {
			var err error
			switch typ {
			case rdmanl.AttrDevIndex:
				idx, err = rdmanl.AttrU32(typ, v)
				haveIdx = true
			case rdmanl.AttrDevName:
				name = rdmanl.AttrString(v)
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
		err = rdmanl.ForEachAttr(table, func(typ uint16, v []byte) error {
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
	err := rdmanl.ForEachAttr(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case rdmanl.AttrPortIndex:
			c.Port, err = rdmanl.AttrU32(typ, v)
		case attrResState:
			c.State, err = rdmanl.AttrU8(typ, v)
			haveState = true
		case attrResPS:
			c.PS, err = rdmanl.AttrU32(typ, v)
		case attrResSrcAddr:
			c.Src, err = attrSockaddr(typ, v)
		case attrResDstAddr:
			c.Dst, err = attrSockaddr(typ, v)
		case attrResCMIDN:
			c.CMIDN, err = rdmanl.AttrU32(typ, v)
		case attrResKernName:
			c.KernName = rdmanl.AttrString(v)
		case attrResPID:
			c.PID, err = rdmanl.AttrU32(typ, v)
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
