package watch

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// node is what the model knows about one path under the root. Every field
// but the tree links is a cache of one Ops call; each is valid only while
// the directory it depends on is watched (the node's own watch for list
// and attrs, the parent's for st and link).
type node struct {
	path   string
	parent *node
	kids   map[string]*node
	wd     int32 // the node's inotify watch; 0: none

	list   []string // ReadDirNames
	listOK bool

	attrsKey string // the attribute names asked, joined by NUL
	attrs    configfs.Attrs
	attrsOK  bool

	st   fs.FileInfo // Lstat
	stEr error
	stOK bool

	link   string // Readlink
	linkEr error
	linkOK bool
}

// node returns the node of path, creating it and its parents; nil when
// path is not under the root.
func (m *Model) node(path string) *node {
	if n := m.nodes[path]; n != nil {
		return n
	}
	if path != m.root && !strings.HasPrefix(path, m.root+"/") {
		return nil
	}
	if path == m.root {
		n := &node{path: path}
		m.nodes[path] = n
		return n
	}
	p := m.node(filepath.Dir(path))
	if p == nil {
		return nil
	}
	n := &node{path: path, parent: p}
	if p.kids == nil {
		p.kids = map[string]*node{}
	}
	p.kids[filepath.Base(path)] = n
	m.nodes[path] = n
	return n
}

// lookup is node for a path as FS makes them (clean: no Clean needed
// when it is known).
func (m *Model) lookup(path string) *node {
	if n := m.nodes[path]; n != nil {
		return n
	}
	return m.node(filepath.Clean(path))
}

// drop forgets n and everything under it, removing their watches, and
// what n's parent knows about n. Dropping a top-level directory (the
// nvmet or LIO tree, the root) asks for a full rescan: their identity is
// recorded at a rescan.
func (m *Model) drop(n *node) {
	if p := n.parent; p != nil {
		delete(p.kids, filepath.Base(n.path))
		p.listOK = false
	}
	m.forget(n)
	if m.top[n.path] {
		m.want("top-level directory " + n.path + " changed")
	}
}

func (m *Model) forget(n *node) {
	for _, k := range n.kids {
		m.forget(k)
	}
	if m.nodes[n.path] == n {
		delete(m.nodes, n.path)
	}
	m.unwatch(n)
	m.gen++
}

// cacheOps is configfs.Ops over the model: reads answer from the cache
// or read through m.ops (watching first, caching after), writes go
// through unchanged. It runs under m.mu, called by m.cfs.
type cacheOps struct{ m *Model }

func (c cacheOps) ReadDirNames(dir string) ([]string, error) {
	m := c.m
	n := m.lookup(dir)
	if n != nil && n.listOK {
		m.stats.Hits++
		return slices.Clone(n.list), nil
	}
	watched := n != nil && m.watch(n)
	names, err := m.ops.ReadDirNames(dir)
	m.stats.Reads++
	if watched && err == nil {
		n.list, n.listOK = slices.Clone(names), true
	} else {
		m.uncached++
	}
	return names, err
}

func (c cacheOps) ReadAttrs(dirs, names []string) []configfs.Attrs {
	m := c.m
	key := strings.Join(names, "\x00")
	out := make([]configfs.Attrs, len(dirs))
	var miss []int
	var missDirs []string
	var missNodes []*node
	for i, d := range dirs {
		n := m.lookup(d)
		if n != nil && n.attrsOK && n.attrsKey == key {
			out[i] = n.attrs
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
		out[i] = res[j]
		if n := missNodes[j]; watched[j] && cacheable(res[j]) {
			n.attrsKey, n.attrs, n.attrsOK = key, res[j], true
		} else {
			m.uncached++
		}
	}
	return out
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
	if n != nil && n.stOK {
		m.stats.Hits++
		return n.st, n.stEr
	}
	watched := n != nil && n.parent != nil && m.watch(n.parent)
	st, err := m.ops.Lstat(path)
	m.stats.Reads++
	if watched && notExistOrNil(err) {
		n.st, n.stEr, n.stOK = st, err, true
	} else {
		m.uncached++
	}
	return st, err
}

func (c cacheOps) Readlink(path string) (string, error) {
	m := c.m
	n := m.lookup(path)
	if n != nil && n.linkOK {
		m.stats.Hits++
		return n.link, n.linkEr
	}
	watched := n != nil && n.parent != nil && m.watch(n.parent)
	target, err := m.ops.Readlink(path)
	m.stats.Reads++
	if watched && notExistOrNil(err) {
		n.link, n.linkEr, n.linkOK = target, err, true
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

func (c cacheOps) Remove(path string) error {
	err := c.m.ops.Remove(path)
	c.m.touchEntry(filepath.Clean(path))
	return err
}

func (c cacheOps) WriteAttr(path, value string) error {
	err := c.m.ops.WriteAttr(path, value)
	c.m.touchAttr(filepath.Clean(path))
	return err
}

// touchEntry marks what creating or removing path changes: its parent's
// listing and attributes, and path itself with everything under it.
func (m *Model) touchEntry(path string) {
	m.gen++
	if p := m.nodes[filepath.Dir(path)]; p != nil {
		p.listOK, p.attrsOK = false, false
	}
	if n := m.nodes[path]; n != nil {
		m.drop(n)
	}
}

// touchAttr marks what writing the attribute at path changes: the
// attributes of its directory.
func (m *Model) touchAttr(path string) {
	m.gen++
	if p := m.nodes[filepath.Dir(path)]; p != nil {
		p.attrsOK = false
	}
	if n := m.nodes[path]; n != nil {
		n.stOK = false
	}
}
