package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// GuestModules are the modules the guest loads at boot, in this order.
// Optional ones (crc32 variants, siw) may be missing from a kernel.
var GuestModules = []string{
	"configfs", "veth", "dummy", "8021q", "macvlan", "bonding", "null_blk", "libcrc32c",
	"crypto-crc32", "crypto-crc32c",
	"rdma_rxe", "ib_uverbs", "ib_umad", "rdma_ucm", "rdma_cm",
	"nvmet", "nvmet-rdma", "nvme-fabrics", "nvme-rdma",
	"target_core_mod", "target_core_file", "target_core_iblock",
	"iscsi_target_mod", "ib_isert",
	"iscsi_tcp", "sd_mod", // iSCSI/TCP initiator (open-iscsi), loaded by the scenario that uses it
	"nvmet-tcp", "nvme-tcp", // NVMe/TCP target and host, loaded by the scenarios that use them
}

// optionalModules may be absent or built in.
// tcp_diag (with inet_diag) answers the daemon's sock_diag requests for
// TCP sockets: the kernel loads it on the first one.
var optionalModules = []string{"crc32_generic", "crc32c_generic", "crc32-pclmul", "crc32c-intel", "crc32c_intel", "tcp_diag"}

// mayBeGone are modules (or aliases) a module list names that newer
// kernels build in or dropped (libcrc32c became part of lib/crc in 6.14; the
// crc crypto aliases moved): missing, they are skipped, not fatal. Any
// other module missing still fails, naming it.
var mayBeGone = map[string]bool{
	"libcrc32c": true, "crypto-crct10dif": true, "crypto-crc64-rocksoft": true,
	"crct10dif_generic": true, "crc64_rocksoft": true, "crc64_rocksoft_generic": true,
}

// AbsentModules lists the GuestModules this kernel does not have and may
// lack (mayBeGone), so that the guest does not try to load them.
func AbsentModules(k *Kernel) []string {
	var out []string
	for _, n := range GuestModules {
		if !mayBeGone[n] {
			continue
		}
		if _, err := run("", "modprobe", "-d", k.Root, "-S", k.Release, "--show-depends", n); err != nil && strings.Contains(err.Error(), "not found") {
			out = append(out, n)
		}
	}
	return out
}

// baseFormat changes whenever the layout of the base initramfs changes, so
// that cached images are rebuilt.
const baseFormat = "base-v5"

// resolveModules returns the module files (absolute host paths) needed to
// load the given modules, with their dependencies.
func resolveModules(k *Kernel, names []string, optional bool) (map[string]bool, error) {
	files := map[string]bool{}
	for _, n := range names {
		out, err := run("", "modprobe", "-d", k.Root, "-S", k.Release, "--show-depends", n)
		if err != nil {
			if optional {
				continue
			}
			if mayBeGone[n] && strings.Contains(err.Error(), "not found") {
				continue // built in or gone in this kernel (AbsentModules)
			}
			return nil, fmt.Errorf("resolving module %s for %s (a module the guest needs): %w", n, k.Release, err)
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "insmod" {
				files[f[1]] = true
			}
		}
	}
	return files, nil
}

// BaseInitramfs builds (or reuses) the part of the initramfs that depends
// only on the kernel and the host's tools: busybox, dash, kmod, iproute2,
// nvme-cli, open-iscsi's iscsid and iscsiadm with their libraries, the
// kernel modules and modules.dep.
// extraModules are out-of-tree module files (siw.ko) to add under extra/.
func BaseInitramfs(k *Kernel, extraModules []string) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	tools := map[string]string{} // guest path -> host path
	for guest, name := range map[string]string{
		"/bin/dash": "dash", "/bin/busybox": "busybox", "/bin/kmod": "kmod",
		"/sbin/ip": "ip", "/sbin/rdma": "rdma", "/usr/sbin/nvme": "nvme",
		"/sbin/iscsid": "iscsid", "/sbin/iscsiadm": "iscsiadm",
	} {
		p, err := LookTool(name)
		if err != nil {
			return "", err
		}
		if rp, err := filepath.EvalSymlinks(p); err == nil {
			p = rp
		}
		tools[guest] = p
	}
	mods, err := resolveModules(k, GuestModules, false)
	if err != nil {
		return "", err
	}
	opt, _ := resolveModules(k, optionalModules, true)
	for m := range opt {
		mods[m] = true
	}
	// Modules that this kernel builds in or dropped: an install rule
	// makes `modprobe <name>` succeed (it runs /bin/true) for every guest
	// script that names them (lib.sh's list, and the scripts of other
	// tests), instead of failing the boot.
	absent := AbsentModules(k)
	// Cache key: everything that goes in.
	h := sha256.New()
	fmt.Fprintln(h, baseFormat, k.Package, k.Version, k.Release)
	var keys []string
	for g, p := range tools {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		keys = append(keys, fmt.Sprintf("%s=%s:%d:%d", g, p, st.Size(), st.ModTime().UnixNano()))
	}
	for m := range mods {
		keys = append(keys, "mod="+m)
	}
	for _, m := range absent {
		keys = append(keys, "absent="+m)
	}
	for _, e := range extraModules {
		sum, err := fileSum(e)
		if err != nil {
			return "", err
		}
		keys = append(keys, "extra="+filepath.Base(e)+":"+sum)
	}
	sort.Strings(keys)
	fmt.Fprintln(h, strings.Join(keys, "\n"))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(cache, "initramfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, fmt.Sprintf("base-%s-%s.cpio.gz", k.Release, key))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	Log("building base initramfs for %s (%d modules)", k.Release, len(mods))

	a := NewArchive()
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp", "/run", "/root", "/var/tmp", "/etc", "/usr/local/bin", "/mnt"} {
		a.Dir(d)
	}
	a.CharDev("/dev/console", 5, 1, 0o600)
	a.CharDev("/dev/null", 1, 3, 0o666)
	for g, p := range tools {
		if err := a.AddBinary(g, p); err != nil {
			return "", err
		}
	}
	real := map[string]bool{"sh": true, "ip": true, "modprobe": true, "insmod": true, "rmmod": true,
		"lsmod": true, "depmod": true, "modinfo": true, "busybox": true}
	list, err := run("", tools["/bin/busybox"], "--list-full")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(list, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || real[filepath.Base(l)] {
			continue
		}
		a.Symlink("/"+l, "/bin/busybox")
	}
	a.Symlink("/bin/sh", "dash")
	for _, n := range []string{"modprobe", "insmod", "rmmod", "lsmod", "depmod", "modinfo"} {
		a.Symlink("/sbin/"+n, "/bin/kmod")
	}
	a.Symlink("/bin/ip", "/sbin/ip")
	a.Symlink("/usr/bin/rdma", "/sbin/rdma")
	a.Bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	a.Bytes("/etc/group", []byte("root:x:0:\n"), 0o644)
	a.Bytes("/etc/nvme/hostnqn", []byte("nqn.2014-08.org.nvmexpress:uuid:6c1f2c5e-3b1a-4d6e-9f4a-2b7c8d9e0a1b\n"), 0o644)
	a.Bytes("/etc/nvme/hostid", []byte("6c1f2c5e-3b1a-4d6e-9f4a-2b7c8d9e0a1b\n"), 0o644)
	if len(absent) > 0 {
		var conf strings.Builder
		conf.WriteString("# Not in this kernel (built in or gone): modprobe succeeds without loading anything.\n")
		for _, m := range absent {
			fmt.Fprintf(&conf, "install %s /bin/true\n", m)
		}
		a.Bytes("/etc/modprobe.d/e2e-absent.conf", []byte(conf.String()), 0o644)
	}
	a.Bytes("/etc/iscsi/initiatorname.iscsi", []byte("InitiatorName=iqn.2024-01.io.e2e:initiator\n"), 0o644)

	// Modules: stage the subset, depmod it, add the tree.
	stage, err := os.MkdirTemp(dir, "stage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := StageModules(k, stage, mods, extraModules); err != nil {
		return "", err
	}
	if err := a.AddTree(stage); err != nil {
		return "", err
	}
	if err := a.WriteGzipFile(out); err != nil {
		return "", err
	}
	return out, nil
}

// Overlay is the per-run part of the initramfs: guest scripts and binaries.
// Files maps guest paths to host files; Data maps guest paths to content.
type Overlay struct {
	Files map[string]string
	Data  map[string][]byte
}

// Write writes the overlay as a gzip cpio to file.
func (o Overlay) Write(file string) error {
	a := NewArchive()
	for g, p := range o.Files {
		mode := uint32(0o644)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if strings.HasSuffix(g, ".sh") || g == "/init" || strings.HasPrefix(g, "/usr/local/bin/") {
			mode = 0o755
		}
		if err := a.File(g, p, mode); err != nil {
			return err
		}
	}
	for g, d := range o.Data {
		a.Bytes(g, d, 0o755)
	}
	return a.WriteGzipFile(file)
}

// ConcatFiles concatenates files into out (gzip cpio archives may be
// concatenated: the kernel unpacks them in order).
func ConcatFiles(out string, files ...string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, in := range files {
		g, err := os.Open(in)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, g)
		g.Close()
		if err != nil {
			return err
		}
	}
	return f.Close()
}

func copyFile(dst, src string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// StageModules copies module files (absolute host paths under the
// kernel's tree, as resolveModules returns them) and out-of-tree modules
// (to extra/) into root/lib/modules/<release>, with the kernel's
// modules.order and modules.builtin*, and runs depmod there.
func StageModules(k *Kernel, root string, mods map[string]bool, extraModules []string) error {
	smod := filepath.Join(root, "lib", "modules", k.Release)
	for m := range mods {
		rel, err := filepath.Rel(k.ModDir(), m)
		if err != nil || strings.HasPrefix(rel, "..") {
			// modprobe -d prints paths under the root; resolve lib -> usr/lib.
			if rm, err2 := filepath.EvalSymlinks(m); err2 == nil {
				if rd, err3 := filepath.EvalSymlinks(k.ModDir()); err3 == nil {
					rel, err = filepath.Rel(rd, rm)
				}
			}
			if err != nil || strings.HasPrefix(rel, "..") {
				return fmt.Errorf("module %s is not under %s", m, k.ModDir())
			}
		}
		if err := copyFile(filepath.Join(smod, rel), m); err != nil {
			return err
		}
	}
	for _, e := range extraModules {
		if err := copyFile(filepath.Join(smod, "extra", filepath.Base(e)), e); err != nil {
			return err
		}
	}
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		src := filepath.Join(k.ModDir(), f)
		if _, err := os.Stat(src); err == nil {
			if err := copyFile(filepath.Join(smod, f), src); err != nil {
				return err
			}
		}
	}
	_, err := run("", "depmod", "-b", root, k.Release)
	return err
}

// AddTree adds the directories and regular files under dir (0644) at the
// same paths below /.
func (a *Archive) AddTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		g := "/" + filepath.ToSlash(rel)
		if d.IsDir() {
			a.Dir(g)
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		a.Bytes(g, data, 0o644)
		return nil
	})
}
