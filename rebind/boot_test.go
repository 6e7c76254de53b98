package rebind_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// At boot the restore's links were refused (no address yet): the port
// exists without links, the portal with iser=0. When rxe and the address
// arrive, the declared links and iser are completed; nothing else is created.
func TestBootCompletion(t *testing.T) {
	w := newWorld(t)
	admin := configfs.NewWithOps(w.k.Root, w.k.Admin())
	must(t, w.k.RemovePort("1"))
	w.k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	must(t, admin.SetISER(portal, false))
	w.k.DelNetdev("veth0")
	dir := t.TempDir()
	for _, f := range []string{"nvmet-config.json", "saveconfig.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		must(t, err)
		b = []byte(strings.ReplaceAll(string(b), "nqn.2024-01.lab:a", nqnA))
		must(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	w.cfg.NvmetConfig = filepath.Join(dir, "nvmet-config.json")
	w.cfg.TargetConfig = filepath.Join(dir, "saveconfig.json")
	w.cfg.BootWindow = time.Minute
	e := w.engine()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("wrote before the address exists: %q", log)
	}
	if it := item(items, "9"); !strings.Contains(it.Reason, "but not in configfs (boot completion makes it within the boot window") || !it.Missing {
		t.Errorf("port 9: missing %v, %q", it.Missing, it.Reason)
	}
	if it := item(items, "1"); it.Missing {
		t.Error("port 1, in configfs, is counted missing")
	}
	sg := e.Snapshot().Sight
	if sg.Saved != nil || !sg.BootUntil.Equal(w.clk.now().Add(time.Minute)) {
		t.Errorf("sight: saved %v, boot window until %v", sg.Saved, sg.BootUntil)
	}
	w.k.AddAddr("veth0", "192.0.2.1")
	w.k.AddDevice("rxe0", 0x80dd69fffe0d1e0b, "veth0")
	items = w.reconcile(e)
	if diff := cmp.Diff([]string{nqnA, nqnB}, w.links("1")); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_rdma", "1") || !w.k.Listening("ib_isert", portal) {
		t.Errorf("not listening: %s", w.k)
	}
	if r := item(items, "1").Reason; !strings.Contains(r, "nqn.2024-01.lab:deleted") {
		t.Errorf("absent subsystem not reported: %q", r)
	}
	// Within the window, an admin's unlink of a declared link that was in
	// place, and iser=0 on a declared portal, are not fought either.
	w.clk.advance(10 * time.Second)
	must(t, admin.Unlink("1", configfs.Link{Name: nqnA, NQN: nqnA}))
	must(t, admin.SetISER(portal, false))
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("fought the admin within the window: %q", log)
	}
	// Nor by the next start in the same boot, whose window opens anew:
	// what was seen in place is kept in the state directory.
	w.reconcile(w.engine())
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("a restart undid the admin's unlink and iser=0: %q", log)
	}
	// After the window, an admin's unlink is not fought.
	w.clk.advance(2 * time.Minute)
	must(t, admin.Unlink("1", configfs.Link{Name: nqnB, NQN: nqnB}))
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("fought the admin after the window: %q", log)
	}
}

// A saved config with a bad entry: the entry is named in the sight (what
// status and check show), and the good entries around it are completed.
func TestBootCompletionBadEntry(t *testing.T) {
	w := newWorld(t)
	must(t, w.k.RemovePort("1"))
	w.k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	dir := t.TempDir()
	cfg := `{"ports":[{"portid":"x"},{"portid":1,"addr":{"trtype":"rdma","adrfam":"ipv4","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":["` + nqnA + `"]},{"portid":5,"addr":{"trtype":"rdma","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":["../x"]}]}`
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600))
	w.cfg.NvmetConfig = filepath.Join(dir, "config.json")
	w.cfg.BootWindow = time.Minute
	e := w.engine()
	w.reconcile(e)
	if diff := cmp.Diff([]string{nqnA}, w.links("1")); diff != "" {
		t.Errorf("port 1's declared link (-want +got):\n%s", diff)
	}
	sg := e.Snapshot().Sight
	for _, want := range []string{"config.json: ports[0]: portid \"x\" is not a port number", "config.json: ports[2]: port 5: subsystem \"../x\" contains '/'"} {
		if sg.Saved == nil || !strings.Contains(sg.Saved.Error(), want) {
			t.Errorf("sight.Saved = %v; want %q", sg.Saved, want)
		}
	}
}

// A saved config edited while the engine runs is read again at a reload
// (SetConfig), not at the next round behind the admin's back.
func TestSavedConfigReadAtReload(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	port := func(id string) string {
		return `{"ports":[{"portid":` + id + `,"addr":{"trtype":"rdma","adrfam":"ipv4","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":["` + nqnA + `"]}]}`
	}
	must(t, os.WriteFile(path, []byte(port("7")), 0o600))
	w.cfg.NvmetConfig = path
	w.cfg.BootWindow = time.Minute
	e := w.engine()
	if it := item(w.reconcile(e), "7"); !it.Missing {
		t.Fatalf("port 7, declared and absent, is not missing: %+v", it)
	}
	must(t, os.WriteFile(path, []byte(port("8")), 0o600))
	items := w.reconcile(e)
	if it := item(items, "7"); !it.Missing {
		t.Errorf("the edit was taken without a reload: port 7 is no longer declared")
	}
	e.SetConfig(w.cfg)
	items = w.reconcile(e)
	if it := item(items, "8"); !it.Missing {
		t.Errorf("after the reload port 8 is not declared: %+v", it)
	}
	for _, it := range items {
		if it.ID == "7" {
			t.Errorf("after the reload port 7 is still declared: %+v", it)
		}
	}
}

// stubCompleter answers what it is told to.
type stubCompleter struct{ again time.Duration }

func (s *stubCompleter) Complete(context.Context, rebind.CompletionInput) rebind.Completion {
	return rebind.Completion{Again: s.again}
}

// WaitsForDevice follows the last round's completion: a block device's
// event is worth a round only while an object waits for a device path.
func TestWaitsForDevice(t *testing.T) {
	w := newWorld(t)
	c := &stubCompleter{again: time.Second}
	e := rebind.New(rebind.Options{Tree: w.k.FS(), Kernel: w.k, Config: w.cfg, Now: w.clk.now, Completer: c})
	if e.WaitsForDevice() {
		t.Fatal("waits before any round")
	}
	w.reconcile(e)
	if !e.WaitsForDevice() {
		t.Fatal("does not wait while the completion asks to look again")
	}
	if next := e.Snapshot().Next; next.IsZero() || next.After(w.clk.now().Add(time.Second)) {
		t.Errorf("next look %v, want within the completion's second", next)
	}
	c.again = 0
	w.reconcile(e)
	if e.WaitsForDevice() {
		t.Fatal("still waits once nothing does")
	}
}
