package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// BuildSiw builds soft-iWARP (siw.ko) out of tree for a Debian kernel, from
// the same Debian source version and that kernel's own headers (Debian ships
// the kernels with CONFIG_RDMA_SIW unset). The result, or the reason it
// failed, is cached per kernel package version: delete
// <cache>/siw/<release>_<version>/ to try again.
func BuildSiw(k *Kernel) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "siw", k.Release+"_"+sanitize(k.Version))
	ko := filepath.Join(dir, "siw.ko")
	failed := filepath.Join(dir, "siw.failed")
	if _, err := os.Stat(ko); err == nil {
		return ko, nil
	}
	if b, err := os.ReadFile(failed); err == nil {
		recipe, why, _ := strings.Cut(string(b), "\n")
		if recipe == siwRecipe {
			return "", fmt.Errorf("%s (cached; remove %s to retry)", strings.TrimSpace(why), dir)
		}
		os.Remove(failed) // an older recipe failed: try this one
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ko2, err := buildSiw(k, dir)
	if err != nil {
		// Cache only failures that are not about this host lacking tools
		// or the network (those may work next time).
		if _, skip := err.(ErrSkip); !skip && !strings.Contains(err.Error(), "apt-get") && !strings.Contains(err.Error(), "mmdebstrap") {
			os.WriteFile(failed, []byte(siwRecipe+"\n"+err.Error()+"\n"), 0o644)
		}
		return "", err
	}
	return ko2, nil
}

// siwRecipe names the build recipe: a failure cached by another recipe is
// retried.
const siwRecipe = "siw-recipe-4"

func buildSiw(k *Kernel, dir string) (string, error) {
	abi := strings.TrimSuffix(k.Release, "-amd64")
	var srcPkg, kbuildPkg string
	switch {
	case k.Series == "6.1":
		srcPkg, kbuildPkg = "linux-source-6.1", "linux-kbuild-6.1"
	case k.Apt.Private() || k.Series == "6.12":
		// linux-source-<major.minor>, linux-kbuild-<abi> (6.12 of Debian
		// 12, and every trixie-backports kernel).
		mm := k.Release
		if i := strings.IndexByte(mm, '.'); i >= 0 {
			if j := strings.IndexAny(mm[i+1:], ".-+"); j >= 0 {
				mm = mm[:i+1+j]
			}
		}
		srcPkg, kbuildPkg = "linux-source-"+mm, "linux-kbuild-"+abi
	default:
		return "", fmt.Errorf("no siw recipe for kernel series %s", k.Series)
	}
	hdrPkg, commonPkg := "linux-headers-"+abi+"-amd64", "linux-headers-"+abi+"-common"

	var missing []string
	if _, err := LookTool("make"); err != nil {
		missing = append(missing, "make")
	}
	if _, err := LookTool("xz"); err != nil {
		missing = append(missing, "xz-utils")
	}
	if len(missing) > 0 {
		if err := AptInstall(missing...); err != nil {
			return "", err
		}
	}
	cache, _ := CacheDir()
	if k.Apt.Private() {
		// trixie-backports keeps the headers and source of its newest
		// kernel of a series only.
		for _, p := range []string{hdrPkg, srcPkg} {
			if v, _ := candidateVersion(k.Apt, p); v != k.Version {
				have := "not there"
				if v != "" {
					have = "only " + v
				}
				return "", fmt.Errorf("%s=%s is not in %s (%s): siw.ko cannot be built for %s", p, k.Version, backportsSuite, have, k.Release)
			}
		}
	}
	var debs []string
	for _, p := range []string{hdrPkg, commonPkg, kbuildPkg} {
		d, err := debFile(cache, k.Apt, p, k.Version)
		if err != nil {
			return "", fmt.Errorf("headers for %s: %w", k.Release, err)
		}
		debs = append(debs, d)
	}
	tree := filepath.Join(dir, "tree")
	if err := unpack(tree, debs...); err != nil {
		return "", err
	}
	hdr := filepath.Join(tree, "usr", "src", hdrPkg)
	common := filepath.Join(tree, "usr", "src", "linux-headers-"+abi+"-common")
	// The compiler Debian built the kernel with (gcc-12 on bookworm,
	// gcc-14 on trixie): the module's flags are that compiler's.
	cc, err := kernelCompiler(filepath.Join(hdr, "include", "config", "auto.conf"))
	if err != nil {
		return "", err
	}
	// chroot: "" builds on the host; else a Debian tree with that
	// compiler, for a compiler the host does not package (trixie's gcc-14
	// on a Debian 12 host: gcc-12 refuses its flags, such as
	// -fmin-function-alignment=16).
	chroot := ""
	if _, err := LookTool(cc); err != nil {
		cand, _ := candidateVersion(HostApt, cc)
		switch {
		case cand != "":
			if err := AptInstall(cc); err != nil {
				return "", err
			}
		case k.Apt.Private():
			if chroot, err = toolchainRoot("trixie", cc); err != nil {
				return "", fmt.Errorf("%s was built by %s, which this host does not package, and a trixie tree with it could not be made: %w", k.Release, cc, err)
			}
		default:
			id, ver := osRelease()
			return "", fmt.Errorf("%s was built by %s, which this host (%s %s) does not package: siw.ko cannot be built here", k.Release, cc, id, ver)
		}
	}
	// at is where a path under dir is seen by make: itself, or under
	// /build in the chroot (dir is bind-mounted there).
	at := func(p string) string {
		if chroot == "" {
			return p
		}
		return "/build" + strings.TrimPrefix(p, dir)
	}
	srcDeb, err := debFile(cache, k.Apt, srcPkg, k.Version)
	if err != nil {
		return "", fmt.Errorf("source for %s: %w", k.Release, err)
	}
	Log("building siw.ko for %s (one time; cached)", k.Release)
	// Point the headers' Makefile at the unpacked trees (trixie's also
	// sets KBUILD_OUTPUT to the headers' folder).
	mk := "include " + at(common) + "/Makefile\n"
	if b, err := os.ReadFile(filepath.Join(hdr, "Makefile")); err == nil && strings.Contains(string(b), "KBUILD_OUTPUT") {
		mk = "KBUILD_OUTPUT=" + at(hdr) + "\n" + mk
	}
	if err := os.WriteFile(filepath.Join(hdr, "Makefile"), []byte(mk), 0o644); err != nil {
		return "", err
	}
	// Only drivers/infiniband/sw/siw of the source tarball.
	srcRoot := filepath.Join(dir, "src-deb")
	os.RemoveAll(srcRoot)
	if _, err := run("", "dpkg-deb", "-x", srcDeb, srcRoot); err != nil {
		return "", err
	}
	defer os.RemoveAll(srcRoot)
	tars, _ := filepath.Glob(filepath.Join(srcRoot, "usr", "src", "linux-source-*.tar.xz"))
	if len(tars) != 1 {
		return "", fmt.Errorf("%s: expected one linux-source tarball, found %v", srcDeb, tars)
	}
	build := filepath.Join(dir, "build")
	os.RemoveAll(build)
	if err := os.MkdirAll(build, 0o755); err != nil {
		return "", err
	}
	top := strings.TrimSuffix(filepath.Base(tars[0]), ".tar.xz")
	if _, err := run("", "tar", "-xJf", tars[0], "-C", build, top+"/drivers/infiniband/sw/siw"); err != nil {
		return "", err
	}
	src := filepath.Join(build, top, "drivers", "infiniband", "sw", "siw")
	// No BTF for the module: it would need pahole (dwarves) and the module
	// loads without it.
	margs := []string{"-C", at(hdr), "M=" + at(src), "CC=" + cc, "CONFIG_RDMA_SIW=m", "CONFIG_DEBUG_INFO_BTF_MODULES=",
		fmt.Sprintf("-j%d", runtime.NumCPU()), "modules"}
	var out string
	if chroot == "" {
		out, err = run("", "make", margs...)
	} else {
		// A private mount namespace: /proc (objtool reads it) and the
		// build folder are mounted for the chroot only; nothing shows on
		// the host, and it all goes away with the command.
		out, err = run("", "unshare", append([]string{"--mount", "--pid", "--fork", "sh", "-c",
			`set -e; r=$1; d=$2; shift 2; mount -t proc proc "$r/proc"; mkdir -p "$r/build"; mount --bind "$d" "$r/build"; exec chroot "$r" make "$@"`,
			"sh", chroot, dir}, margs...)...)
	}
	if err != nil {
		// Keep the reason short: the error lines, without the cache paths.
		msg := strings.ReplaceAll(err.Error()+"\n"+out, dir+"/", "")
		var keep []string
		for _, l := range strings.Split(msg, "\n") {
			if strings.Contains(l, "rror") || strings.Contains(l, "not found") || strings.Contains(l, "No such") {
				keep = append(keep, strings.TrimSpace(l))
			}
		}
		if len(keep) > 4 {
			keep = keep[:4]
		}
		return "", fmt.Errorf("make siw.ko for %s failed: %s", k.Release, strings.Join(keep, "; "))
	}
	ko := filepath.Join(dir, "siw.ko")
	if err := copyFile(ko, filepath.Join(src, "siw.ko")); err != nil {
		return "", err
	}
	os.RemoveAll(build)
	return ko, nil
}

// kernelCompiler reads the compiler a kernel was built with from its
// headers' include/config/auto.conf (CONFIG_CC_VERSION_TEXT, e.g.
// "x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0"): its gcc-N.
func kernelCompiler(autoConf string) (string, error) {
	b, err := os.ReadFile(autoConf)
	if err != nil {
		return "", err
	}
	return parseKernelCompiler(string(b))
}

var reCCVersion = regexp.MustCompile(`(?m)^CONFIG_CC_VERSION_TEXT="?(?:[a-z0-9_]+-linux-gnu-)?(gcc-[0-9]+)\b`)

func parseKernelCompiler(autoConf string) (string, error) {
	if m := reCCVersion.FindStringSubmatch(autoConf); m != nil {
		return m[1], nil
	}
	for _, l := range strings.Split(autoConf, "\n") {
		if strings.HasPrefix(l, "CONFIG_CC_VERSION_TEXT=") {
			return "", fmt.Errorf("compiler of the kernel not understood: %s", l)
		}
	}
	return "", fmt.Errorf("no CONFIG_CC_VERSION_TEXT in the kernel's auto.conf")
}

// toolchainPackages are what an out-of-tree module build needs in a
// toolchain tree besides the compiler: make, the C library's headers, and
// the shared libraries of linux-kbuild's tools (fixdep, modpost, objtool).
var toolchainPackages = []string{"make", "libc6-dev", "libelf1t64", "libssl3t64", "zlib1g"}

// toolchainRoot returns a Debian tree of codename with the compiler cc
// (mmdebstrap --variant=apt, from the mirror of the host's apt sources,
// checked with the host's keyring; about 270 MB, a minute), cached in
// <cache>/toolchain/<codename>-<cc>/. Root only.
func toolchainRoot(codename, cc string) (string, error) {
	if os.Geteuid() != 0 {
		return "", ErrSkip{"not root: cannot make the " + codename + " tree with " + cc + " (mmdebstrap, chroot)"}
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	root := filepath.Join(cache, "toolchain", codename+"-"+cc)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err == nil {
		return root, nil
	}
	mirror, _, err := debianMirror()
	if err != nil {
		return "", err
	}
	if _, err := LookTool("mmdebstrap"); err != nil {
		if err := AptInstall("mmdebstrap"); err != nil {
			return "", err
		}
	}
	Log("making a %s tree with %s for out-of-tree modules (mmdebstrap; one time, cached)", codename, cc)
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	os.RemoveAll(root)
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return "", err
	}
	if _, err := run("", "mmdebstrap", "--variant=apt", "--mode=root", "--format=directory",
		`--aptopt=Acquire::Languages "none"`,
		"--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--include="+strings.Join(append([]string{cc}, toolchainPackages...), ","),
		codename, tmp, "deb "+mirror+" "+codename+" main"); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	return root, os.Rename(tmp, root)
}
