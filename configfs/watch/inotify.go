package watch

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// watchMask is what a watched directory reports: entries created, removed
// or renamed (mkdir, rmdir, ln -s, rm), attributes written (IN_MODIFY on
// the directory, with the attribute's name), and the directory itself
// going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// maxWatchesSysctl is the limit a watch-add failure (ENOSPC) runs into.
const maxWatchesSysctl = "fs.inotify.max_user_watches"

// watch makes sure n's directory is watched, adding the watch (before the
// caller reads: a change after the add is an event, one before it is in
// what the caller reads). False when it cannot be watched: missing or not
// a directory (nothing to cache), or the watch failed (the model falls
// back to full reads).
func (m *Model) watch(n *node) bool {
	if n.wd != 0 {
		return true
	}
	if m.fallback {
		return false
	}
	var wd int
	var err error
	path := m.pathOf(n)
	if m.addWatchHook != nil {
		err = m.addWatchHook(path)
	}
	if err == nil {
		wd, err = unix.InotifyAddWatch(m.fd, path, watchMask)
	}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return false
	case err != nil:
		m.stats.WatchErrors++
		m.fallback = true
		m.stats.Fallback = true
		msg := "cannot watch a configfs directory: every read is a full read until a rescan can watch it"
		if errors.Is(err, unix.ENOSPC) {
			m.log.Warn(msg+"; raise the sysctl", "dir", path, "err", err, "sysctl", maxWatchesSysctl, "watches", len(m.byWD))
		} else {
			m.log.Warn(msg, "dir", path, "err", err, "watches", len(m.byWD))
		}
		return false
	}
	if old := m.byWD[int32(wd)]; old != nil && old != n {
		// The same directory under another path (renamed): what the
		// model knew under the old path is no longer there.
		old.wd = 0
		delete(m.byWD, int32(wd))
		m.drop(old)
	}
	n.wd = int32(wd)
	m.byWD[n.wd] = n
	return true
}

// unwatch removes n's watch (its IN_IGNORED then names no node and is
// skipped).
func (m *Model) unwatch(n *node) {
	if n.wd == 0 {
		return
	}
	if m.byWD[n.wd] == n {
		delete(m.byWD, n.wd)
		unix.InotifyRmWatch(m.fd, uint32(n.wd)) // EINVAL: the kernel dropped it already
	}
	n.wd = 0
}

// drain reads every queued event without blocking and applies it. The
// kernel queues an event within the writing system call, so after drain
// the model has seen every write that completed before it.
func (m *Model) drain() {
	if m.overflowNext {
		m.overflowNext = false
		m.stats.Overflows++
		m.want("event queue overflowed (test)")
	}
	for {
		n, err := unix.Read(m.fd, m.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) || n == 0 {
			break
		}
		if err != nil {
			m.log.Warn("cannot read configfs events; rescanning", "err", err)
			m.want("reading events failed")
			break
		}
		if m.discardEvents {
			continue
		}
		m.parse(m.buf[:n])
	}
}

// parse applies the events in b.
func (m *Model) parse(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		l := int(binary.NativeEndian.Uint32(b[12:]))
		end := unix.SizeofInotifyEvent + l
		if end > len(b) {
			break
		}
		name := b[unix.SizeofInotifyEvent:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		m.event(wd, mask, string(name))
		b = b[end:]
	}
}

// event turns one event into dirty marks.
func (m *Model) event(wd int32, mask uint32, name string) {
	m.stats.Events++
	if mask&unix.IN_Q_OVERFLOW != 0 {
		m.stats.Overflows++
		m.want("event queue overflowed")
		return
	}
	n := m.byWD[wd]
	if n == nil {
		return // a watch the model removed (or replaced): nothing of it is cached
	}
	m.gen++
	switch {
	case mask&unix.IN_UNMOUNT != 0:
		m.want("file system of " + m.pathOf(n) + " unmounted")
		m.lost(n)
	case mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		// Not a watch the model removed (that one is out of byWD): the
		// directory went away (rmdir, a module unloaded) or was moved.
		m.lost(n)
	case name == "":
		n.clear(fAttrs | fStat) // the directory itself changed
	case mask&(unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0:
		// An entry appeared or went: the listing, the attributes (one
		// may have appeared), and all that is known under that name.
		n.clear(fList | fAttrs)
		if k := m.kid(n, name); k != nil {
			m.drop(k)
		}
	default: // IN_MODIFY, IN_ATTRIB of an entry: an attribute written
		n.clear(fAttrs)
		if k := m.kid(n, name); k != nil {
			k.clear(fStat)
		}
	}
}

// lost forgets a directory whose watch the kernel ended: its own
// subtree, and what its parent knows of it. A top-level directory makes
// a rescan (drop asks for it).
func (m *Model) lost(n *node) {
	delete(m.byWD, n.wd)
	unix.InotifyRmWatch(m.fd, uint32(n.wd)) // IN_MOVE_SELF keeps it on the moved directory
	n.wd = 0
	m.drop(n)
}
