package complete

// LIO's side of boot completion: the storage objects of targetcli's saved
// config that rtslib's restore skipped because their device was missing
// (rtslib/tcm.py: BlockStorageObject, FileIOStorageObject), then the LUNs
// and mapped LUNs that refer to them (rtslib/target.py: LUN, MappedLUN),
// in rtslib restore's order. Targets, TPGs and ACLs are the restore's: it
// goes on past a missing disk and makes them.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// backstoreDirs are the backstore directory prefixes by rtslib plugin
// (core/<prefix>_<index>/<name>).
var backstoreDirs = map[string]string{"block": "iblock", "fileio": "fileio", "ramdisk": "rd_mcp", "pscsi": "pscsi", "user": "user"}

const soPrefix = "target/core/"

// soID splits a storage object's unit id (target/core/<plugin>/<name>).
func soID(id string) (plugin, name string, ok bool) {
	rest, ok := strings.CutPrefix(id, soPrefix)
	if !ok {
		return "", "", false
	}
	plugin, name, ok = strings.Cut(rest, "/")
	return plugin, name, ok && backstoreDirs[plugin] != ""
}

// lioUnits flattens targetcli's tree in rtslib restore's order.
func lioUnits(t *saved.LIOTree) []unit {
	var out []unit
	for i := range t.StorageObjects {
		so := &t.StorageObjects[i]
		if so.Plugin != "block" && so.Plugin != "fileio" {
			continue
		}
		out = append(out, unit{id: soPrefix + so.Key(), kind: kSO, so: so, attrs: so.Attrs})
	}
	for _, tpg := range t.TPGs {
		dir := tpg.Dir()
		for i := range tpg.LUNs {
			l := &tpg.LUNs[i]
			id := dir + "/lun/lun_" + strconv.FormatUint(uint64(l.Index), 10)
			out = append(out, unit{id: id, dir: id, kind: kLUN, lun: l, parent: dir, deps: []string{soPrefix + l.SO}})
		}
		for _, acl := range tpg.ACLs {
			adir := dir + "/acls/" + acl.Node
			for i := range acl.MappedLUNs {
				m := &acl.MappedLUNs[i]
				id := adir + "/lun_" + strconv.FormatUint(uint64(m.Index), 10)
				out = append(out, unit{id: id, dir: id, kind: kMapped, mapped: m, parent: adir,
					deps: []string{dir + "/lun/lun_" + strconv.FormatUint(uint64(m.TPGLUN), 10)}})
			}
		}
	}
	return out
}

// soDir is where the storage object plugin/name is (core/<prefix>_<N>/<name>),
// "" when it is nowhere.
func (c *Completer) soDir(plugin, name string) string {
	prefix := backstoreDirs[plugin]
	core := filepath.Join(c.Root, "target/core")
	names, err := c.Ops.ReadDirNames(core)
	if err != nil {
		return ""
	}
	for _, h := range names {
		if p, _, ok := strings.Cut(h, "_"); !ok || p != prefix || !isIndex(h[len(p)+1:]) {
			continue
		}
		d := filepath.Join(core, h, name)
		if st, err := c.Ops.Lstat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

func isIndex(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// backstore picks the directory of a new storage object's backstore:
// <prefix>_<N> with the lowest N no backstore of any plugin has (rtslib's
// _Backstore: one index space for all plugins). An empty one of the
// plugin's is taken first: a crash between the backstore's mkdir and its
// storage object's left it.
func (c *Completer) backstore(plugin string) (string, error) {
	core := filepath.Join(c.Root, "target/core")
	names, err := c.Ops.ReadDirNames(core)
	if err != nil {
		return "", err
	}
	for _, h := range names {
		if p, n, ok := strings.Cut(h, "_"); ok && p == backstoreDirs[plugin] && isIndex(n) {
			if sub, err := c.Ops.ReadDirNames(filepath.Join(core, h)); err == nil && len(sub) == 0 {
				return filepath.Join(core, h), nil
			}
		}
	}
	used := map[uint64]bool{}
	for _, h := range names {
		if i := strings.LastIndexByte(h, '_'); i > 0 {
			if n, err := strconv.ParseUint(h[i+1:], 10, 32); err == nil {
				used[n] = true
			}
		}
	}
	n := uint64(0)
	for used[n] {
		n++
	}
	return filepath.Join(core, backstoreDirs[plugin]+"_"+strconv.FormatUint(n, 10)), nil
}

// controls are the control writes that configure a storage object before
// its enable, as rtslib makes them.
func controls(so *saved.StorageObject, dev fs.FileInfo) []string {
	if so.Plugin == "block" {
		return []string{"udev_path=" + so.Dev, "readonly=" + b01(so.Readonly)}
	}
	var out []string
	if dev != nil && dev.Mode()&fs.ModeDevice != 0 {
		out = append(out, "fd_dev_name="+so.Dev)
	} else {
		out = append(out, fmt.Sprintf("fd_dev_name=%s,fd_dev_size=%d", so.Dev, so.Size))
	}
	if so.WriteBack {
		out = append(out, "fd_buffered_io=1")
	}
	return out
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// makeSO makes a storage object: its backstore and directory, the control
// writes, udev_path, enable, then its unit serial and attributes. One
// already enabled (a crash after its enable) only gets what follows.
func (c *Completer) makeSO(so *saved.StorageObject) error {
	dir := c.soDir(so.Plugin, so.Name)
	if dir == "" {
		hba, err := c.backstore(so.Plugin)
		if err != nil {
			return err
		}
		if err := c.mkdir(hba); err != nil {
			return err
		}
		dir = filepath.Join(hba, so.Name)
		if err := c.mkdir(dir); err != nil {
			return err
		}
	}
	en := c.Ops.ReadAttrs([]string{dir}, []string{"enable"})[0]
	if en.Err != nil {
		return en.Err
	}
	if en.Errs[0] != nil || en.Values[0] != "1" {
		st, _ := c.stat()(so.Dev)
		for _, ctl := range controls(so, st) {
			if err := c.Ops.WriteAttr(filepath.Join(dir, "control"), ctl); err != nil {
				return fmt.Errorf("control %s: %w", ctl, err)
			}
		}
		if err := c.Ops.WriteAttr(filepath.Join(dir, "udev_path"), so.Dev); err != nil {
			return err
		}
		if err := c.Ops.WriteAttr(filepath.Join(dir, "enable"), "1"); err != nil {
			return err
		}
	}
	var errs []error
	if so.WWN != "" {
		// vpd_unit_serial reads "T10 VPD Unit Serial Number: <serial>".
		a := c.Ops.ReadAttrs([]string{filepath.Join(dir, "wwn")}, []string{"vpd_unit_serial"})[0]
		if a.Err != nil || a.Errs[0] != nil || !strings.HasSuffix(a.Values[0], ": "+so.WWN) {
			if err := c.Ops.WriteAttr(filepath.Join(dir, "wwn/vpd_unit_serial"), so.WWN); err != nil {
				errs = append(errs, fmt.Errorf("wwn/vpd_unit_serial: %w", err))
			}
		}
	}
	as := so.Attrs
	if so.WriteBack && so.Plugin == "fileio" {
		as = append(as[:len(as):len(as)], saved.Attr{File: "emulate_write_cache", Value: "1"})
	}
	if err := c.write(filepath.Join(dir, "attrib"), c.writable(filepath.Join(dir, "attrib"), as)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errAttrs, errors.Join(errs...))
	}
	return nil
}

// writable keeps the attributes the kernel lets one write: rtslib's dump
// lists read-only ones too (hw_block_size, …), its restore skips them.
func (c *Completer) writable(dir string, as []saved.Attr) []saved.Attr {
	var out []saved.Attr
	for _, a := range as {
		if st, err := c.Ops.Lstat(filepath.Join(dir, a.File)); err == nil && st.Mode().Perm()&0o200 != 0 {
			out = append(out, a)
		}
	}
	return out
}

func (c *Completer) stat() func(string) (fs.FileInfo, error) {
	if c.Stat != nil {
		return c.Stat
	}
	return os.Stat
}

// linkTarget is what a LUN or mapped LUN links: the storage object's
// directory, or the TPG's LUN.
func (c *Completer) linkTarget(u unit) string {
	if u.kind == kLUN {
		plugin, name, _ := strings.Cut(u.lun.SO, "/")
		if d := c.soDir(plugin, name); d != "" {
			return d
		}
		return filepath.Join(c.Root, "target/core", backstoreDirs[plugin]+"_<N>", name)
	}
	return filepath.Join(c.Root, u.deps[0])
}

// alias is the name of the link in a LUN or mapped LUN: the file's, else
// a new one (rtslib: the last 10 characters of a random UUID).
func (c *Completer) alias(u unit) string {
	a := ""
	if u.kind == kLUN {
		a = u.lun.Alias
	} else {
		a = u.mapped.Alias
	}
	if a != "" {
		return a
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// makeLink makes a LUN or mapped LUN: its directory, the link (unless one
// is there: a crash after it), then a mapped LUN's write_protect.
func (c *Completer) makeLink(u unit) error {
	dir := c.path(u)
	if err := c.mkdir(dir); err != nil {
		return err
	}
	names, err := c.Ops.ReadDirNames(dir)
	if err != nil {
		return err
	}
	linked := false
	for _, n := range names {
		if st, err := c.Ops.Lstat(filepath.Join(dir, n)); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			linked = true
		}
	}
	if !linked {
		if err := c.Ops.Symlink(c.linkTarget(u), filepath.Join(dir, c.alias(u))); err != nil {
			return err
		}
	}
	if u.kind == kMapped && u.mapped.WriteProtect {
		return c.write(dir, []saved.Attr{{File: "write_protect", Value: "1"}})
	}
	return nil
}

// describeSO is what makeSO would write, for `plan`.
func (c *Completer) describeSO(so *saved.StorageObject) []string {
	hba, _ := c.backstore(so.Plugin)
	dir := filepath.Join(hba, so.Name)
	out := []string{"mkdir " + hba, "mkdir " + dir}
	st, _ := c.stat()(so.Dev)
	for _, ctl := range controls(so, st) {
		out = append(out, fmt.Sprintf("echo %q > %s", ctl, filepath.Join(dir, "control")))
	}
	out = append(out, fmt.Sprintf("echo %q > %s", so.Dev, filepath.Join(dir, "udev_path")), "echo 1 > "+filepath.Join(dir, "enable"))
	if so.WWN != "" {
		out = append(out, fmt.Sprintf("echo %q > %s", so.WWN, filepath.Join(dir, "wwn/vpd_unit_serial")))
	}
	for _, a := range so.Attrs {
		out = append(out, fmt.Sprintf("echo %q > %s (if writable)", a.Value, filepath.Join(dir, "attrib", a.File)))
	}
	return out
}
