package tests

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
	"github.com/nvmet-rebind/nvmet-rebind/tests/vm"
)

// TestSystemd installs the project's .deb into Debian images — Debian 12
// (systemd 252, where the package adds its systemd-252 drop-in), Debian 13
// (systemd 257: the unit's own Type=notify-reload, no drop-in) and Debian
// testing (systemd 262) — boots each under qemu with systemd as PID 1
// (real udevd, the LIO restore unit of python3-rtslib-fb, and nvmetcli
// upstream's nvmet.service running Debian's nvmetcli 0.9: testing's own
// package, installed from testing on 12 and 13),
// and runs tests/guest/systemd/e2e-systemd in it: two boots on the same
// disk per kernel. Each check is a subtest:
// TestSystemd/<release>/<kernel>/<boot>/<check>.
func TestSystemd(t *testing.T) {
	skipUnlessVM(t)
	plan, err := systemdPlan()
	if err != nil {
		t.Fatal(err)
	}
	var debs systemdDebs
	for _, p := range plan {
		t.Run(p.release.Name, func(t *testing.T) {
			root, err := vm.DebianRootfs(p.release)
			if err != nil {
				if s, ok := err.(vm.ErrSkip); ok {
					t.Skip(s.Msg)
				}
				t.Fatalf("%s image: %v", p.release.Codename, err)
			}
			if debs.deb == "" {
				debs.deb = buildDeb(t)
				debs.newer = buildNewerDeb(t, debs.deb)
			}
			for _, series := range p.kernels {
				t.Run(series, func(t *testing.T) {
					runSystemd(t, p.release, series, root, debs)
				})
			}
		})
	}
}

// systemdDebs are the packages the guest installs: the tree's .deb (boot
// 1's dpkg -i) and the same tree built with a higher version (boot 2's
// upgrade check).
type systemdDebs struct{ deb, newer string }

// systemdRun is one image with the kernels it boots.
type systemdRun struct {
	release vm.DebianRelease
	kernels []string
}

// systemdPlan: NVMET_REBIND_E2E_DISTROS picks images by name (default
// all: debian12 debian13 debian-testing), each booting systemdKernels().
func systemdPlan() ([]systemdRun, error) {
	want := map[string]bool{}
	for _, d := range strings.Fields(os.Getenv(envDistros)) {
		want[d] = true
	}
	// unknown is what is left of want once every image was looked at: want
	// itself stays whole, or an image named first would let the later
	// ones in.
	unknown := maps.Clone(want)
	var plan []systemdRun
	for _, r := range vm.DebianReleases {
		delete(unknown, r.Name)
		if len(want) > 0 && !want[r.Name] || len(want) == 0 && r.AllOnly && os.Getenv(envAll) != "1" {
			continue
		}
		plan = append(plan, systemdRun{r, systemdKernels(r.Codename)})
	}
	for d := range unknown {
		var names []string
		for _, r := range vm.DebianReleases {
			names = append(names, r.Name)
		}
		return nil, fmt.Errorf("%s: unknown image %q (have %s)", envDistros, d, strings.Join(names, " "))
	}
	return plan, nil
}

var debOnce sync.Once
var debFile, debErr = "", error(nil)

// buildDeb runs `make packages` into the cache and returns the .deb.
func buildDeb(t *testing.T) string {
	t.Helper()
	debOnce.Do(func() { debFile, debErr = makeDeb(repoRoot(t), "dist", "") })
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debFile
}

var newerOnce sync.Once
var newerFile, newerErr = "", error(nil)

// buildNewerDeb runs `make packages` again into the cache, with
// PKG_VERSION set above deb's own version (the Makefile's packages target
// takes the version from etc/packaging/version.sh, which honours
// PKG_VERSION): the same files under a version dpkg sorts after deb's, so
// that dpkg -i of it is an upgrade, as apt would do one.
func buildNewerDeb(t *testing.T, deb string) string {
	t.Helper()
	newerOnce.Do(func() {
		out, err := exec.Command("dpkg-deb", "-f", deb, "Version").Output()
		if err != nil {
			newerErr = fmt.Errorf("dpkg-deb -f %s Version: %v", deb, err)
			return
		}
		old := strings.TrimSpace(string(out))
		// 1.2.3 → 1.2.3+1; 0.0.0+12.gabc (a snapshot) → 0.0.0+12.gabc.1:
		// version.sh allows one '+', and a longer string sorts after its
		// prefix.
		v := old + "+1"
		if strings.Contains(old, "+") {
			v = old + ".1"
		}
		if err := exec.Command("dpkg", "--compare-versions", v, "gt", old).Run(); err != nil {
			newerErr = fmt.Errorf("the upgrade's version %s does not sort after %s (dpkg --compare-versions): change buildNewerDeb's suffix", v, old)
			return
		}
		newerFile, newerErr = makeDeb(repoRoot(t), "dist-newer", v)
	})
	if newerErr != nil {
		t.Fatal(newerErr)
	}
	return newerFile
}

// makeDeb runs `make packages` in root into the cache's run/<dir> (with
// PKG_VERSION=version unless empty) and returns the one .deb it made.
func makeDeb(root, dir, version string) (string, error) {
	run, err := theRunDir()
	if err != nil {
		return "", err
	}
	dist := filepath.Join(run, dir)
	os.RemoveAll(dist)
	args, what := []string{"packages", "DIST=" + dist}, "make packages"
	if version != "" {
		args = append(args, "PKG_VERSION="+version)
		what += " PKG_VERSION=" + version
	}
	cmd := exec.Command("make", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", what, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "nvmet-rebind_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("%s: want one .deb in %s, have %v", what, dist, debs)
	}
	return debs[0], nil
}

func runSystemd(t *testing.T, rel vm.DebianRelease, series, rootTar string, debs systemdDebs) {
	start := time.Now()
	k, err := vm.PrepareKernel(series)
	if err != nil {
		if s, ok := err.(vm.ErrSkip); ok {
			t.Skip(s.Msg)
		}
		t.Fatalf("kernel %s: %v", series, err)
	}
	initrd, err := vm.SwitchRootInitramfs(k)
	if err != nil {
		t.Fatalf("switch_root initramfs: %v", err)
	}
	bins := buildBinaries(t)
	g := filepath.Join("guest", "systemd")
	wants := "/etc/systemd/system/multi-user.target.wants/"
	files := map[string]vm.DiskFile{
		"/root/nvmet-rebind.deb":                                    {Src: debs.deb},
		"/root/nvmet-rebind-newer.deb":                              {Src: debs.newer},
		"/usr/local/bin/e2eutil":                                    {Src: bins.e2eutil, Mode: 0o755},
		"/usr/local/sbin/e2e-systemd":                               {Src: filepath.Join(g, "e2e-systemd"), Mode: 0o755},
		"/etc/systemd/system/e2e-rdma.service":                      {Src: filepath.Join(g, "e2e-rdma.service")},
		"/etc/systemd/system/e2e-systemd.service":                   {Src: filepath.Join(g, "e2e-systemd.service")},
		"/etc/nvmet/config.json":                                    {Src: filepath.Join(g, "nvmet.json")},
		"/etc/rtslib-fb-target/saveconfig.json":                     {Src: filepath.Join(g, "saveconfig.json"), Mode: 0o600},
		wants + "nvmet.service":                                     {Link: "/etc/systemd/system/nvmet.service"},
		wants + "e2e-systemd.service":                               {Link: "/etc/systemd/system/e2e-systemd.service"},
		"/etc/systemd/system/sysinit.target.wants/e2e-rdma.service": {Link: "/etc/systemd/system/e2e-rdma.service"},
		// The console belongs to the test's output: no login prompt.
		"/etc/systemd/system/serial-getty@ttyS0.service": {Link: "/dev/null"},
		"/etc/systemd/system/getty@tty1.service":         {Link: "/dev/null"},
		// Nothing to fetch or connect to: no timers, no NVMe-oF initiator
		// autoconnect at boot.
		"/etc/systemd/system/apt-daily.timer":                 {Link: "/dev/null"},
		"/etc/systemd/system/apt-daily-upgrade.timer":         {Link: "/dev/null"},
		"/etc/systemd/system/nvmf-autoconnect.service":        {Link: "/dev/null"},
		"/etc/systemd/system/nvmefc-boot-connections.service": {Link: "/dev/null"},
		"/etc/hostname": {Data: []byte("e2e-systemd\n")},
		// As Debian's installer writes it: sudo resolves the host's name.
		"/etc/hosts": {Data: []byte("127.0.0.1 localhost\n127.0.1.1 e2e-systemd\n::1 localhost ip6-localhost ip6-loopback\n")},
		"/etc/fstab": {Data: []byte("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")},
	}
	// The README's quick-start config and the man page's sudoers line,
	// for check_admin: the admin path as the docs give it.
	quick, sudoers, err := adminDocs()
	if err != nil {
		t.Fatal(err)
	}
	files["/root/quickstart.toml"] = vm.DiskFile{Data: quick}
	files["/root/sudoers-check"] = vm.DiskFile{Data: sudoers}
	// nvmet.service restores /etc/nvmet/config.json: upstream's unit
	// running Debian's nvmetcli (its package ships no unit), on every
	// image.
	files["/etc/systemd/system/nvmet.service"] = vm.DiskFile{Src: filepath.Join(g, "nvmetcli.service")}
	disk := filepath.Join(runDir(t), "systemd-"+rel.Name+"-"+k.Release+".img")
	build := func() {
		if err := vm.BuildDisk(disk, rootTar, []*vm.Kernel{k}, nil, files, 2048); err != nil {
			t.Fatalf("disk image: %v", err)
		}
	}
	build()
	defer os.Remove(disk)
	t.Logf("%s image (%s, systemd %d) for %s ready in %v", rel.Name, rel.Codename, rel.Systemd, k.Release, time.Since(start).Round(time.Millisecond))

	boot2 := []string{"e2e.phase=2", "e2e.late-rdma", "e2e.late-tcp"}
	if rel.LateDisk {
		boot2 = append(boot2, "e2e.late-disk")
	}
	boots := []struct {
		name   string
		append []string
		checks []string
	}{
		{"boot1", []string{"e2e.phase=1"}, []string{"install", "ready", "restored", "reset", "reload", "udev", "watchdog", "kill9", "security", "admin", "lio-save"}},
		{"boot2", boot2, []string{"restore-refused", "boot", "boot-disk", "boot-lio-disk", "boot-tcp", "udev-tcp", "upgrade", "remove"}},
	}
	// A kernel that panics in the middle of a boot's checks (under TCG:
	// seen once in CI, 6.12 in __alloc_skb under nvme-tcp's connect) left
	// the disk half way through that boot: a new disk, and both boots
	// once more, the panic kept as a warning. Any failure of the second
	// try stands.
	for try := 1; ; try++ {
		panicked := false
		for _, b := range boots {
			// The second boot runs whatever the first said: its checks do
			// not depend on the first's beyond the installed package.
			t.Run(b.name, func(t *testing.T) {
				args := b.append
				if c := os.Getenv(envPanic); c != "" && try == 1 {
					args = append(slices.Clone(args), "e2e.panic-before="+c)
				}
				panicked = bootSystemd(t, rel.Name+"-"+k.Series, k, initrd, disk, b.name, args, b.checks, try == 1)
			})
			if panicked {
				break
			}
		}
		if !panicked {
			return
		}
		build()
	}
}

// bootSystemd boots the disk once and reports its checks. When mayRetry,
// a kernel that panicked after the checks began is not reported: it
// returns true, for the caller to start again on a new disk.
func bootSystemd(t *testing.T, label string, k *vm.Kernel, initrd, disk, name string, appendArgs, checks []string, mayRetry bool) bool {
	timeout := 12 * time.Minute
	if s := os.Getenv(envTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", envTimeout, err)
		}
		timeout = d
	}
	res := bootSystemdOnce(t, label, k, initrd, disk, name, appendArgs, timeout)
	if diedBeforeUserspace(res) {
		// As bootVM does: a kernel that panicked before any of the
		// guest's checks printed a line ran none of them (the disk is
		// as it was); boot once more, the panic kept as a warning.
		p := saveConsole(t, label+"-systemd-"+name+"-died-before-init.log", res.Console)
		t.Logf("WARNING: the kernel panicked before the checks ran (console: %s): booting once more; its tail:\n%s", p, tail(res.Console, 30))
		res = bootSystemdOnce(t, label, k, initrd, disk, name, appendArgs, timeout)
	}
	ev := res.Events
	t.Logf("%s %s: wall time %v (done=%v rc=%d timed out=%v)", k.Release, name, res.Elapsed.Round(time.Second), ev.Done, ev.RC, res.TimedOut)
	if mayRetry && panickedMidway(res) {
		p := saveConsole(t, label+"-systemd-"+name+"-panicked.log", res.Console)
		t.Logf("WARNING: the kernel panicked during the checks (console: %s): a new disk, both boots once more; its tail:\n%s", p, tail(res.Console, 40))
		return true
	}
	failed := len(reportResults(t, ev, checks, "the VM ended or the check was not reached")) > 0
	if !ev.Done {
		failed = true
		t.Errorf("the VM ended without E2E DONE (timed out=%v, qemu: %v)", res.TimedOut, res.ExitErr)
	}
	if failed || t.Failed() {
		p := saveConsole(t, label+"-systemd-"+name+"-console.log", res.Console)
		t.Logf("console log: %s; its tail:\n%s", p, tail(res.Console, 40))
	}
	return false
}

// panickedMidway: the guest's kernel panicked (panic=-1 ends the VM)
// before the guest said E2E DONE.
func panickedMidway(res *vm.BootResult) bool {
	return !res.TimedOut && !res.Events.Done && bytes.Contains(res.Console, []byte("Kernel panic"))
}

// diedBeforeUserspace: the guest's kernel panicked (panic=-1 ends the VM)
// before any guest script printed a marker.
func diedBeforeUserspace(res *vm.BootResult) bool {
	return panickedMidway(res) && !res.Events.Init && len(res.Events.Results) == 0 && len(res.Events.Info) == 0
}

func bootSystemdOnce(t *testing.T, label string, k *vm.Kernel, initrd, disk, name string, appendArgs []string, timeout time.Duration) *vm.BootResult {
	verbose := os.Getenv(envVerbose) == "1"
	start := time.Now()
	var mu sync.Mutex
	res, err := vm.Boot(t.Context(), vm.BootConfig{
		Kernel:  k.Vmlinuz,
		Initrd:  initrd,
		Disk:    disk,
		MemMB:   1536,
		Append:  append([]string{"systemd.show_status=error"}, appendArgs...),
		Timeout: timeout,
		OnLine: func(line string) {
			if verbose {
				fmt.Fprintf(os.Stderr, "[%s %s] %s\n", label, name, line)
			}
			if i := strings.Index(line, "E2E "); i >= 0 && !strings.HasPrefix(line[i:], "E2E BEGIN") {
				mu.Lock()
				defer mu.Unlock()
				t.Logf("%6.1fs %s", time.Since(start).Seconds(), line[i:])
			}
		},
	})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	return res
}

// TestSystemdPlan: NVMET_REBIND_E2E_DISTROS picks exactly the images it
// names, in DebianReleases' order, each on its own kernel by default; an
// unknown name is an error that lists the known ones.
func TestSystemdPlan(t *testing.T) {
	t.Setenv(envKernels, "")
	t.Setenv(envAll, "")
	names := func(p []systemdRun) (s []string) {
		for _, r := range p {
			s = append(s, r.release.Name+"@"+strings.Join(r.kernels, ","))
		}
		return s
	}
	for _, tt := range []struct{ env, want string }{
		{"", "debian12@6.1 debian13@6.12"}, // testing: make test-all, or named
		{"debian12", "debian12@6.1"},       // not the images after it
		{"debian13", "debian13@6.12"},
		{"debian-testing debian12", "debian12@6.1 debian-testing@" + vm.TestingSeries},
	} {
		t.Setenv(envDistros, tt.env)
		p, err := systemdPlan()
		if got := strings.Join(names(p), " "); err != nil || got != tt.want {
			t.Errorf("%s=%q: %q, %v; want %q", envDistros, tt.env, got, err, tt.want)
		}
	}
	t.Setenv(envDistros, "debian12 debian11")
	if _, err := systemdPlan(); err == nil || !strings.Contains(err.Error(), `"debian11"`) || !strings.Contains(err.Error(), "debian-testing") {
		t.Errorf("an unknown image: %v", err)
	}
	t.Setenv(envDistros, "")
	t.Setenv(envAll, "1")
	if p, _ := systemdPlan(); len(p) != 3 {
		t.Errorf("ALL=1: images %v, want all three", names(p))
	}
	t.Setenv(envDistros, "debian-testing")
	if p, _ := systemdPlan(); len(p) != 1 || !slices.Equal(p[0].kernels, append(slices.Clone(allKernels), vm.TestingSeries)) {
		t.Errorf("ALL=1: the testing image on %v, want every kernel of test-all and its own", names(p))
	}
}

// quickstartMarker precedes, in README.md, the fenced config block of the
// admin's quick start that TestSystemd installs.
const quickstartMarker = "<!-- quickstart-config: TestSystemd's admin check installs the next block -->"

// adminDocs reads the admin path's two texts from the docs themselves: the
// README's quick-start config (the ```toml block after quickstartMarker)
// and the man page's sudoers line for a monitoring user's check (the line
// with NOPASSWD, roff escapes undone).
func adminDocs() (quick, sudoers []byte, err error) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		return nil, nil, err
	}
	_, after, ok := strings.Cut(string(readme), quickstartMarker)
	if !ok {
		return nil, nil, fmt.Errorf("README.md: no %q before the quick-start config", quickstartMarker)
	}
	_, block, ok := strings.Cut(after, "```toml\n")
	if !ok {
		return nil, nil, errors.New("README.md: no ```toml block after the quick-start marker")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		return nil, nil, errors.New("README.md: the quick-start config block is not closed")
	}
	man, err := os.ReadFile(filepath.Join("..", "etc", "man", "nvmet-rebind.8"))
	if err != nil {
		return nil, nil, err
	}
	for _, l := range strings.Split(string(man), "\n") {
		if strings.Contains(l, "NOPASSWD") && !strings.HasPrefix(l, ".\\\"") {
			l = strings.NewReplacer(`\-`, "-", `\(em`, "-", `\e`, `\`, `\&`, "").Replace(l)
			return []byte(block), []byte(strings.TrimSpace(l) + "\n"), nil
		}
	}
	return nil, nil, errors.New("etc/man/nvmet-rebind.8: no sudoers line (NOPASSWD) for a monitoring user's check")
}

// TestAdminDocs: the README's quick-start config and the man page's
// sudoers line, which TestSystemd's admin check installs, are found, and
// the config is one config check would take.
func TestAdminDocs(t *testing.T) {
	quick, sudoers, err := adminDocs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse("README.md quick start", quick); err != nil {
		t.Errorf("the README's quick-start config: %v\n%s", err, quick)
	}
	if !strings.Contains(string(sudoers), "NOPASSWD: /usr/sbin/nvmet-rebind check") {
		t.Errorf("the man page's sudoers line does not allow exactly `nvmet-rebind check`: %s", sudoers)
	}
}
