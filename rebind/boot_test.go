package rebind_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
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
	if r := item(items, "9").Reason; !strings.Contains(r, "not in configfs: not created") {
		t.Errorf("port 9: %q", r)
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
	// After the window, an admin's unlink is not fought.
	w.clk.advance(2 * time.Minute)
	must(t, admin.Unlink("1", configfs.Link{Name: nqnB, NQN: nqnB}))
	w.k.ResetLog()
	w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("fought the admin after the window: %q", log)
	}
}
