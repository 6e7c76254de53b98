package rdmanl

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// RDMA netlink monitor (kernel ≥ 6.12; include/uapi/rdma/rdma_netlink.h,
// drivers/infiniband/core/nldev.c rdma_nl_notify_event).
const (
	// MonitorGroup is RDMA_NL_GROUP_NOTIFY, the multicast group of the
	// RDMA_NLDEV_CMD_MONITOR messages.
	MonitorGroup = 4

	nldevCmdSysGet  = 6  // RDMA_NLDEV_CMD_SYS_GET
	nldevCmdMonitor = 28 // RDMA_NLDEV_CMD_MONITOR

	attrEventType      = 102 // RDMA_NLDEV_ATTR_EVENT_TYPE, u8
	sysAttrMonitorMode = 103 // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE, u8
)

// MonitorEventType is enum rdma_nl_notify_event_type.
type MonitorEventType uint8

// Monitor events. REGISTER, UNREGISTER, NETDEV_ATTACH and NETDEV_DETACH
// since 6.12, RENAME and NETDEV_RENAME since 6.13.
const (
	MonitorRegister     MonitorEventType = 0 // RDMA_REGISTER_EVENT
	MonitorUnregister   MonitorEventType = 1 // RDMA_UNREGISTER_EVENT
	MonitorNetdevAttach MonitorEventType = 2 // RDMA_NETDEV_ATTACH_EVENT
	MonitorNetdevDetach MonitorEventType = 3 // RDMA_NETDEV_DETACH_EVENT
	MonitorRename       MonitorEventType = 4 // RDMA_RENAME_EVENT
	MonitorNetdevRename MonitorEventType = 5 // RDMA_NETDEV_RENAME_EVENT
)

var monitorEventNames = [...]string{"register", "unregister", "netdev_attach", "netdev_detach", "rename", "netdev_rename"}

// String is the lower-case name of the kernel's enum without its prefix
// and suffix ("netdev_attach"), or "event N" for a type this code does not
// know.
func (t MonitorEventType) String() string {
	if int(t) < len(monitorEventNames) {
		return monitorEventNames[t]
	}
	return "event " + strconv.Itoa(int(t))
}

// MonitorEvent is one RDMA_NLDEV_CMD_MONITOR message. Which attributes come
// depends on the type: REGISTER, UNREGISTER and RENAME carry the device
// (index and name; RENAME the new name, not the old one); NETDEV_ATTACH
// and NETDEV_DETACH the device, the port and, while the port has one, its
// netdev; NETDEV_RENAME only the netdev (ifindex and new name: not which
// device or port), or nothing when the netdev is in another network
// namespace than the device (udev/testdata/rdmamon-7.3/README.md).
type MonitorEvent struct {
	Type MonitorEventType // RDMA_NLDEV_ATTR_EVENT_TYPE
	// HasDev says DevIndex was sent. The index is the device's identity
	// (0 is valid, never reused); the name changes on rename, and udev
	// renames devices right after they register.
	HasDev   bool
	DevIndex uint32 // RDMA_NLDEV_ATTR_DEV_INDEX
	DevName  string // RDMA_NLDEV_ATTR_DEV_NAME; "" when not sent
	Port     uint32 // RDMA_NLDEV_ATTR_PORT_INDEX; 0 when not sent
	// HasNetdev says NetdevIndex was sent.
	HasNetdev   bool
	NetdevIndex uint32 // RDMA_NLDEV_ATTR_NDEV_INDEX (ifindex)
	Netdev      string // RDMA_NLDEV_ATTR_NDEV_NAME; "" when not sent
}

// ParseMonitor decodes one datagram read from the RDMA_NL_GROUP_NOTIFY
// group: every RDMA_NLDEV_CMD_MONITOR message in it, in order. Netlink
// control messages without content (NLMSG_NOOP) are skipped; an
// NLMSG_OVERRUN is an error wrapping syscall.ENOBUFS; any other message
// type, a malformed attribute or a message without EVENT_TYPE is an error.
func ParseMonitor(datagram []byte) ([]MonitorEvent, error) {
	if len(datagram) == 0 {
		return nil, errors.New("rdma monitor: empty datagram")
	}
	msgs, err := SplitMessages(datagram)
	if err != nil {
		return nil, fmt.Errorf("rdma monitor: %w", err)
	}
	var evs []MonitorEvent
	for i, m := range msgs {
		switch {
		case m.Type == NLMsgOverrun:
			return nil, fmt.Errorf("rdma monitor: message %d: NLMSG_OVERRUN: %w", i, syscall.ENOBUFS)
		case m.Type == NLMsgError || m.Type == NLMsgDone:
			return nil, fmt.Errorf("rdma monitor: message %d: control message %#x in a multicast datagram", i, m.Type)
		case m.Type < NLMsgMinType:
			continue
		case m.Type != NLDevType(nldevCmdMonitor):
			return nil, fmt.Errorf("rdma monitor: message %d: type %#x, want %#x", i, m.Type, NLDevType(nldevCmdMonitor))
		}
		e, err := parseMonitorEvent(m.Data)
		if err != nil {
			return nil, fmt.Errorf("rdma monitor: message %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		return nil, errors.New("rdma monitor: datagram without a monitor message")
	}
	return evs, nil
}

func parseMonitorEvent(b []byte) (MonitorEvent, error) {
	var (
		e        MonitorEvent
		haveType bool
	)
	err := ForEachAttr(b, func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case attrEventType:
			var t uint8
			t, err = AttrU8(typ, v)
			e.Type = MonitorEventType(t)
			haveType = true
		case AttrDevIndex:
			e.DevIndex, err = AttrU32(typ, v)
			e.HasDev = true
		case AttrDevName:
			e.DevName = AttrString(v)
		case AttrPortIndex:
			e.Port, err = AttrU32(typ, v)
		case AttrNdevIndex:
			e.NetdevIndex, err = AttrU32(typ, v)
			e.HasNetdev = true
		case AttrNdevName:
			e.Netdev = AttrString(v)
		}
		return err
	})
	if err != nil {
		return MonitorEvent{}, err
	}
	if !haveType {
		return MonitorEvent{}, errors.New("monitor message without EVENT_TYPE")
	}
	return e, nil
}

// newSysGetRequest is RDMA_NLDEV_CMD_SYS_GET as a doit with NLM_F_ACK.
func newSysGetRequest(seq uint32) []byte {
	b := make([]byte, HdrLen)
	put32(b[0:], HdrLen)
	put16(b[4:], NLDevType(nldevCmdSysGet))
	put16(b[6:], NLMFRequest|NLMFAck)
	put32(b[8:], seq)
	return b
}

// ParseMonitorMode decodes the answer datagrams of an RDMA_NLDEV_CMD_SYS_GET
// doit with NLM_F_ACK and reports whether the kernel sends monitor events:
// it does when the answer carries RDMA_NLDEV_SYS_ATTR_MONITOR_MODE (6.12
// and later, always 1 there); older kernels leave the attribute out.
func ParseMonitorMode(datagrams [][]byte) (bool, error) {
	msgs, err := ReadDump(datagrams, NLDevType(nldevCmdSysGet))
	if err != nil {
		return false, fmt.Errorf("rdma netlink: sys get: %w", err)
	}
	return monitorMode(msgs)
}

func monitorMode(msgs []Msg) (bool, error) {
	if len(msgs) != 1 {
		return false, fmt.Errorf("rdma netlink: sys get: %d answer messages, want 1", len(msgs))
	}
	var mode, have bool
	err := ForEachAttr(msgs[0].Data, func(typ uint16, v []byte) error {
		if typ != sysAttrMonitorMode {
			return nil
		}
		m, err := AttrU8(typ, v)
		mode, have = m != 0, true
		return err
	})
	if err != nil {
		return false, fmt.Errorf("rdma netlink: sys get: %w", err)
	}
	return have && mode, nil
}

// MonitorSupported asks the kernel over c (RDMA_NLDEV_CMD_SYS_GET, with
// sequence number seq) whether it multicasts RDMA_NLDEV_CMD_MONITOR events
// (see ParseMonitorMode).
func MonitorSupported(c Conn, seq uint32) (bool, error) {
	if err := c.Send(newSysGetRequest(seq)); err != nil {
		return false, fmt.Errorf("rdma netlink: sys get: send request: %w", err)
	}
	d := DumpReader{Type: NLDevType(nldevCmdSysGet), Seq: seq, CheckSeq: true}
	for !d.Done {
		dg, err := c.Recv()
		if err != nil {
			return false, fmt.Errorf("rdma netlink: sys get: receive: %w", err)
		}
		err = d.Add(dg)
		var ke *KernelError
		if errors.As(err, &ke) {
			// A kernel older than RDMA_NLDEV_CMD_SYS_GET (5.1) refuses
			// the command: it has no monitor either.
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("rdma netlink: sys get: %w", err)
		}
	}
	return monitorMode(d.Msgs)
}
