package complete

// The units: the saved config flattened in the restores' order.

import (
	"strconv"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// unit kinds.
const (
	kHost = iota
	kSubsystem
	kNamespace
	kEnable
	kAllowed
	kAttrs
	kPort
	kANAGroup
	kReferral
	kSO     // a LIO storage object (targetcli's file)
	kLUN    // a TPG's LUN, linking a storage object
	kMapped // a node ACL's mapped LUN, linking a TPG's LUN
)

type unit struct {
	// id names the unit: nvmetcli's objects by their path under nvmet/
	// (#enable, #attr: the two-step objects), LIO's under target/
	// (target/core/<plugin>/<name> for a storage object).
	id   string
	kind int
	deps []string
	// before: the units of a subsystem the restore writes before its
	// attributes (kAttrs).
	before []string
	ns     *saved.Namespace // kNamespace, kEnable
	port   *saved.Port      // kPort: its ANA group 1 (made by the kernel)
	ref    *saved.Referral  // kReferral: its enable
	name   string           // kAllowed: the host
	// attrs are the attributes the unit writes in its own directory.
	attrs []saved.Attr
	// dir is the object's directory under the configfs root ("" for a
	// storage object: its backstore's index is found, or chosen, then).
	dir    string
	so     *saved.StorageObject // kSO
	lun    *saved.LUN           // kLUN
	mapped *saved.MappedLUN     // kMapped
	parent string               // kLUN, kMapped: the TPG or ACL the restore makes
}

// units flattens the tree in the restores' order: nvmetcli's, then
// rtslib's storage objects, LUNs and mapped LUNs.
func units(t *saved.Tree) []unit {
	out := nvmetUnits(t)
	for i := range out {
		id, _, _ := strings.Cut(out[i].id, "#")
		out[i].dir = "nvmet/" + id
	}
	if t.LIO != nil {
		out = append(out, lioUnits(t.LIO)...)
	}
	return out
}

// nvmetUnits flattens nvmetcli's tree in its restore's order.
func nvmetUnits(t *saved.Tree) []unit {
	var out []unit
	for i := range t.Hosts {
		h := &t.Hosts[i]
		out = append(out, unit{id: "hosts/" + h.NQN, kind: kHost, attrs: h.Attrs})
	}
	for i := range t.Subsystems {
		s := &t.Subsystems[i]
		sid := "subsystems/" + s.NQN
		out = append(out, unit{id: sid, kind: kSubsystem})
		var before []string
		for j := range s.Namespaces {
			ns := &s.Namespaces[j]
			nid := sid + "/namespaces/" + strconv.FormatUint(uint64(ns.NSID), 10)
			out = append(out, unit{id: nid, kind: kNamespace, deps: []string{sid}, ns: ns, attrs: ns.Attrs})
			before = append(before, nid)
			if ns.Enable {
				out = append(out, unit{id: nid + "#enable", kind: kEnable, deps: []string{nid}, ns: ns})
				before = append(before, nid+"#enable")
			}
		}
		for _, h := range s.AllowedHosts {
			aid := sid + "/allowed_hosts/" + h
			out = append(out, unit{id: aid, kind: kAllowed, deps: []string{sid, "hosts/" + h}, name: h})
			before = append(before, aid)
		}
		if len(s.Attrs) > 0 {
			out = append(out, unit{id: sid + "#attr", kind: kAttrs, deps: []string{sid}, before: before, attrs: s.Attrs})
		}
	}
	for i := range t.Ports {
		p := &t.Ports[i]
		pid := "ports/" + p.ID
		out = append(out, unit{id: pid, kind: kPort, port: p, attrs: p.Attrs})
		for j := range p.ANAGroups {
			g := &p.ANAGroups[j]
			if g.GrpID == 1 {
				continue // the kernel makes group 1 with the port; the port's unit writes it
			}
			out = append(out, unit{id: pid + "/ana_groups/" + strconv.FormatUint(uint64(g.GrpID), 10), kind: kANAGroup, deps: []string{pid}, attrs: g.Attrs})
		}
		for j := range p.Referrals {
			r := &p.Referrals[j]
			out = append(out, unit{id: pid + "/referrals/" + r.Name, kind: kReferral, deps: []string{pid}, ref: r, attrs: r.Attrs})
		}
	}
	return out
}

// device is the device path the unit waits for and the kernel opens ("":
// none).
func (u unit) device() string {
	switch u.kind {
	case kEnable:
		return u.ns.Device
	case kSO:
		return u.so.Dev
	}
	return ""
}
