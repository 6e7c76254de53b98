package vm

import (
	"fmt"
	"os"
	"path/filepath"
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
		if _, skip := err.(ErrSkip); !skip && !strings.Contains(err.Error(), "apt-get") {
			os.WriteFile(failed, []byte(siwRecipe+"\n"+err.Error()+"\n"), 0o644)
		}
		return "", err
	}
	return ko2, nil
}

// siwRecipe names the build recipe: a failure cached by another recipe is
// retried.
const siwRecipe = "siw-recipe-2"

func buildSiw(k *Kernel, dir string) (string, error) {
	abi := strings.TrimSuffix(k.Release, "-amd64")
	var srcPkg, kbuildPkg string
	switch k.Series {
	case "6.1":
		srcPkg, kbuildPkg = "linux-source-6.1", "linux-kbuild-6.1"
	case "6.12":
		srcPkg, kbuildPkg = "linux-source-6.12", "linux-kbuild-"+abi
	default:
		return "", fmt.Errorf("no siw recipe for kernel series %s", k.Series)
	}
	hdrPkg, commonPkg := "linux-headers-"+abi+"-amd64", "linux-headers-"+abi+"-common"

	// The compiler Debian built the kernel with (gcc-12 on bookworm).
	var missing []string
	if _, err := LookTool("make"); err != nil {
		missing = append(missing, "make")
	}
	if _, err := LookTool("gcc-12"); err != nil {
		missing = append(missing, "gcc-12")
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
	var debs []string
	for _, p := range []string{hdrPkg, commonPkg, kbuildPkg} {
		d, err := debFile(cache, p, k.Version)
		if err != nil {
			return "", fmt.Errorf("headers for %s: %w", k.Release, err)
		}
		debs = append(debs, d)
	}
	srcDeb, err := debFile(cache, srcPkg, k.Version)
	if err != nil {
		return "", fmt.Errorf("source for %s: %w", k.Release, err)
	}
	Log("building siw.ko for %s (one time; cached)", k.Release)
	tree := filepath.Join(dir, "tree")
	if err := unpack(tree, debs...); err != nil {
		return "", err
	}
	hdr := filepath.Join(tree, "usr", "src", hdrPkg)
	common := filepath.Join(tree, "usr", "src", "linux-headers-"+abi+"-common")
	// Point the headers' Makefile at the unpacked -common tree.
	if err := os.WriteFile(filepath.Join(hdr, "Makefile"), []byte("include "+common+"/Makefile\n"), 0o644); err != nil {
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
	out, err := run("", "make", "-C", hdr, "M="+src, "CONFIG_RDMA_SIW=m", "CONFIG_DEBUG_INFO_BTF_MODULES=",
		fmt.Sprintf("-j%d", runtime.NumCPU()), "modules")
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
