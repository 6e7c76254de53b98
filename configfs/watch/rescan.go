package watch

// Rescans: the check of a trusted model against configfs read around it,
// and the rebuild of one that cannot trust itself (doc.go, "Rescans").

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// rescan reads configfs whole. A model with no reason to doubt itself (a
// periodic or requested rescan: trusted) is checked first: what it would
// answer is compared with a read of the tree that bypasses it, and when
// the two agree it stays as it is — its cache, its watches, its
// generation — so the check costs the read alone, the most of an idle
// daemon's CPU (BENCHMARKS.md). A difference is a bug: logged with both
// values, counted, and the model is rebuilt. A model that could not trust
// itself (an overflow, a watch lost, a module loaded, a tree replaced,
// watches run out) is rebuilt without a check.
func (m *Model) rescan(trusted bool, why string) {
	m.stats.Rescans++
	m.pending = ""
	m.lastRescan = m.opts.Now()
	var unchecked string // why the model is rebuilt without a check, or after one
	switch {
	case !trusted:
		unchecked = "not trusted"
	case m.fallback:
		unchecked = "reads go to configfs (fallback)"
	case m.swapping > 0:
		unchecked = "iser writes in flight"
	case !m.agrees():
		unchecked = "it disagreed"
	case m.fallback:
		// A watch that failed during the check (the model's own reads
		// watch what they read first).
		unchecked = "a watch failed during the check"
	default:
		m.log.Debug("configfs rescanned", "why", why, "model", "agrees", "watches", len(m.byWD))
		return
	}
	m.rebuild(why, unchecked)
}

// agrees compares what the model answers with what configfs answers now,
// read around the model, and reports whether every object is the same;
// each one that is not is logged and counted as a disagreement.
func (m *Model) agrees() bool {
	before := snapshot(modelAnswers{m})
	after := snapshot(m.fs)
	same := true
	for _, k := range unionKeys(before, after) {
		if before[k] != after[k] {
			same = false
			m.stats.Disagreements++
			m.log.Warn("configfs model disagreed with a rescan", "object", k, "model", before[k], "rescan", after[k])
		}
	}
	return same
}

// rebuild forgets the cache and reads configfs whole through it, watching
// every directory anew.
func (m *Model) rebuild(why, unchecked string) {
	m.fallback, m.stats.Fallback = false, false
	old := m.byWD
	m.byWD, m.rootNode, m.big = map[int32]*node{}, nil, nil
	m.keys, m.lastVals, m.lastLink, m.errs = nil, nil, nil, nil
	m.lastLists = [4][]string{}
	m.gen++
	for _, d := range m.topDirs()[:3] {
		m.watch(m.node(d)) // root, nvmet, target: a tree appearing is noticed
	}
	m.idents = map[string]ident{}
	for _, d := range m.identDirs() {
		m.idents[d] = m.identOf(d)
	}
	snapshot(m.cfs) // every answer read once: the cache filled, each directory watched
	for wd := range old {
		if m.byWD[wd] == nil {
			unix.InotifyRmWatch(m.fd, uint32(wd))
		}
	}
	m.log.Debug("configfs rescanned", "why", why, "model", "rebuilt", "because", unchecked, "watches", len(m.byWD), "fallback", m.fallback)
}

// answers is the read side of the Tree: configfs.FS, or the model.
type answers interface {
	Ports() ([]configfs.Port, error)
	Links(portID string) ([]configfs.Link, error)
	Portals() ([]configfs.Portal, error)
	Subsystems() ([]string, error)
}

// modelAnswers is what the model would answer now, whole answers
// included, without draining or rescanning (it runs under m.mu).
type modelAnswers struct{ m *Model }

func (a modelAnswers) Ports() ([]configfs.Port, error) {
	return fromMemo(a.m, &a.m.memoPorts, a.m.cfs.Ports)
}
func (a modelAnswers) Links(id string) ([]configfs.Link, error) {
	if v, ok := a.m.memoLinks[id]; ok && a.m.linksGen == a.m.gen {
		return slices.Clone(v), nil
	}
	return a.m.cfs.Links(id)
}
func (a modelAnswers) Portals() ([]configfs.Portal, error) {
	return fromMemo(a.m, &a.m.memoPortals, a.m.cfs.Portals)
}
func (a modelAnswers) Subsystems() ([]string, error) {
	return fromMemo(a.m, &a.m.memoSubsys, a.m.cfs.Subsystems)
}

func fromMemo[E any](m *Model, mo *memo[[]E], read func() ([]E, error)) ([]E, error) {
	if mo.ok && mo.gen == m.gen {
		return slices.Clone(mo.v), nil
	}
	return read()
}

// snapshot reads everything the model answers for, as text per object.
func snapshot(f answers) map[string]string {
	s := map[string]string{}
	ports, err := f.Ports()
	s["nvmet ports"] = errText(err)
	for _, p := range ports {
		s["nvmet port "+p.ID] = fmt.Sprintf("%s %s %s %s err=%v", p.Trtype, p.Adrfam, p.Traddr, p.Trsvcid, p.Err)
		if p.Err != nil {
			continue
		}
		links, err := f.Links(p.ID)
		s["nvmet port "+p.ID+" links"] = fmt.Sprintf("%v err=%s", links, errText(err))
	}
	portals, err := f.Portals()
	s["lio portals"] = errText(err)
	for _, p := range portals {
		s["lio portal "+p.ID()] = fmt.Sprintf("iser=%v addr=%v err=%v", p.ISER, p.Addr, p.Err)
	}
	subs, err := f.Subsystems()
	s["nvmet subsystems"] = fmt.Sprintf("%q err=%s", subs, errText(err))
	return s
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
