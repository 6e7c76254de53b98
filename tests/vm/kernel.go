package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Kernel is one of Debian's stock kernels unpacked into the cache.
type Kernel struct {
	Series  string // "6.1" or "6.12"
	Package string // linux-image-6.1.0-57-amd64
	Version string // Debian package version, 6.1.192-3
	Release string // uname -r, 6.1.0-57-amd64
	Root    string // unpacked package (holds boot/ and lib/modules/)
	Vmlinuz string
}

// ModDir is lib/modules/<release> inside the unpacked package.
func (k *Kernel) ModDir() string { return filepath.Join(k.Root, "lib", "modules", k.Release) }

// Name is the short name used in test names and artifact files.
func (k *Kernel) Name() string { return k.Series }

// ResolveKernel finds which Debian package provides the kernel of a series:
// "6.1" is what linux-image-amd64 depends on; "6.12" the newest
// linux-image-6.12.*+deb12-amd64.
func ResolveKernel(series string) (pkg, version string, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		pkg, err = resolvePackage(series)
		if err == nil {
			version, err = candidateVersion(pkg)
		}
		if err == nil {
			return pkg, version, nil
		}
		if attempt == 0 && os.Geteuid() == 0 {
			if uerr := AptUpdate(); uerr != nil {
				return "", "", fmt.Errorf("%v (apt-get update: %v)", err, uerr)
			}
		}
	}
	// The guest kernels come from Debian 12's archive. On another
	// distribution (Ubuntu…) without it, the VM tests cannot run here:
	// skip, saying how to make them run. On Debian 12 it is a failure.
	if id, ver := osRelease(); !(id == "debian" && ver == "12") {
		return "", "", ErrSkip{fmt.Sprintf("the guest kernels are Debian 12 packages and this host (%s %s) has none in apt (%v): add Debian bookworm's archive to apt, or run on Debian 12", id, ver, err)}
	}
	return "", "", err
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

func depends(meta string) []string {
	out, err := run("", "apt-cache", "depends", meta)
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
		for _, d := range depends("linux-image-amd64") {
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
	return "", fmt.Errorf("unknown kernel series %q (want 6.1 or 6.12)", series)
}

func candidateVersion(pkg string) (string, error) {
	out, err := run("", "apt-cache", "policy", pkg)
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
func debFile(cache, pkg, version string) (string, error) {
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
	if _, err := run(dir, "apt-get", "download", pkg+"="+version); err != nil {
		if uerr := AptUpdate(); uerr != nil {
			return "", err
		}
		if _, err := run(dir, "apt-get", "download", pkg+"="+version); err != nil {
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
	pkg, version, err := ResolveKernel(series)
	if err != nil {
		return nil, err
	}
	deb, err := debFile(cache, pkg, version)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(cache, "kernels", pkg+"_"+sanitize(version))
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		Log("unpacking %s", filepath.Base(deb))
		if err := unpack(root, deb); err != nil {
			return nil, err
		}
	}
	k := &Kernel{Series: series, Package: pkg, Version: version, Root: root}
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
	k.Vmlinuz = filepath.Join(root, "boot", "vmlinuz-"+k.Release)
	if _, err := os.Stat(k.Vmlinuz); err != nil {
		return nil, fmt.Errorf("%s: no kernel image: %v", pkg, err)
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
