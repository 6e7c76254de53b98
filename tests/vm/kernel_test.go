package vm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An `apt-cache search --names-only` listing of trixie-backports (trimmed
// from a real one): several versions per series, the -cloud and -rt
// flavours, a 7.10 that must sort after 7.9 and 7.3.
const backportsListing = `linux-image-6.12.117+deb13-amd64 - Linux 6.12 for 64-bit PCs (signed)
linux-image-6.16.12+deb13-amd64 - Linux 6.16 for 64-bit PCs (signed)
linux-image-6.18.12+deb13-amd64 - Linux 6.18.12 for 64-bit PCs (signed)
linux-image-6.18.15+deb13-amd64 - Linux 6.18.15 for 64-bit PCs (signed)
linux-image-6.18.15+deb13-cloud-amd64 - Linux 6.18.15 for x86-64 cloud (signed)
linux-image-6.18.5+deb13-amd64 - Linux 6.18.5 for 64-bit PCs (signed)
linux-image-6.18.9+deb13-amd64 - Linux 6.18.9 for 64-bit PCs (signed)
linux-image-7.3.4+deb13-amd64 - Linux 7.3.4 for 64-bit PCs
linux-image-7.3.4+deb13-rt-amd64 - Linux 7.3.4 for 64-bit PCs, PREEMPT_RT
linux-image-7.3.10+deb13-cloud-amd64 - Linux 7.3.10 for x86-64 cloud
linux-image-7.2.12+deb13-amd64 - Linux 7.2.12 for 64-bit PCs
linux-image-7.2.9+deb13-amd64 - Linux 7.2.9 for 64-bit PCs
`

func TestPickImage(t *testing.T) {
	for _, tt := range []struct{ listing, series, want string }{
		{backportsListing, NewestSeries, "linux-image-7.3.4+deb13-amd64"},
		{backportsListing, "6.18", "linux-image-6.18.15+deb13-amd64"}, // 15 > 12 > 9 > 5, numerically
		{backportsListing, "7.3", "linux-image-7.3.4+deb13-amd64"},    // not the cloud flavour's 7.3.10
		{backportsListing, "7.2", "linux-image-7.2.12+deb13-amd64"},
		{backportsListing + "linux-image-7.10.1+deb13-amd64 - Linux 7.10.1\n", NewestSeries, "linux-image-7.10.1+deb13-amd64"},
		{backportsListing, "7.1", ""},
		{"", NewestSeries, ""},
	} {
		got, err := pickImage(tt.listing, tt.series)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("pickImage(%s) = %q, %v; want %q", tt.series, got, err, tt.want)
		}
	}
}

func TestKernelApt(t *testing.T) {
	t.Setenv("NVMET_REBIND_VM_CACHE", t.TempDir())
	for _, s := range []string{"6.1", "6.12"} {
		if a, err := KernelApt(s); err != nil || a.Private() {
			t.Errorf("%s: %v %v, want the host's apt", s, a, err)
		}
	}
	for _, s := range []string{"6.18", "7.3", NewestSeries} {
		a, err := KernelApt(s)
		if err != nil || !a.Private() || !slices.Equal(a.Suites, []string{"trixie-backports"}) {
			t.Errorf("%s: %v %v, want the private apt of trixie-backports", s, a, err)
		}
	}
	for _, s := range []string{"", "latest", "7", "6.1.0", "v7.3"} {
		if _, err := KernelApt(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func TestKernelParts(t *testing.T) {
	// apt-cache depends of a split trixie-backports image (7.3.4).
	split := []string{"dracut", "initramfs-tools", "linux-base-7.3.4+deb13-amd64", "linux-binary-7.3.4+deb13-amd64", "linux-modules-7.3.4+deb13-amd64"}
	got := kernelParts("linux-image-7.3.4+deb13-amd64", split)
	want := []string{"linux-image-7.3.4+deb13-amd64", "linux-base-7.3.4+deb13-amd64", "linux-binary-7.3.4+deb13-amd64", "linux-modules-7.3.4+deb13-amd64"}
	if !slices.Equal(got, want) {
		t.Errorf("split: %q, want %q", got, want)
	}
	// An unsplit one (6.18.15): the image and its linux-base only; another
	// ABI's packages are not taken.
	got = kernelParts("linux-image-6.18.15+deb13-amd64", []string{"kmod", "linux-base-6.18.15+deb13-amd64", "linux-modules-6.18.12+deb13-amd64"})
	if !slices.Equal(got, []string{"linux-image-6.18.15+deb13-amd64", "linux-base-6.18.15+deb13-amd64"}) {
		t.Errorf("unsplit: %q", got)
	}
	// Debian 12's: linux-base without an ABI is not a part.
	if got := kernelParts("linux-image-6.1.0-57-amd64", []string{"kmod", "linux-base"}); !slices.Equal(got, []string{"linux-image-6.1.0-57-amd64"}) {
		t.Errorf("bookworm: %q", got)
	}
}

func TestKernelImage(t *testing.T) {
	touch := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Debian 12: /boot/vmlinuz-<release>, modules in /lib/modules.
	boot := t.TempDir()
	touch(filepath.Join(boot, "boot", "vmlinuz-6.1.0-57-amd64"))
	touch(filepath.Join(boot, "lib", "modules", "6.1.0-57-amd64", "kernel", "x.ko"))
	if p, l, err := kernelImage(boot, "6.1.0-57-amd64"); err != nil || l != "boot" || p != filepath.Join(boot, "boot", "vmlinuz-6.1.0-57-amd64") {
		t.Errorf("boot layout: %q %q %v", p, l, err)
	}
	// Split: usr/lib/modules/<release>/vmlinuz (lib -> usr/lib, as unpack makes it).
	split := t.TempDir()
	touch(filepath.Join(split, "usr", "lib", "modules", "7.3.4+deb13-amd64", "vmlinuz"))
	if err := os.Symlink("usr/lib", filepath.Join(split, "lib")); err != nil {
		t.Fatal(err)
	}
	if p, l, err := kernelImage(split, "7.3.4+deb13-amd64"); err != nil || l != "split" || !strings.HasSuffix(p, "modules/7.3.4+deb13-amd64/vmlinuz") {
		t.Errorf("split layout: %q %q %v", p, l, err)
	}
	// Modules only (linux-binary not unpacked): a clear error.
	if _, _, err := kernelImage(split, "7.2.12+deb13-amd64"); err == nil || !strings.Contains(err.Error(), "no kernel image") {
		t.Errorf("no image: %v", err)
	}
}

func TestPrivateAptOptions(t *testing.T) {
	dir := "/c/apt/trixie-backports"
	args := privateAptOptions(dir)
	opts := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		if args[i] != "-o" {
			t.Fatalf("args[%d] = %q, want -o: %q", i, args[i], args)
		}
		k, v, _ := strings.Cut(args[i+1], "=")
		opts[k] = v
	}
	for k, v := range map[string]string{
		"Dir::Etc::SourceList":  dir + "/sources.list",
		"Dir::Etc::SourceParts": "/dev/null", // not the host's sources.list.d
		"Dir::Etc::Preferences": "/dev/null",
		"Dir::State::Lists":     dir + "/lists",
		"Dir::State::status":    dir + "/status", // not the host's dpkg status
		"Dir::Cache":            dir + "/cache",
		"Dir::Cache::archives":  dir + "/cache/archives",
	} {
		if opts[k] != v {
			t.Errorf("%s=%q, want %q", k, opts[k], v)
		}
	}
	for k, v := range opts {
		if strings.HasPrefix(k, "Dir::") && strings.HasPrefix(v, "/") && v != "/dev/null" && !strings.HasPrefix(v, dir+"/") {
			t.Errorf("%s=%s is outside the private folder", k, v)
		}
	}
	if a := (&Apt{}); a.args() != nil {
		t.Errorf("the host's apt has options: %q", a.args())
	}
	src := privateSourcesList("http://mirror.example/debian", debianKeyring, []string{"trixie-backports"})
	want := "deb [signed-by=" + debianKeyring + "] http://mirror.example/debian trixie-backports main\n"
	if !strings.HasSuffix(src, want) || strings.Count(src, "\ndeb ") != 1 {
		t.Errorf("sources.list:\n%s\nwant its line %q", src, want)
	}
}

func TestParseKernelCompiler(t *testing.T) {
	for conf, want := range map[string]string{
		"CONFIG_CC_VERSION_TEXT=\"gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0\"\n":                     "gcc-12",
		"CONFIG_GCC_VERSION=120200\nCONFIG_CC_VERSION_TEXT=x86_64-linux-gnu-gcc-12 (Debian) 12.2.0": "gcc-12",
		"CONFIG_CC_VERSION_TEXT=\"x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0\"":              "gcc-14",
		"CONFIG_CC_VERSION_TEXT=\"Debian clang version 19\"":                                        "",
		"CONFIG_X=y": "",
	} {
		got, err := parseKernelCompiler(conf)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("%q: %q, %v; want %q", conf, got, err, want)
		}
	}
}
