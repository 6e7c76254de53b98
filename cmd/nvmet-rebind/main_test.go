package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
)

// The test binary doubles as nvmet-rebind: run with NVMET_REBIND_AS_MAIN=1
// it is the real command (signals, sockets, exit codes and all).
func TestMain(m *testing.M) {
	if os.Getenv("NVMET_REBIND_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type daemonEnv struct {
	t    *testing.T
	dir  string
	args []string
}

func newDaemonEnv(t *testing.T) *daemonEnv {
	dir := t.TempDir()
	for _, d := range []string{"cfs/nvmet/ports/1/subsystems", "cfs/nvmet/subsystems/nqn.a", "cfs/target/iscsi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": "192.0.2.1", "addr_trsvcid": "4420"} {
		if err := os.WriteFile(filepath.Join(dir, "cfs/nvmet/ports/1", f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[policy]\nresync_interval = \"30s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &daemonEnv{t: t, dir: dir, args: []string{"--config", cfg, "--configfs-root", filepath.Join(dir, "cfs"),
		"--sysfs-root", filepath.Join(dir, "sys"), "--state-dir", filepath.Join(dir, "state"), "--run-dir", filepath.Join(dir, "run")}}
}

func (d *daemonEnv) cmd(env []string, args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], append(append([]string{}, d.args...), args...)...)
	c.Env = append(append(os.Environ(), "NVMET_REBIND_AS_MAIN=1"), env...)
	return c
}

// start runs the daemon in the background until the test ends; it returns
// once the control socket is there.
func (d *daemonEnv) start() {
	d.t.Helper()
	c := d.cmd(nil, "run")
	if err := c.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); c.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(d.dir, "run", "control.sock")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatal("daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemonEnv) run(args ...string) (string, int) { return d.runEnv(nil, args...) }

// runEnv is run with env added to the environment.
func (d *daemonEnv) runEnv(env []string, args ...string) (string, int) {
	var out bytes.Buffer
	c := d.cmd(env, args...)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return out.String(), 0
}

// The notify protocol as systemd sees it, from the real command: READY=1
// after the first reconcile, WATCHDOG=1 from the loop, RELOADING=1 with
// MONOTONIC_USEC then READY=1 on SIGHUP (also for a refused config),
// STOPPING=1 on SIGTERM; plus the control socket while it runs.
func TestDaemonNotifyAndControl(t *testing.T) {
	d := newDaemonEnv(t)
	sock := filepath.Join(d.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	expect := func(prefix string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed waiting for %q", prefix)
				}
				if strings.HasPrefix(m, prefix) {
					return m
				}
			case <-deadline:
				t.Fatalf("no %q datagram", prefix)
			}
		}
	}
	var stderr bytes.Buffer
	c := d.cmd([]string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}, "run")
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	expect("READY=1")
	expect("WATCHDOG=1")
	expect("WATCHDOG=1") // keeps beating while idle

	// The control socket answers while the daemon runs.
	out, code := d.run("status", "--json")
	var r struct {
		Source    string `json:"source"`
		Listeners []struct {
			Kind    string `json:"kind"`
			ID      string `json:"id"`
			Managed bool   `json:"managed"`
			Reason  string `json:"reason"`
		} `json:"listeners"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Source != "daemon" || len(r.Listeners) != 1 || r.Listeners[0].Reason != "not enabled: no subsystem linked" {
		t.Errorf("status --json (exit %d): %s", code, out)
	}
	// A reload through the socket is the same reload as SIGHUP.
	if out, code := d.run("reload"); code != 0 {
		t.Errorf("reload exit %d: %s", code, out)
	}
	if m := expect("RELOADING=1"); !strings.Contains(m, "\nMONOTONIC_USEC=") {
		t.Errorf("RELOADING datagram without MONOTONIC_USEC: %q", m)
	}
	expect("READY=1")
	if out, code := d.run("trigger"); code != 0 {
		t.Errorf("trigger exit %d: %s", code, out)
	}
	if out, code := d.run("check"); code != 0 || !strings.HasPrefix(out, "NVMET-REBIND OK - 0 managed listeners | alive=0 ") {
		t.Errorf("check with nothing managed: exit %d: %s", code, out)
	}

	c.Process.Signal(syscall.SIGHUP)
	m := expect("RELOADING=1")
	if !strings.Contains(m, "\nMONOTONIC_USEC=") {
		t.Errorf("RELOADING datagram without MONOTONIC_USEC: %q", m)
	}
	expect("READY=1")

	// A broken config on reload: refused, old config kept, READY again.
	if err := os.WriteFile(d.args[1], []byte("[policy]\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := d.run("reload"); code != 2 || !strings.Contains(out, `unknown key "policy.bogus"`) {
		t.Errorf("reload of a bad config: exit %d: %s", code, out)
	}
	// The daemon itself refused it: its STATUS= says so (systemctl
	// status), whichever way the reload came (ExecReload or SIGHUP).
	for i := 0; ; i++ {
		if m := expect("STATUS="); strings.Contains(m, "reload refused") && strings.Contains(m, "policy.bogus") {
			break
		}
		if i == 5 {
			t.Fatal("no STATUS= saying the reload was refused")
		}
	}
	c.Process.Signal(syscall.SIGHUP)
	expect("RELOADING=1")
	expect("READY=1")

	c.Process.Signal(syscall.SIGTERM)
	expect("STOPPING=1")
	if err := c.Wait(); err != nil {
		t.Errorf("daemon exit: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "reload refused, keeping the old config") {
		t.Errorf("log lacks the refused reload:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(d.dir, "run", "control.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left behind: %v", err)
	}
}

// A second daemon: refused at once (the first answers on the socket), a
// setup failure that may pass (exit 2, restarted by the unit), not the
// invalid configuration (78) that RestartPreventExitStatus= stops.
func TestSecondDaemonRefused(t *testing.T) {
	d := newDaemonEnv(t)
	d.start()
	out, code := d.run("run")
	if code != 2 || !strings.Contains(out, "locked by another nvmet-rebind") {
		t.Errorf("second daemon: exit %d: %s", code, out)
	}
}

// A daemon started while a trigger or a rebind holds the lock (the udev
// hook's unit reconciling after an event, with no daemon yet) waits for
// it instead of failing its start (seen in the VM: systemctl start right
// after a trigger's heal exited 2).
func TestDaemonWaitsForTriggersLock(t *testing.T) {
	d := newDaemonEnv(t)
	unlock, err := daemon.Lock(filepath.Join(d.dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a buffer: the test reads it while the daemon writes.
	log, err := os.Create(filepath.Join(d.dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	logged := func() string { b, _ := os.ReadFile(log.Name()); return string(b) }
	c := d.cmd(nil, "run")
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	defer func() {
		c.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	time.Sleep(time.Second)
	unlock()
	sock := filepath.Join(d.dir, "run", "control.sock")
	for deadline := time.Now().Add(10 * time.Second); !control.Answers(sock); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("daemon exited (%v) instead of waiting for the lock:\n%s", err, logged())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not answering 10 s after the lock was freed:\n%s", logged())
		}
	}
	if !strings.Contains(logged(), "waiting for the state directory's lock") {
		t.Errorf("the wait is not logged:\n%s", logged())
	}
}

func TestBadInputExitCodes(t *testing.T) {
	d := newDaemonEnv(t)
	if out, code := d.run("--log-level", "loud", "status"); code != 2 || !strings.Contains(out, "--log-level") {
		t.Errorf("bad log level: exit %d: %s", code, out)
	}
	if out, code := d.run("rebind"); code != 2 || !strings.Contains(out, "give one port id") {
		t.Errorf("rebind without id: exit %d: %s", code, out)
	}
	if out, code := d.run("rebind", "42"); code != 2 || !strings.Contains(out, "no such port") {
		t.Errorf("rebind of a missing port: exit %d: %s", code, out)
	}
	if err := os.Chmod(d.args[1], 0o666); err != nil {
		t.Fatal(err)
	}
	if out, code := d.run("run"); code != exitConfig || !strings.Contains(out, "writable by group or others") {
		t.Errorf("world-writable config: run exit %d: %s", code, out)
	}
	if out, code := d.run("plan"); code != 2 {
		t.Errorf("plan with a refused config: exit %d: %s", code, out)
	}
}

// snapshotDir records every entry under dir: path, mode, and content.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := st.Mode().String()
		if st.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Observers are read-only: status, check and plan, with and without a
// daemon, leave the state directory byte for byte as it was — a temp file
// of a crash, a corrupt entry, a pins file and loose modes included (only
// the writer cleans up, at its start).
func TestObserversLeaveStateDirUntouched(t *testing.T) {
	d := newDaemonEnv(t)
	state := filepath.Join(d.dir, "state")
	for p, v := range map[string]string{
		"journal/.tmp-123":                          "half a put",
		"journal/nvmet-bad.json":                    "{garbage",
		"journal/lio-0123456789abcdef01234567.json": `{"version":1,"kind":"lio","id":"iqn.x/tpgt_1/192.0.2.1:3260","address":"192.0.2.1:3260","iser":true,"started":"2026-01-01T00:00:00Z"}`,
		"pins.json":                                 `[{"kind":"nvmet","id":"1","node_guid":"0000:0000:0000:0011"}]`,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(state, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	observe := func(when string) {
		t.Helper()
		before := snapshotDir(t, state)
		for _, args := range [][]string{{"status"}, {"status", "--json"}, {"check"}, {"plan"}} {
			d.run(args...) // exit codes do not matter here (no RDMA on this host)
		}
		if diff := cmp.Diff(before, snapshotDir(t, state)); diff != "" {
			t.Errorf("%s: status/check/plan changed the state dir (-before +after):\n%s", when, diff)
		}
	}
	observe("without a daemon")
	d.start()
	// The writer cleaned up at its start: the temp file is gone, the
	// corrupt entry moved aside; the directory's mode is the admin's, kept
	// (only one others can write is refused).
	if _, err := os.Stat(filepath.Join(state, "journal/.tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon left the temp file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "journal/nvmet-bad.json.corrupt")); err != nil {
		t.Errorf("the daemon did not quarantine the corrupt entry: %v", err)
	}
	if st, err := os.Stat(state); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o755 {
		t.Errorf("the daemon changed the state dir's mode: %v, want 0755 kept", st.Mode())
	}
	observe("with a daemon")
}

// run --metrics-textfile from the real command: the file appears after the
// first reconcile with the nvmet_rebind_* metrics; [metrics] textfile is
// used without the flag, and a SIGHUP reload that changes it moves the
// file; a path node_exporter would never read is refused at start (exit
// 78, an invalid configuration).
func TestMetricsTextfileFlagAndConfig(t *testing.T) {
	d := newDaemonEnv(t)
	stopDaemon := func(c *exec.Cmd) {
		t.Helper()
		c.Process.Signal(syscall.SIGTERM)
		if err := c.Wait(); err != nil {
			t.Errorf("daemon exit: %v", err)
		}
	}

	flag := filepath.Join(d.dir, "flag.prom")
	c := d.cmd(nil, "run", "--metrics-textfile", flag)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitProm(t, flag, `(?m)^nvmet_rebind_reconciles_total [1-9]`)
	stopDaemon(c)

	a, b := filepath.Join(d.dir, "a.prom"), filepath.Join(d.dir, "b.prom")
	setTextfile := func(p string) {
		t.Helper()
		if err := os.WriteFile(d.args[1], []byte("[metrics]\ntextfile = \""+p+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setTextfile(a)
	c = d.cmd(nil, "run")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitProm(t, a, `nvmet_rebind_listeners\{`)
	setTextfile(b)
	c.Process.Signal(syscall.SIGHUP)
	waitProm(t, b, `nvmet_rebind_listeners\{`)
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old textfile stayed after the reload moved it: %v", err)
	}
	stopDaemon(c)

	for _, bad := range []string{"relative.prom", filepath.Join(d.dir, "m.txt")} {
		if out, code := d.run("run", "--metrics-textfile", bad); code != exitConfig || !strings.Contains(out, "metrics textfile") {
			t.Errorf("run --metrics-textfile %s: exit %d: %s", bad, code, out)
		}
	}
	setTextfile("relative.prom")
	if out, code := d.run("run"); code != exitConfig || !strings.Contains(out, "metrics.textfile") {
		t.Errorf("run with [metrics] textfile relative: exit %d: %s", code, out)
	}
}

// runSplit runs the real command with exactly args (no daemonEnv flags)
// and returns its stdout, stderr and exit code.
func runSplit(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

func bareCmd(args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "NVMET_REBIND_") {
			c.Env = append(c.Env, e)
		}
	}
	c.Env = append(c.Env, "NVMET_REBIND_AS_MAIN=1")
	return c
}

// An unknown command (or help topic) is a usage error: exit 2, on stderr,
// naming it and listing the commands.
func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"help", "bogus"}, {"--log-level", "debug", "bogus", "x"}} {
		stdout, stderr, code := runSplit(t, bareCmd(args...))
		want := `nvmet-rebind: unknown command "bogus": the commands are run, reload, config, status, check, plan, trigger, rebind, version (see nvmet-rebind --help)` + "\n"
		if code != 2 || stdout != "" || stderr != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", args, code, stdout, stderr, want)
		}
	}
	// Help itself still works, exit 0.
	for _, args := range [][]string{{}, {"help"}, {"--help"}, {"-h"}, {"help", "run"}, {"status", "--help"}} {
		stdout, stderr, code := runSplit(t, bareCmd(args...))
		if code != 0 || !strings.Contains(stdout, "USAGE:") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if stdout, _, _ := runSplit(t, bareCmd("--help")); !strings.Contains(stdout, "--help, -h") || !strings.Contains(stdout, "help, h") {
		t.Errorf("--help lost the help flag or command:\n%s", stdout)
	}
}

// A global flag after the command: an error on stderr saying where it
// goes, with the command line fixed; other bad flags: an error pointing at
// the help, not the help itself on stdout.
func TestFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--config", "x"}, "--config is a global flag: put it before the command: nvmet-rebind --config x status"},
		{[]string{"status", "-config=x"}, "--config is a global flag: put it before the command: nvmet-rebind --config x status"},
		{[]string{"--log-level", "debug", "--config", "a", "status", "--json", "--config", "b c", "--state-dir", "/s"},
			"--config is a global flag: put it before the command: nvmet-rebind --config 'b c' --log-level debug --state-dir /s status --json"},
		{[]string{"rebind", "--run-dir=/r", "1"}, "--run-dir is a global flag: put it before the command: nvmet-rebind --run-dir /r rebind 1"},
		{[]string{"status", "--bogus"}, "status: unknown flag --bogus (see nvmet-rebind status --help)"},
		{[]string{"--bogus", "status"}, "unknown flag --bogus (see nvmet-rebind --help)"},
		{[]string{"--json", "status"}, "--json is a flag of status: put it after the command: nvmet-rebind status --json"},
	} {
		stdout, stderr, code := runSplit(t, bareCmd(tt.args...))
		if want := "nvmet-rebind: " + tt.want + "\n"; code != 2 || stdout != "" || stderr != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", tt.args, code, stdout, stderr, want)
		}
	}
}

// trigger without a daemon: exit 2 for a bad config, 1 when it did
// nothing because another nvmet-rebind holds the lock, 0 once the lock is
// free within the wait; always saying why on stderr. (A poke of a running
// daemon exits 0: TestDaemonNotifyAndControl.)
func TestTriggerExitCodes(t *testing.T) {
	d := newDaemonEnv(t)
	if out, code := d.run("trigger"); code != 0 {
		t.Errorf("trigger without a daemon: exit %d: %s", code, out)
	}

	unlock, err := daemon.Lock(filepath.Join(d.dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	// As udev runs it (SEQNUM set): the lock is waited for 2 s at most
	// (udev kills slow RUN programs).
	asUdev := []string{"SEQNUM=4242"}
	start := time.Now()
	out, code := d.runEnv(asUdev, "trigger")
	if code != 1 || !strings.Contains(out, "trigger: did nothing: no daemon answers on") || !strings.Contains(out, "is held by another nvmet-rebind") {
		t.Errorf("trigger with the lock held: exit %d: %s", code, out)
	}
	if el := time.Since(start); el < triggerLockWait || el > triggerLockWait+5*time.Second {
		t.Errorf("trigger with the lock held took %v, want about %v", el, triggerLockWait)
	}
	// Elsewhere (the trigger unit, a shell) the held lock is waited for.
	time.AfterFunc(3*time.Second, unlock)
	start = time.Now()
	if out, code := d.run("trigger"); code != 0 || time.Since(start) < 3*time.Second {
		t.Errorf("trigger outside udev, the lock freed after 3 s: exit %d after %v: %s", code, time.Since(start), out)
	}
	unlock, err = daemon.Lock(filepath.Join(d.dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, unlock)
	if out, code := d.runEnv(asUdev, "trigger"); code != 0 {
		t.Errorf("trigger with the lock freed during its wait: exit %d: %s", code, out)
	}

	if err := os.WriteFile(d.args[1], []byte("[polcy]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := d.run("trigger"); code != 2 || !strings.Contains(out, `trigger: did nothing: config `) || !strings.Contains(out, `line 1: unknown key "polcy"`) {
		t.Errorf("trigger with a bad config: exit %d: %s", code, out)
	}
	if out, code := d.run("--log-level", "loud", "trigger"); code != 2 || !strings.Contains(out, "--log-level") {
		t.Errorf("trigger with a bad log level: exit %d: %s", code, out)
	}
}

// trigger run by a user who can reach neither the socket nor the lock:
// exit 1, "not root".
func TestTriggerNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another uid")
	}
	d := newDaemonEnv(t)
	// The test binary's directory is root's alone: copy it where nobody
	// can run it.
	bin, err := os.MkdirTemp("", "nvmet-rebind-bin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "nvmet-rebind")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	c := d.cmd(nil, "trigger")
	c.Path, c.Args[0] = exe, exe
	c.Dir = bin
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdout, stderr, code := runSplit(t, c)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "trigger: did nothing: not root (uid 65534)") {
		t.Errorf("trigger as uid 65534: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// The man page's SYNOPSIS and the completions list every command and
// every flag of every command, as newApp defines them.
func TestDocsListEveryCommandFlag(t *testing.T) {
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "etc", p))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), `\-`, "-")
	}
	man := read("man/nvmet-rebind.8")
	i, j := strings.Index(man, "\n.SH SYNOPSIS\n"), strings.Index(man, "\n.SH DESCRIPTION\n")
	if i < 0 || j < i {
		t.Fatal("no SYNOPSIS section")
	}
	synopsis := man[i:j]
	bash, zsh := read("completion/nvmet-rebind.bash"), read("completion/_nvmet-rebind")
	for _, cmd := range newApp(io.Discard, io.Discard).Commands {
		if cmd.Name == "help" {
			continue
		}
		if !regexp.MustCompile(`(?m)^\.BR? .*\b` + cmd.Name + `\b`).MatchString(synopsis) {
			t.Errorf("SYNOPSIS lacks the command %s", cmd.Name)
		}
		for _, f := range cmd.Flags {
			flag := "--" + f.Names()[0]
			if !strings.Contains(synopsis, flag+" ") && !strings.Contains(synopsis, flag+"\n") {
				t.Errorf("SYNOPSIS lacks %s %s", cmd.Name, flag)
			}
			if !strings.Contains(bash, flag+" ") {
				t.Errorf("bash completion lacks %s %s", cmd.Name, flag)
			}
			if !strings.Contains(zsh, "'"+flag+"[") && !strings.Contains(zsh, "'"+flag+"=[") {
				t.Errorf("zsh completion lacks %s %s", cmd.Name, flag)
			}
		}
	}
}

// check is a monitoring plugin: the status line first, exit 0 OK,
// 1 WARNING, 2 CRITICAL, 3 UNKNOWN; never OK when it could not see
// configfs, and UNKNOWN for any error.
func TestCheckPlugin(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, d *daemonEnv)
		code  int
		line  string // prefix of the first line
		more  string // somewhere in the output
	}{
		{name: "nothing managed, both trees: OK", code: 0,
			line: "NVMET-REBIND OK - 0 managed listeners | alive=0 dead=0 stranded=0 unknown=0 managed=0 healing=0 gave_up=0 unreadable=0 missing=0"},
		{name: "configfs root missing: UNKNOWN", code: 3,
			setup: func(t *testing.T, d *daemonEnv) { must(t, os.RemoveAll(filepath.Join(d.dir, "cfs"))) },
			line:  "NVMET-REBIND UNKNOWN - configfs not visible: configfs root " + "", more: "does not exist"},
		{name: "an empty root, not a configfs mount: UNKNOWN", code: 3,
			setup: func(t *testing.T, d *daemonEnv) {
				must(t, os.RemoveAll(filepath.Join(d.dir, "cfs")))
				must(t, os.Mkdir(filepath.Join(d.dir, "cfs"), 0o755))
			},
			line: "NVMET-REBIND UNKNOWN - configfs not visible: ", more: "is not a configfs mount"},
		{name: "only nvmet: OK, LIO noted", code: 0,
			setup: func(t *testing.T, d *daemonEnv) { must(t, os.RemoveAll(filepath.Join(d.dir, "cfs", "target"))) },
			line:  "NVMET-REBIND OK - 0 managed listeners |", more: "\nnote: LIO iSCSI not loaded (no "},
		{name: "a config refused: UNKNOWN, said on the status line", code: 3,
			setup: func(t *testing.T, d *daemonEnv) { must(t, os.Chmod(d.args[1], 0o666)) },
			line:  "NVMET-REBIND UNKNOWN - cannot read the status: ", more: "writable by group or others"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDaemonEnv(t)
			if tt.setup != nil {
				tt.setup(t, d)
			}
			var stdout bytes.Buffer
			c := d.cmd(nil, "check")
			c.Stdout = &stdout
			err := c.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stdout.String()
			if code != tt.code || !strings.HasPrefix(out, tt.line) || !strings.Contains(out, tt.more) {
				t.Errorf("check: exit %d, want %d; want a first line %q… and %q in:\n%s", code, tt.code, tt.line, tt.more, out)
			}
			wantPipes := 1 // the perf data, on the first line
			if strings.Contains(tt.line, "cannot read the status") {
				wantPipes = 0 // nothing counted: no perf data
			}
			if first, _, _ := strings.Cut(out, "\n"); strings.Count(out, "|") != wantPipes || strings.Count(first, "|") != wantPipes {
				t.Errorf("perf data is not on the first line alone:\n%s", out)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A usage error of check is UNKNOWN (exit 3) with its status line, as the
// monitoring-plugin convention wants of any failure of the plugin.
func TestCheckUsageError(t *testing.T) {
	var out, errw bytes.Buffer
	app := newApp(&out, &errw)
	err := app.Run([]string{"nvmet-rebind", "check", "--bogus"})
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 3 {
		t.Fatalf("check --bogus: %v, want exit 3", err)
	}
	if !strings.HasPrefix(out.String(), "NVMET-REBIND UNKNOWN - check: unknown flag --bogus") {
		t.Errorf("stdout %q", out.String())
	}
}

// The udev hook's request to systemd: `systemctl --no-block start` of the
// event's instance of the trigger unit, found on PATH; a systemctl that
// fails, or a SEQNUM that is not a number, is an error (the hook then
// reconciles itself).
func TestStartTriggerUnit(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" >" + logf + "\n[ \"$4\" != fail ] || { echo 'Unit nvmet-rebind-trigger@x.service not found.' >&2; exit 5; }\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if err := startTriggerUnit(context.Background(), "4242"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(logf); string(b) != "--no-block start nvmet-rebind-trigger@4242.service\n" {
		t.Errorf("systemctl ran with %q", b)
	}
	if err := startTriggerUnit(context.Background(), "12;reboot"); err == nil || !strings.Contains(err.Error(), "is not udev's event number") {
		t.Errorf("a SEQNUM that is not a number: %v", err)
	}
	script = "#!/bin/sh\necho 'Failed to start nvmet-rebind-trigger@7.service: Unit not found.' >&2\nexit 5\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := startTriggerUnit(context.Background(), "7"); err == nil || !strings.Contains(err.Error(), "Unit not found") {
		t.Errorf("a failing systemctl: %v", err)
	}
}

// Without a daemon, plan prints the objects a saved config declares and
// configfs lacks as the writes that would make them; status and check
// say what is missing (WARNING within the window); nothing is written.
func TestPlanStatusCheckShowSavedCompletion(t *testing.T) {
	d := newDaemonEnv(t)
	saved := filepath.Join(d.dir, "nvmet.json")
	must(t, os.WriteFile(saved, []byte(`{"hosts": [{"nqn": "nqn.h"}], "subsystems": [
 {"nqn": "nqn.a", "attr": {"allow_any_host": "1"}, "allowed_hosts": [], "namespaces": []},
 {"nqn": "nqn.b", "attr": {"allow_any_host": "1"}, "allowed_hosts": [], "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/e2e-absent-disk"}}]}],
 "ports": []}`), 0o600))
	cfg := d.args[1]
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString("\n[boot]\nnvmet_config = \"" + saved + "\"\nwindow = \"5m\"\n")
	must(t, err)
	must(t, f.Close())
	cfs := filepath.Join(d.dir, "cfs", "nvmet")
	out, code := d.run("plan")
	for _, want := range []string{"saved config " + saved + ": make", "mkdir " + filepath.Join(cfs, "hosts/nqn.h"),
		"mkdir " + filepath.Join(cfs, "subsystems/nqn.b"), "mkdir " + filepath.Join(cfs, "subsystems/nqn.b/namespaces/1"),
		"saved config: subsystems/nqn.b/namespaces/1#enable: waiting for /dev/e2e-absent-disk"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("plan (rc %d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "subsystems/nqn.a") {
		t.Errorf("plan makes nqn.a, which exists:\n%s", out)
	}
	out, _ = d.run("status")
	if !strings.Contains(out, "declared by the saved config, not in configfs (5):") || !strings.Contains(out, "subsystems/nqn.b: due") {
		t.Errorf("status:\n%s", out)
	}
	out, code = d.run("check")
	if code != 1 || !strings.Contains(out, "WARNING: subsystems/nqn.b: due") {
		t.Errorf("check (rc %d):\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(cfs, "subsystems/nqn.b")); err == nil {
		t.Fatal("a read-only command made a subsystem")
	}
	if _, err := os.Stat(filepath.Join(d.dir, "state", "completion.json")); err == nil {
		t.Fatal("a read-only command wrote the completion record")
	}
}
