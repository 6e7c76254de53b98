package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/tests/vm"
)

// TestSystemd installs the project's .deb into Debian images — Debian 12
// (systemd 252, where the package adds its systemd-252 drop-in) and
// Debian 13 (systemd 257: the unit's own Type=notify-reload, no drop-in) —
// boots each under qemu with systemd as PID 1 (real udevd, the LIO restore
// unit of python3-rtslib-fb and an nvmet.service of the test's own), and
// runs tests/guest/systemd/e2e-systemd in it: two boots on the same disk
// per kernel. Each check is a subtest:
// TestSystemd/<release>/<kernel>/<boot>/<check>.
func TestSystemd(t *testing.T) {
	skipUnlessVM(t)
	plan, err := systemdPlan()
	if err != nil {
		t.Fatal(err)
	}
	deb := ""
	for _, p := range plan {
		t.Run(p.release.Name, func(t *testing.T) {
			root, err := vm.DebianRootfs(p.release.Codename)
			if err != nil {
				if s, ok := err.(vm.ErrSkip); ok {
					t.Skip(s.Msg)
				}
				t.Fatalf("%s image: %v", p.release.Codename, err)
			}
			if deb == "" {
				deb = buildDeb(t)
			}
			for _, series := range p.kernels {
				t.Run(series, func(t *testing.T) {
					runSystemd(t, p.release, series, root, deb)
				})
			}
		})
	}
}

// systemdRun is one image with the kernels it boots.
type systemdRun struct {
	release vm.DebianRelease
	kernels []string
}

// systemdPlan: NVMET_REBIND_E2E_DISTROS picks images by name (default
// all), each booting systemdKernels().
func systemdPlan() ([]systemdRun, error) {
	want := map[string]bool{}
	for _, d := range strings.Fields(os.Getenv(envDistros)) {
		want[d] = true
	}
	var plan []systemdRun
	for _, r := range vm.DebianReleases {
		if len(want) > 0 && !want[r.Name] {
			continue
		}
		delete(want, r.Name)
		plan = append(plan, systemdRun{r, systemdKernels(r.Codename)})
	}
	for d := range want {
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
	debOnce.Do(func() {
		cache, err := vm.CacheDir()
		if err != nil {
			debErr = err
			return
		}
		dist := filepath.Join(cache, "run", "dist")
		os.RemoveAll(dist)
		cmd := exec.Command("make", "packages", "DIST="+dist)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			debErr = fmt.Errorf("make packages: %v\n%s", err, out)
			return
		}
		debs, _ := filepath.Glob(filepath.Join(dist, "nvmet-rebind_*.deb"))
		if len(debs) != 1 {
			debErr = fmt.Errorf("make packages: want one .deb in %s, have %v", dist, debs)
			return
		}
		debFile = debs[0]
	})
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debFile
}

func runSystemd(t *testing.T, rel vm.DebianRelease, series, rootTar, deb string) {
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
		"/root/nvmet-rebind.deb":                                    {Src: deb},
		"/usr/local/bin/e2eutil":                                    {Src: bins.e2eutil, Mode: 0o755},
		"/usr/local/sbin/e2e-systemd":                               {Src: filepath.Join(g, "e2e-systemd"), Mode: 0o755},
		"/usr/local/sbin/nvmet-restore":                             {Src: filepath.Join(g, "nvmet-restore"), Mode: 0o755},
		"/etc/systemd/system/nvmet.service":                         {Src: filepath.Join(g, "nvmet.service")},
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
		"/etc/fstab":    {Data: []byte("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")},
	}
	cache, _ := vm.CacheDir()
	disk := filepath.Join(cache, "run", "systemd-"+rel.Name+"-"+k.Release+".img")
	if err := vm.BuildDisk(disk, rootTar, []*vm.Kernel{k}, nil, files, 2048); err != nil {
		t.Fatalf("disk image: %v", err)
	}
	defer os.Remove(disk)
	t.Logf("%s image (%s, systemd %d) for %s ready in %v", rel.Name, rel.Codename, rel.Systemd, k.Release, time.Since(start).Round(time.Millisecond))

	for _, b := range []struct {
		name   string
		append []string
		checks []string
	}{
		{"boot1", []string{"e2e.phase=1"}, []string{"install", "ready", "restored", "reset", "reload", "udev", "watchdog", "kill9", "security"}},
		{"boot2", []string{"e2e.phase=2", "e2e.late-rdma"}, []string{"restore-refused", "boot", "remove"}},
	} {
		// The second boot runs whatever the first said: its checks do
		// not depend on the first's beyond the installed package.
		t.Run(b.name, func(t *testing.T) {
			bootSystemd(t, rel.Name+"-"+k.Series, k, initrd, disk, b.name, b.append, b.checks)
		})
	}
}

func bootSystemd(t *testing.T, label string, k *vm.Kernel, initrd, disk, name string, appendArgs, checks []string) {
	timeout := 12 * time.Minute
	if s := os.Getenv(envTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", envTimeout, err)
		}
		timeout = d
	}
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
	ev := res.Events
	t.Logf("%s %s: wall time %v (done=%v rc=%d timed out=%v)", k.Release, name, res.Elapsed.Round(time.Second), ev.Done, ev.RC, res.TimedOut)
	failed := len(reportResults(t, ev, checks, "the VM ended or the check was not reached")) > 0
	if !ev.Done {
		failed = true
		t.Errorf("the VM ended without E2E DONE (timed out=%v, qemu: %v)", res.TimedOut, res.ExitErr)
	}
	if failed || t.Failed() {
		p := saveConsole(t, label+"-systemd-"+name+"-console.log", res.Console)
		t.Logf("console log: %s; its tail:\n%s", p, tail(res.Console, 40))
	}
}
