package configfs

// The FS's writes: the edits the engine makes to a port's links and a
// portal's iser, each through Ops after its names are checked.

import (
	"fmt"
)

// Unlink removes ports/<id>/subsystems/<link.Name>. Unlinking the last
// subsystem disables the port (the listener goes away).
func (f *FS) Unlink(portID string, l Link) error {
	if err := checkName(portID); err != nil {
		return fmt.Errorf("nvmet port: %w", err)
	}
	if err := checkName(l.Name); err != nil {
		return fmt.Errorf("nvmet port %s: %w", portID, err)
	}
	if err := f.ops.Remove(f.nvmet("ports", portID, "subsystems", l.Name)); err != nil {
		return fmt.Errorf("nvmet port %s: unlink %q: %w", portID, l.Name, err)
	}
	return nil
}

// UnlinkAll removes the links of port portID, in order, through one open
// of its subsystems directory: done is told each unlink's result and stops
// the rest by returning false. The error is about the port itself (a bad
// id or name, its directory not opened): nothing was removed.
func (f *FS) UnlinkAll(portID string, links []Link, done func(i int, err error) bool) error {
	if err := checkName(portID); err != nil {
		return fmt.Errorf("nvmet port: %w", err)
	}
	names := make([]string, len(links))
	for i, l := range links {
		if err := checkName(l.Name); err != nil {
			return fmt.Errorf("nvmet port %s: %w", portID, err)
		}
		names[i] = l.Name
	}
	err := f.ops.RemoveLinks(f.nvmet("ports", portID, "subsystems"), names, func(i int, err error) bool {
		if err != nil {
			err = fmt.Errorf("nvmet port %s: unlink %q: %w", portID, names[i], err)
		}
		return done(i, err)
	})
	if err != nil {
		return fmt.Errorf("nvmet port %s: unlink: %w", portID, err)
	}
	return nil
}

// Relink creates ports/<id>/subsystems/<link.Name> → subsystems/<link.NQN>.
// The first link enables the port; when the transport cannot bind, the
// kernel refuses the link (EADDRNOTAVAIL: no netdev holds the address,
// ENODEV: no RDMA device on it) and no link is left behind.
func (f *FS) Relink(portID string, l Link) error {
	for _, n := range []string{portID, l.Name, l.NQN} {
		if err := checkName(n); err != nil {
			return fmt.Errorf("nvmet port %s: relink: %w", portID, err)
		}
	}
	target := f.nvmet("subsystems", l.NQN)
	if err := f.ops.Symlink(target, f.nvmet("ports", portID, "subsystems", l.Name)); err != nil {
		return fmt.Errorf("nvmet port %s: relink %q: %w", portID, l.Name, err)
	}
	return nil
}

// RelinkAll creates the links of port portID, in order, through one open
// of its subsystems directory (each as Relink: the first enables the
// port, and a refused bind leaves no link); done is told each result and
// stops the rest by returning false. The error is about the port itself
// (a bad id or name, its directory not opened): nothing was created.
func (f *FS) RelinkAll(portID string, links []Link, done func(i int, err error) bool) error {
	if err := checkName(portID); err != nil {
		return fmt.Errorf("nvmet port %s: relink: %w", portID, err)
	}
	names, targets := make([]string, len(links)), make([]string, len(links))
	for i, l := range links {
		for _, n := range []string{l.Name, l.NQN} {
			if err := checkName(n); err != nil {
				return fmt.Errorf("nvmet port %s: relink: %w", portID, err)
			}
		}
		names[i], targets[i] = l.Name, f.nvmet("subsystems", l.NQN)
	}
	err := f.ops.SymlinkAll(f.nvmet("ports", portID, "subsystems"), targets, names, func(i int, err error) bool {
		if err != nil {
			err = fmt.Errorf("nvmet port %s: relink %q: %w", portID, names[i], err)
		}
		return done(i, err)
	})
	if err != nil {
		return fmt.Errorf("nvmet port %s: relink: %w", portID, err)
	}
	return nil
}

// SetISER writes np/<np>/iser. 1 adds the iSER listener (refused with the
// bind error when the address has no RDMA device); 0 removes it.
func (f *FS) SetISER(portalID string, on bool) error {
	iqn, tpg, np, err := ParsePortalID(portalID)
	if err != nil {
		return err
	}
	v := "0"
	if on {
		v = "1"
	}
	if err := f.ops.WriteAttr(f.iscsi(iqn, tpg, "np", np, "iser"), v); err != nil {
		return fmt.Errorf("lio portal %s: write iser=%s: %w", portalID, v, err)
	}
	return nil
}

// SwapISERs writes on to the np/<np>/iser of each portal of ids, in
// order, where it reads the other value, on one open file; done is told
// what each read (true: 1) or its error, and stops the rest by returning
// false. A write of 1 is refused with the bind error when the address
// has no RDMA device. The error is the run's own (an id that names no
// portal: nothing written, done never called).
func (f *FS) SwapISERs(ids []string, on bool, done func(i int, was bool, err error) bool) error {
	paths := make([]string, len(ids))
	for i, id := range ids {
		iqn, tpg, np, err := ParsePortalID(id)
		if err != nil {
			return err
		}
		paths[i] = f.iserPath(iqn, tpg, np)
	}
	from, to := "1", "0"
	if on {
		from, to = to, from
	}
	return f.ops.SwapAttrs(paths, from, to, func(i int, got string, err error) bool {
		switch {
		case err != nil:
			err = fmt.Errorf("lio portal %s: write iser=%s: %w", ids[i], to, err)
		case got != "0" && got != "1":
			err = fmt.Errorf("lio portal %s: iser reads %q, want 0 or 1; not written", ids[i], got)
		}
		return done(i, err == nil && got == "1", err)
	})
}
