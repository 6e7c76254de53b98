package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// An nvmetcli saved config that declares only what newDaemonEnv's tree
// holds (port 1, tcp, no subsystem linked; nqn.a): nothing to complete.
const savedOK = `{"hosts": [], "ports": [{"portid": 1, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "192.0.2.1", "trsvcid": "4420"}, "subsystems": []}],
 "subsystems": [{"nqn": "nqn.a", "attr": {"allow_any_host": "1"}, "allowed_hosts": [], "namespaces": []}]}`

// withBoot writes the config with [boot] naming the nvmetcli config
// nvmet.json in the tree, and that file (text; "": none).
func withBoot(t *testing.T, d *daemonEnv, text string) string {
	t.Helper()
	saved := filepath.Join(d.dir, "nvmet.json")
	os.Remove(saved)
	if text != "" {
		must(t, os.WriteFile(saved, []byte(text), 0o600))
	}
	must(t, os.WriteFile(d.args[1], []byte("[policy]\nresync_interval = \"30s\"\n[boot]\nnvmet_config = \""+saved+"\"\nwindow = \"5m\"\n"), 0o600))
	return saved
}

// config check validates what the daemon would read: exit 0 and one line,
// or exit 78 (EX_CONFIG, as run) naming the file and the line or entry.
func TestConfigCheck(t *testing.T) {
	tests := []struct {
		name  string
		saved string   // the nvmetcli config [boot] names; "": none
		args  []string // after the global flags
		code  int
		want  string // the whole output; %DIR% is the tree, %SAVED% the saved config
	}{
		{name: "valid", saved: savedOK, args: []string{"config", "check"}, code: 0,
			want: "config %DIR%/config.toml is valid (watch: every specific address; give up after 10m0s; [boot] %SAVED%: 1 port, 1 object, window 5m0s)\n"},
		{name: "[boot] file missing", args: []string{"config", "check"}, code: exitConfig,
			want: "nvmet-rebind: config check: config %DIR%/config.toml: [boot]: nvmetcli config %SAVED%: file does not exist (save it with the tool, or remove the key from [boot])\n"},
		{name: "corrupt JSON", saved: `{"ports": [{"portid": 1,`, args: []string{"config", "check"}, code: exitConfig,
			want: "nvmet-rebind: config check: config %DIR%/config.toml: [boot]: nvmetcli config %SAVED%: unexpected end of JSON input\n"},
		{name: "a bad entry named", saved: `{"ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "192.0.2.1", "trsvcid": "4420"}, "subsystems": ["a/b"]}]}`,
			args: []string{"config", "check"}, code: exitConfig,
			want: "nvmet-rebind: config check: config %DIR%/config.toml: [boot]: nvmetcli config %SAVED%: ports[0]: port 1: subsystem \"a/b\" contains '/'; this port is not completed\n"},
		{name: "--config after the subcommand", saved: savedOK, args: []string{"config", "check", "--config", "%DIR%/other.toml"}, code: exitConfig,
			want: "nvmet-rebind: config check: config %DIR%/other.toml: stat %DIR%/other.toml: no such file or directory (create it from the reference config, or pass --config)\n"},
		{name: "configfs root one level off", saved: savedOK, args: []string{"--configfs-root", "%DIR%/cfs/nvmet", "config", "check"}, code: exitConfig,
			want: "nvmet-rebind: config check: --configfs-root: %DIR%/cfs/nvmet is one level inside the configfs root %DIR%/cfs, which holds nvmet/ or target/iscsi/: use --configfs-root %DIR%/cfs\n"},
		{name: "an argument", args: []string{"config", "check", "x.toml"}, code: 2,
			want: "nvmet-rebind: config check takes no argument, got \"x.toml\": the file is given with --config\n"},
		{name: "unknown subcommand", args: []string{"config", "lint"}, code: 2,
			want: "nvmet-rebind: config: unknown subcommand \"lint\": the only one is check (nvmet-rebind config check)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := newDaemonEnv(t)
			saved := withBoot(t, d, tt.saved)
			fill := strings.NewReplacer("%DIR%", d.dir, "%SAVED%", saved)
			var args []string
			for _, a := range tt.args {
				args = append(args, fill.Replace(a))
			}
			// Global flags given after d.args win (the last one counts).
			out, code := d.run(args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if diff := cmp.Diff(fill.Replace(tt.want), out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(filepath.Join(d.dir, "state")); err == nil {
				t.Error("config check made the state directory")
			}
		})
	}
}

// Without a daemon, reload runs the same validation and refuses a config
// whose [boot] files are missing or corrupt, saying why, touching nothing;
// a valid one is said to be valid, with nothing to reload.
func TestReloadWithoutDaemonValidates(t *testing.T) {
	d := newDaemonEnv(t)
	state := filepath.Join(d.dir, "state")
	must(t, os.MkdirAll(state, 0o755))
	for _, bad := range []struct{ name, saved, want string }{
		{"missing", "", "file does not exist"},
		{"corrupt", `{"ports": [`, "unexpected end of JSON input"},
		{"a bad entry", `{"ports": [{"portid": 70000}]}`, `ports[0]: portid "70000" is not a port number (0-65535)`},
	} {
		saved := withBoot(t, d, bad.saved)
		before := snapshotDir(t, d.dir)
		out, code := d.run("reload")
		want := "nvmet-rebind: reload refused: config " + d.args[1] + ": [boot]: nvmetcli config " + saved + ": " + bad.want
		if code != 2 || !strings.HasPrefix(out, want) || !strings.Contains(out, "no daemon answers on "+filepath.Join(d.dir, "run", "control.sock")+", nothing reloaded") {
			t.Errorf("%s: reload: exit %d: %s\nwant exit 2 and %q", bad.name, code, out, want)
		}
		if diff := cmp.Diff(before, snapshotDir(t, d.dir)); diff != "" {
			t.Errorf("%s: a refused reload changed the tree (-before +after):\n%s", bad.name, diff)
		}
	}
	withBoot(t, d, savedOK)
	out, code := d.run("reload")
	if code != 0 || !regexp.MustCompile(`^config \S+ is valid \(.*\); no daemon is running, nothing to reload\n$`).MatchString(out) {
		t.Errorf("reload of a valid config without a daemon: exit %d: %q", code, out)
	}
}

// With a daemon, reload is refused by the daemon itself, saying why; the
// daemon keeps its config, and check (WARNING) and the metrics
// (nvmet_rebind_config_reload_refused 1) say so until a good reload.
func TestReloadRefusedShowsInCheckAndMetrics(t *testing.T) {
	d := newDaemonEnv(t)
	saved := withBoot(t, d, savedOK)
	prom := filepath.Join(d.dir, "m.prom")
	startWithArgs(t, d, "run", "--metrics-textfile", prom)
	waitProm(t, prom, `(?m)^nvmet_rebind_config_reload_refused 0$`)
	if out, code := d.run("check"); code != 0 {
		t.Fatalf("check before: exit %d: %s", code, out)
	}
	if out, code := d.run("reload"); code != 0 || !strings.HasSuffix(out, "; the daemon reloaded it\n") || !strings.Contains(out, "[boot] "+saved+": 1 port") {
		t.Errorf("good reload: exit %d: %s", code, out)
	}

	must(t, os.WriteFile(saved, []byte(`{"ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "not-an-ip", "trsvcid": "4420"}}]}`), 0o600))
	out, code := d.run("reload")
	why := "nvmetcli config " + saved + `: ports[0]: port 1: traddr "not-an-ip" is not an IP address`
	if code != 2 || !strings.HasPrefix(out, "nvmet-rebind: reload refused: config "+d.args[1]+": [boot]: "+why) || !strings.Contains(out, "the daemon keeps its current config") {
		t.Errorf("reload of a bad [boot] file: exit %d: %s", code, out)
	}
	// The summary joins the warnings: when a round has read the saved
	// file since it was rewritten (it is an input of every round), its
	// refused entry is warned first.
	out, code = d.run("check")
	if code != 1 || !strings.HasPrefix(out, "NVMET-REBIND WARNING - ") || !strings.Contains(out, "reload refused, the daemon runs on its previous config: ") || !strings.Contains(out, why) {
		t.Errorf("check after a refused reload: exit %d: %s", code, out)
	}
	waitProm(t, prom, `(?m)^nvmet_rebind_config_reload_refused 1$`)

	must(t, os.WriteFile(saved, []byte(savedOK), 0o600))
	if out, code := d.run("reload"); code != 0 {
		t.Errorf("reload of the fixed config: exit %d: %s", code, out)
	}
	if out, code := d.run("check"); code != 0 || strings.Contains(out, "reload refused") {
		t.Errorf("check after a good reload: exit %d: %s", code, out)
	}
	waitProm(t, prom, `(?m)^nvmet_rebind_config_reload_refused 0$`)
}

// A daemon started with a [boot] file missing runs (what it declares is
// not completed), and check and the metrics say so until a reload reads
// it whole.
func TestSavedConfigMissingAtStart(t *testing.T) {
	d := newDaemonEnv(t)
	saved := withBoot(t, d, "")
	prom := filepath.Join(d.dir, "m.prom")
	startWithArgs(t, d, "run", "--metrics-textfile", prom)
	waitProm(t, prom, `(?m)^nvmet_rebind_saved_config_unreadable 1$`)
	out, code := d.run("check")
	if code != 1 || !strings.Contains(out, "saved config unreadable, not completed: nvmetcli config "+saved+": file does not exist") {
		t.Errorf("check with the [boot] file missing: exit %d: %s", code, out)
	}
	must(t, os.WriteFile(saved, []byte(savedOK), 0o600))
	if out, code := d.run("reload"); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	waitProm(t, prom, `(?m)^nvmet_rebind_saved_config_unreadable 0$`)
	if out, code := d.run("check"); code != 0 {
		t.Errorf("check after the reload: exit %d: %s", code, out)
	}
}

// startWithArgs is daemonEnv.start with the command's arguments.
func startWithArgs(t *testing.T, d *daemonEnv, args ...string) {
	t.Helper()
	c := d.cmd(nil, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Signal(syscall.SIGTERM); c.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(d.dir, "run", "control.sock")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitProm waits for the metrics textfile to match re.
func waitProm(t *testing.T, path, re string) {
	t.Helper()
	r := regexp.MustCompile(re)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if r.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never matched %q:\n%s", path, re, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
