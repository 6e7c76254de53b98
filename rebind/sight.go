package rebind

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Sight is what an observation could see and what it could not: the one
// place the facts "configfs missing or unreadable", "nvmet or LIO not
// loaded", "RDMA netlink unavailable" and "objects unreadable" are
// decided. `check` (rebind/status, through the report) and the daemon's
// log (rebind/daemon) both read it from the snapshot.
type Sight struct {
	Configfs ConfigfsSight
	// Netlink is why the RDMA tables (devices, the cm_id table) could not
	// be read: the RDMA listeners' state is then unknown (ListenersErr).
	Netlink error
	// RDMAWanted: configfs holds RDMA objects (an nvmet RDMA port, a
	// portal with iser=1): RDMA netlink missing is then a fault, not a
	// host without RDMA (a TCP-only target).
	RDMAWanted bool
	// TCP is why the TCP sockets in LISTEN could not be read (sock_diag):
	// nvmet TCP ports' listeners are then unknown. TCPWanted: there are
	// nvmet TCP ports.
	TCP       error
	TCPWanted bool
	// Addrs is why the netdevs' addresses could not be read (rtnetlink):
	// no heal runs while it is set.
	Addrs error
	// Unreadable are the objects the engine might manage (an RDMA port or
	// a portal in the watched subnets, or whose address could not be read)
	// that could not be read whole: never judged, never healed. Each names
	// its object.
	Unreadable []string
	// NvmetWanted and LIOWanted say that the config (a saved config to
	// complete) or the journal names objects of that kind: its tree
	// missing is then a fault, not a host that does not use it.
	NvmetWanted, LIOWanted bool
	// Saved names the saved configs, and their entries, that could not be
	// read or were refused: what they declare is neither completed nor
	// counted missing. BootUntil is when the boot window of the saved
	// configs closes (zero: none named): an object they declare that
	// configfs lacks is made, or awaited, within it, and missing after.
	Saved     error
	BootUntil time.Time
}

// ConfigfsSight is what the configfs root shows (ProbeConfigfs).
type ConfigfsSight struct {
	// Probed is false when the engine was given no probe (Options.Probe,
	// tests over a fake tree): nothing is known of the root.
	Probed bool
	Root   string
	// Err says why nothing under the root can be seen: it is missing, not
	// a directory, unreadable, or not a configfs mount and holding neither
	// tree. Nil otherwise.
	Err error
	// Mounted: the root is a configfs mount (false also for a copy of a
	// tree, as tests use; such a root is read as it is).
	Mounted bool
	Nvmet   bool // <root>/nvmet exists: nvmet is loaded
	LIO     bool // <root>/target/iscsi exists: iscsi_target_mod is loaded
}

// same tells whether two probes saw the same root.
func (c ConfigfsSight) same(d ConfigfsSight) bool {
	return c.Probed == d.Probed && c.Root == d.Root && c.Mounted == d.Mounted && c.Nvmet == d.Nvmet && c.LIO == d.LIO &&
		sameErr(c.Err, d.Err)
}

// StrandedGrace is how long a stranded listener is left to the kernel's
// own repair before it is rebound: `check` warns within it, and is
// critical after it.
const StrandedGrace = strandedGrace

// ProbeConfigfs looks at a configfs root: whether it is there and mounted,
// and which trees it holds. It reads three inodes and the root's statfs.
func ProbeConfigfs(root string) ConfigfsSight {
	c := ConfigfsSight{Probed: true, Root: root}
	st, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Err = fmt.Errorf("configfs root %s does not exist (configfs not mounted, or not built into this kernel)", root)
		return c
	case err != nil:
		c.Err = fmt.Errorf("configfs root unreadable: %w", err)
		return c
	case !st.IsDir():
		c.Err = fmt.Errorf("configfs root %s is not a directory", root)
		return c
	}
	c.Mounted = isConfigfsMount(root)
	for _, t := range []struct {
		has  *bool
		path string
	}{{&c.Nvmet, filepath.Join(root, "nvmet")}, {&c.LIO, filepath.Join(root, "target", "iscsi")}} {
		st, err := os.Stat(t.path)
		switch {
		case err == nil:
			*t.has = st.IsDir()
		case !errors.Is(err, fs.ErrNotExist):
			c.Err = fmt.Errorf("configfs root unreadable: %w", err)
			return c
		}
	}
	switch {
	case c.Nvmet || c.LIO:
	case holdsTrees(filepath.Dir(root)):
		c.Err = fmt.Errorf("%s is one level inside the configfs root %s, which holds nvmet/ or target/iscsi/: use --configfs-root %s", root, filepath.Dir(root), filepath.Dir(root))
	case holdsTrees(filepath.Join(root, "config")):
		c.Err = fmt.Errorf("%s is one level above the configfs root %s, which holds nvmet/ or target/iscsi/: use --configfs-root %s", root, filepath.Join(root, "config"), filepath.Join(root, "config"))
	case !c.Mounted:
		c.Err = fmt.Errorf("%s is not a configfs mount (mount -t configfs none %s)", root, root)
	}
	return c
}

// holdsTrees tells whether dir looks like a configfs root: a configfs
// mount's top (not a directory inside one), or a directory holding nvmet/
// or target/iscsi/. It tells a root given one level off from the right one.
func holdsTrees(dir string) bool {
	if isConfigfsMount(dir) && !isConfigfsMount(filepath.Dir(dir)) {
		return true
	}
	for _, t := range []string{"nvmet", filepath.Join("target", "iscsi")} {
		if st, err := os.Stat(filepath.Join(dir, t)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// sight is what the observation saw, with cfg's watched subnets and saved
// configs.
func (o *Observed) sight(cfg Config) Sight {
	s := Sight{NvmetWanted: cfg.NvmetConfig != "", LIOWanted: cfg.TargetConfig != ""}
	for _, in := range inputs {
		in.sight(o, &s)
	}
	for _, p := range o.Ports {
		s.RDMAWanted = s.RDMAWanted || p.Trtype == configfs.TransportRDMA
		s.TCPWanted = s.TCPWanted || p.Trtype == configfs.TransportTCP
	}
	for _, p := range o.Portals {
		s.RDMAWanted = s.RDMAWanted || p.ISER
	}
	for _, p := range o.Ports {
		if p.Err == nil || p.Trtype != "" && p.Trtype != configfs.TransportRDMA && p.Trtype != configfs.TransportTCP {
			continue
		}
		if ap, err := p.Addr(); err == nil && (ap.Addr().IsUnspecified() || !watched(cfg, ap.Addr())) {
			continue
		}
		s.Unreadable = append(s.Unreadable, p.Err.Error())
	}
	for _, p := range o.Portals {
		if p.Err == nil || p.Addr.IsValid() && (p.Addr.Addr().IsUnspecified() || !watched(cfg, p.Addr.Addr())) {
			continue
		}
		s.Unreadable = append(s.Unreadable, p.Err.Error())
	}
	if o.PortalsErr != nil {
		if j, ok := o.PortalsErr.(interface{ Unwrap() []error }); ok {
			for _, err := range j.Unwrap() {
				s.Unreadable = append(s.Unreadable, err.Error())
			}
		} else {
			s.Unreadable = append(s.Unreadable, o.PortalsErr.Error())
		}
	}
	return s
}
