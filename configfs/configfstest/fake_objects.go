package configfstest

// The nvmet objects boot completion creates (mkdir), with the kernel's
// semantics (drivers/nvme/target/configfs.c): each object is made with its
// attributes at their defaults and its default children; a namespace's
// enable opens its device_path (-ENOENT when it does not exist); the
// attributes of an enabled namespace are refused (-EBUSY); allow_any_host
// is refused while allowed_hosts has entries (-EINVAL).

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// objectDefaults are the attributes mkdir makes, by the kind of object.
var objectDefaults = map[string]map[string]string{
	"host": {"dhchap_key": "", "dhchap_ctrl_key": "", "dhchap_hash": "hmac(sha256)", "dhchap_dhgroup": "null"},
	"subsystem": {"attr_allow_any_host": "0", "attr_serial": "1d6b2bcdd7e8f4a9", "attr_version": "1.3", "attr_model": "Linux",
		"attr_cntlid_min": "1", "attr_cntlid_max": "65519", "attr_ieee_oui": "0x000000", "attr_firmware": "6.1.0"},
	"namespace": {"device_path": "", "device_nguid": "00000000-0000-0000-0000-000000000000", "device_uuid": "6b1c4f3e-8f7a-4c2b-9d1e-2a3b4c5d6e7f",
		"enable": "0", "ana_grpid": "1", "buffered_io": "0"},
	"port": {"addr_trtype": "", "addr_adrfam": "", "addr_traddr": "", "addr_trsvcid": "", "addr_treq": "not specified",
		"addr_tsas": "not specified", "param_inline_data_size": "-1", "param_pi_enable": "0"},
	"ana_group": {"ana_state": "optimized"},
	// LIO (drivers/target/target_core_configfs.c): a storage object's
	// control and udev_path are empty, enable 0; wwn/ and attrib/ below.
	"so":       {"control": "", "udev_path": "", "enable": "0"},
	"mapped":   {"write_protect": "0"},
	"referral": {"addr_trtype": "", "addr_adrfam": "", "addr_traddr": "", "addr_trsvcid": "", "addr_treq": "not specified", "enable": "0"},
}

// objectKind tells what kind of object mkdir of rel (under the root)
// makes, "" when configfs refuses a directory there.
func objectKind(rel string) string {
	p := strings.Split(rel, "/")
	if len(p) >= 3 && p[0] == "target" {
		return lioKind(p)
	}
	if len(p) < 3 || p[0] != "nvmet" {
		return ""
	}
	switch {
	case len(p) == 3 && p[1] == "hosts":
		return "host"
	case len(p) == 3 && p[1] == "subsystems":
		return "subsystem"
	case len(p) == 5 && p[1] == "subsystems" && p[3] == "namespaces":
		if n, err := strconv.ParseUint(p[4], 10, 32); err != nil || n == 0 || n == 0xffffffff {
			return "bad"
		}
		return "namespace"
	case len(p) == 3 && p[1] == "ports":
		if _, err := strconv.ParseUint(p[2], 10, 16); err != nil {
			return "bad"
		}
		return "port"
	case len(p) == 5 && p[1] == "ports" && p[3] == "ana_groups":
		if n, err := strconv.ParseUint(p[4], 10, 32); err != nil || n < 1 || n > 128 {
			return "bad"
		}
		return "ana_group"
	case len(p) == 5 && p[1] == "ports" && p[3] == "referrals":
		return "referral"
	}
	return ""
}

func (k *Fake) mkdirObject(abs string) error {
	kind := objectKind(k.rel(abs))
	perr := func(e error) error { return &fs.PathError{Op: "mkdir", Path: abs, Err: e} }
	if kind == "" {
		return perr(syscall.EPERM)
	}
	if _, err := os.Lstat(filepath.Dir(abs)); err != nil {
		return perr(syscall.ENOENT)
	}
	if _, err := os.Lstat(abs); err == nil {
		return perr(syscall.EEXIST)
	}
	if kind == "bad" {
		return perr(syscall.EINVAL)
	}
	k.makeObject(abs, kind)
	return nil
}

// makeObject makes an object of kind at abs with its defaults.
func (k *Fake) makeObject(abs, kind string) {
	k.mkdir(abs)
	for name, v := range objectDefaults[kind] {
		writeFile(filepath.Join(abs, name), v)
	}
	switch kind {
	case "subsystem":
		k.mkdir(filepath.Join(abs, "namespaces"))
		k.mkdir(filepath.Join(abs, "allowed_hosts"))
	case "so":
		k.mkdir(filepath.Join(abs, "wwn"))
		writeFile(filepath.Join(abs, "wwn", "vpd_unit_serial"), "T10 VPD Unit Serial Number: 6001405"+strings.Repeat("0", 25))
		k.mkdir(filepath.Join(abs, "attrib"))
		writeFile(filepath.Join(abs, "attrib", "emulate_write_cache"), "0")
		writeFile(filepath.Join(abs, "attrib", "block_size"), "512")
		if err := os.WriteFile(filepath.Join(abs, "attrib", "hw_block_size"), []byte("512\n"), 0o444); err != nil {
			panic(err)
		}
	case "port":
		k.mkdir(filepath.Join(abs, "subsystems"))
		k.mkdir(filepath.Join(abs, "referrals"))
		k.makeObject(filepath.Join(abs, "ana_groups", "1"), "ana_group")
	}
}

// lioKind is objectKind under target/: a backstore (core/<prefix>_<N>),
// a storage object in it, a TPG's LUN, an ACL's mapped LUN.
func lioKind(p []string) string {
	idx := func(s, prefix string) bool {
		n, ok := strings.CutPrefix(s, prefix)
		_, err := strconv.ParseUint(n, 10, 16)
		return ok && err == nil
	}
	switch {
	case len(p) == 3 && p[1] == "core" && strings.Contains(p[2], "_"):
		return "hba"
	case len(p) == 4 && p[1] == "core":
		return "so"
	case len(p) == 6 && p[4] == "lun" && idx(p[5], "lun_"):
		return "lun"
	case len(p) == 7 && p[4] == "acls" && idx(p[6], "lun_"):
		return "mapped"
	}
	return ""
}

// AddTPG makes target/<fabric>/<wwn>/<tpg> with its lun/ and acls/, and
// an ACL for each node (as the restore makes them).
func (k *Fake) AddTPG(fabric, wwn, tpg string, nodes ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Join(k.Root, "target", fabric, wwn, tpg)
	k.mkdir(filepath.Join(dir, "lun"))
	for _, n := range nodes {
		k.mkdir(filepath.Join(dir, "acls", n))
	}
	k.mkdir(filepath.Join(dir, "acls"))
}

// lioLink links a storage object into a LUN, or a LUN into a mapped LUN.
func (k *Fake) lioLink(abs, target string) error {
	lerr := func(e error) error { return &os.LinkError{Op: "symlink", Old: target, New: abs, Err: e} }
	dir := filepath.Dir(abs)
	want := map[string]string{"lun": "so", "mapped": "lun"}[objectKind(k.rel(dir))]
	if want == "" || objectKind(k.rel(target)) != want {
		return lerr(syscall.EPERM)
	}
	if _, err := os.Lstat(target); err != nil {
		return lerr(syscall.ENOENT)
	}
	if want == "so" {
		if b, _ := os.ReadFile(filepath.Join(target, "enable")); strings.TrimSpace(string(b)) != "1" {
			return lerr(syscall.ENODEV) // "se_dev not configured"
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 && want == "so" {
		for _, e := range ents {
			if e.Type()&fs.ModeSymlink != 0 {
				return lerr(syscall.EEXIST)
			}
		}
	}
	if err := os.Symlink(target, abs); err != nil {
		return err
	}
	k.addChild(abs)
	return nil
}

// allowedHostOf tells whether abs is subsystems/<nqn>/allowed_hosts/<host>.
func (k *Fake) allowedHostOf(abs string) ([]string, bool) {
	p := strings.Split(k.rel(abs), "/")
	return p, len(p) == 5 && p[0] == "nvmet" && p[1] == "subsystems" && p[3] == "allowed_hosts"
}

// allowHost links hosts/<host> into a subsystem's allowed_hosts.
func (k *Fake) allowHost(abs string, p []string) error {
	target := filepath.Join(k.Root, "nvmet/hosts", p[4])
	lerr := func(e error) error { return &os.LinkError{Op: "symlink", Old: target, New: abs, Err: e} }
	if _, err := os.Lstat(filepath.Dir(abs)); err != nil {
		return lerr(syscall.ENOENT)
	}
	if _, err := os.Lstat(target); err != nil {
		return lerr(syscall.ENOENT)
	}
	if _, err := os.Lstat(abs); err == nil {
		return lerr(syscall.EEXIST)
	}
	rel, err := filepath.Rel(filepath.Dir(abs), target)
	if err != nil {
		return err
	}
	if err := os.Symlink(rel, abs); err != nil {
		return err
	}
	k.addChild(abs)
	return nil
}

// writeObject writes the attributes whose write the kernel checks: a
// namespace's (enable opens the device), a subsystem's allow_any_host.
// ok is false for the others.
func (k *Fake) writeObject(abs, v string) (error, bool) {
	dir := filepath.Dir(abs)
	kind := objectKind(k.rel(dir))
	werr := func(e error) error { return &fs.PathError{Op: "write", Path: abs, Err: e} }
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	switch kind {
	case "so":
		switch filepath.Base(abs) {
		case "control":
			// The kernel parses each write's key=value pairs into the
			// device's parameters (a key written again is set again); the
			// fake keeps them in the file, each key once, first-set order.
			var keys []string
			val := map[string]string{}
			for _, kv := range strings.Split(read("control")+","+v, ",") {
				key, _, _ := strings.Cut(kv, "=")
				if key == "" {
					continue
				}
				if _, ok := val[key]; !ok {
					keys = append(keys, key)
				}
				val[key] = kv
			}
			out := make([]string, len(keys))
			for i, key := range keys {
				out[i] = val[key]
			}
			writeFile(abs, strings.Join(out, ","))
			return nil, true
		case "enable":
			if v != "1" || read("enable") == "1" {
				return werr(syscall.EINVAL), true
			}
			if _, err := os.Stat(read("udev_path")); err != nil || read("control") == "" {
				return werr(syscall.EINVAL), true
			}
		}
	case "namespace":
		name := filepath.Base(abs)
		if name == "enable" {
			switch v {
			case "1":
				if read("enable") == "1" {
					return nil, true
				}
				st, err := os.Stat(read("device_path"))
				if err != nil || st.IsDir() {
					return werr(syscall.ENOENT), true // "failed to open block device (-2)"
				}
			case "0":
			default:
				return werr(syscall.EINVAL), true
			}
			writeFile(abs, v)
			return nil, true
		}
		if name != "ana_grpid" && read("enable") == "1" {
			return werr(syscall.EBUSY), true
		}
	case "subsystem":
		if filepath.Base(abs) == "attr_allow_any_host" && v == "1" {
			if ents, _ := os.ReadDir(filepath.Join(dir, "allowed_hosts")); len(ents) > 0 {
				return werr(syscall.EINVAL), true
			}
		}
	}
	return nil, false
}

// RemoveObject removes an nvmet object and everything under it, as an
// admin's rmdir (after emptying it) would; a link is unlinked.
func (k *Fake) RemoveObject(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := os.Lstat(path); err != nil {
		return err
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	k.dropChild(path)
	return nil
}
