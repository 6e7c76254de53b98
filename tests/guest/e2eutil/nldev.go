package main

// The LISTEN poll's own reading of the RDMA cm_id table: the RDMA netlink
// dump that `rdma resource show cm_id` makes (a device dump, then one
// RES_CM_ID_GET dump per device), read in this process. `wait-listen`
// polls with it; `rdma` stays the judge (`listening`, and wait-listen's
// confirmation once the poll has seen what it waits for).
//
// Why not fork `rdma` every 20 ms as the poll did: under qemu without KVM
// one `rdma` run costs about as much CPU as its interval, and the poll is a
// real-time task, so it held one of the guest's two vCPUs for the whole
// measured window. With the poll every 250 ms instead, the daemon's writes
// before the bind of 256 sharers took 234–240 ms against 365–374 ms
// (BENCHMARKS.md, 2026-12-04). The measurement must not load the machine
// it measures.
//
// Written from include/uapi/rdma/rdma_netlink.h and the recorded bytes of
// ../shared/testdata (copied in testdata/, with the JSON `rdma -j` printed
// for the same tables: nldev_test.go holds the two to one answer). It
// shares no code with the daemon's reader (rebind/rdma): a witness.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
)

const (
	netlinkRDMA = 20                            // NETLINK_RDMA
	nldevGet    = 5<<10 | 1                     // RDMA_NL_NLDEV << 10 | RDMA_NLDEV_CMD_GET
	nldevCMIDs  = 5<<10 | 11                    // … | RDMA_NLDEV_CMD_RES_CM_ID_GET
	nlmDump     = syscall.NLM_F_REQUEST | 0x300 // NLM_F_REQUEST | NLM_F_DUMP

	aDevIndex   = 1  // u32
	aDevName    = 2  // string
	aPortIndex  = 3  // u32
	aResState   = 27 // u8: 8 LISTEN (enum rdma_cm_state, cma_priv.h)
	aResPID     = 28 // u32
	aResKern    = 29 // string
	aResCMID    = 30 // nested table (no NLA_F_NESTED)
	aResCMEntry = 31 // nested
	aResSrc     = 33 // struct __kernel_sockaddr_storage
	aResCMIDN   = 63 // u32
)

// cmStates names the rdma_cm states as iproute2's rdma/res-cmid.c does.
var cmStates = []string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED",
	"CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}

// readCMIDs reads every device's cm_ids. A device deleted between the two
// dumps (its dump answers EINVAL or ENODEV) has none.
func readCMIDs() ([]cmID, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkRDMA)
	if err != nil {
		return nil, fmt.Errorf("NETLINK_RDMA socket: %w", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("NETLINK_RDMA bind: %w", err)
	}
	devs, err := dump(fd, nldevGet, nil)
	if err != nil {
		return nil, fmt.Errorf("RDMA_NLDEV_CMD_GET: %w", err)
	}
	var ids []cmID
	for _, d := range devs {
		idx, ok := devIndex(d)
		if !ok {
			return nil, fmt.Errorf("RDMA_NLDEV_CMD_GET: a device without DEV_INDEX")
		}
		msgs, err := dump(fd, nldevCMIDs, attrU32(aDevIndex, idx))
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENODEV) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("RDMA_NLDEV_CMD_RES_CM_ID_GET of device %d: %w", idx, err)
		}
		got, err := parseCMIDs(msgs)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// dump sends one dump request of typ with attrs and returns the payloads of
// its answer's messages.
func dump(fd int, typ uint16, attrs []byte) ([][]byte, error) {
	req := make([]byte, 16, 16+len(attrs))
	req = append(req, attrs...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], nlmDump)
	binary.NativeEndian.PutUint32(req[8:], 1)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	var out [][]byte
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		done, err := messages(buf[:n], &out)
		if done || err != nil {
			return out, err
		}
	}
}

// messages appends the payloads of datagram b's messages to out, copied;
// done at NLMSG_DONE, and NLMSG_ERROR or NLMSG_DONE carrying an error is
// that errno.
func messages(b []byte, out *[][]byte) (done bool, err error) {
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b))
		if l < 16 || l > len(b) {
			return false, fmt.Errorf("netlink message of %d bytes in %d", l, len(b))
		}
		m, t := b[16:l], binary.NativeEndian.Uint16(b[4:])
		switch t {
		case syscall.NLMSG_DONE, syscall.NLMSG_ERROR:
			if len(m) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m)); e < 0 {
					return true, syscall.Errno(-e)
				}
			}
			if t == syscall.NLMSG_DONE {
				return true, nil
			}
		default:
			*out = append(*out, append([]byte(nil), m...))
		}
		if a := (l + 3) &^ 3; a < len(b) {
			b = b[a:]
		} else {
			b = nil
		}
	}
	return false, nil
}

func attrU32(typ uint16, v uint32) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint16(b, 8)
	binary.NativeEndian.PutUint16(b[2:], typ)
	binary.NativeEndian.PutUint32(b[4:], v)
	return b
}

// attrs calls f for each attribute of b (its type without the NLA_F_*
// bits).
func attrs(b []byte, f func(typ uint16, v []byte) error) error {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return fmt.Errorf("netlink attribute of %d bytes in %d", l, len(b))
		}
		if err := f(binary.NativeEndian.Uint16(b[2:])&0x3fff, b[4:l]); err != nil {
			return err
		}
		if a := (l + 3) &^ 3; a < len(b) {
			b = b[a:]
		} else {
			b = nil
		}
	}
	return nil
}

func devIndex(m []byte) (uint32, bool) {
	var idx uint32
	ok := false
	attrs(m, func(typ uint16, v []byte) error {
		if typ == aDevIndex && len(v) == 4 {
			idx, ok = binary.NativeEndian.Uint32(v), true
		}
		return nil
	})
	return idx, ok
}

// parseCMIDs decodes RES_CM_ID_GET messages (after their netlink header):
// the device's name, then one entry per cm_id, as `rdma -j` prints them
// (ifname, port, cm-idn, state, pid, comm of kernel ones, src-addr).
func parseCMIDs(msgs [][]byte) ([]cmID, error) {
	var ids []cmID
	for _, m := range msgs {
		var dev string
		var tables [][]byte
		err := attrs(m, func(typ uint16, v []byte) error {
			switch typ {
			case aDevName:
				dev = cString(v)
			case aResCMID:
				tables = append(tables, v)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, t := range tables {
			err := attrs(t, func(typ uint16, v []byte) error {
				if typ != aResCMEntry {
					return nil
				}
				c, err := parseEntry(v)
				c.IfName = dev
				ids = append(ids, c)
				return err
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

func parseEntry(b []byte) (cmID, error) {
	var c cmID
	return c, attrs(b, func(typ uint16, v []byte) error {
		switch typ {
		case aPortIndex:
			if len(v) != 4 {
				return fmt.Errorf("PORT_INDEX of %d bytes", len(v))
			}
			p := int(binary.NativeEndian.Uint32(v))
			c.Port = &p
		case aResState:
			if len(v) != 1 {
				return fmt.Errorf("RES_STATE of %d bytes", len(v))
			}
			if int(v[0]) < len(cmStates) {
				c.State = cmStates[v[0]]
			} else {
				c.State = strconv.Itoa(int(v[0]))
			}
		case aResPID:
			if len(v) == 4 {
				c.PID = int(binary.NativeEndian.Uint32(v))
			}
		case aResKern:
			c.Comm = cString(v)
		case aResCMIDN:
			if len(v) == 4 {
				c.IDN = int(binary.NativeEndian.Uint32(v))
			}
		case aResSrc:
			s, err := sockaddr(v)
			if err != nil {
				return fmt.Errorf("RES_SRC_ADDR: %w", err)
			}
			c.Src = s
		}
		return nil
	})
}

// sockaddr prints a struct __kernel_sockaddr_storage (family in host order,
// port and address in network order) as `rdma` does: "addr:port", IPv6
// without brackets.
func sockaddr(b []byte) (string, error) {
	if len(b) < 2 {
		return "", fmt.Errorf("%d bytes", len(b))
	}
	var a netip.Addr
	switch binary.NativeEndian.Uint16(b) {
	case syscall.AF_INET:
		if len(b) < 8 {
			return "", fmt.Errorf("AF_INET in %d bytes", len(b))
		}
		a = netip.AddrFrom4([4]byte(b[4:8]))
	case syscall.AF_INET6:
		if len(b) < 24 {
			return "", fmt.Errorf("AF_INET6 in %d bytes", len(b))
		}
		a = netip.AddrFrom16([16]byte(b[8:24]))
	default:
		return "", nil // AF_IB, AF_UNSPEC: no IP
	}
	return a.String() + ":" + strconv.Itoa(int(binary.BigEndian.Uint16(b[2:]))), nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
