package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/tests/vm"
)

// Environment knobs (see README.md in this folder).
const (
	envE2E       = "NVMET_REBIND_E2E"              // "0" skips the VM tests
	envKernels   = "NVMET_REBIND_E2E_KERNELS"      // "6.1 6.12 6.18 newest" (default)
	envAll       = "NVMET_REBIND_E2E_ALL"          // "1": every scenario on every kernel (make test-all)
	envScenarios = "NVMET_REBIND_E2E_SCENARIOS"    // regexp on scenario names
	envBench     = "NVMET_REBIND_E2E_BENCH"        // N resets for the bench scenario (0: off)
	envRepeat    = "NVMET_REBIND_E2E_REPEAT"       // run the selection N times in one boot (rare failures)
	envTimeout   = "NVMET_REBIND_E2E_TIMEOUT"      // hard limit per boot (Go duration)
	envVerbose   = "NVMET_REBIND_E2E_VERBOSE"      // "1": echo the console while it runs
	envSiw       = "NVMET_REBIND_E2E_SIW"          // "0": do not build siw.ko
	envDistros   = "NVMET_REBIND_E2E_DISTROS"      // TestSystemd's images: "debian12 debian13 debian-testing" (default)
	envPanic     = "NVMET_REBIND_E2E_PANIC_BEFORE" // TestSystemd: the first try panics before this check
)

// skipUnlessVM skips when the VM tests cannot or should not run.
func skipUnlessVM(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("VM tests skipped in -short mode")
	}
	if os.Getenv(envE2E) == "0" {
		t.Skip(envE2E + "=0")
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("VM tests need linux/amd64 (have %s/%s)", runtime.GOOS, runtime.GOARCH)
	}
	if err := hostToolsOnce(); err != nil {
		if s, ok := err.(vm.ErrSkip); ok {
			t.Skip(s.Msg)
		}
		t.Fatalf("host tools: %v", err)
	}
}

var hostToolsOnce = sync.OnceValue(vm.EnsureHostTools)

// repoRoot is the module root (the tests run in tests/).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// goTool finds the go command: PATH first, then the usual install place.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

type binaries struct {
	daemon     string // "" when it did not build
	daemonErr  string // why
	e2eutil    string
	buildError error // e2eutil failed: fatal
}

var buildOnce sync.Once
var built binaries

// buildBinaries builds the static nvmet-rebind (with the faultinject tag)
// and the guest helper. A daemon that does not build yet is not fatal: the
// scenarios that need it fail with the reason.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		root := repoRoot(t)
		cache, err := vm.CacheDir()
		if err != nil {
			built.buildError = err
			return
		}
		out := filepath.Join(cache, "bin")
		os.MkdirAll(out, 0o755)
		gobuild := func(dst, pkg string, tags ...string) error {
			args := []string{"build", "-trimpath", "-o", dst}
			if len(tags) > 0 {
				args = append(args, "-tags", strings.Join(tags, ","))
			}
			args = append(args, pkg)
			cmd := exec.Command(goTool(), args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			b, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			}
			return nil
		}
		built.e2eutil = filepath.Join(out, "e2eutil")
		if err := gobuild(built.e2eutil, "./tests/guest/e2eutil"); err != nil {
			built.buildError = err
			return
		}
		d := filepath.Join(out, "nvmet-rebind")
		os.Remove(d)
		if err := gobuild(d, "./cmd/nvmet-rebind", "faultinject"); err != nil {
			built.daemonErr = err.Error()
			t.Logf("nvmet-rebind does not build (scenarios that need it will fail): %v", err)
		} else {
			built.daemon = d
		}
	})
	if built.buildError != nil {
		t.Fatalf("building guest helper: %v", built.buildError)
	}
	return built
}

// scenarioNames lists tests/guest/scenarios/NN-name.sh in order.
func scenarioNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("guest", "scenarios", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		b := strings.TrimSuffix(filepath.Base(f), ".sh")
		if i := strings.IndexByte(b, '-'); i >= 0 {
			b = b[i+1:]
		}
		names = append(names, b)
	}
	return names
}

// selectScenarios applies NVMET_REBIND_E2E_SCENARIOS and the bench switch.
func selectScenarios(t *testing.T, all []string) []string {
	t.Helper()
	var re *regexp.Regexp
	if s := os.Getenv(envScenarios); s != "" {
		var err error
		if re, err = regexp.Compile(s); err != nil {
			t.Fatalf("%s: %v", envScenarios, err)
		}
	}
	bench := benchCount() > 0
	var out []string
	for _, n := range all {
		if n == "bench" && !bench {
			continue
		}
		if re != nil && !re.MatchString(n) {
			continue
		}
		out = append(out, n)
	}
	// Repetitions run as name@2 … name@N, each with its own work dir and
	// result, in rounds: the selection in order, N times.
	r := 1
	if s := os.Getenv(envRepeat); s != "" {
		var err error
		if r, err = strconv.Atoi(s); err != nil || r < 1 {
			t.Fatalf("%s=%q: want a count ≥ 1", envRepeat, s)
		}
	}
	once := out
	for i := 2; i <= r; i++ {
		for _, n := range once {
			out = append(out, fmt.Sprintf("%s@%d", n, i))
		}
	}
	return out
}

func benchCount() int {
	n, _ := strconv.Atoi(os.Getenv(envBench))
	return n
}

// defaultKernels are booted when NVMET_REBIND_E2E_KERNELS is unset:
// Debian 12's 6.1, the 6.12 that Debian 12 (as a backport) and Debian 13
// ship, and the newest kernel of trixie-backports.
var defaultKernels = []string{"6.1", "6.12", vm.NewestSeries}

// allKernels are booted under NVMET_REBIND_E2E_ALL=1 (make test-all): the
// default ones and the 6.18 LTS between them, whose representative set
// took 3 of the 47 minutes ./tests/ took on a slow host (tests/README.md).
var allKernels = []string{"6.1", "6.12", "6.18", vm.NewestSeries}

// fullKernels run every scenario in the default plan: the kernel of
// Debian stable and the newest. The others run representativeScenarios,
// so that `make test` stays within its budget (tests/README.md has the
// figures); NVMET_REBIND_E2E_ALL=1 (make test-all) runs every scenario on
// every kernel.
var fullKernels = map[string]bool{"6.12": true, vm.NewestSeries: true}

// representativeScenarios: one of each kind — the kernel facts, nvmet and
// LIO resets, the netdev recreated, IPv6, soft-iWARP, the boot completion,
// a shared iSER portal, a VLAN, NVMe/TCP's boot completion (tcp-boot) and
// a host without RDMA (tcp-only) — about 3.5 minutes of boot; and bench
// (only run when NVMET_REBIND_E2E_BENCH asks), so that its figures exist
// per kernel.
var representativeScenarios = map[string]bool{
	"smoke": true, "nvmet-reset": true, "lio-reset": true, "netdev-recreate": true,
	"ipv6": true, "siw-reset": true, "boot-completion": true, "shared-iser": true, "vlan": true, "tcp-boot": true,
	"tcp-only": true, "bench": true,
}

// newestOnlyScenarios run, in the default plan, on the newest kernel
// alone: the scale layouts (256 ports + 32 portals, 256 sharers of one
// iSER portal), whose subject is the daemon's work at that size; what the
// kernel does for each of their objects is what the small scenarios check
// on every kernel (nvmet-reset, shared-iser). On 6.12 they took 3.3 of the
// 47 minutes ./tests/ took on a slow host (tests/README.md).
var newestOnlyScenarios = map[string]bool{"nvmet-scale": true, "shared-iser-scale": true}

// kernelSeries is the kernels to boot: NVMET_REBIND_E2E_KERNELS, else
// allKernels under NVMET_REBIND_E2E_ALL=1, else defaultKernels.
func kernelSeries() []string {
	if s := strings.Fields(os.Getenv(envKernels)); len(s) > 0 {
		return s
	}
	if os.Getenv(envAll) == "1" {
		return allKernels
	}
	return defaultKernels
}

// kernelRun is one kernel's boot with its scenarios.
type kernelRun struct {
	series    string
	scenarios []string
}

// kernelPlan decides which scenarios (already selected by selectScenarios)
// each kernel runs: every one on each kernel NVMET_REBIND_E2E_KERNELS names,
// or with NVMET_REBIND_E2E_ALL=1; by default every one on fullKernels
// (newestOnlyScenarios on the newest alone) and representativeScenarios
// on the others. Kernels left with none are not booted.
func kernelPlan(selected []string) []kernelRun {
	explicit := len(strings.Fields(os.Getenv(envKernels))) > 0 || os.Getenv(envAll) == "1"
	var plan []kernelRun
	for _, series := range kernelSeries() {
		var sc []string
		for _, n := range selected {
			base, _, _ := strings.Cut(n, "@")
			full := fullKernels[series] && (!newestOnlyScenarios[base] || series == vm.NewestSeries)
			if explicit || full || representativeScenarios[base] {
				sc = append(sc, n)
			}
		}
		if len(sc) > 0 {
			plan = append(plan, kernelRun{series, sc})
		}
	}
	return plan
}

// systemdKernels are the kernels TestSystemd boots an image on:
// NVMET_REBIND_E2E_KERNELS when set; by default the image's own (Debian 12
// on its 6.1, Debian 13 on its 6.12, Debian testing on forky's kernel:
// vm.DebianRelease.Kernel); with NVMET_REBIND_E2E_ALL=1 every one of
// allKernels and the image's own.
func systemdKernels(codename string) []string {
	own := ""
	for _, r := range vm.DebianReleases {
		if r.Codename == codename {
			own = r.Kernel
		}
	}
	if s := strings.Fields(os.Getenv(envKernels)); len(s) > 0 {
		return s
	}
	if os.Getenv(envAll) == "1" {
		ks := kernelSeries()
		if own != "" && !slices.Contains(ks, own) {
			ks = append(slices.Clone(ks), own)
		}
		return ks
	}
	return []string{own}
}

// vmImage is everything needed to boot one kernel.
type vmImage struct {
	kernel *vm.Kernel
	initrd string
	siw    string // siw.ko, "" if not built
	siwErr string // why not
}

// prepareImage downloads/unpacks the kernel, builds siw.ko (best effort),
// the cached base initramfs and the per-run overlay.
func prepareImage(t *testing.T, series string) *vmImage {
	t.Helper()
	start := time.Now()
	k, err := vm.PrepareKernel(series)
	if err != nil {
		if s, ok := err.(vm.ErrSkip); ok {
			t.Skip(s.Msg)
		}
		t.Fatalf("kernel %s: %v", series, err)
	}
	img := &vmImage{kernel: k}
	var extra []string
	if os.Getenv(envSiw) != "0" {
		ko, err := vm.BuildSiw(k)
		if err != nil {
			img.siwErr = err.Error()
			t.Logf("siw.ko for %s not built (the siw scenarios will skip): %v", k.Release, err)
		} else {
			img.siw = ko
			extra = append(extra, ko)
		}
	} else {
		img.siwErr = envSiw + "=0"
	}
	base, err := vm.BaseInitramfs(k, extra)
	if err != nil {
		t.Fatalf("base initramfs: %v", err)
	}
	bins := buildBinaries(t)
	ov := vm.Overlay{Files: map[string]string{
		"/init":                  filepath.Join("guest", "init.sh"),
		"/e2e/lib.sh":            filepath.Join("guest", "lib.sh"),
		"/e2e/demo.sh":           filepath.Join("guest", "demo.sh"),
		"/usr/local/bin/e2eutil": bins.e2eutil,
	}, Data: map[string][]byte{}}
	scripts, _ := filepath.Glob(filepath.Join("guest", "scenarios", "*.sh"))
	for _, s := range scripts {
		ov.Files["/e2e/scenarios/"+filepath.Base(s)] = s
	}
	if bins.daemon != "" {
		ov.Files["/usr/local/bin/nvmet-rebind"] = bins.daemon
	} else {
		ov.Data["/e2e/daemon-missing"] = []byte(firstLines(bins.daemonErr, 5) + "\n")
	}
	if img.siwErr != "" {
		ov.Data["/e2e/siw-missing"] = []byte(firstLines(img.siwErr, 3) + "\n")
	}
	// Modules this kernel builds in or dropped (libcrc32c since 6.14):
	// /init does not load them.
	if absent := vm.AbsentModules(k); len(absent) > 0 {
		t.Logf("%s: modules not in this kernel (built in or gone; not loaded): %s", k.Release, strings.Join(absent, " "))
		ov.Data["/e2e/modules-absent"] = []byte(strings.Join(absent, " ") + "\n")
	}
	dir := runDir(t)
	overlay := filepath.Join(dir, "overlay-"+k.Release+".cpio.gz")
	if err := ov.Write(overlay); err != nil {
		t.Fatalf("overlay: %v", err)
	}
	img.initrd = filepath.Join(dir, "initrd-"+k.Release+".img")
	if err := vm.ConcatFiles(img.initrd, base, overlay); err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s (%s %s, %s layout, from %s) ready in %v", k.Release, k.Package, k.Version, k.Layout, k.Apt, time.Since(start).Round(time.Millisecond))
	return img
}

func firstLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, " | ")
}

// scenarioLimit is the limit a scenario declares for itself in a line
// "# e2e-limit: <seconds>" (lib.sh's run_scenario kills it after that;
// 300 s when it declares none), 0 when none: a scenario that is long by
// design (shared-iser-scale: 256 sharers, each iser=1 spawning modprobe)
// gets its own budget, in the guest and in the boot's.
func scenarioLimit(name string) time.Duration {
	base, _, _ := strings.Cut(name, "@")
	files, _ := filepath.Glob(filepath.Join("guest", "scenarios", "[0-9][0-9]-"+base+".sh"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "# e2e-limit:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
					return time.Duration(n) * time.Second
				}
			}
		}
	}
	return 0
}

// bootTimeout is the hard limit of one boot.
func bootTimeout(t *testing.T, scenarios []string) time.Duration {
	if s := os.Getenv(envTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", envTimeout, err)
		}
		return d
	}
	d := 90 * time.Second
	for _, n := range scenarios {
		d += max(150*time.Second, scenarioLimit(n))
	}
	if b := benchCount(); b > 0 {
		d += time.Duration(b) * 20 * time.Second
	}
	if d > 40*time.Minute {
		d = 40 * time.Minute
	}
	return d
}

// bootVM boots an image and returns the result.
//
// A kernel that dies before the guest's /init prints its first line, or
// any marker (the rdmamon image's /init prints no E2E INIT) (a
// panic in an initcall under TCG: seen once in CI, 7.3.4 in
// update_rq_clock from cpu_latency_qos_init, 1.1 s into the boot) ran
// nothing of the project's: that boot is logged as a warning, its console
// kept, and the VM booted once more. Any later failure stands.
func bootVM(t *testing.T, img *vmImage, appendArgs []string, timeout time.Duration, onLine func(string)) *vm.BootResult {
	t.Helper()
	res := bootOnce(t, img, appendArgs, timeout, onLine)
	if ev := res.Events; !ev.Init && !ev.Done && len(ev.Results) == 0 && len(ev.Logs) == 0 && !res.TimedOut {
		p := saveConsole(t, img.kernel.Series+"-died-before-init.log", res.Console)
		t.Logf("WARNING: the kernel died before /init ran (qemu: %v; console: %s): booting once more; its tail:\n%s", res.ExitErr, p, tail(res.Console, 30))
		res = bootOnce(t, img, appendArgs, timeout, onLine)
	}
	return res
}

func bootOnce(t *testing.T, img *vmImage, appendArgs []string, timeout time.Duration, onLine func(string)) *vm.BootResult {
	t.Helper()
	verbose := os.Getenv(envVerbose) == "1"
	res, err := vm.Boot(context.Background(), vm.BootConfig{
		Kernel:  img.kernel.Vmlinuz,
		Initrd:  img.initrd,
		Append:  appendArgs,
		Timeout: timeout,
		OnLine: func(line string) {
			if verbose {
				fmt.Fprintf(os.Stderr, "[%s] %s\n", img.kernel.Series, line)
			}
			if onLine != nil {
				onLine(line)
			}
		},
	})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	return res
}

// saveConsole writes the console log to tests/artifacts/<kernel>-<what>.log
// and returns its path.
func saveConsole(t *testing.T, name string, console []byte) string {
	t.Helper()
	dir := "artifacts"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("artifacts: %v", err)
		return ""
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, console, 0o644); err != nil {
		t.Logf("artifacts: %v", err)
		return ""
	}
	abs, _ := filepath.Abs(p)
	return abs
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func getenv(k string) string { return os.Getenv(k) }

// The run directory: what one `go test` builds for its boots (initrds,
// overlays, disk images, packages), under the cache but its own, so that
// two runs at once (a developer's and a benchmark's) never rebuild each
// other's files; TestMain removes it at the end.
var (
	runDirOnce sync.Once
	runDirPath string
	runDirErr  error
)

func theRunDir() (string, error) {
	runDirOnce.Do(func() {
		cache, err := vm.CacheDir()
		if err != nil {
			runDirErr = err
			return
		}
		// Those of runs that ended without their TestMain (a go test
		// -timeout panic, a kill) go first.
		ents, _ := os.ReadDir(filepath.Join(cache, "run"))
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() && syscall.Kill(pid, 0) == syscall.ESRCH {
				os.RemoveAll(filepath.Join(cache, "run", e.Name()))
			}
		}
		runDirPath = filepath.Join(cache, "run", strconv.Itoa(os.Getpid()))
		runDirErr = os.MkdirAll(runDirPath, 0o755)
	})
	return runDirPath, runDirErr
}

func runDir(t testing.TB) string {
	t.Helper()
	d, err := theRunDir()
	if err != nil {
		t.Fatalf("run directory: %v", err)
	}
	return d
}

func TestMain(m *testing.M) {
	code := m.Run()
	if runDirPath != "" {
		os.RemoveAll(runDirPath)
	}
	os.Exit(code)
}
