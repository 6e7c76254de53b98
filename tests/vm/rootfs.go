package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// SystemdPackages are installed in every image of the systemd test (with
// their dependencies, by mmdebstrap): systemd as PID 1, udevd, the RDMA and
// storage tools, and the LIO restore unit (python3-rtslib-fb's
// rtslib-fb-targetctl.service). nvmetcli is packaged from Debian testing
// on: the testing image has it from its own archive, Debian 12's and 13's
// from testing's (DebianRelease.FromTesting).
var SystemdPackages = []string{
	"systemd", "systemd-sysv", "udev", "dbus", "kmod", "procps",
	"iproute2", "rdma-core", "ibverbs-providers", "nvme-cli",
	"targetcli-fb", "python3-rtslib-fb",
	// The admin check: a monitoring user runs `check` through sudo.
	"sudo",
}

// testingCodename is Debian testing's: where FromTesting packages come from.
const testingCodename = "forky"

// rootfsFormat changes whenever the way the image is made changes, so
// that cached images are rebuilt.
const rootfsFormat = "rootfs-v1"

// debianSources are the apt sources of an image of a Debian release
// ("bookworm", "trixie": the release, its updates and its security
// archive), on the Debian mirror this host's own apt configuration uses
// (hostDebianMirror), or NVMET_REBIND_DEBIAN_MIRROR when set.
func debianSources(release string) ([]string, error) {
	m, sec, err := debianMirror()
	if err != nil {
		return nil, err
	}
	return []string{
		"deb " + m + " " + release + " main",
		"deb " + m + " " + release + "-updates main",
		"deb " + sec + " " + release + "-security main",
	}, nil
}

// DebianRelease is one Debian release an image of the systemd test is made of.
type DebianRelease struct {
	Name     string   // test name: "debian12"
	Codename string   // "bookworm"
	Systemd  int      // its systemd's major version (documentation; the guest asks systemctl)
	Kernel   string   // the kernel series it boots by default: its own release's
	Packages []string // installed on top of SystemdPackages
	// FromTesting are installed from Debian testing on an older release
	// (nvmetcli: packaged from testing on, Architecture: all, depending
	// only on python3-configshell-fb, which the release has); the rest
	// stays the release's (APT::Default-Release).
	FromTesting []string
	// LateDisk: the second boot's restore also lacks a disk (e2e.late-disk:
	// a namespace's backing file appears after nvmetcli's restore).
	LateDisk bool
	// AllOnly: booted by make test-all (NVMET_REBIND_E2E_ALL=1) or when
	// NVMET_REBIND_E2E_DISTROS names it, not by make test (its budget).
	AllOnly bool
}

// Nvmetcli tells whether the image has Debian's nvmetcli package: its
// nvmetcli restores /etc/nvmet/config.json at boot instead of the test's
// stand-in.
func (r DebianRelease) Nvmetcli() bool {
	return slices.Contains(r.Packages, "nvmetcli") || slices.Contains(r.FromTesting, "nvmetcli")
}

// DebianReleases are the releases of TestSystemd's images: Debian 12
// (systemd 252: the unit needs the package's systemd-252 drop-in), Debian
// 13 (systemd 257: the unit's own Type=notify-reload, no drop-in) and
// Debian testing, "forky" (systemd 262, the first release with nvmetcli
// packaged; on its own 7.2 kernel; in make test-all only: with it, make
// test took 40 minutes warm, too close to its 45 on a fresh machine).
var DebianReleases = []DebianRelease{
	{Name: "debian12", Codename: "bookworm", Systemd: 252, Kernel: "6.1", FromTesting: []string{"nvmetcli"}, LateDisk: true},
	{Name: "debian13", Codename: "trixie", Systemd: 257, Kernel: "6.12", FromTesting: []string{"nvmetcli"}, LateDisk: true},
	{Name: "debian-testing", Codename: "forky", Systemd: 262, Kernel: TestingSeries, Packages: []string{"nvmetcli"}, AllOnly: true},
}

// hostDebianMirror reads the apt sources under dir (sources.list and
// sources.list.d/*.list, *.sources in one-line or deb822 form) and returns
// the first URI of Debian's archive (its path ends in /debian) and of its
// security archive (/debian-security; by default the archive's host with
// that path).
func hostDebianMirror(dir string) (archive, security string, err error) {
	files := []string{filepath.Join(dir, "sources.list")}
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(dir, "sources.list.d", pat))
		sort.Strings(m)
		files = append(files, m...)
	}
	var uris []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "URIs:"); ok {
				uris = append(uris, strings.Fields(v)...)
				continue
			}
			fs := strings.Fields(line)
			if len(fs) < 3 || fs[0] != "deb" {
				continue
			}
			fs = fs[1:]
			if strings.HasPrefix(fs[0], "[") { // [arch=… signed-by=…]
				for len(fs) > 0 && !strings.HasSuffix(fs[0], "]") {
					fs = fs[1:]
				}
				if len(fs) > 0 {
					fs = fs[1:]
				}
			}
			if len(fs) > 0 {
				uris = append(uris, fs[0])
			}
		}
	}
	for _, u := range uris {
		u = strings.TrimSuffix(u, "/")
		switch {
		case archive == "" && strings.HasSuffix(u, "/debian"):
			archive = u
		case security == "" && strings.HasSuffix(u, "/debian-security"):
			security = u
		}
	}
	if archive == "" {
		return "", "", ErrSkip{fmt.Sprintf("no Debian archive (a URI ending in /debian) in the apt sources under %s: add one, or set NVMET_REBIND_DEBIAN_MIRROR", dir)}
	}
	if security == "" {
		security = strings.TrimSuffix(archive, "/debian") + "/debian-security"
	}
	return archive, security, nil
}

// DebianRootfs builds (or reuses from the cache) a tar of a Debian system
// of rel ("bookworm", "trixie", "forky") made by mmdebstrap from Debian's
// archive, with SystemdPackages and rel's own Packages. Root only
// (mmdebstrap's root mode keeps owners and device nodes). The archive's
// signatures are checked with the host's keyring (/etc/apt/trusted.gpg.d:
// Debian 12's debian-archive-keyring also holds Debian 13's keys, which
// sign testing too).
func DebianRootfs(rel DebianRelease) (string, error) {
	release := rel.Codename
	if os.Geteuid() != 0 {
		return "", ErrSkip{"not root: mmdebstrap cannot build the " + release + " image of the systemd test"}
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	sources, err := debianSources(release)
	if err != nil {
		return "", err
	}
	pkgs := append(append(append([]string(nil), SystemdPackages...), rel.Packages...), rel.FromTesting...)
	sort.Strings(pkgs)
	var pin []string
	if len(rel.FromTesting) > 0 && release != testingCodename {
		m, _, err := debianMirror()
		if err != nil {
			return "", err
		}
		sources = append(sources, "deb "+m+" "+testingCodename+" main")
		pin = []string{`--aptopt=APT::Default-Release "` + release + `"`}
	}
	h := sha256.New()
	fmt.Fprintln(h, rootfsFormat, strings.Join(pkgs, ","), strings.Join(sources, "|"))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(cache, "rootfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, release+"-"+key+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if _, err := LookTool("mmdebstrap"); err != nil {
		Log("installing mmdebstrap")
		if err := AptInstall("mmdebstrap"); err != nil {
			return "", err
		}
	}
	Log("building the %s image with mmdebstrap (%d packages and their dependencies)", release, len(pkgs))
	tmp := out + ".tmp"
	args := []string{
		"--variant=minbase", "--mode=root", "--format=tar",
		// The archive snapshot the host uses may be older than its
		// Valid-Until; the packages are still verified by their signatures.
		`--aptopt=Acquire::Check-Valid-Until "false"`,
		`--aptopt=Acquire::Languages "none"`,
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--include=" + strings.Join(pkgs, ","),
	}
	args = append(append(args, pin...), release, tmp)
	args = append(args, sources...)
	if _, err := run("", "mmdebstrap", args...); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// DiskFile is one file put into the image: from a host file, or data.
type DiskFile struct {
	Src  string // host file ("" when Data is used)
	Data []byte
	Mode os.FileMode
	Link string // non-empty: a symlink to this target instead
}

// BuildDisk writes an ext4 image (raw, sparse, sizeMB) holding the rootfs
// tar, the modules the guest loads for each kernel, and files (guest path
// -> file). mkfs.ext4 -d populates it without mounting anything.
func BuildDisk(out, rootTar string, kernels []*Kernel, extra map[string][]string, files map[string]DiskFile, sizeMB int) error {
	stage, err := os.MkdirTemp(filepath.Dir(out), "rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if _, err := run("", "tar", "-xpf", rootTar, "--numeric-owner", "-C", stage); err != nil {
		return err
	}
	for _, k := range kernels {
		mods, err := resolveModules(k, GuestModules, false)
		if err != nil {
			return err
		}
		opt, _ := resolveModules(k, optionalModules, true)
		for m := range opt {
			mods[m] = true
		}
		if err := StageModules(k, stage, mods, extra[k.Release]); err != nil {
			return err
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, g := range paths {
		f := files[g]
		dst, err := inside(stage, g)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		os.Remove(dst)
		switch {
		case f.Link != "":
			err = os.Symlink(f.Link, dst)
		case f.Src != "":
			err = copyFile(dst, f.Src)
		default:
			err = os.WriteFile(dst, f.Data, 0o644)
		}
		if err != nil {
			return err
		}
		if f.Link == "" {
			mode := f.Mode
			if mode == 0 {
				mode = 0o644
			}
			if err := os.Chmod(dst, mode); err != nil {
				return err
			}
		}
	}
	os.Remove(out)
	_, err = run("", "mkfs.ext4", "-q", "-F", "-L", "e2e-root", "-d", stage, out, fmt.Sprintf("%dM", sizeMB))
	return err
}

// inside resolves a guest path under root without following the image's
// own absolute symlinks out to the host (only the relative usr-merge links
// of the first component, like lib -> usr/lib, are followed).
func inside(root, guest string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean("/"+guest), "/"), "/")
	if len(parts) == 0 || parts[0] == "" {
		return "", fmt.Errorf("bad guest path %q", guest)
	}
	first := filepath.Join(root, parts[0])
	if t, err := os.Readlink(first); err == nil {
		if filepath.IsAbs(t) || strings.Contains(t, "..") {
			return "", fmt.Errorf("%s: %s is a symlink to %s", guest, parts[0], t)
		}
		first = filepath.Join(root, t)
	}
	return filepath.Join(append([]string{first}, parts[1:]...)...), nil
}

// SwitchRootInitramfs builds (or reuses) the small initramfs that boots the
// image: busybox and kmod load virtio and ext4, mount /dev/vda and hand over
// to the image's /sbin/init (systemd) with switch_root.
func SwitchRootInitramfs(k *Kernel) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	mods, err := resolveModules(k, []string{"virtio_pci", "virtio_blk", "ext4"}, false)
	if err != nil {
		return "", err
	}
	opt, _ := resolveModules(k, []string{"crc32c_generic", "crc32c-intel"}, true)
	for m := range opt {
		mods[m] = true
	}
	dir := filepath.Join(cache, "initramfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "switchroot-v1-"+k.Release+".cpio.gz")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	bb, err := LookTool("busybox")
	if err != nil {
		return "", err
	}
	kmod, err := LookTool("kmod")
	if err != nil {
		return "", err
	}
	a := NewArchive()
	for _, d := range []string{"/proc", "/sys", "/dev", "/newroot", "/bin", "/sbin"} {
		a.Dir(d)
	}
	a.CharDev("/dev/console", 5, 1, 0o600)
	a.CharDev("/dev/null", 1, 3, 0o666)
	if err := a.AddBinary("/bin/busybox", bb); err != nil {
		return "", err
	}
	if err := a.AddBinary("/bin/kmod", kmod); err != nil {
		return "", err
	}
	for _, n := range []string{"sh", "mount", "umount", "sleep", "switch_root", "poweroff", "echo", "cat"} {
		a.Symlink("/bin/"+n, "/bin/busybox")
	}
	a.Symlink("/sbin/modprobe", "/bin/kmod")
	a.Bytes("/init", []byte(switchRootInit), 0o755)
	stage, err := os.MkdirTemp(dir, "stage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := StageModules(k, stage, mods, nil); err != nil {
		return "", err
	}
	if err := a.AddTree(stage); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := a.WriteGzipFile(tmp); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

const switchRootInit = `#!/bin/sh
# Mount the test image (virtio disk, ext4) and start its systemd as PID 1.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_pci virtio_blk ext4; do modprobe $m || echo "switchroot: modprobe $m failed"; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if ! mount -t ext4 -o rw /dev/vda /newroot; then
	echo "E2E RESULT boot FAIL the image /dev/vda does not mount"
	echo "E2E DONE rc=1"
	poweroff -f
fi
mount --move /dev /newroot/dev
mount --move /sys /newroot/sys
mount --move /proc /newroot/proc
exec switch_root /newroot /sbin/init
`
