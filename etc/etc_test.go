// Package etc holds the files installed next to the binary (systemd unit,
// udev rule, man page, shell completion, reference config). These tests
// parse each one and, where the tool exists on the machine, run it through
// the tool that will read it (systemd-analyze, udevadm, groff, bash, zsh).
// A missing tool skips with the reason; CI installs them.
package etc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	unitPath        = "systemd/nvmet-rebind.service"
	triggerUnitPath = "systemd/nvmet-rebind-trigger@.service"
	dropInPath      = "systemd/nvmet-rebind.service.d/systemd-252.conf"
	rulePath        = "udev/rules.d/90-nvmet-rebind.rules"
	manPath         = "man/nvmet-rebind.8"
	bashPath        = "completion/nvmet-rebind.bash"
	zshPath         = "completion/_nvmet-rebind"

	// binary is where `make install` (PREFIX=/usr/local) puts the program.
	binary = "/usr/local/sbin/nvmet-rebind"

	// textfileDir is node_exporter's textfile directory on Debian, which
	// the unit lets the daemon write to.
	textfileDir = "/var/lib/prometheus/node-exporter"
)

// The CLI surface the docs must cover (cmd/nvmet-rebind). TestDocsMatchCLI
// checks this list against the built binary's --help.
var (
	commands    = []string{"run", "reload", "config", "status", "check", "plan", "trigger", "rebind", "version"}
	globalFlags = []string{"--config", "--configfs-root", "--sysfs-root", "--state-dir", "--run-dir", "--log-level"}
)

// --- systemd unit files ----------------------------------------------------

// unitFile is a parsed systemd unit: section -> key -> values in order.
type unitFile map[string]map[string][]string

// parseUnit reads systemd's unit syntax (systemd.syntax(7)): [Section]
// headers, Key=Value lines, '#' and ';' comments, and a trailing backslash
// joining the next line.
func parseUnit(b []byte) (unitFile, error) {
	u := unitFile{}
	section := ""
	var cont strings.Builder
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if cont.Len() > 0 {
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
				continue
			}
			line = cont.String() + " " + line
			cont.Reset()
		}
		if strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`))
			continue
		}
		switch {
		case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("line %d: %q is not Key=Value inside a section", i+1, line)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			u[section][k] = append(u[section][k], v)
		}
	}
	if cont.Len() > 0 {
		return nil, errors.New("file ends in a line continuation")
	}
	return u, nil
}

// last is the effective value of a single-valued key.
func (u unitFile) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// list is a list-valued key (After=, Wants=, ...): all assignments, split on
// whitespace; an empty assignment resets the list.
func (u unitFile) list(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		if v == "" {
			out = nil
			continue
		}
		out = append(out, strings.Fields(v)...)
	}
	return out
}

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

func TestParseUnit(t *testing.T) {
	t.Parallel()
	got, err := parseUnit([]byte("# c\n[Unit]\nAfter=a b\n; c\nAfter=c \\\n  d\n[Service]\nType=simple\nType=notify\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := unitFile{"Unit": {"After": {"a b", "c  d"}}, "Service": {"Type": {"simple", "notify"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseUnit (-want +got):\n%s", d)
	}
	if got.last("Service", "Type") != "notify" || !slices.Equal(got.list("Unit", "After"), []string{"a", "b", "c", "d"}) {
		t.Errorf("last/list: %q %q", got.last("Service", "Type"), got.list("Unit", "After"))
	}
	for _, bad := range []string{"Key=outside\n", "[S]\nno equals sign\n"} {
		if _, err := parseUnit([]byte(bad)); err == nil {
			t.Errorf("parseUnit(%q) accepted", bad)
		}
	}
}

func TestUnit(t *testing.T) {
	t.Parallel()
	u := readUnit(t, unitPath)
	svc := func(k string) string { return u.last("Service", k) }

	for k, want := range map[string]string{
		"Type":                  "notify-reload",
		"NotifyAccess":          "main",
		"ExecStart":             binary + " run",
		"Restart":               "on-failure",
		"RuntimeDirectory":      "nvmet-rebind",
		"RuntimeDirectoryMode":  "0700",
		"StateDirectory":        "nvmet-rebind",
		"StateDirectoryMode":    "0700",
		"ProtectSystem":         "strict",
		"ProtectHome":           "yes",
		"PrivateTmp":            "yes",
		"NoNewPrivileges":       "yes",
		"ProtectKernelTunables": "yes",
		"CapabilityBoundingSet": "CAP_NET_ADMIN",
	} {
		if got := svc(k); got != want {
			t.Errorf("[Service] %s=%q, want %q", k, got, want)
		}
	}
	// configfs lives under /sys: with ProtectKernelTunables it is writable
	// only through ReadWritePaths. The metrics textfile goes to
	// node_exporter's directory (Debian's default), nowhere else.
	if got, want := u.list("Service", "ReadWritePaths"), []string{"-/sys/kernel/config", "-" + textfileDir}; !slices.Equal(got, want) {
		t.Errorf("ReadWritePaths=%q, want %q", got, want)
	}
	// Type=notify-reload sends SIGHUP itself; an ExecReload= would reload
	// twice on systemd >= 253.
	if v := u["Service"]["ExecReload"]; v != nil {
		t.Errorf("ExecReload=%q in the main unit; it belongs in the systemd 252 drop-in only", v)
	}

	wd, err := time.ParseDuration(svc("WatchdogSec"))
	if err != nil || wd < 10*time.Second {
		t.Errorf("WatchdogSec=%q: want a duration of at least 10s (%v)", svc("WatchdogSec"), err)
	}

	after := u.list("Unit", "After")
	for _, dep := range []string{"sys-kernel-config.mount", "rdma-hw.target", "network.target",
		"nvmet.service", "target.service", "rtslib-fb-targetctl.service"} {
		if !slices.Contains(after, dep) {
			t.Errorf("After= %q lacks %s", after, dep)
		}
	}
	if !slices.Contains(u.list("Unit", "Wants"), "sys-kernel-config.mount") {
		t.Errorf("Wants= %q lacks sys-kernel-config.mount", u.list("Unit", "Wants"))
	}
	// The restore services may be absent or disabled, and the daemon must
	// outlive its RDMA devices: none of these may be a hard or pulling
	// dependency.
	for _, key := range []string{"Requires", "Requisite", "BindsTo", "PartOf", "Wants"} {
		for _, dep := range []string{"nvmet.service", "target.service", "rtslib-fb-targetctl.service", "rdma-hw.target"} {
			if slices.Contains(u.list("Unit", key), dep) {
				t.Errorf("%s= contains %s", key, dep)
			}
		}
	}

	fams := u.list("Service", "RestrictAddressFamilies")
	for _, f := range []string{"AF_UNIX", "AF_NETLINK"} {
		if !slices.Contains(fams, f) {
			t.Errorf("RestrictAddressFamilies=%q lacks %s", fams, f)
		}
	}
	if strings.Contains(svc("ExecStart"), "--metrics-listen") && !slices.Contains(fams, "AF_INET") {
		t.Errorf("ExecStart= enables the metrics listener but RestrictAddressFamilies=%q has no AF_INET", fams)
	}
	if got := u.list("Install", "WantedBy"); !slices.Equal(got, []string{"multi-user.target"}) {
		t.Errorf("WantedBy=%q, want multi-user.target", got)
	}
}

func TestDropIn(t *testing.T) {
	t.Parallel()
	u := readUnit(t, dropInPath)
	if got := u.last("Service", "Type"); got != "notify" {
		t.Errorf("Type=%q, want notify", got)
	}
	if got, want := u.last("Service", "ExecReload"), binary+" reload"; got != want {
		t.Errorf("ExecReload=%q, want %q", got, want)
	}
}

// systemdVersion is the major version printed by `systemd-analyze
// --version`, or a skip when the tool is missing.
func systemdVersion(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	out, err := exec.Command("systemd-analyze", "--version").Output()
	if err != nil {
		t.Fatalf("systemd-analyze --version: %v", err)
	}
	m := regexp.MustCompile(`(?m)^systemd (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze --version: no version in %q", out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

// installUnit copies the unit (and with dropIn its systemd 252 drop-in) to
// a temp dir with /usr/local/sbin/nvmet-rebind replaced by exe: verify
// insists that ExecStart= exists.
func installUnit(t *testing.T, exe string, dropIn bool) string {
	t.Helper()
	dir := t.TempDir()
	cp := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, bytes.ReplaceAll(b, []byte(binary), []byte(exe)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp(unitPath, filepath.Join(dir, "nvmet-rebind.service"))
	if dropIn {
		cp(dropInPath, filepath.Join(dir, "nvmet-rebind.service.d", "systemd-252.conf"))
	}
	return filepath.Join(dir, "nvmet-rebind.service")
}

func TestUnitVerify(t *testing.T) {
	t.Parallel()
	ver := systemdVersion(t)
	exe, err := os.Executable() // any existing executable will do
	if err != nil {
		t.Fatal(err)
	}
	for _, dropIn := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop-in=%v", dropIn), func(t *testing.T) {
			t.Parallel()
			unit := installUnit(t, exe, dropIn)
			cmd := exec.Command("systemd-analyze", "verify", "--man=no", unit)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("systemd-analyze verify: %v\n%s", err, stderr.String())
			}
			var complaints []string
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				// Only lines about our files; verify also loads the
				// host's units and may grumble about those.
				if !strings.Contains(line, filepath.Dir(unit)) {
					continue
				}
				// Type=notify-reload is systemd 253; older ones ignore the
				// line (the drop-in then sets Type=notify).
				if ver < 253 && strings.HasSuffix(line, "Failed to parse service type, ignoring: notify-reload") {
					t.Logf("systemd %d: %s (expected before 253)", ver, line)
					continue
				}
				complaints = append(complaints, line)
			}
			if len(complaints) > 0 {
				t.Errorf("systemd-analyze verify (systemd %d) complained:\n%s", ver, strings.Join(complaints, "\n"))
			}
		})
	}
}

// TestUnitSecurity keeps the sandbox from eroding: systemd's own exposure
// score of the unit, offline (systemd >= 250).
func TestUnitSecurity(t *testing.T) {
	t.Parallel()
	if v := systemdVersion(t); v < 250 {
		t.Skipf("systemd %d: systemd-analyze security --offline needs 250", v)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", installUnit(t, exe, false)).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("exposure %.1f", score)
	if score > 2.0 {
		t.Errorf("exposure level %.1f > 2.0; a sandboxing directive was dropped?\n%s", score, out)
	}
}

// --- the daemon's system calls against SystemCallFilter= --------------------

var (
	buildOnce sync.Once
	buildExe  string
	buildErr  error
)

// buildBinary builds cmd/nvmet-rebind once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs the daemon")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nvmet-rebind-etc-test-")
		if err != nil {
			buildErr = err
			return
		}
		buildExe = filepath.Join(dir, "nvmet-rebind")
		cmd := exec.Command(goTool, "build", "-o", buildExe, "../cmd/nvmet-rebind")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildExe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildExe != "" {
		os.RemoveAll(filepath.Dir(buildExe))
	}
	os.Exit(code)
}

// filterSets expands systemd's syscall groups with `systemd-analyze
// syscall-filter`: group name -> system calls, nested groups resolved.
func filterSets(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "syscall-filter", "--no-pager").Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter: %v", err)
	}
	raw := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case !strings.HasPrefix(line, " ") && strings.HasPrefix(f[0], "@"):
			cur = f[0]
		case cur != "":
			raw[cur] = append(raw[cur], f[0])
		}
	}
	var expand func(g string, seen map[string]bool) []string
	expand = func(g string, seen map[string]bool) []string {
		if seen[g] {
			return nil
		}
		seen[g] = true
		var out []string
		for _, s := range raw[g] {
			if strings.HasPrefix(s, "@") {
				out = append(out, expand(s, seen)...)
			} else {
				out = append(out, s)
			}
		}
		return out
	}
	sets := map[string][]string{}
	for g := range raw {
		sets[g] = expand(g, map[string]bool{})
	}
	return sets
}

// TestSyscallFilter runs the daemon under strace (against empty temp
// configfs/sysfs roots, so the configfs-write and RDMA paths are not
// exercised: those add socket/sendto/recvfrom/write/symlinkat/unlinkat/
// mkdirat), pokes it through its control socket, stops it, and checks every
// system call and socket family against the unit's filters.
func TestSyscallFilter(t *testing.T) {
	t.Parallel()
	systemdVersion(t)
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace not installed (apt-get install strace)")
	}
	checkSandbox(t, buildBinary(t))
}

// checkSandbox runs exe as the daemon under strace and checks its system
// calls and socket families against the unit's filters (TestSyscallFilter
// for `make build`'s binary, TestPackages for the packages' PIE one).
func checkSandbox(t *testing.T, exe string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"configfs", "sys", "state", "run"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "--configfs-root", filepath.Join(dir, "configfs"), "--sysfs-root", filepath.Join(dir, "sys"),
		"--state-dir", filepath.Join(dir, "state"), "--run-dir", filepath.Join(dir, "run")}
	trace := filepath.Join(dir, "strace.out")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	textfile := filepath.Join(dir, "nvmet-rebind.prom")
	daemon := exec.CommandContext(ctx, "strace", append([]string{"-f", "-qq", "-o", trace, exe}, append(args, "run", "--metrics-textfile", textfile)...)...)
	stderr, err := daemon.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	// "starting" is logged before the tasks start; the control socket
	// answering means they are running.
	started := make(chan error, 1)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), "msg=starting") {
				started <- nil
				sent = true
			}
		}
		if !sent {
			started <- fmt.Errorf("daemon exited before starting:\n%s", log.String())
		}
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	var trig []byte
	for {
		trig, err = exec.CommandContext(ctx, exe, append(args, "trigger")...).CombinedOutput()
		// Not listening yet: the trigger fell back to a reconcile under
		// the lock, which the daemon holds, and did nothing (exit 0, or
		// an error). Only an answer on the socket means the daemon's
		// signal handlers are in place for the SIGINT below.
		if err == nil && !bytes.Contains(trig, []byte("nothing done")) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("trigger: %v\n%s", err, trig)
	}
	// The metrics textfile is written after the round, by its own
	// goroutine: wait for it, so the trace has its system calls.
	for {
		if _, err := os.Stat(textfile); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// strace does not pass SIGINT on to the program it runs: signal the
	// daemon, its child, and strace exits with it.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", daemon.Process.Pid, daemon.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil {
		t.Fatalf("children of strace: %q", kids)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Fatalf("daemon under strace: %v\n%s", err, log.String())
	}
	// The trace covers the metrics textfile's write (temp file, chmod,
	// rename) too.
	if b, err := os.ReadFile(textfile); err != nil || !bytes.Contains(b, []byte("nvmet_rebind_reconciles_total")) {
		t.Errorf("the daemon did not write its metrics textfile: %v %q", err, b)
	}

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	callRE := regexp.MustCompile(`^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>)`)
	famRE := regexp.MustCompile(`\bsocket\((AF_[A-Z0-9]+)`)
	used, fams := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := callRE.FindStringSubmatch(line); m != nil {
			used[m[1]] = true
		}
		if m := famRE.FindStringSubmatch(line); m != nil {
			fams[m[1]] = true
		}
	}
	delete(used, "execve") // strace's exec of the daemon, before any filter
	if len(used) < 10 {
		t.Fatalf("only %d system calls in the trace; strace output unparsed?\n%s", len(used), b)
	}

	u := readUnit(t, unitPath)
	sets := filterSets(t)
	allow, deny := map[string]bool{}, map[string]bool{}
	for _, v := range u.list("Service", "SystemCallFilter") {
		target := allow
		if strings.HasPrefix(v, "~") {
			target, v = deny, v[1:]
		}
		if strings.HasPrefix(v, "@") {
			if sets[v] == nil {
				t.Fatalf("SystemCallFilter group %s unknown to this systemd", v)
			}
			for _, s := range sets[v] {
				target[s] = true
			}
		} else {
			target[v] = true
		}
	}
	// @default is always allowed (systemd.exec(5)).
	for _, s := range sets["@default"] {
		allow[s] = true
	}
	var bad []string
	for s := range used {
		if !allow[s] || deny[s] {
			bad = append(bad, s)
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("system calls the unit's SystemCallFilter= would refuse: %v", bad)
	}
	rafs := u.list("Service", "RestrictAddressFamilies")
	for f := range fams {
		if !slices.Contains(rafs, f) {
			t.Errorf("socket(%s) is used but RestrictAddressFamilies=%q", f, rafs)
		}
	}
	names := make([]string, 0, len(used))
	for s := range used {
		names = append(names, s)
	}
	slices.Sort(names)
	t.Logf("%d system calls, all allowed: %s", len(names), strings.Join(names, " "))
}

// --- udev rule -------------------------------------------------------------

// udevToken is one KEY{attr}OP"value" of a rule line.
type udevToken struct {
	Key, Attr, Op, Value string
}

// isMatch: == and != compare; =, +=, -=, := assign (udev(7)).
func (tk udevToken) isMatch() bool { return tk.Op == "==" || tk.Op == "!=" }

var udevTokenRE = regexp.MustCompile(`^([A-Z_]+)(?:\{([^}]*)\})?(==|!=|\+=|-=|:=|=)"((?:[^"\\]|\\.)*)"`)

// parseUdevRules parses udev rule syntax (udev(7)): one rule per line
// (backslash continues a line), comma-separated tokens, '#' comments.
func parseUdevRules(b []byte) ([][]udevToken, error) {
	var rules [][]udevToken
	var cont string
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if cont != "" {
			line, cont = cont+line, ""
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rule []udevToken
		rest := line
		for rest != "" {
			m := udevTokenRE.FindStringSubmatch(rest)
			if m == nil {
				return nil, fmt.Errorf("line %d: cannot parse %q", i+1, rest)
			}
			rule = append(rule, udevToken{Key: m[1], Attr: m[2], Op: m[3], Value: m[4]})
			rest = strings.TrimSpace(rest[len(m[0]):])
			if rest == "" {
				break
			}
			if !strings.HasPrefix(rest, ",") {
				return nil, fmt.Errorf("line %d: expected ',' before %q", i+1, rest)
			}
			rest = strings.TrimSpace(rest[1:])
			if rest == "" {
				return nil, fmt.Errorf("line %d: trailing ','", i+1)
			}
		}
		rules = append(rules, rule)
	}
	if cont != "" {
		return nil, errors.New("file ends in a line continuation")
	}
	return rules, nil
}

func TestParseUdevRules(t *testing.T) {
	t.Parallel()
	got, err := parseUdevRules([]byte("# c\nACTION==\"add\", ATTR{x}!=\"a\\\"b\", \\\n  RUN+=\"/bin/x y\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]udevToken{{{"ACTION", "", "==", "add"}, {"ATTR", "x", "!=", `a\"b`}, {"RUN", "", "+=", "/bin/x y"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseUdevRules (-want +got):\n%s", d)
	}
	for _, bad := range []string{`ACTION=="add" RUN+="x"`, `ACTION=="add",`, `action=="add"`, `ACTION==add`} {
		if _, err := parseUdevRules([]byte(bad)); err == nil {
			t.Errorf("parseUdevRules(%q) accepted", bad)
		}
	}
}

func TestUdevRule(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(rulePath)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseUdevRules(b)
	if err != nil {
		t.Fatalf("%s: %v", rulePath, err)
	}
	if len(rules) != 1 {
		t.Fatalf("%d rules, want 1", len(rules))
	}
	var matches, assigns []udevToken
	for _, tk := range rules[0] {
		if tk.isMatch() {
			matches = append(matches, tk)
		} else {
			assigns = append(assigns, tk)
		}
	}
	wantMatches := []udevToken{{"ACTION", "", "==", "add|remove|move"}, {"SUBSYSTEM", "", "==", "infiniband"}}
	if d := cmp.Diff(wantMatches, matches); d != "" {
		t.Errorf("matches (-want +got):\n%s", d)
	}
	wantAssigns := []udevToken{{"RUN", "", "+=", binary + " trigger"}}
	if d := cmp.Diff(wantAssigns, assigns); d != "" {
		t.Errorf("assignments (-want +got):\n%s", d)
	}
}

func TestUdevadmVerify(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("udevadm"); err != nil {
		t.Skip("udevadm not installed (apt-get install udev)")
	}
	out, err := exec.Command("udevadm", "verify", "--help").CombinedOutput()
	if err != nil {
		t.Skipf("this udevadm has no verify (added in systemd 253): %s", bytes.TrimSpace(out))
	}
	out, err = exec.Command("udevadm", "verify", "--no-style", rulePath).CombinedOutput()
	if err != nil {
		t.Errorf("udevadm verify: %v\n%s", err, out)
	}
}

// --- man page and completion ----------------------------------------------

func TestManPage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, sh := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "CONFIGURATION", "FILES", "EXIT STATUS", "SEE ALSO"} {
		if !strings.Contains(src, "\n.SH "+sh+"\n") {
			t.Errorf("no .SH %s section", sh)
		}
	}
	text := strings.ReplaceAll(src, `\-`, "-")
	for _, want := range append(append([]string{
		"subnet", "give_up_after", "pin_device", "resync_interval",
		"/etc/nvmet-rebind/config.toml", "/var/lib/nvmet-rebind/journal", "/run/nvmet-rebind/control.sock",
		"nvmetcli (8)", "targetcli (8)", "rdma (8)",
	}, commands...), globalFlags...) {
		if !strings.Contains(text, want) {
			t.Errorf("man page does not mention %q", want)
		}
	}

	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff not installed (apt-get install groff-base)")
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", manPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, stderr.String())
	}
}

func TestBashCompletion(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	if out, err := exec.Command("bash", "-n", bashPath).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	// Source it, check the registration, and complete a few command lines.
	script := `set -e
source "$1"
complete -p nvmet-rebind
c() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _nvmet_rebind; echo "${COMPREPLY[*]}"; }
c nvmet-rebind ''
c nvmet-rebind --
c nvmet-rebind --log-level ''
c nvmet-rebind --state-dir /x st
c nvmet-rebind run --
`
	out, err := exec.Command("bash", "--norc", "--noprofile", "-c", script, "bash", bashPath).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{
		"complete -F _nvmet_rebind nvmet-rebind",
		strings.Join(commands, " ") + " help",
		strings.Join(globalFlags, " ") + " --help --version",
		"debug info warn error",
		"status",
		"--dry-run --metrics-listen --metrics-textfile --no-watch --help",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bash completion (-want +got):\n%s", d)
	}
}

func TestZshCompletion(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(zshPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("#compdef nvmet-rebind\n")) {
		t.Error("first line is not #compdef nvmet-rebind")
	}
	for _, w := range append(append([]string{}, commands...), globalFlags...) {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("zsh completion does not mention %q", w)
		}
	}
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh not installed (apt-get install zsh)")
	}
	if out, err := exec.Command("zsh", "-n", zshPath).CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v\n%s", err, out)
	}
}

// TestDocsMatchCLI checks the lists above against the binary's --help, so
// a new command or global flag fails here until the docs cover it.
func TestDocsMatchCLI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(buildBinary(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	var gotCmds, gotFlags []string
	section := ""
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, " ") {
			section = strings.TrimSpace(line)
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch section {
		case "COMMANDS:":
			if name := strings.TrimSuffix(f[0], ","); name != "help" {
				gotCmds = append(gotCmds, name)
			}
		case "GLOBAL OPTIONS:":
			if f[0] != "--help," && f[0] != "--version," {
				gotFlags = append(gotFlags, f[0])
			}
		}
	}
	if d := cmp.Diff(commands, gotCmds); d != "" {
		t.Errorf("commands (-docs +binary):\n%s", d)
	}
	if d := cmp.Diff(globalFlags, gotFlags); d != "" {
		t.Errorf("global flags (-docs +binary):\n%s", d)
	}
}

// --- make install ------------------------------------------------------------

// TestMakeInstall runs the Makefile's install target (its build step
// skipped: a stand-in binary) into scratch roots, with a fake systemctl on
// PATH that records being asked. The systemd < 253 drop-in follows the
// target's systemd: SYSTEMD_VERSION when given; with DESTDIR and no
// SYSTEMD_VERSION the build host is not asked and the drop-in is installed
// (it works on every version); without DESTDIR this host's systemctl
// decides (run in a private mount namespace with an overlay on /etc, as
// root).
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed (apt-get install make)")
	}
	for _, tool := range []string{"sh", "awk", "sed", "install"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	// A tree with the repository's Makefile and etc/, and bin/nvmet-rebind.
	src, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tree, fake := t.TempDir(), t.TempDir()
	for _, l := range [][2]string{{filepath.Join(src, "../Makefile"), "Makefile"}, {src, "etc"}} {
		if err := os.Symlink(l[0], filepath.Join(tree, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(tree, "bin/nvmet-rebind"), "#!/bin/sh\necho stand-in\n", 0o755)

	// The fake systemctl of "the build host": systemd 257, or 252.
	asked := filepath.Join(fake, "asked")
	hostSystemd := func(version string) {
		os.Remove(asked)
		write(filepath.Join(fake, "systemctl"), "#!/bin/sh\ntouch '"+asked+"'\n[ \"$1\" = --version ] || exit 3\necho 'systemd "+version+" ("+version+".1-1)'\necho '+PAM +AUDIT'\n", 0o755)
	}
	// The caller's environment, without what would change the Makefile's
	// defaults, and the fake systemctl first on PATH.
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "SYSTEMD_VERSION", "DESTDIR", "PREFIX", "MAKEFLAGS", "MFLAGS", "PATH":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+fake+":"+os.Getenv("PATH"))
	makeInstall := func(args ...string) (string, error) {
		cmd := exec.Command(makeTool, append([]string{"-s", "-o", "build", "install"}, args...)...)
		cmd.Dir = tree
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// files lists the regular files under root, relative.
	files := func(root string) []string {
		t.Helper()
		var out []string
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				out = append(out, rel)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	const dropIn = "etc/systemd/system/nvmet-rebind.service.d/systemd-252.conf"
	base := []string{
		"etc/nvmet-rebind/config.toml",
		"etc/udev/rules.d/90-nvmet-rebind.rules",
		"usr/lib/systemd/system/nvmet-rebind-trigger@.service",
		"usr/lib/systemd/system/nvmet-rebind.service",
		"usr/sbin/nvmet-rebind",
		"usr/share/bash-completion/completions/nvmet-rebind",
		"usr/share/man/man8/nvmet-rebind.8",
		"usr/share/zsh/site-functions/_nvmet-rebind",
	}
	withDropIn := slices.Sorted(slices.Values(append(slices.Clone(base), dropIn)))

	for _, tc := range []struct {
		name, host, version string
		want                []string
	}{
		{"unknown target (host 257 not asked)", "257", "", withDropIn},
		{"unknown target (host 252 not asked)", "252", "", withDropIn},
		{"SYSTEMD_VERSION=257", "252", "257", base},
		{"SYSTEMD_VERSION=253", "252", "253", base},
		{"SYSTEMD_VERSION=252", "257", "252", withDropIn},
	} {
		hostSystemd(tc.host)
		dest := t.TempDir()
		args := []string{"DESTDIR=" + dest, "PREFIX=/usr"}
		if tc.version != "" {
			args = append(args, "SYSTEMD_VERSION="+tc.version)
		}
		if out, err := makeInstall(args...); err != nil {
			t.Fatalf("%s: make install %s: %v\n%s", tc.name, strings.Join(args, " "), err, out)
		}
		if _, err := os.Stat(asked); err == nil {
			t.Errorf("%s: make install DESTDIR=... ran the build host's systemctl", tc.name)
		}
		if d := cmp.Diff(tc.want, files(dest)); d != "" {
			t.Errorf("%s: installed files (-want +got):\n%s", tc.name, d)
		}
		if slices.Contains(tc.want, dropIn) {
			u := readUnit(t, filepath.Join(dest, dropIn))
			if got := u.last("Service", "ExecReload"); got != "/usr/sbin/nvmet-rebind reload" {
				t.Errorf("%s: PREFIX=/usr drop-in ExecReload=%q", tc.name, got)
			}
			if st, _ := os.Stat(filepath.Join(dest, dropIn)); st.Mode().Perm() != 0o644 {
				t.Errorf("%s: drop-in mode %v, want 0644", tc.name, st.Mode().Perm())
			}
		}
	}
	for _, bad := range []string{"252.39", "v252", "x"} {
		if out, err := makeInstall("DESTDIR="+t.TempDir(), "SYSTEMD_VERSION="+bad); err == nil || !strings.Contains(out, "not a number") {
			t.Errorf("SYSTEMD_VERSION=%s: %v, %q; want a failure naming it", bad, err, out)
		}
	}

	// No DESTDIR: onto this host, whose systemctl decides. /etc is an
	// overlay in a private mount namespace; PREFIX a scratch dir.
	t.Run("host", func(t *testing.T) {
		unshare, err := lookTool("unshare")
		if err != nil || os.Geteuid() != 0 {
			t.Skip("needs root and unshare (util-linux) for a private /etc")
		}
		// /etc as an overlay whose upper layer (on a tmpfs) gets the writes:
		// the rest of /etc (/etc/alternatives/awk) stays visible.
		const private = `set -e; mount -t tmpfs none "$2"; mkdir "$2/u" "$2/w"; mount -t overlay overlay -o lowerdir=/etc,upperdir="$2/u",workdir="$2/w" /etc; `
		if out, err := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", private+"true", "sh", "-", t.TempDir()).CombinedOutput(); err != nil {
			t.Skipf("no private mount namespace with an overlay on /etc here: %v %s", err, out)
		}
		for _, tc := range []struct {
			host string
			want bool
		}{{"252", true}, {"257", false}, {"", true}} { // "": no systemctl, version unknown
			hostSystemd(tc.host)
			if tc.host == "" {
				write(filepath.Join(fake, "systemctl"), "#!/bin/sh\ntouch '"+asked+"'\nexit 1\n", 0o755)
			}
			prefix := t.TempDir()
			script := private + `"$0" -s -o build install PREFIX="$1"; cd "$2/u"; find . -type f | sort`
			cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, makeTool, prefix, t.TempDir())
			cmd.Dir = tree
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd %q: make install PREFIX=%s: %v\n%s", tc.host, prefix, err, out)
			}
			if _, err := os.Stat(asked); err != nil {
				t.Errorf("systemd %q: make install without DESTDIR did not ask this host's systemctl", tc.host)
			}
			if got := strings.Contains(string(out), "./"+strings.TrimPrefix(dropIn, "etc/")+"\n"); got != tc.want {
				t.Errorf("systemd %q: drop-in installed %v, want %v; /etc:\n%s", tc.host, got, tc.want, out)
			}
			if _, err := os.Stat(filepath.Join(prefix, "lib/systemd/system/nvmet-rebind.service")); err != nil {
				t.Errorf("systemd %q: no unit under PREFIX: %v", tc.host, err)
			}
		}
	})
}

// The trigger unit (the udev hook's reconcile on a systemd host) runs under
// the daemon's sandbox: every [Service] directive of nvmet-rebind.service
// but the daemon's own (its type, start, watchdog, restarts, runtime
// directory) has the same values there, and it has nothing else; systemd
// verifies it and scores its exposure as the daemon's.
func TestTriggerUnit(t *testing.T) {
	t.Parallel()
	d, u := readUnit(t, unitPath), readUnit(t, triggerUnitPath)
	daemonOnly := map[string]bool{"Type": true, "NotifyAccess": true, "ExecStart": true, "WatchdogSec": true, "Restart": true,
		"RestartSec": true, "RestartPreventExitStatus": true, "RuntimeDirectory": true, "RuntimeDirectoryMode": true}
	for k, v := range d["Service"] {
		if daemonOnly[k] {
			continue
		}
		if !slices.Equal(u["Service"][k], v) {
			t.Errorf("%s: %s=%q, the daemon's unit has %q", triggerUnitPath, k, u["Service"][k], v)
		}
	}
	for k := range u["Service"] {
		if _, ok := d["Service"][k]; !ok || daemonOnly[k] && k != "Type" && k != "ExecStart" {
			t.Errorf("%s: %s is not the daemon's sandbox", triggerUnitPath, k)
		}
	}
	if u.last("Service", "Type") != "oneshot" || u.last("Service", "ExecStart") != "/usr/local/sbin/nvmet-rebind trigger" {
		t.Errorf("%s: Type=%s ExecStart=%s", triggerUnitPath, u.last("Service", "Type"), u.last("Service", "ExecStart"))
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(triggerUnitPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "nvmet-rebind-trigger@.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/sbin/nvmet-rebind"), []byte(exe)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", unit).CombinedOutput()
	if err != nil || strings.Contains(string(out), dir) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if v := systemdVersion(t); v < 250 {
		return
	}
	inst := filepath.Join(dir, "nvmet-rebind-trigger@4242.service")
	if err := os.Rename(unit, inst); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", inst).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	if score, _ := strconv.ParseFloat(string(m[1]), 64); score > 2.0 {
		t.Errorf("trigger unit exposure %.1f > 2.0\n%s", score, out)
	}
}
