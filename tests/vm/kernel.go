package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kernel is one of Debian's stock kernels unpacked into the cache.
type Kernel struct {
	Series  string // "6.1", "6.12", "6.18", "7.3", "newest"…: as asked for
	Package string // linux-image-6.1.0-57-amd64
	Version string // Debian package version, 6.1.192-3
	Release string // uname -r, 6.1.0-57-amd64
	Root    string // unpacked packages (hold lib/modules/<release>/ and the image)
	Vmlinuz string
	// Layout is "boot" (the image at boot/vmlinuz-<release>, Debian 12
	// and the unsplit trixie-backports kernels) or "split" (Debian's split
	// packages since 6.19: linux-image-X is empty and depends on
	// linux-binary-X, whose image is usr/lib/modules/X/vmlinuz, and on
	// linux-modules-X).
	Layout string
	Apt    *Apt // where its packages come from
}

// ModDir is lib/modules/<release> inside the unpacked package.
func (k *Kernel) ModDir() string { return filepath.Join(k.Root, "lib", "modules", k.Release) }

// Name is the short name used in test names and artifact files.
func (k *Kernel) Name() string { return k.Series }

// NewestSeries is the alias of the newest kernel Debian's archive serves
// (in trixie-backports), resolved at run time.
const NewestSeries = "newest"

// backportsSuite holds the kernels newer than Debian 12's: Debian 13's
// backports (6.16 … 6.18 LTS … 7.x), reached through a private apt
// configuration.
const backportsSuite = "trixie-backports"

// TestingSeries is the kernel of Debian testing ("forky"): the newest
// linux-image-*+deb14-amd64 of the forky suite itself, reached through a
// private apt configuration. It is the series of TestSystemd's testing
// image, whose userspace (systemd 262) is built against it.
const TestingSeries = "forky"

// testingTag is the version tag of the testing suite's kernel packages
// (Debian 14).
const testingTag = "deb14"

var reSeries = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// KernelApt returns where the packages of a series come from: Debian 12's
// 6.1 and 6.12 from the host's own apt (a Debian 12 host), Debian
// testing's ("forky") from that suite and every other series ("6.18",
// "7.3", "newest") from trixie-backports, both through a private apt
// configuration.
func KernelApt(series string) (*Apt, error) {
	switch {
	case series == "6.1" || series == "6.12":
		return HostApt, nil
	case series == TestingSeries:
		return PrivateApt(TestingSeries)
	case series == NewestSeries || reSeries.MatchString(series):
		return PrivateApt(backportsSuite)
	}
	return nil, fmt.Errorf("unknown kernel series %q (want 6.1, 6.12, another major.minor such as 6.18 or 7.3, %s, or %s for Debian testing's own)", series, NewestSeries, TestingSeries)
}

// ResolveKernel finds which Debian package provides the kernel of a series:
// "6.1" is what linux-image-amd64 depends on; "6.12" the newest
// linux-image-6.12.*+deb12-amd64; any other major.minor the newest
// linux-image-<major.minor>.*+deb13-amd64 of trixie-backports, and "newest"
// the newest linux-image-*+deb13-amd64 there; "forky" the newest
// linux-image-*+deb14-amd64 of the forky suite.
func ResolveKernel(series string) (a *Apt, pkg, version string, err error) {
	a, err = KernelApt(series)
	if err != nil {
		return nil, "", "", err
	}
	if a.Private() {
		// Resolved at run time: the lists are updated once per process.
		if err := a.Update(); err != nil {
			return nil, "", "", err
		}
		tag, pick := "deb13", series
		if series == TestingSeries {
			tag, pick = testingTag, NewestSeries
		}
		out, err := a.Cache("search", "--names-only", `^linux-image-[0-9]+\.[0-9]+\.[0-9]+\+`+tag+`-amd64$`)
		if err != nil {
			return nil, "", "", err
		}
		if pkg, err = pickImageTag(out, pick, tag); err == nil {
			version, err = candidateVersion(a, pkg)
		}
		if err != nil {
			return nil, "", "", fmt.Errorf("kernel %s from %s: %w", series, a, err)
		}
		return a, pkg, version, nil
	}
	for attempt := 0; attempt < 2; attempt++ {
		pkg, err = resolvePackage(series)
		if err == nil {
			version, err = candidateVersion(a, pkg)
		}
		if err == nil {
			return a, pkg, version, nil
		}
		if attempt == 0 && os.Geteuid() == 0 {
			if uerr := AptUpdate(); uerr != nil {
				return nil, "", "", fmt.Errorf("%v (apt-get update: %v)", err, uerr)
			}
		}
	}
	// The guest kernels come from Debian 12's archive. On another
	// distribution (Ubuntu…) without it, the VM tests cannot run here:
	// skip, saying how to make them run. On Debian 12 it is a failure.
	if id, ver := osRelease(); !(id == "debian" && ver == "12") {
		return nil, "", "", ErrSkip{fmt.Sprintf("the guest kernels are Debian 12 packages and this host (%s %s) has none in apt (%v): add Debian bookworm's archive to apt, or run on Debian 12", id, ver, err)}
	}
	return nil, "", "", err
}

// pickImage chooses, from an `apt-cache search --names-only` listing
// ("<name> - <description>" lines), the linux-image-X.Y.Z+deb13-amd64 of
// the series with the highest X.Y.Z: within X.Y for a "X.Y" series, among
// all for "newest". -cloud and -rt flavours are not amd64's generic one
// and never match.
func pickImage(listing, series string) (string, error) {
	return pickImageTag(listing, series, "deb13")
}

// pickImageTag is pickImage for the kernels of another Debian release's
// tag (deb14: testing's).
func pickImageTag(listing, series, tag string) (string, error) {
	re := regexp.MustCompile(`^linux-image-([0-9]+)\.([0-9]+)\.([0-9]+)\+` + regexp.QuoteMeta(tag) + `-amd64$`)
	best, bestV := "", [3]int{-1, -1, -1}
	for _, l := range strings.Split(listing, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(l), " ")
		m := re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		var v [3]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		if series != NewestSeries && m[1]+"."+m[2] != series {
			continue
		}
		if v[0] > bestV[0] || v[0] == bestV[0] && (v[1] > bestV[1] || v[1] == bestV[1] && v[2] > bestV[2]) {
			best, bestV = name, v
		}
	}
	if best == "" {
		if series == NewestSeries {
			return "", fmt.Errorf("no linux-image-*+%s-amd64 listed", tag)
		}
		return "", fmt.Errorf("no linux-image-%s.*+%s-amd64 listed", series, tag)
	}
	return best, nil
}

// kernelParts returns the packages to download for a kernel image package,
// given its dependencies (apt-cache depends): the package itself, and the
// linux-base-<abi> (modules.builtin, modules.order, config), linux-binary-<abi>
// (the image) and linux-modules-<abi> (the modules) it depends on, with
// <abi> the package's name without linux-image- (Debian 13's backports;
// Debian 12's packages have none of them).
func kernelParts(pkg string, deps []string) []string {
	abi := strings.TrimPrefix(pkg, "linux-image-")
	parts := []string{pkg}
	seen := map[string]bool{pkg: true}
	for _, d := range deps {
		d = strings.TrimSpace(d)
		for _, prefix := range []string{"linux-base-", "linux-binary-", "linux-modules-"} {
			if d == prefix+abi && !seen[d] {
				seen[d] = true
				parts = append(parts, d)
			}
		}
	}
	return parts
}

// kernelImage finds the kernel image of release in an unpacked tree and
// says which layout it has: boot/vmlinuz-<release> ("boot"), or
// lib/modules/<release>/vmlinuz (or usr/lib/…: "split").
func kernelImage(root, release string) (path, layout string, err error) {
	for _, c := range []struct{ path, layout string }{
		{filepath.Join(root, "boot", "vmlinuz-"+release), "boot"},
		{filepath.Join(root, "usr", "lib", "modules", release, "vmlinuz"), "split"},
		{filepath.Join(root, "lib", "modules", release, "vmlinuz"), "split"},
	} {
		if st, err := os.Stat(c.path); err == nil && st.Mode().IsRegular() {
			return c.path, c.layout, nil
		}
	}
	return "", "", fmt.Errorf("no kernel image in %s (neither boot/vmlinuz-%s nor usr/lib/modules/%s/vmlinuz)", root, release, release)
}

// osRelease returns ID and VERSION_ID of /etc/os-release.
func osRelease() (id, version string) {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "unknown", ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	return id, version
}

func depends(a *Apt, meta string) []string {
	out, err := a.Cache("depends", meta)
	if err != nil {
		return nil
	}
	var deps []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Depends:") {
			deps = append(deps, strings.TrimSpace(strings.TrimPrefix(l, "Depends:")))
		}
	}
	return deps
}

var (
	re61  = regexp.MustCompile(`^linux-image-6\.1\.0-\d+-amd64$`)
	re612 = regexp.MustCompile(`^linux-image-6\.12\.(\d+)\+deb12-amd64$`)
)

func resolvePackage(series string) (string, error) {
	switch series {
	case "6.1":
		for _, d := range depends(HostApt, "linux-image-amd64") {
			if re61.MatchString(d) {
				return d, nil
			}
		}
		return "", fmt.Errorf("apt-cache depends linux-image-amd64: no linux-image-6.1.0-*-amd64 dependency")
	case "6.12":
		out, err := run("", "apt-cache", "search", "--names-only", `^linux-image-6\.12\.[0-9]+\+deb12-amd64$`)
		if err != nil {
			return "", err
		}
		best, bestN := "", -1
		for _, l := range strings.Split(out, "\n") {
			name, _, _ := strings.Cut(l, " ")
			if m := re612.FindStringSubmatch(name); m != nil {
				var n int
				fmt.Sscan(m[1], &n)
				if n > bestN {
					best, bestN = name, n
				}
			}
		}
		if best == "" {
			return "", fmt.Errorf("apt-cache search: no linux-image-6.12.*+deb12-amd64")
		}
		return best, nil
	}
	return "", fmt.Errorf("unknown kernel series %q for the host's apt (want 6.1 or 6.12)", series)
}

func candidateVersion(a *Apt, pkg string) (string, error) {
	out, err := a.Cache("policy", pkg)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "Candidate:"); ok {
			v = strings.TrimSpace(v)
			if v == "" || v == "(none)" {
				break
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("apt-cache policy %s: no candidate version", pkg)
}

// debFile returns the cached .deb for pkg=version, downloading it if needed.
func debFile(cache string, a *Apt, pkg, version string) (string, error) {
	dir := filepath.Join(cache, "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	find := func() string {
		m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
		for _, f := range m {
			out, err := exec.Command("dpkg-deb", "-f", f, "Version").Output()
			if err == nil && strings.TrimSpace(string(out)) == version {
				return f
			}
		}
		return ""
	}
	if f := find(); f != "" {
		return f, nil
	}
	Log("downloading %s=%s", pkg, version)
	if _, err := a.Get(dir, "download", pkg+"="+version); err != nil {
		if uerr := a.Update(); uerr != nil {
			return "", err
		}
		if _, err := a.Get(dir, "download", pkg+"="+version); err != nil {
			return "", err
		}
	}
	if f := find(); f != "" {
		return f, nil
	}
	return "", fmt.Errorf("apt-get download %s=%s: no .deb found in %s", pkg, version, dir)
}

// unpack extracts .deb files into dest (once; keyed by the folder name).
func unpack(dest string, debs ...string) error {
	if _, err := os.Stat(filepath.Join(dest, ".complete")); err == nil {
		return nil
	}
	tmp := dest + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, d := range debs {
		if _, err := run("", "dpkg-deb", "-x", d, tmp); err != nil {
			return err
		}
	}
	// Merged-/usr packages put modules under usr/lib/modules: make lib/
	// point there so that depmod -b and modprobe -d find them.
	if _, err := os.Lstat(filepath.Join(tmp, "lib")); os.IsNotExist(err) {
		if _, err := os.Stat(filepath.Join(tmp, "usr", "lib")); err == nil {
			if err := os.Symlink("usr/lib", filepath.Join(tmp, "lib")); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dest)
	return os.Rename(tmp, dest)
}

// PrepareKernel resolves, downloads, unpacks and depmods a kernel series.
func PrepareKernel(series string) (*Kernel, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	a, pkg, version, err := ResolveKernel(series)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(cache, "kernels", pkg+"_"+sanitize(version))
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		parts := []string{pkg}
		if a.Private() {
			parts = kernelParts(pkg, depends(a, pkg))
		}
		var debs []string
		for _, p := range parts {
			deb, err := debFile(cache, a, p, version)
			if err != nil {
				return nil, err
			}
			debs = append(debs, deb)
		}
		Log("unpacking %s", strings.Join(parts, " "))
		if err := unpack(root, debs...); err != nil {
			return nil, err
		}
	}
	k := &Kernel{Series: series, Package: pkg, Version: version, Root: root, Apt: a}
	mods, _ := filepath.Glob(filepath.Join(root, "lib", "modules", "*"))
	var rels []string
	for _, m := range mods {
		if st, err := os.Stat(m); err == nil && st.IsDir() {
			rels = append(rels, filepath.Base(m))
		}
	}
	sort.Strings(rels)
	if len(rels) != 1 {
		return nil, fmt.Errorf("%s: expected one lib/modules/<release>, found %v", root, rels)
	}
	k.Release = rels[0]
	if k.Vmlinuz, k.Layout, err = kernelImage(root, k.Release); err != nil {
		return nil, fmt.Errorf("%s: %v", pkg, err)
	}
	if _, err := os.Stat(filepath.Join(k.ModDir(), "modules.dep")); err != nil {
		if _, err := run("", "depmod", "-b", root, k.Release); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func sanitize(s string) string {
	return strings.NewReplacer("/", "_", ":", "_", "~", "_").Replace(s)
}
