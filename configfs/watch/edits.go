package watch

// The model's writes: each is the configfs.FS write of the same name,
// under the model's lock, and marks what it changed.

import (
	"path/filepath"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Unlink is configfs.FS.Unlink; the model marks the port's links changed.
func (m *Model) Unlink(portID string, l configfs.Link) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.fs.Unlink(portID, l)
	m.touchEntry(filepath.Join(m.root, "nvmet", "ports", portID, "subsystems", l.Name))
	return err
}

// UnlinkAll is configfs.FS.UnlinkAll; the model marks the port's links
// changed, each as it goes.
func (m *Model) UnlinkAll(portID string, links []configfs.Link, done func(int, error) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.find(filepath.Join(m.root, "nvmet", "ports", portID, "subsystems"))
	return m.fs.UnlinkAll(portID, links, func(i int, err error) bool {
		m.touchKid(dir, links[i].Name)
		return done(i, err)
	})
}

// RelinkAll is configfs.FS.RelinkAll; the model marks the port's links
// changed, each as it goes.
func (m *Model) RelinkAll(portID string, links []configfs.Link, done func(int, error) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.find(filepath.Join(m.root, "nvmet", "ports", portID, "subsystems"))
	return m.fs.RelinkAll(portID, links, func(i int, err error) bool {
		m.touchKid(dir, links[i].Name)
		return done(i, err)
	})
}

// SwapISERs is configfs.FS.SwapISERs; the model marks each portal
// changed as it is written. The writes are made outside the model's lock:
// the writes of a shared portal's sharers run side by side (each iser=1
// waits for the modprobe the kernel spawns), and a reader meanwhile sees
// a portal as before its write until it is marked (a rescan meanwhile
// does not compare: swapping).
func (m *Model) SwapISERs(ids []string, on bool, done func(i int, was bool, err error) bool) error {
	m.mu.Lock()
	m.swapping++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.swapping--
		m.mu.Unlock()
	}()
	return m.fs.SwapISERs(ids, on, func(i int, was bool, err error) bool {
		// done is told only of a parsed id: its parts are names.
		if iqn, tpg, np, ok := configfs.SplitPortalID(ids[i]); ok {
			m.mu.Lock()
			m.touchISER(iqn, tpg, np)
			m.mu.Unlock()
		}
		return done(i, was, err)
	})
}

// touchISER is touchAttr of the portal's np/<np>/iser, found name by name
// from the root: a shared portal's heal writes it for each of its
// sharers, and builds no path for it.
func (m *Model) touchISER(iqn, tpg, np string) {
	m.gen++
	n := m.rootNode
	for _, name := range [...]string{"target", "iscsi", iqn, tpg, "np", np} {
		if n == nil {
			return
		}
		n = m.kid(n, name)
	}
	if n != nil {
		n.clear(fAttrs)
		if k := m.kid(n, "iser"); k != nil {
			k.clear(fStat)
		}
	}
}

// SetISER is configfs.FS.SetISER; the model marks the portal changed.
func (m *Model) SetISER(portalID string, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.fs.SetISER(portalID, on)
	if iqn, tpg, np, perr := configfs.ParsePortalID(portalID); perr == nil {
		m.touchISER(iqn, tpg, np)
	}
	return err
}
