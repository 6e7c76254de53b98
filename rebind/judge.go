package rebind

import (
	"net/netip"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Verdict is the kernel's word on one endpoint in one observation: judged
// once (judge), when the observation is read, and read by everything after
// it — which links observe reads, select, plan, verify. Two verdicts that
// are equal are the same input to a plan.
type Verdict struct {
	State State // listening, dead, stranded or unknown
	// The LISTEN entry (listening or stranded): its device's index, name
	// and node GUID, and its port.
	EntryDev  uint32
	EntryName string
	EntryGUID uint64
	EntryPort uint32
	Carrier   Carried // where the address is and which port carries it now
}

// Carried is where an address is and which RDMA port rdma_cm would bind it
// to now (rdma.Carrier, what of it a plan reads).
type Carried struct {
	Netdev  string // the netdev holding the address
	Ifindex int
	Held    bool   // some netdev holds the address
	Dev     string // the RDMA device that carries it (HasDev)
	Index   uint32 // its index
	GUID    uint64 // its node GUID
	Port    uint32 // its port
	FromGID bool   // decided from a GID table (else the netdev fallback)
	HasDev  bool
}

func carried(c rdma.Carrier) Carried {
	return Carried{Netdev: c.Addr.Netdev, Ifindex: c.Addr.Ifindex, Held: c.Held, Dev: c.Dev.Name, Index: c.Dev.Index,
		GUID: c.Dev.NodeGUID, Port: c.Port, FromGID: c.FromGID, HasDev: c.HasDev}
}

// judge says whether the endpoint's listener is alive where its address is
// carried now. A LISTEN entry on another device is stranded: hosts that
// reach the address through the carrier are rejected. Without a carrier
// decided from a GID table (address absent, no device carries it, GID table
// unreadable) an entry is taken as alive: nothing better can be bound.
//
// A wildcard endpoint is the kernel's own (it listens on every device, and
// on new ones by itself): listening when some device has its wildcard
// listener, never stranded.
func judge(ep Endpoint, listenersKnown bool, ix *rdma.Index) Verdict {
	if ep.Addr.Addr().IsUnspecified() {
		v := Verdict{State: StateUnknown}
		switch {
		case !listenersKnown:
		case ix.Devices() > 0 && ix.Wildcard(ep.Owner(), ep.Addr):
			v.State = StateListening
		default:
			v.State = StateDead
		}
		return v
	}
	c := carried(ix.Carrier(ep.Addr.Addr()))
	v := Verdict{Carrier: c}
	if !listenersKnown {
		v.State = StateUnknown
		return v
	}
	es := ix.Listeners(ep.Owner(), ep.Addr)
	if len(es) == 0 {
		v.State = StateDead
		return v
	}
	entry := es[0]
	v.State = StateStranded
	if !c.HasDev || !c.FromGID {
		v.State = StateListening
	} else {
		for _, e := range es {
			if e.DevIndex == c.Index && (e.Port == 0 || e.Port == c.Port) {
				v.State, entry = StateListening, e
				break
			}
		}
	}
	v.EntryDev, v.EntryName, v.EntryPort = entry.DevIndex, entry.DevName, entry.Port
	if d, ok := ix.Device(entry.DevIndex); ok {
		v.EntryGUID = d.NodeGUID
	}
	return v
}

// judgeTCP is judge for an nvmet TCP port's listener, a kernel TCP socket:
// listening when a socket in LISTEN has the port's address:port (a
// wildcard port: that service on the wildcard address of its family),
// else dead. There is no device: a TCP listener outlives its address and
// its netdev (KERNEL.md), so it is never stranded; Carrier says only where
// the address is.
func judgeTCP(ep Endpoint, known bool, listening []netip.AddrPort, ix *rdma.Index) Verdict {
	v := Verdict{State: StateUnknown}
	if !ep.Addr.Addr().IsUnspecified() {
		a, held := ix.Addr(ep.Addr.Addr()) // no RDMA port to decide: a TCP bind needs only the address
		v.Carrier = Carried{Netdev: a.Netdev, Ifindex: a.Ifindex, Held: held}
	}
	if !known {
		return v
	}
	v.State = StateDead
	if _, ok := slices.BinarySearchFunc(listening, ep.Addr, netip.AddrPort.Compare); ok {
		v.State = StateListening
	}
	return v
}
