package daemon

import (
	"fmt"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// Valid is what Validate read: the config, the saved configs' counts and
// what the roots showed.
type Valid struct {
	Path   string
	Config rebind.Config
	Saved  saved.Checked
	// Configfs is what the configfs root showed: missing, not a
	// directory, or neither a configfs mount nor holding a tree is an
	// error; nvmet and LIO not loaded yet is none (the daemon waits for
	// them), said in Summary.
	Configfs rebind.ConfigfsSight
}

// Validate reads everything the daemon reads from the paths p names, as
// `config check`, `reload` and the daemon's own reload judge it: the TOML
// config (config.Load), the configfs root (rebind.ProbeConfigfs: there,
// a directory, and a configfs mount or holding nvmet/ or target/iscsi/;
// sysfs is not judged: without it RDMA is only not seen, as status says),
// and the saved configs [boot] names (saved.Check: each must exist and
// parse whole). The error is the first problem, naming the file
// and the line or entry.
func Validate(p Paths) (Valid, error) {
	v := Valid{Path: p.Config}
	cfg, err := config.Load(p.Config)
	if err != nil {
		return v, err
	}
	v.Config = cfg
	v.Configfs = rebind.ProbeConfigfs(p.Configfs)
	if err := v.Configfs.Err; err != nil {
		return v, fmt.Errorf("--configfs-root: %w", err)
	}
	if v.Saved, err = saved.Check(cfg); err != nil {
		return v, fmt.Errorf("config %s: [boot]: %w", p.Config, err)
	}
	return v, nil
}

// Summary is the one line `config check` and `reload` print for a valid
// config: "config F is valid (…)".
func (v Valid) Summary() string {
	var parts []string
	switch n := len(v.Config.Watch); n {
	case 0:
		parts = append(parts, "watch: every specific address")
	case 1:
		parts = append(parts, "watch: 1 subnet")
	default:
		parts = append(parts, fmt.Sprintf("watch: %d subnets", n))
	}
	if v.Config.GiveUpAfter == 0 {
		parts = append(parts, "never gives up")
	} else {
		parts = append(parts, "give up after "+v.Config.GiveUpAfter.String())
	}
	s := v.Saved
	switch {
	case s.Nvmet == "" && s.LIO == "":
		parts = append(parts, "no [boot] files")
	default:
		var boot []string
		if s.Nvmet != "" {
			boot = append(boot, fmt.Sprintf("%s: %d %s", s.Nvmet, s.Ports, plural(s.Ports, "port", "ports")))
		}
		if s.LIO != "" {
			boot = append(boot, fmt.Sprintf("%s: %d iSER %s", s.LIO, s.Portals, plural(s.Portals, "portal", "portals")))
		}
		parts = append(parts, fmt.Sprintf("[boot] %s, %d %s, window %v", strings.Join(boot, ", "), s.Objects,
			plural(s.Objects, "object", "objects"), v.Config.BootWindow))
	}
	if c := v.Configfs; !c.Nvmet && !c.LIO {
		parts = append(parts, "neither nvmet nor LIO iSCSI loaded yet")
	}
	return fmt.Sprintf("config %s is valid (%s)", v.Path, strings.Join(parts, "; "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
