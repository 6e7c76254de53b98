package watch

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// cacheOps is configfs.Ops over the model: reads answer from the cache
// or read through m.ops (watching first, caching after), writes go
// through unchanged. It runs under m.mu, called by m.cfs.
type cacheOps struct{ m *Model }

func (c cacheOps) ReadDirNames(dir string) ([]string, error) {
	m := c.m
	n := m.lookup(dir)
	if n != nil && n.has(fList) {
		m.stats.Hits++
		return slices.Clone(n.list()), nil
	}
	watched := n != nil && m.watch(n)
	names, err := m.ops.ReadDirNames(dir)
	m.stats.Reads++
	if watched && err == nil {
		n.setList(m.shareList(names))
		if len(names) >= m.opts.BigDir {
			// A large directory's entries are each read next: their
			// nodes keep the listing's names (kidName copies the ones it
			// cannot find in a short listing).
			for _, name := range n.list() {
				if name != "" && name != "." && name != ".." && !strings.Contains(name, "/") && m.kid(n, name) == nil {
					m.addKid(n, name, true)
				}
			}
		}
	} else {
		m.uncached++
	}
	return names, err
}

// shareList is a copy of names to cache: a short listing equal to one
// cached lately is shared with it (most targets have one TPG, tpgt_1;
// most ports' subsystems one NQN).
func (m *Model) shareList(names []string) []string {
	if len(names) == 0 || len(names) > 2 {
		return slices.Clone(names)
	}
	for _, l := range m.lastLists {
		if slices.Equal(l, names) {
			return l
		}
	}
	l := slices.Clip(slices.Clone(names))
	m.lastLists[m.nextList] = l
	m.nextList = (m.nextList + 1) % len(m.lastLists)
	return l
}

func (c cacheOps) ReadAttrs(dirs, names []string) []configfs.Attrs {
	m := c.m
	key := m.keyOf(names)
	out := make([]configfs.Attrs, len(dirs))
	var miss []int
	var missDirs []string
	var missNodes []*node
	for i, d := range dirs {
		n := m.lookup(d)
		if n != nil && n.has(fAttrs) && key != 0 && n.key == key {
			out[i] = m.attrsOf(n)
			m.stats.Hits++
			continue
		}
		miss = append(miss, i)
		missDirs = append(missDirs, d)
		missNodes = append(missNodes, n)
	}
	if len(miss) == 0 {
		return out
	}
	watched := make([]bool, len(miss))
	for j, n := range missNodes {
		watched[j] = n != nil && m.watch(n) // before the read: no change is missed
	}
	res := m.ops.ReadAttrs(missDirs, names)
	m.stats.Reads += uint64(len(miss))
	for j, i := range miss {
		if n := missNodes[j]; watched[j] && key != 0 && cacheable(res[j]) {
			m.setAttrs(n, key, &res[j])
		} else {
			m.uncached++
		}
		out[i] = res[j]
	}
	return out
}

// maxKeys bounds the sets of attribute names the model tells apart (FS
// asks two); reads of more are not cached until the next rescan.
const maxKeys = 255

// keyOf numbers a set of attribute names (0: too many sets).
func (m *Model) keyOf(names []string) uint8 {
	for i, k := range m.keys {
		if slices.Equal(k, names) {
			return uint8(i + 1)
		}
	}
	if len(m.keys) == maxKeys {
		return 0
	}
	m.keys = append(m.keys, slices.Clone(names))
	m.lastVals = append(m.lastVals, nil)
	return uint8(len(m.keys))
}

// setAttrs caches a (read whole, cacheable) as n's attributes. A value
// equal to the one the last directory read with the same names had is
// shared with it (most are: rdma, ipv4, 4420, 1), a's own included.
func (m *Model) setAttrs(n *node, key uint8, a *configfs.Attrs) {
	last := m.lastVals[key-1]
	switch {
	case slices.Equal(last, a.Values) && last != nil:
		a.Values = last
	case len(last) == len(a.Values):
		for i, v := range a.Values {
			if v == last[i] {
				a.Values[i] = last[i]
			}
		}
	}
	m.lastVals[key-1] = a.Values
	var errs []error
	if len(a.Errs) != len(a.Values) || slices.ContainsFunc(a.Errs, func(err error) bool { return err != nil }) {
		errs = a.Errs
	}
	m.editErrs(n, func(e *nodeErrs) { e.attrs = errs })
	n.key = key
	n.setVals(a.Values)
}

// attrsOf is n's cached attributes as ReadAttrs returned them (all nil
// errors from one shared slice: FS only reads them).
func (m *Model) attrsOf(n *node) configfs.Attrs {
	v := n.vals()
	a := configfs.Attrs{Values: v}
	if e := m.errsOf(n); e != nil && e.attrs != nil {
		a.Errs = e.attrs
		return a
	}
	if len(m.nilErrs) < len(v) {
		m.nilErrs = make([]error, len(v))
	}
	a.Errs = m.nilErrs[:len(v):len(v)]
	return a
}

// cacheable: a directory read whole, whose attributes exist or do not
// (an attribute appearing is an IN_CREATE); other errors are read again.
func cacheable(a configfs.Attrs) bool {
	if a.Err != nil {
		return false
	}
	for _, err := range a.Errs {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

func notExistOrNil(err error) bool { return err == nil || errors.Is(err, fs.ErrNotExist) }

func (c cacheOps) Lstat(path string) (fs.FileInfo, error) {
	m := c.m
	n := m.lookup(path)
	if n != nil && n.has(fStat) {
		m.stats.Hits++
		if e := m.errsOf(n); e != nil && e.st != nil {
			return nil, e.st
		}
		return (*nodeInfo)(n), nil
	}
	watched := n != nil && n.parent != nil && m.watch(n.parent)
	st, err := m.ops.Lstat(path)
	m.stats.Reads++
	if watched && notExistOrNil(err) {
		m.editErrs(n, func(e *nodeErrs) { e.st = err })
		if err == nil {
			n.mode = st.Mode()
		}
		n.set(fStat)
	} else {
		m.uncached++
	}
	return st, err
}

// nodeInfo is a cached Lstat: the node's name and mode. configfs.FS reads
// only the mode (IsDir); size, time and Sys are not kept.
type nodeInfo node

func (i *nodeInfo) Name() string {
	if i.parent == nil {
		return filepath.Base(i.name)
	}
	return i.name
}
func (i *nodeInfo) Size() int64        { return 0 }
func (i *nodeInfo) Mode() fs.FileMode  { return i.mode }
func (i *nodeInfo) ModTime() time.Time { return time.Time{} }
func (i *nodeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *nodeInfo) Sys() any           { return nil }

func (c cacheOps) Readlink(path string) (string, error) {
	m := c.m
	n := m.lookup(path)
	if n != nil && n.has(fLink) {
		m.stats.Hits++
		if e := m.errsOf(n); e != nil && e.link != nil {
			return "", e.link
		}
		return n.data[0], nil
	}
	watched := n != nil && n.parent != nil && m.watch(n.parent)
	target, err := m.ops.Readlink(path)
	m.stats.Reads++
	if watched && notExistOrNil(err) {
		if len(m.lastLink) == 0 || m.lastLink[0] != target {
			m.lastLink = []string{target}
		}
		target = m.lastLink[0] // ports link the same few subsystems: share the text
		m.editErrs(n, func(e *nodeErrs) { e.link = err })
		n.setLink(m.lastLink)
	} else {
		m.uncached++
	}
	return target, err
}

// The model writes through m.fs, never through the cache; these keep
// cacheOps a configfs.Ops and mark what they change all the same.
func (c cacheOps) Symlink(target, link string) error {
	err := c.m.ops.Symlink(target, link)
	c.m.touchEntry(filepath.Clean(link))
	return err
}

func (c cacheOps) Mkdir(path string) error {
	err := c.m.ops.Mkdir(path)
	c.m.touchEntry(filepath.Clean(path))
	return err
}

func (c cacheOps) Remove(path string) error {
	err := c.m.ops.Remove(path)
	c.m.touchEntry(filepath.Clean(path))
	return err
}

func (c cacheOps) RemoveLinks(dir string, names []string, done func(int, error) bool) error {
	p := c.m.find(dir)
	return c.m.ops.RemoveLinks(dir, names, func(i int, err error) bool {
		c.m.touchKid(p, names[i])
		return done(i, err)
	})
}

func (c cacheOps) SymlinkAll(dir string, targets, names []string, done func(int, error) bool) error {
	p := c.m.find(dir)
	return c.m.ops.SymlinkAll(dir, targets, names, func(i int, err error) bool {
		c.m.touchKid(p, names[i])
		return done(i, err)
	})
}

func (c cacheOps) WriteAttr(path, value string) error {
	err := c.m.ops.WriteAttr(path, value)
	c.m.touchAttr(filepath.Clean(path))
	return err
}

func (c cacheOps) SwapAttrs(paths []string, from, to string, done func(int, string, error) bool) error {
	return c.m.ops.SwapAttrs(paths, from, to, func(i int, got string, err error) bool {
		c.m.touchAttr(filepath.Clean(paths[i]))
		return done(i, got, err)
	})
}

// touchEntry marks what creating or removing path changes: its parent's
// listing and attributes, and path itself with everything under it.
func (m *Model) touchEntry(path string) {
	if p := m.find(filepath.Dir(path)); p != nil {
		m.touchKid(p, filepath.Base(path))
		return
	}
	m.gen++
	if n := m.find(path); n != nil {
		m.drop(n) // the root, which has no parent
	}
}

// touchKid is touchEntry of the entry name of directory p (nil: a
// directory the model has no node for): a run of writes in one directory
// (a port's unlinks and links) finds it once.
func (m *Model) touchKid(p *node, name string) {
	m.gen++
	if p == nil {
		return
	}
	p.clear(fList | fAttrs)
	if n := m.kid(p, name); n != nil {
		m.drop(n)
	}
}

// touchAttr marks what writing the attribute at path changes: the
// attributes of its directory.
func (m *Model) touchAttr(path string) {
	m.gen++
	if p := m.find(filepath.Dir(path)); p != nil {
		p.clear(fAttrs)
	}
	if n := m.find(path); n != nil {
		n.clear(fStat)
	}
}
