package rebind

import (
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Verdict is the kernel's word on one endpoint in one observation: judged
// once (judge), when the observation is read, and read by everything after
// it — which links observe reads, select, plan, verify.
type Verdict struct {
	State State // listening, dead, stranded or unknown
	// Entry is the LISTEN entry (listening or stranded): its device's
	// index, name and node GUID, and its port.
	EntryDev   uint32
	EntryName  string
	EntryGUID  uint64
	EntryPort  uint32
	Carrier    rdma.Carrier // where the address is and which port carries it now
	carrierKey carrierKey
}

// carrierKey is what of a carrier a plan reads (compared by select).
type carrierKey struct {
	netdev        string
	ifindex       int
	dev           string
	index, port   uint32
	guid          uint64
	held, fromGID bool
	hasDev        bool
}

// same reports whether a plan reads the same of v and w.
func (v Verdict) same(w Verdict) bool {
	return v.State == w.State && v.EntryDev == w.EntryDev && v.EntryName == w.EntryName && v.EntryGUID == w.EntryGUID &&
		v.EntryPort == w.EntryPort && v.carrierKey == w.carrierKey
}

// judge says whether the endpoint's listener is alive where its address is
// carried now. A LISTEN entry on another device is stranded: hosts that
// reach the address through the carrier are rejected. Without a carrier
// decided from a GID table (address absent, no device carries it, GID table
// unreadable) an entry is taken as alive: nothing better can be bound.
func judge(ep Endpoint, listenersKnown bool, ix *rdma.Index) Verdict {
	c := ix.Carrier(ep.Addr.Addr())
	v := Verdict{Carrier: c, carrierKey: carrierKey{netdev: c.Addr.Netdev, ifindex: c.Addr.Ifindex, dev: c.Dev.Name,
		index: c.Dev.Index, port: c.Port, guid: c.Dev.NodeGUID, held: c.Held, fromGID: c.FromGID, hasDev: c.HasDev}}
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
			if e.DevIndex == c.Dev.Index && (e.Port == 0 || e.Port == c.Port) {
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
