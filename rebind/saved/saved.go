// Package saved reads what nvmetcli's (/etc/nvmet/config.json) and
// targetcli's (/etc/target/saveconfig.json) saved configurations declare:
// the port→subsystem links and iSER portals that the boot-time restore may
// have failed to create. The engine completes them (boot completion); this
// package only parses.
package saved

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// nvmetcli's format (nvmetcli/nvmet/nvme.py Root.dump()): each entry is
// decoded by itself, so that one bad entry is reported and skipped while
// the rest is declared (nvmetcli's own restore stops at its first).
type nvmetcliFile struct {
	Ports []json.RawMessage `json:"ports"`
}

type nvmetcliPort struct {
	PortID     json.RawMessage   `json:"portid"` // a number (nvmetcli's), or a string of one
	Addr       map[string]string `json:"addr"`
	Subsystems []string          `json:"subsystems"`
}

// Limits of the kernel's configfs names (nvmet: NVMF_NQN_SIZE, NAME_MAX).
const (
	maxNQN  = 223
	maxName = 255
)

// CheckName refuses what cannot name a configfs object: empty, "." or
// "..", a '/', a control character, or longer than max bytes.
func CheckName(what, name string, max int) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case name == "." || name == "..":
		return fmt.Errorf("%s %q is not a name", what, name)
	case len(name) > max:
		return fmt.Errorf("%s %.40q… is %d bytes, over the kernel's %d", what, name, len(name), max)
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("%s %q contains '/'", what, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q contains a control character", what, name)
		}
	}
	return nil
}

// ParseNvmetcli reads nvmetcli's saved config: rdma and tcp ports with
// specific addresses and the subsystems they link, in file order. A file
// that is not JSON of that shape is an error; an entry that is malformed
// or hostile (a port id out of range, a name configfs cannot take, a
// duplicate) is one of errs, naming the file and the entry, and is not
// declared: the rest is.
func ParseNvmetcli(name string, b []byte) (out []rebind.Declared, errs []error, err error) {
	var f nvmetcliFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("nvmetcli config %s: %w", name, err)
	}
	seen := map[string]int{}
	for i, raw := range f.Ports {
		d, ok, err := nvmetcliPortEntry(raw)
		if err == nil && ok {
			if j, dup := seen[d.ID]; dup {
				err = fmt.Errorf("port %s is declared again (ports[%d] declares it first)", d.ID, j)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("nvmetcli config %s: ports[%d]: %w; this port is not completed", name, i, err))
			continue
		}
		if !ok {
			continue
		}
		seen[d.ID] = i
		d.Source = name
		out = append(out, d)
	}
	return out, errs, nil
}

// nvmetcliPortEntry is one port of nvmetcli's file (ok false: not a port
// the daemon watches: another transport).
func nvmetcliPortEntry(raw json.RawMessage) (rebind.Declared, bool, error) {
	var p nvmetcliPort
	if err := json.Unmarshal(raw, &p); err != nil {
		return rebind.Declared{}, false, err
	}
	id := strings.Trim(string(p.PortID), `"`)
	if _, err := strconv.ParseUint(id, 10, 16); err != nil {
		return rebind.Declared{}, false, fmt.Errorf("portid %q is not a port number (0-65535)", id)
	}
	if t := p.Addr["trtype"]; t != "rdma" && t != "tcp" {
		return rebind.Declared{}, false, nil
	}
	ip, err := netip.ParseAddr(p.Addr["traddr"])
	if err != nil {
		return rebind.Declared{}, false, fmt.Errorf("port %s: traddr %q is not an IP address", id, p.Addr["traddr"])
	}
	svc, err := strconv.ParseUint(p.Addr["trsvcid"], 10, 16)
	if err != nil {
		return rebind.Declared{}, false, fmt.Errorf("port %s: trsvcid %q is not a port number", id, p.Addr["trsvcid"])
	}
	linked := map[string]bool{}
	for _, n := range p.Subsystems {
		if err := CheckName("subsystem", n, maxNQN); err != nil {
			return rebind.Declared{}, false, fmt.Errorf("port %s: %w", id, err)
		}
		if linked[n] {
			return rebind.Declared{}, false, fmt.Errorf("port %s: subsystem %s is linked twice", id, n)
		}
		linked[n] = true
	}
	return rebind.Declared{Kind: rebind.KindNvmet, ID: id, Addr: netip.AddrPortFrom(ip.Unmap(), uint16(svc)), NQNs: p.Subsystems}, true, nil
}

// rtslib-fb's format (rtslib/root.py RTSRoot.dump()); each target is
// decoded by itself, as nvmetcli's ports are.
type saveconfigFile struct {
	Targets []json.RawMessage `json:"targets"`
}

type saveconfigTarget struct {
	WWN    string `json:"wwn"`
	Fabric string `json:"fabric"`
	TPGs   []struct {
		Tag     int `json:"tag"`
		Portals []struct {
			IPAddress string `json:"ip_address"`
			Port      int    `json:"port"`
			ISER      bool   `json:"iser"`
		} `json:"portals"`
	} `json:"tpgs"`
}

// ParseSaveconfig reads targetcli's saved config: iSCSI portals with
// iser enabled. Bad entries are errs, as in ParseNvmetcli: a target
// with one is not declared.
func ParseSaveconfig(name string, b []byte) (out []rebind.Declared, errs []error, err error) {
	var f saveconfigFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("targetcli config %s: %w", name, err)
	}
	seen := map[string]bool{}
	for i, raw := range f.Targets {
		d, err := saveconfigEntry(raw, seen)
		if err != nil {
			errs = append(errs, fmt.Errorf("targetcli config %s: targets[%d]: %w; this target's portals are not completed", name, i, err))
			continue
		}
		for _, x := range d {
			seen[x.ID] = true
			x.Source = name
			out = append(out, x)
		}
	}
	return out, errs, nil
}

func saveconfigEntry(raw json.RawMessage, seen map[string]bool) ([]rebind.Declared, error) {
	var t saveconfigTarget
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, err
	}
	if t.Fabric != "iscsi" {
		return nil, nil
	}
	if err := CheckName("wwn", t.WWN, maxName); err != nil {
		return nil, err
	}
	var out []rebind.Declared
	for _, tpg := range t.TPGs {
		if tpg.Tag < 1 || tpg.Tag > 65535 {
			return nil, fmt.Errorf("target %s: tpg tag %d is not 1-65535", t.WWN, tpg.Tag)
		}
		for _, p := range tpg.Portals {
			if !p.ISER {
				continue
			}
			ip, err := netip.ParseAddr(strings.Trim(p.IPAddress, "[]"))
			if err != nil {
				return nil, fmt.Errorf("target %s tpg %d: ip_address %q is not an IP address", t.WWN, tpg.Tag, p.IPAddress)
			}
			if p.Port <= 0 || p.Port > 65535 {
				return nil, fmt.Errorf("target %s tpg %d: port %d is not a port number", t.WWN, tpg.Tag, p.Port)
			}
			ap := netip.AddrPortFrom(ip.Unmap(), uint16(p.Port))
			id := t.WWN + "/tpgt_" + strconv.Itoa(tpg.Tag) + "/" + ap.String()
			if seen[id] {
				return nil, fmt.Errorf("portal %s is declared twice", id)
			}
			seen[id] = true
			out = append(out, rebind.Declared{Kind: rebind.KindLIO, ID: id, Addr: ap})
		}
	}
	return out, nil
}

// maxSavedBytes bounds a saved config: targetcli's holds every LUN and
// ACL of the host, a few MiB on the largest.
const maxSavedBytes = 64 << 20

// read reads one saved config: nil, nil when it does not exist. It may be
// a symlink (followed) but must be a regular file of at most maxSavedBytes
// (64 MiB): anything else is refused before it is read, and the read is
// bounded. Errors name the file.
func read(what, path string) ([]byte, error) {
	b, err := bounded.ReadFile(path, maxSavedBytes, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if _, ok := errors.AsType[*bounded.Error](err); ok {
		return nil, fmt.Errorf("%s %w", what, err) // names the path
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// Load reads the saved configs named in the config; a file that does not
// exist declares nothing. A file that cannot be read or parsed declares
// nothing; a bad entry is left out of what its file declares. Both come
// back in err, each naming its file (and entry), with what the other
// files and entries declare.
func Load(cfg rebind.Config) ([]rebind.Declared, error) {
	var out []rebind.Declared
	var errs []error
	for _, f := range []struct {
		what  string
		path  string
		parse func(string, []byte) ([]rebind.Declared, []error, error)
	}{{"nvmetcli config", cfg.NvmetConfig, ParseNvmetcli}, {"targetcli config", cfg.TargetConfig, ParseSaveconfig}} {
		if f.path == "" {
			continue
		}
		b, err := read(f.what, f.path)
		if err != nil || b == nil {
			errs = append(errs, err)
			continue
		}
		d, bad, err := f.parse(f.path, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, bad...)
		out = append(out, d...)
	}
	return out, errors.Join(errs...)
}

// LoadTree reads every object the saved configs cfg names declare for
// boot completion to make: nvmetcli's whole tree, targetcli's storage
// objects, LUNs and mapped LUNs (nil when it names none, or none exists),
// with the errors of their bad entries, as Load reads their listeners.
func LoadTree(cfg rebind.Config) (*Tree, error) {
	var t *Tree
	var errs []error
	get := func() *Tree {
		if t == nil {
			t = &Tree{}
		}
		return t
	}
	if cfg.NvmetConfig != "" {
		b, err := read("nvmetcli config", cfg.NvmetConfig)
		errs = append(errs, err)
		if b != nil {
			n, bad, err := ParseNvmetcliTree(cfg.NvmetConfig, b)
			errs = append(append(errs, err), bad...)
			if n != nil {
				n.LIO = get().LIO
				t = n
			}
		}
	}
	if cfg.TargetConfig != "" {
		b, err := read("targetcli config", cfg.TargetConfig)
		errs = append(errs, err)
		if b != nil {
			l, bad, err := ParseSaveconfigTree(cfg.TargetConfig, b)
			errs = append(append(errs, err), bad...)
			if l != nil {
				get().LIO = l
			}
		}
	}
	return t, errors.Join(errs...)
}
