package rebind

import (
	"net/netip"
	"time"
)

// Config is the daemon's configuration (/etc/nvmet-rebind/config.toml).
type Config struct {
	// Watch lists the subnets whose specific-address RDMA ports and portals
	// are managed. Empty: every specific-address RDMA port is managed.
	Watch []netip.Prefix
	// GiveUpAfter stops rebinding a listener that has been dead this long
	// (0: never give up).
	GiveUpAfter time.Duration
	// PinDevice rebinds only onto an RDMA device with the node GUID the
	// listener was last seen alive on.
	PinDevice bool
	// ResyncInterval is the period of the resync: a reconcile with no
	// event (configfs from the daemon's inotify model, the kernel's tables
	// read afresh).
	ResyncInterval time.Duration
	// RescanInterval is the period of the daemon's full rescan of
	// configfs, the safety net of its inotify model (configfs/watch): a
	// rescan that disagrees with the model is logged as a bug. 0 = only
	// at start and when the model knows it is stale.
	RescanInterval time.Duration
	// NvmetConfig and TargetConfig are nvmetcli's and targetcli's saved
	// configs; links and iSER portals they declare that the boot-time
	// restore could not create (no address or RDMA device yet) are
	// completed within BootWindow after the daemon starts. "" = off.
	NvmetConfig, TargetConfig string
	// BootWindow bounds the boot-order completion (default: GiveUpAfter,
	// or 10m when that is 0).
	BootWindow time.Duration
	// MetricsTextfile is where the daemon writes its metrics for
	// node_exporter's textfile collector ("" = off). The daemon's, not
	// the engine's: `run --metrics-textfile` overrides it.
	MetricsTextfile string
}

// DefaultConfig is what an empty file means.
func DefaultConfig() Config {
	return Config{GiveUpAfter: 10 * time.Minute, ResyncInterval: 30 * time.Second, RescanInterval: 10 * time.Minute, BootWindow: 10 * time.Minute}
}
