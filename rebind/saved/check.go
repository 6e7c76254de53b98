package saved

import (
	"fmt"
	"io/fs"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// Checked is what the saved configs a config names declare, as Check
// counts it for its summary.
type Checked struct {
	Nvmet, LIO string // the files checked ("": none named)
	Ports      int    // nvmetcli ports (rdma, tcp) with a specific address
	Portals    int    // targetcli iSER portals
	Objects    int    // nvmetcli hosts and subsystems, targetcli storage objects and TPGs
}

// Check is what `config check` and a reload ask of the saved configs cfg
// names: each must exist, be read whole and parse, with no bad entry.
// Unlike Load and LoadTree, which declare what they can and skip the rest,
// it returns the first problem: the file does not exist, cannot be read or
// is not of its tool's shape, or its first bad entry (named with its file
// and index, as Load names them).
func Check(cfg rebind.Config) (Checked, error) {
	var c Checked
	for _, f := range []struct {
		what, path string
		into       *string
		check      func(string, []byte) error
	}{
		{"nvmetcli config", cfg.NvmetConfig, &c.Nvmet, c.nvmetcli},
		{"targetcli config", cfg.TargetConfig, &c.LIO, c.targetcli},
	} {
		if f.path == "" {
			continue
		}
		*f.into = f.path
		b, err := read(f.what, f.path)
		if err != nil {
			return c, err
		}
		if b == nil {
			return c, fmt.Errorf("%s %s: %w (save it with the tool, or remove the key from [boot])", f.what, f.path, fs.ErrNotExist)
		}
		if err := f.check(f.path, b); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Checked) nvmetcli(name string, b []byte) error {
	d, bad, err := ParseNvmetcli(name, b)
	if err = first(err, bad); err != nil {
		return err
	}
	t, bad, err := ParseNvmetcliTree(name, b)
	if err = first(err, bad); err != nil {
		return err
	}
	c.Ports += len(d)
	if t != nil {
		c.Objects += len(t.Hosts) + len(t.Subsystems)
	}
	return nil
}

func (c *Checked) targetcli(name string, b []byte) error {
	d, bad, err := ParseSaveconfig(name, b)
	if err = first(err, bad); err != nil {
		return err
	}
	t, bad, err := ParseSaveconfigTree(name, b)
	if err = first(err, bad); err != nil {
		return err
	}
	c.Portals += len(d)
	if t != nil {
		c.Objects += len(t.StorageObjects) + len(t.TPGs)
	}
	return nil
}

// first is a parse's error, else its first bad entry.
func first(err error, bad []error) error {
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		return bad[0]
	}
	return nil
}
