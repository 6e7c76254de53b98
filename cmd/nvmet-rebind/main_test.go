package main

import (
	"bytes"
	"encoding/json"
	"errors"
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

func (d *daemonEnv) run(args ...string) (string, int) {
	var out bytes.Buffer
	c := d.cmd(nil, args...)
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
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Source != "daemon" || len(r.Listeners) != 1 || r.Listeners[0].Managed {
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
	if out, code := d.run("check"); code != 0 {
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

func TestSecondDaemonRefused(t *testing.T) {
	d := newDaemonEnv(t)
	d.start()
	out, code := d.run("run")
	if code != 2 || !strings.Contains(out, "locked by another nvmet-rebind") {
		t.Errorf("second daemon: exit %d: %s", code, out)
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
	if out, code := d.run("run"); code != 2 || !strings.Contains(out, "writable by group or others") {
		t.Errorf("world-writable config: exit %d: %s", code, out)
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
	// corrupt entry moved aside, modes tightened.
	if _, err := os.Stat(filepath.Join(state, "journal/.tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon left the temp file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "journal/nvmet-bad.json.corrupt")); err != nil {
		t.Errorf("the daemon did not quarantine the corrupt entry: %v", err)
	}
	if st, err := os.Stat(state); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("the daemon did not tighten the state dir's mode: %v", st.Mode())
	}
	observe("with a daemon")
}

// run --metrics-textfile from the real command: the file appears after the
// first reconcile with the nvmet_rebind_* metrics; [metrics] textfile is
// used without the flag, and a SIGHUP reload that changes it moves the
// file; a path node_exporter would never read is refused at start (exit 2).
func TestMetricsTextfileFlagAndConfig(t *testing.T) {
	d := newDaemonEnv(t)
	waitFile := func(path, want string) {
		t.Helper()
		re := regexp.MustCompile(want)
		deadline := time.Now().Add(20 * time.Second)
		for {
			b, _ := os.ReadFile(path)
			if re.Match(b) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never held %q: %q", path, want, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
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
	waitFile(flag, `(?m)^nvmet_rebind_reconciles_total [1-9]`)
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
	waitFile(a, `nvmet_rebind_listeners\{`)
	setTextfile(b)
	c.Process.Signal(syscall.SIGHUP)
	waitFile(b, `nvmet_rebind_listeners\{`)
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old textfile stayed after the reload moved it: %v", err)
	}
	stopDaemon(c)

	for _, bad := range []string{"relative.prom", filepath.Join(d.dir, "m.txt")} {
		if out, code := d.run("run", "--metrics-textfile", bad); code != 2 || !strings.Contains(out, "metrics textfile") {
			t.Errorf("run --metrics-textfile %s: exit %d: %s", bad, code, out)
		}
	}
	setTextfile("relative.prom")
	if out, code := d.run("run"); code != 2 || !strings.Contains(out, "metrics.textfile") {
		t.Errorf("run with [metrics] textfile relative: exit %d: %s", code, out)
	}
}
