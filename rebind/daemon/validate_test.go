package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

const goodNvmetcli = `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "192.0.2.1", "trsvcid": "4420"}, "subsystems": ["nqn.2024-01.lab:a"]}],
	"subsystems": [{"nqn": "nqn.2024-01.lab:a", "namespaces": [], "allowed_hosts": [], "attr": {"allow_any_host": "1"}}], "hosts": []}`

// tree is a config, a configfs and sysfs root, and a saved nvmetcli
// config, written in a temporary directory.
type tree struct {
	dir   string
	paths Paths
	saved string // the nvmetcli config [boot] names
}

func newTree(t *testing.T, configfs string) *tree {
	t.Helper()
	dir := t.TempDir()
	if configfs == "" {
		configfs = filepath.Join(dir, "cfs")
		if err := os.MkdirAll(filepath.Join(configfs, "nvmet"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tr := &tree{dir: dir, saved: filepath.Join(dir, "nvmet.json"),
		paths: Paths{Config: filepath.Join(dir, "config.toml"), Configfs: configfs, Sysfs: dir, State: filepath.Join(dir, "state"), Run: dir}}
	tr.write(t, tr.saved, goodNvmetcli)
	tr.config(t, "[[watch]]\nsubnet = \"192.0.2.0/24\"\n[boot]\nnvmet_config = \""+tr.saved+"\"\n")
	return tr
}

func (tr *tree) write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (tr *tree) config(t *testing.T, text string) { tr.write(t, tr.paths.Config, text) }

// Validate reads what the daemon reads: the TOML, the roots, the [boot]
// files; its error is the first problem, naming the file and line or entry.
func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, tr *tree)
		want  string // in the error; "": valid
	}{
		{name: "valid", setup: func(*testing.T, *tree) {}},
		{name: "no config", setup: func(t *testing.T, tr *tree) { os.Remove(tr.paths.Config) }, want: "config.toml: no such file or directory (create it from the reference config"},
		{name: "bad TOML", setup: func(t *testing.T, tr *tree) { tr.config(t, "[policy]\nbogus = 1\n") }, want: `config.toml: line 2: unknown key "policy.bogus"`},
		{name: "configfs root missing", setup: func(t *testing.T, tr *tree) { tr.paths.Configfs = filepath.Join(tr.dir, "nope") }, want: "--configfs-root: configfs root " + "%DIR%/nope does not exist"},
		{name: "configfs root not configfs", setup: func(t *testing.T, tr *tree) { tr.paths.Configfs = t.TempDir() }, want: "is not a configfs mount"},
		{name: "[boot] file missing", setup: func(t *testing.T, tr *tree) { os.Remove(tr.saved) }, want: "config %DIR%/config.toml: [boot]: nvmetcli config %DIR%/nvmet.json: file does not exist"},
		{name: "[boot] file corrupt", setup: func(t *testing.T, tr *tree) { tr.write(t, tr.saved, `{"ports": [`) }, want: "[boot]: nvmetcli config %DIR%/nvmet.json: unexpected end of JSON input"},
		{name: "[boot] bad entry named", setup: func(t *testing.T, tr *tree) {
			tr.write(t, tr.saved, `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "99999"}, "subsystems": []}]}`)
		}, want: `nvmetcli config %DIR%/nvmet.json: ports[0]: port 1: trsvcid "99999" is not a port number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t, "")
			tt.setup(t, tr)
			v, err := Validate(tr.paths)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := "config " + tr.paths.Config + " is valid (watch: 1 subnet; give up after 10m0s; [boot] " + tr.saved + ": 1 port, 1 object, window 10m0s)"
				if d := cmp.Diff(want, v.Summary()); d != "" {
					t.Errorf("summary (-want +got):\n%s", d)
				}
				return
			}
			want := strings.ReplaceAll(tt.want, "%DIR%", tr.dir)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate: %v; want it to say %q", err, want)
			}
		})
	}
}

// startWith is startFake's daemon, reading its config from tr, with its
// metrics as the daemon wires them.
func startWith(t *testing.T, tr *tree) (*fakeDaemon, *metrics.Collector) {
	t.Helper()
	k := rdmatest.NewTargetPair(t, nqn, iqn)
	tr.paths.Configfs = k.Root
	v, err := Validate(tr.paths)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: st, Config: v.Config, Logger: log, Declared: saved.Load})
	d := &daemon{paths: tr.paths, log: log, env: &Env{Config: v.Config, Engine: eng, Store: st}}
	col := metrics.NewCollector(eng, nil)
	col.SetConfigState(d.configState)
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := control.Listen(sock, d.handler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Serve(ctx) }()
	go func() { defer wg.Done(); eng.Run(ctx, nil) }()
	f := &fakeDaemon{k: k, d: d, sock: sock, stop: func() { cancel(); wg.Wait() }}
	t.Cleanup(f.stop)
	return f, col
}

// A reload through the socket runs Validate: a missing or corrupt [boot]
// file, or a bad entry, is refused naming it, the config in use does not
// change, and check and the metrics say so until a good reload.
func TestReloadRefusedRemembered(t *testing.T) {
	tr := newTree(t, "")
	f, col := startWith(t, tr)
	ctx := context.Background()
	reload := func() (ReloadReply, error) {
		var r ReloadReply
		err := control.Call(ctx, f.sock, control.Request{Cmd: "reload", ID: tr.paths.Config}, &r)
		return r, err
	}
	report := func() status.StatusReport {
		t.Helper()
		var r status.StatusReport
		if err := control.Call(ctx, f.sock, control.Request{Cmd: "status"}, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	metric := func(name string) float64 {
		t.Helper()
		return gaugeOf(t, col, name)
	}
	if r, err := reload(); err != nil || !strings.HasPrefix(r.Summary, "config "+tr.paths.Config+" is valid (") {
		t.Fatalf("good reload: %+v, %v", r, err)
	}
	if r := report(); r.Config != nil {
		t.Errorf("a good reload left %+v", r.Config)
	}
	before := f.d.env.Engine.Config()
	// The TOML is fine and would change the watch; the [boot] file is not.
	tr.config(t, "[[watch]]\nsubnet = \"198.51.100.0/24\"\n[boot]\nnvmet_config = \""+tr.saved+"\"\n")
	for _, bad := range []struct{ name, text, want string }{
		{"corrupt JSON", `{"ports": [`, "nvmetcli config " + tr.saved + ": unexpected end of JSON input"},
		{"a bad entry", `{"ports": [{"portid": "x"}]}`, "nvmetcli config " + tr.saved + `: ports[0]: portid "x" is not a port number`},
		{"missing", "", "nvmetcli config " + tr.saved + ": file does not exist"},
	} {
		if bad.text == "" {
			os.Remove(tr.saved)
		} else {
			tr.write(t, tr.saved, bad.text)
		}
		_, err := reload()
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "the daemon keeps its current config") {
			t.Fatalf("%s: reload: %v; want it refused saying %q", bad.name, err, bad.want)
		}
		if got := f.d.env.Engine.Config(); !cmp.Equal(got.Watch, before.Watch, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })) {
			t.Errorf("%s: a refused reload changed the config: %v, was %v", bad.name, got.Watch, before.Watch)
		}
		r := report()
		if r.Config == nil || !strings.Contains(r.Config.ReloadRefused, bad.want) {
			t.Fatalf("%s: report's config %+v", bad.name, r.Config)
		}
		v := status.Check(r)
		if v.Health == status.OK || !strings.Contains(v.Summary, "reload refused, the daemon runs on its previous config: ") || !strings.Contains(v.Summary, bad.want) {
			t.Errorf("%s: check %v: %s", bad.name, v.Health, v.StatusLine())
		}
		if got := metric("nvmet_rebind_config_reload_refused"); got != 1 {
			t.Errorf("%s: nvmet_rebind_config_reload_refused %v", bad.name, got)
		}
	}
	tr.write(t, tr.saved, goodNvmetcli)
	if _, err := reload(); err != nil {
		t.Fatal(err)
	}
	if got := f.d.env.Engine.Config().Watch; len(got) != 1 || got[0].String() != "198.51.100.0/24" {
		t.Errorf("the good reload did not take the config: %v", got)
	}
	r := report()
	if r.Config != nil {
		t.Errorf("a good reload left %+v", r.Config)
	}
	if v := status.Check(r); strings.Contains(strings.Join(v.Details, "\n"), "reload refused") {
		t.Errorf("check after a good reload: %s", v.StatusLine())
	}
	if got := metric("nvmet_rebind_config_reload_refused"); got != 0 {
		t.Errorf("after a good reload: nvmet_rebind_config_reload_refused %v", got)
	}
}

// A saved config unreadable at the start is the report's and the metrics'
// until a reload reads it whole.
func TestSavedUnreadableUntilReload(t *testing.T) {
	tr := newTree(t, "")
	f, col := startWith(t, tr)
	msg := "nvmetcli config " + tr.saved + ": file does not exist"
	f.d.savedBad.Store(&msg) // as setUp does
	var r status.StatusReport
	if err := control.Call(context.Background(), f.sock, control.Request{Cmd: "status"}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Config == nil || r.Config.SavedUnreadable != msg {
		t.Fatalf("report's config %+v", r.Config)
	}
	if v := status.Check(r); !strings.Contains(v.Summary, "saved config unreadable, not completed: "+msg) {
		t.Errorf("check: %s", v.StatusLine())
	}
	if n := gaugeOf(t, col, "nvmet_rebind_saved_config_unreadable"); n != 1 {
		t.Errorf("nvmet_rebind_saved_config_unreadable %v", n)
	}
	if _, err := f.d.reload(); err != nil {
		t.Fatal(err)
	}
	if f.d.configStatus() != nil {
		t.Errorf("a good reload left %+v", f.d.configStatus())
	}
}

// gaugeOf is the value of a gauge c collects.
func gaugeOf(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
