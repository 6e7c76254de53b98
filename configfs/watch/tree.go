package watch

// The model's tree of nodes: one per path it knows, kept small (names,
// not paths), and how paths are found, made and forgotten in it. What each
// node caches is filled by cacheOps (cache.go).

import (
	"io/fs"
	"path/filepath"
	"strings"
)

// node is what the model knows about one path under the root. Every field
// but the tree links is a cache of one Ops call; each is valid only while
// the directory it depends on is watched (the node's own watch for the
// listing and attributes, the parent's for the Lstat mode and the link)
// and its flag is set.
//
// A node is small on purpose (80 bytes; a tree of 4096 ports and 4096
// portals has about 29,000): it keeps its name, not its path (pathOf
// builds that); its children are a chain, or, once there are many
// (Options.BigDir), only in the index m.big (no chain: removing one
// child of thousands, as a port's unlinks do, is then one map delete, not
// a walk of the chain); its listing, attribute values or symlink target share
// one slice; of an Lstat it keeps only the mode (all configfs.FS reads of
// it); the errors it caches are in m.errs.
type node struct {
	name   string // the entry's name in its parent; the root's: the root path
	parent *node
	first  *node // the first child (children: first, first.next, ...); nil when fBig
	next   *node // the next sibling; nil in a fBig parent

	// data is, for a directory, the listing (ReadDirNames, fList), its
	// first nlist entries (-1: a nil listing), then the attribute values
	// (ReadAttrs' Values, fAttrs; Errs from m.errs, else all nil); for a
	// symlink, its target (Readlink, fLink: a symlink has no listing or
	// attributes, a directory no target). Values or a target without a
	// listing are shared with other nodes (nlist 0).
	data  []string
	nlist int32

	wd    int32       // the node's inotify watch; 0: none
	mode  fs.FileMode // Lstat's mode (fStat, without error)
	key   uint8       // the attribute names of the values: m.keys[key-1]
	flags uint8
}

// node flags: which caches are valid, whether the children are indexed
// in m.big, whether m.errs has errors of the node.
const (
	fList  = 1 << iota // data: the listing
	fAttrs             // key, data: the values
	fStat              // mode, or m.errs[n].st
	fLink              // data: the target, or m.errs[n].link
	fBig               // children in m.big[n], not chained
	fErrs              // m.errs[n]
)

func (n *node) has(f uint8) bool { return n.flags&f != 0 }
func (n *node) set(f uint8)      { n.flags |= f }
func (n *node) clear(f uint8)    { n.flags &^= f }

// list is the cached listing (when fList).
func (n *node) list() []string {
	if n.nlist < 0 {
		return nil
	}
	return n.data[:n.nlist:n.nlist]
}

// vals are the cached attribute values (when fAttrs).
func (n *node) vals() []string { return n.data[max(n.nlist, 0):len(n.data):len(n.data)] }

// setList caches a listing (names itself, which the node may share, when
// there are no values to keep).
func (n *node) setList(names []string) {
	if n.has(fAttrs) {
		vals := n.vals()
		n.data = append(append(make([]string, 0, len(names)+len(vals)), names...), vals...)
	} else {
		n.data = names
	}
	n.nlist = int32(len(names))
	if names == nil {
		n.nlist = -1
	}
	n.clear(fLink)
	n.set(fList)
}

// setVals caches attribute values (vals itself when there is no listing
// to keep).
func (n *node) setVals(vals []string) {
	if n.has(fList) {
		list := n.list()
		n.data = append(append(make([]string, 0, len(list)+len(vals)), list...), vals...)
	} else {
		n.data, n.nlist = vals, 0
	}
	n.clear(fLink)
	n.set(fAttrs)
}

// setLink caches a symlink's target (target: a slice of one, shared).
func (n *node) setLink(target []string) {
	n.data, n.nlist = target, 0
	n.clear(fList | fAttrs)
	n.set(fLink)
}

// nodeErrs are the "does not exist" answers a node caches (rare).
type nodeErrs struct {
	attrs    []error // ReadAttrs' Errs when one is not nil
	st, link error
}

// errsOf is n's cached errors (nil: none).
func (m *Model) errsOf(n *node) *nodeErrs {
	if !n.has(fErrs) {
		return nil
	}
	return m.errs[n]
}

// editErrs changes n's cached errors by edit.
func (m *Model) editErrs(n *node, edit func(e *nodeErrs)) {
	var e nodeErrs
	if old := m.errsOf(n); old != nil {
		e = *old
	}
	edit(&e)
	if e.attrs == nil && e.st == nil && e.link == nil {
		if n.has(fErrs) {
			delete(m.errs, n)
			n.clear(fErrs)
		}
		return
	}
	if m.errs == nil {
		m.errs = map[*node]*nodeErrs{}
	}
	kept := e
	m.errs[n] = &kept
	n.set(fErrs)
}

// kid is n's child called name, nil when it has none.
func (m *Model) kid(n *node, name string) *node {
	if n.has(fBig) {
		return m.big[n][name]
	}
	for k := n.first; k != nil; k = k.next {
		if k.name == name {
			return k
		}
	}
	return nil
}

// addKid makes n's child called name (n has none); own: name is a string
// of its own (not part of a path) the node may keep.
func (m *Model) addKid(n *node, name string, own bool) *node {
	if !own {
		name = m.kidName(n, name)
	}
	k := &node{name: name, parent: n}
	if n.has(fBig) {
		m.big[n][k.name] = k
		return k
	}
	k.next, n.first = n.first, k
	count := 0
	for c := n.first; c != nil; c = c.next {
		count++
	}
	if count >= m.opts.BigDir {
		// From now on the index alone: the chain is taken apart.
		idx := make(map[string]*node, count)
		for c := n.first; c != nil; {
			next := c.next
			idx[c.name], c.next = c, nil
			c = next
		}
		n.first = nil
		if m.big == nil {
			m.big = map[*node]map[string]*node{}
		}
		m.big[n] = idx
		n.set(fBig)
	}
	return k
}

// kidName is name as a string of its own: the one in n's cached listing
// when it is short, else a copy (name is part of a longer path).
func (m *Model) kidName(n *node, name string) string {
	if n.has(fList) && len(n.list()) <= m.opts.BigDir {
		for _, s := range n.list() {
			if s == name {
				return s
			}
		}
	}
	return strings.Clone(name)
}

// unlinkKid removes k from its parent's children.
func (m *Model) unlinkKid(p, k *node) {
	if p.has(fBig) {
		if m.big[p][k.name] == k {
			delete(m.big[p], k.name)
		}
		return
	}
	for at := &p.first; *at != nil; at = &(*at).next {
		if *at == k {
			*at = k.next
			k.next = nil
			return
		}
	}
}

// pathOf is n's path.
func (m *Model) pathOf(n *node) string {
	size := 0
	for c := n; c != nil; c = c.parent {
		size += len(c.name) + 1
	}
	b := make([]byte, size-1)
	at := len(b)
	for c := n; c != nil; c = c.parent {
		at -= len(c.name)
		copy(b[at:], c.name)
		if at > 0 {
			at--
			b[at] = '/'
		}
	}
	return string(b)
}

// depth is how many parents n has, counted up to most.
func (n *node) depth(most int) int {
	d := 0
	for c := n.parent; c != nil && d < most; c = c.parent {
		d++
	}
	return d
}

// walk is the node of path (cleaned), nil when path is not under the root
// or, unless create, when the model has no node for it.
func (m *Model) walk(path string, create bool) *node {
	path = filepath.Clean(path)
	r := len(m.root)
	if path != m.root && !(len(path) > r && path[r] == '/' && path[:r] == m.root) {
		return nil
	}
	n := m.rootNode
	if n == nil {
		if !create {
			return nil
		}
		n = &node{name: m.root}
		m.rootNode = n
	}
	rest := path[r:]
	for rest != "" {
		rest = rest[1:] // the '/'
		name := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			name, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		k := m.kid(n, name)
		if k == nil {
			if !create {
				return nil
			}
			k = m.addKid(n, name, false)
		}
		n = k
	}
	return n
}

// node returns the node of path, creating it and its parents; nil when
// path is not under the root.
func (m *Model) node(path string) *node { return m.walk(path, true) }

// lookup is node (kept: the Ops calls create the nodes they cache in).
func (m *Model) lookup(path string) *node { return m.walk(path, true) }

// find is the node of path when the model has one.
func (m *Model) find(path string) *node { return m.walk(path, false) }

// drop forgets n and everything under it, removing their watches, and
// what n's parent knows about n. Dropping a top-level directory (the
// nvmet or LIO tree, the root) asks for a full rescan: their identity is
// recorded at a rescan.
func (m *Model) drop(n *node) {
	// A node deeper than any top-level directory (a port's link, dropped
	// at each unlink) builds no path.
	path := ""
	if n.depth(m.topDepth+1) <= m.topDepth {
		path = m.pathOf(n)
	}
	if p := n.parent; p != nil {
		m.unlinkKid(p, n)
		p.clear(fList)
	} else if m.rootNode == n {
		m.rootNode = nil
	}
	m.forget(n)
	if m.top[path] {
		m.want("top-level directory " + path + " changed")
	}
}

func (m *Model) forget(n *node) {
	for k := n.first; k != nil; k = k.next {
		m.forget(k)
	}
	if n.has(fBig) {
		for _, k := range m.big[n] {
			m.forget(k)
		}
		delete(m.big, n)
	}
	if n.has(fErrs) {
		delete(m.errs, n)
	}
	m.unwatch(n)
	m.gen++
}
