package watch

import (
	"path/filepath"
	"strings"
)

// The model keeps a short log of what its invalidations may have changed,
// so that a reader holding an earlier Generation token can ask what to
// read again (Changes) instead of reading everything: after a heal's own
// writes (a port's links made again, a portal's iser written) or an
// admin's change to one object, only that object.

// logged is one invalidation: the token Generation would have returned
// just before it, and what it may have changed — the links of one port,
// one portal, or anything (whole).
type logged struct {
	at     uint64
	port   string
	portal string
	whole  bool
}

// maxChanges bounds the log: past it the log restarts, and a token older
// than its floor gets "cannot tell".
const maxChanges = 512

// token is what Generation returns now (both counters only grow).
func (m *Model) token() uint64 { return m.gen + m.uncached }

// note logs an invalidation of path (under the root), before the
// counters move.
func (m *Model) note(path string) { m.log1(m.classify(path)) }

// noteWhole logs an invalidation that may have changed anything.
func (m *Model) noteWhole() { m.log1(logged{whole: true}) }

func (m *Model) log1(c logged) {
	c.at = m.token()
	if n := len(m.changes); n > 0 {
		// The same change again (a write, then its own event): one entry,
		// at the later token (it covers every token the earlier did).
		if last := &m.changes[n-1]; last.port == c.port && last.portal == c.portal && last.whole == c.whole {
			last.at = c.at
			return
		}
	}
	if len(m.changes) >= maxChanges {
		m.changes = m.changes[:0]
		m.changesFloor = c.at
	}
	m.changes = append(m.changes, c)
}

// classify is what an invalidation at path may change: the links of port
// <id> (nvmet/ports/<id>/subsystems and below), one portal
// (target/iscsi/<iqn>/<tpg>/np/<np> and below), or anything else.
func (m *Model) classify(path string) logged {
	rel, ok := strings.CutPrefix(filepath.Clean(path), m.root+"/")
	if !ok {
		return logged{whole: true}
	}
	parts := strings.Split(rel, "/")
	switch {
	case len(parts) >= 4 && parts[0] == "nvmet" && parts[1] == "ports" && parts[3] == "subsystems":
		return logged{port: parts[2]}
	case len(parts) >= 6 && parts[0] == "target" && parts[1] == "iscsi" && parts[4] == "np":
		return logged{portal: parts[2] + "/" + parts[3] + "/" + parts[5]}
	}
	return logged{whole: true}
}

// Changes tells what may answer differently now than when Generation
// returned tok: the ports whose Links and the portals (by ID) whose
// Portal may differ; every other answer — Ports, Portals but for those
// portals, Subsystems, the other ports' Links — is what it was at tok.
// ok is false when the model cannot tell (anything else may have changed,
// tok is older than the log, a rescan, fallback): read everything.
func (m *Model) Changes(tok uint64) (ports, portals []string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.prepare() != m.cfs || tok < m.changesFloor || tok > m.token() {
		return nil, nil, false
	}
	seenPort, seenPortal := map[string]bool{}, map[string]bool{}
	for _, c := range m.changes {
		switch {
		case c.at < tok:
		case c.whole:
			return nil, nil, false
		case c.port != "" && !seenPort[c.port]:
			seenPort[c.port] = true
			ports = append(ports, c.port)
		case c.portal != "" && !seenPortal[c.portal]:
			seenPortal[c.portal] = true
			portals = append(portals, c.portal)
		}
	}
	return ports, portals, true
}
