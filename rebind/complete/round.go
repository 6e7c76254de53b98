package complete

// One call's view of configfs: what is present, what blocks a unit.

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// round is one call's view of configfs: what each unit looked like (or
// will, once the due units before it are made), each looked at once.
type round struct {
	c     *Completer
	known map[string]bool
	due   map[string]bool // made in this round, after the units before them
}

// has tells whether the unit is in configfs (or made earlier in this
// round).
func (r *round) has(u unit) (bool, error) {
	if v, ok := r.known[u.id]; ok {
		return v, nil
	}
	v, err := r.c.present(u, r)
	if err == nil {
		r.known[u.id] = v
	}
	return v, err
}

// hasID is has for a unit named by a dependency.
func (r *round) hasID(id string) bool {
	if v, ok := r.known[id]; ok {
		return v
	}
	u, ok := r.c.byID[id]
	if !ok {
		// A storage object a LUN names that is not the completer's (a
		// ramdisk, pscsi, user backstore; or one not declared): there or not.
		if plugin, name, ok := soID(id); ok {
			return r.c.soDir(plugin, name) != ""
		}
		return false
	}
	v, _ := r.has(u)
	return v
}

// blocked says why a unit cannot be made yet ("" when it can): a unit it
// depends on is missing. A dependency the admin removed makes it gone with
// it (returned with a leading "-": not reported).
func (r *round) blocked(u unit) string {
	if u.parent != "" {
		if st, err := r.c.Ops.Lstat(filepath.Join(r.c.Root, u.parent)); err != nil || !st.IsDir() {
			return "waiting for " + u.parent + " (the restore makes it)"
		}
	}
	for _, d := range u.deps {
		if r.hasID(d) {
			continue
		}
		if r.c.seen[d] && !r.c.making[d] {
			return "-removed with " + d
		}
		return "waiting for " + d
	}
	return ""
}

// present tells whether the unit is in configfs.
func (c *Completer) present(u unit, r *round) (bool, error) {
	switch u.kind {
	case kEnable:
		a := c.Ops.ReadAttrs([]string{c.path(u)}, []string{"enable"})[0]
		if a.Err != nil || a.Errs[0] != nil {
			return false, nil
		}
		return a.Values[0] == "1", nil
	case kAttrs:
		// The restore writes a subsystem's attributes after its
		// namespaces and allowed hosts: with all of them in place, it
		// did (whatever they read now: the admin's since).
		for _, b := range append([]string{u.deps[0]}, u.before...) {
			if !r.hasID(b) || c.making[b] || r.due[b] {
				return false, nil
			}
		}
		return true, nil
	case kSO:
		return c.path(u) != "", nil
	}
	st, err := c.Ops.Lstat(c.path(u))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("saved config object %s: %w", u.id, err)
	}
	if u.kind == kAllowed {
		return st.Mode()&fs.ModeSymlink != 0, nil
	}
	return st.IsDir(), nil
}
