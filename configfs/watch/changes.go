package watch

import (
	"path/filepath"
	"slices"
	"strings"
)

// The model remembers what its invalidations may have changed, so that a
// reader holding an earlier Generation token can ask what to read again
// (Changes) instead of reading everything: after a heal's own writes (a
// port's links made again, a portal's iser written) or an admin's change
// to one object, only that object.
//
// Each invalidation is stamped with the token Generation would have
// returned just before it: the last such stamp of every port's links and
// of every portal, and of the last invalidation that may have changed
// anything (wholeAt). A reader's token tok sees a change when its stamp is
// tok or later.

// touched is what one invalidation may have changed: the links of one
// port, one portal, or anything (whole).
type touched struct {
	port   string
	portal string
	whole  bool
}

// token is what Generation returns now (both counters only grow).
func (m *Model) token() uint64 { return m.gen + m.uncached }

// note records an invalidation of path (under the root), before the
// counters move.
func (m *Model) note(path string) { m.stamp(m.classify(path)) }

// noteWhole records an invalidation that may have changed anything.
func (m *Model) noteWhole() { m.stamp(touched{whole: true}) }

func (m *Model) stamp(c touched) {
	at := m.token()
	switch {
	case c.whole:
		// Every token before this one gets "cannot tell": the objects'
		// stamps before it are of no use.
		m.wholeAt = at
		clear(m.linksAt)
		clear(m.portalAt)
	case c.port != "":
		if m.linksAt == nil {
			m.linksAt = map[string]uint64{}
		}
		m.linksAt[c.port] = at
	default:
		if m.portalAt == nil {
			m.portalAt = map[string]uint64{}
		}
		m.portalAt[c.portal] = at
	}
}

// classify is what an invalidation at path may change: the links of port
// <id> (nvmet/ports/<id>/subsystems and below), one portal
// (target/iscsi/<iqn>/<tpg>/np/<np> and below), or anything else.
func (m *Model) classify(path string) touched {
	rel, ok := strings.CutPrefix(filepath.Clean(path), m.root+"/")
	if !ok {
		return touched{whole: true}
	}
	parts := strings.Split(rel, "/")
	switch {
	case len(parts) >= 4 && parts[0] == "nvmet" && parts[1] == "ports" && parts[3] == "subsystems":
		return touched{port: parts[2]}
	case len(parts) >= 6 && parts[0] == "target" && parts[1] == "iscsi" && parts[4] == "np":
		return touched{portal: parts[2] + "/" + parts[3] + "/" + parts[5]}
	}
	return touched{whole: true}
}

// Changes tells what may answer differently now than when Generation
// returned tok: the ports whose Links and the portals (by ID) whose
// Portal may differ; every other answer — Ports, Portals but for those
// portals, Subsystems, the other ports' Links — is what it was at tok.
// ok is false when the model cannot tell (anything else may have changed
// since tok: a rescan, an uncached read, an object created or removed
// above a port's links or a portal; fallback).
func (m *Model) Changes(tok uint64) (ports, portals []string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.prepare() != m.cfs || tok > m.token() || m.wholeAt >= tok {
		return nil, nil, false
	}
	for id, at := range m.linksAt {
		if at >= tok {
			ports = append(ports, id)
		}
	}
	for id, at := range m.portalAt {
		if at >= tok {
			portals = append(portals, id)
		}
	}
	slices.Sort(ports)
	slices.Sort(portals)
	return ports, portals, true
}
