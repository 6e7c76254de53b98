package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// portWorld is rxe0 on veth0 with nvmet port 1 on 192.0.2.1:4420 linked
// to nqn.a, listening, and a state directory.
func portWorld(t *testing.T) (*rdmatest.System, *state.Store) {
	t.Helper()
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	k.LinkedPort("1", "192.0.2.1", "4420", "nqn.a")
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k, j
}

// healedEngine is an engine that has healed nvmet port 1 once.
func healedEngine(t *testing.T) *rebind.Engine {
	t.Helper()
	k, j := portWorld(t)
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 1, "veth0")
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

var afterAHeal = []string{
	`nvmet_rebind_listeners{kind="nvmet",state="alive"} 1`,
	`nvmet_rebind_listeners{kind="nvmet",state="dead"} 0`,
	`nvmet_rebind_rebinds_total{result="ok"} 1`,
	`nvmet_rebind_reconciles_total 1`,
	`nvmet_rebind_reconciles_unchanged_total 0`,
	`nvmet_rebind_event_source_resyncs_total{source="uevent"} 0`,
	`nvmet_rebind_last_relisten_seconds `,
	`nvmet_rebind_listeners_given_up{kind="nvmet"} 0`,
}

// A listener dead for more than give_up_after counts as given up (the
// NvmetRebindGaveUp alert), and as dead.
func TestMetricsGivenUp(t *testing.T) {
	k, j := portWorld(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := rebind.DefaultConfig()
	cfg.GiveUpAfter = time.Minute
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: cfg, Now: func() time.Time { return now }})
	ctx := context.Background()
	if _, err := e.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	k.RemoveDevice("rxe0") // the listener dies; no device to rebind onto
	if _, err := e.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	k.AddDevice("rxe0", 1, "veth0")
	if _, err := e.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewCollector(e, nil)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`nvmet_rebind_listeners_given_up{kind="nvmet"} 1`,
		`nvmet_rebind_listeners{kind="nvmet",state="dead"} 1`,
		`nvmet_rebind_rebinds_total{result="ok"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// NVMe/TCP ports count under kind nvmet-tcp: one listening, one whose
// address is on no netdev (declared, not listening: dead).
func TestMetricsTCP(t *testing.T) {
	k, j := portWorld(t)
	k.AddNetdev("eth1")
	k.AddAddr("eth1", "192.0.2.7")
	k.TCPPort("2", "192.0.2.7", "4420", "nqn.a")
	k.AddPort("3", "tcp", "ipv4", "192.0.2.9", "4420")
	if err := k.AdminLink("3", "nqn.a"); err == nil {
		t.Fatal("a TCP link with its address absent was accepted")
	}
	dir := t.TempDir()
	cfgJSON := `{"ports": [{"portid": 3, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "192.0.2.9", "trsvcid": "4420"}, "subsystems": ["nqn.a"]}]}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := rebind.DefaultConfig()
	cfg.NvmetConfig, cfg.BootWindow = filepath.Join(dir, "config.json"), time.Hour
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: cfg, Declared: saved.Load})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewCollector(e, nil)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`nvmet_rebind_listeners{kind="nvmet-tcp",state="alive"} 1`,
		`nvmet_rebind_listeners{kind="nvmet-tcp",state="dead"} 1`,
		`nvmet_rebind_listeners{kind="nvmet",state="alive"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestMetricsAfterAHeal(t *testing.T) {
	e := healedEngine(t)
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewCollector(e, new(udev.Stats))).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range afterAHeal {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// The textfile holds the endpoint's nvmet_rebind_* metrics and nothing
// else (node_exporter has go_* and process_* of its own), readable by all,
// replaced by a rename (a new inode each write), and no temporary file is
// left in node_exporter's directory.
func TestTextfile(t *testing.T) {
	e := healedEngine(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "nvmet-rebind.prom")
	tf := metrics.NewTextfile(metrics.NewCollector(e, new(udev.Stats)))
	if err := tf.Write(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range afterAHeal {
		if !strings.Contains(string(b), want) {
			t.Errorf("textfile lacks %q:\n%s", want, b)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "nvmet_rebind_") {
			t.Errorf("textfile line %q is not an nvmet_rebind_ metric", line)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (node_exporter runs as another user)", st.Mode().Perm())
	}
	if err := tf.Write(path); err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st, st2) {
		t.Error("the second write reused the file: not replaced by a rename")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("%d entries in the directory, want only the textfile: %v", len(ents), ents)
	}
	// A missing directory is an error naming the path, and leaves nothing.
	if err := tf.Write(filepath.Join(dir, "missing", "m.prom")); err == nil || !strings.Contains(err.Error(), "missing/m.prom") {
		t.Errorf("write into a missing directory: %v", err)
	}
}

func TestCheckTextfile(t *testing.T) {
	for p, ok := range map[string]bool{
		"/var/lib/prometheus/node-exporter/nvmet-rebind.prom": true,
		"/tmp/x.prom": true,
		"x.prom":      false,
		"/tmp/x.txt":  false,
		"/tmp/.prom":  false,
		"/tmp/":       false,
		"":            false,
	} {
		if err := metrics.CheckTextfile(p); (err == nil) != ok {
			t.Errorf("CheckTextfile(%q) = %v", p, err)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:9767": true, "[::1]:9767": true, "localhost:1": true, "0.0.0.0:9767": false, "192.0.2.1:9767": false, "nonsense": false} {
		if err := metrics.CheckAddr(addr, false); (err == nil) != ok {
			t.Errorf("CheckAddr(%q) = %v", addr, err)
		}
	}
}

// newFakeKernel is the tests' fake kernel: both fakes wired together.
var newFakeKernel = rdmatest.NewSystem
