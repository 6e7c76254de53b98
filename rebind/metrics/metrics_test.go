package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

func TestMetricsAfterAHeal(t *testing.T) {
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	k.AddSubsystem("nqn.a")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	if err := configfs.NewWithOps(k.Root, k.Admin()).Relink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}); err != nil {
		t.Fatal(err)
	}
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 1, "veth0")
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewCollector(e, new(udev.Stats))).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`nvmet_rebind_listeners{kind="nvmet",state="alive"} 1`,
		`nvmet_rebind_listeners{kind="nvmet",state="dead"} 0`,
		`nvmet_rebind_rebinds_total{result="ok"} 1`,
		`nvmet_rebind_reconciles_total 1`,
		`nvmet_rebind_event_source_resyncs_total{source="uevent"} 0`,
		`nvmet_rebind_last_relisten_seconds `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
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

// fakeKernel is the tests' fake kernel: the configfs tree
// (configfstest.Fake) binding its listeners through the RDMA side
// (rdmatest.Kernel, also the engine's rebind.Kernel).
type fakeKernel struct {
	*configfstest.Fake
	*rdmatest.Kernel
}

func newFakeKernel(tb interface{ TempDir() string }) *fakeKernel {
	r := rdmatest.New()
	return &fakeKernel{configfstest.New(tb, r), r}
}

func (k *fakeKernel) String() string { return k.Fake.String() + " | " + k.Kernel.String() }
