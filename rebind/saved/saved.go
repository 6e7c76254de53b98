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

// nvmetcli's format (nvmetcli/nvmet/nvme.py Root.dump()).
type nvmetcliFile struct {
	Ports []struct {
		PortID     json.Number       `json:"portid"`
		Addr       map[string]string `json:"addr"`
		Subsystems []string          `json:"subsystems"`
	} `json:"ports"`
}

// ParseNvmetcli reads nvmetcli's saved config: rdma ports with specific
// addresses and the subsystems they link.
func ParseNvmetcli(name string, b []byte) ([]rebind.Declared, error) {
	var f nvmetcliFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("nvmetcli config %s: %w", name, err)
	}
	var out []rebind.Declared
	for i, p := range f.Ports {
		id := p.PortID.String()
		if _, err := strconv.ParseUint(id, 10, 16); err != nil {
			return nil, fmt.Errorf("nvmetcli config %s: ports[%d]: portid %q is not a port number", name, i, id)
		}
		if t := p.Addr["trtype"]; t != "rdma" && t != "tcp" {
			continue
		}
		ip, err := netip.ParseAddr(p.Addr["traddr"])
		if err != nil {
			return nil, fmt.Errorf("nvmetcli config %s: port %s: traddr %q is not an IP address", name, id, p.Addr["traddr"])
		}
		svc, err := strconv.ParseUint(p.Addr["trsvcid"], 10, 16)
		if err != nil {
			return nil, fmt.Errorf("nvmetcli config %s: port %s: trsvcid %q is not a port number", name, id, p.Addr["trsvcid"])
		}
		out = append(out, rebind.Declared{Source: name, Kind: rebind.KindNvmet, ID: id, Addr: netip.AddrPortFrom(ip.Unmap(), uint16(svc)), NQNs: p.Subsystems})
	}
	return out, nil
}

// rtslib-fb's format (rtslib/root.py RTSRoot.dump()).
type saveconfigFile struct {
	Targets []struct {
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
	} `json:"targets"`
}

// ParseSaveconfig reads targetcli's saved config: iSCSI portals with
// iser enabled.
func ParseSaveconfig(name string, b []byte) ([]rebind.Declared, error) {
	var f saveconfigFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("targetcli config %s: %w", name, err)
	}
	var out []rebind.Declared
	for _, t := range f.Targets {
		if t.Fabric != "iscsi" {
			continue
		}
		for _, tpg := range t.TPGs {
			for _, p := range tpg.Portals {
				if !p.ISER {
					continue
				}
				ip, err := netip.ParseAddr(strings.Trim(p.IPAddress, "[]"))
				if err != nil {
					return nil, fmt.Errorf("targetcli config %s: target %s tpg %d: ip_address %q is not an IP address", name, t.WWN, tpg.Tag, p.IPAddress)
				}
				if p.Port <= 0 || p.Port > 65535 {
					return nil, fmt.Errorf("targetcli config %s: target %s tpg %d: port %d is not a port number", name, t.WWN, tpg.Tag, p.Port)
				}
				ap := netip.AddrPortFrom(ip.Unmap(), uint16(p.Port))
				out = append(out, rebind.Declared{Source: name, Kind: rebind.KindLIO, ID: t.WWN + "/tpgt_" + strconv.Itoa(tpg.Tag) + "/" + ap.String(), Addr: ap})
			}
		}
	}
	return out, nil
}

// maxSavedBytes bounds a saved config: targetcli's holds every LUN and
// ACL of the host, a few MiB on the largest.
const maxSavedBytes = 64 << 20

// Load reads the saved configs named in the config; a file that
// does not exist declares nothing. A saved config may be a symlink (it is
// followed) but must be a regular file of at most maxSavedBytes (64 MiB):
// anything else is refused before it is read, and the read is bounded.
func Load(cfg rebind.Config) ([]rebind.Declared, error) {
	var out []rebind.Declared
	for _, f := range []struct {
		what  string
		path  string
		parse func(string, []byte) ([]rebind.Declared, error)
	}{{"nvmetcli config", cfg.NvmetConfig, ParseNvmetcli}, {"targetcli config", cfg.TargetConfig, ParseSaveconfig}} {
		if f.path == "" {
			continue
		}
		b, err := bounded.ReadFile(f.path, maxSavedBytes, true)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if _, ok := errors.AsType[*bounded.Error](err); ok {
			return nil, fmt.Errorf("%s %w", f.what, err) // names the path
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.what, err)
		}
		d, err := f.parse(f.path, b)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}
