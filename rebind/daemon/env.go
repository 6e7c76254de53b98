package daemon

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/watch"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/complete"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// Paths are the roots and files the daemon uses (flags of the command).
type Paths struct {
	Config   string // the TOML config
	Configfs string // configfs mount point
	Sysfs    string // sysfs mount point
	State    string // journal, pins, lock
	Run      string // control socket
}

// Socket is the control socket's path.
func (p Paths) Socket() string { return filepath.Join(p.Run, "control.sock") }

// Mode says what an engine built by Open may do.
type Mode int

// Modes.
const (
	ReadOnly Mode = iota // status, check, plan: writes nothing anywhere
	Write                // trigger, rebind without a daemon (under Lock)
)

// Env is an engine over the live system.
type Env struct {
	Config rebind.Config
	Engine *rebind.Engine
	Kernel *rdma.Live
	Store  *state.Store
	// Model is the daemon's inotify model of configfs (nil: configfs is
	// read whole at every observation, as the one-shot commands do).
	Model *watch.Model
}

// Close releases the kernel sockets and the model's inotify descriptor.
func (e *Env) Close() error {
	if e.Model != nil {
		e.Model.Close()
	}
	return e.Kernel.Close()
}

// Open builds an engine over the live kernel. ReadOnly never creates,
// changes or removes anything (the state directory is opened read-only and
// the engine runs dry); Write opens the state directory for the writer and
// cleans it: the caller must hold Lock.
func Open(p Paths, log *slog.Logger, mode Mode, fault func(string) bool) (*Env, error) {
	return open(p, log, mode, fault, 0, false)
}

// open builds the engine; with model, configfs is read through an inotify
// model of it (the daemon), else whole at every observation.
func open(p Paths, log *slog.Logger, mode Mode, fault func(string) bool, heartbeat time.Duration, model bool) (*Env, error) {
	cfg, err := config.Load(p.Config)
	if err != nil {
		return nil, configError{err}
	}
	env := &Env{Config: cfg, Kernel: rdma.NewLive(p.Sysfs)}
	fsys := configfs.New(p.Configfs)
	var tree rebind.Tree = fsys
	if model {
		rescan := cfg.RescanInterval
		if rescan == 0 {
			rescan = -1
		}
		m, err := watch.New(fsys, watch.Options{RescanEvery: rescan, Logger: log})
		if err != nil {
			// No inotify (instances exhausted, a seccomp filter): the
			// daemon still works, reading configfs whole every time.
			log.Warn("configfs model unavailable; reading configfs whole at every event", "err", err)
		} else {
			env.Model, tree = m, m
		}
	}
	opts := rebind.Options{Tree: tree, Kernel: env.Kernel, Config: cfg, Logger: log,
		Declared: saved.Load, HeartbeatEvery: heartbeat,
		Probe: func() rebind.ConfigfsSight { return rebind.ProbeConfigfs(fsys.Root()) }}
	if mode == ReadOnly {
		env.Store = state.OpenReadOnly(p.State)
		opts.DryRun = true
	} else {
		if env.Store, err = state.Open(p.State); err != nil {
			return nil, err
		}
		moved, err := env.Store.Clean()
		for _, m := range moved {
			log.Error("journal entry ignored", "err", m)
		}
		if err != nil {
			return nil, err
		}
		opts.Fault, opts.Quarantined = fault, moved
	}
	opts.Store = env.Store
	opts.Completer = &complete.Completer{Ops: fsys.Ops(), Root: fsys.Root(), Store: env.Store, BootID: func() (string, error) { return env.Store.Boot(), nil },
		Load: saved.LoadTree, Log: log}
	env.Engine = rebind.New(opts)
	return env, nil
}
