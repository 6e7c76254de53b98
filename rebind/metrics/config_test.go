package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/metrics"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// scrape returns the collector's metrics as the endpoint serves them.
func scrape(t *testing.T, c *metrics.Collector) string {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(c).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nvmet_rebind_config_reload_refused and nvmet_rebind_saved_config_unreadable
// are 0 or 1: the daemon's state (SetConfigState), and for the second the
// engine's own saved config error too.
func TestMetricsConfigState(t *testing.T) {
	t.Parallel()
	e := healedEngine(t)
	c := metrics.NewCollector(e, nil)
	want := func(body string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(body, "\n"+l+"\n") {
				t.Errorf("metrics lack %q:\n%s", l, body)
			}
		}
	}
	want(scrape(t, c), "nvmet_rebind_config_reload_refused 0", "nvmet_rebind_saved_config_unreadable 0")
	var st metrics.ConfigState
	c.SetConfigState(func() metrics.ConfigState { return st })
	st.ReloadRefused = true
	want(scrape(t, c), "nvmet_rebind_config_reload_refused 1", "nvmet_rebind_saved_config_unreadable 0")
	st = metrics.ConfigState{SavedUnreadable: true}
	want(scrape(t, c), "nvmet_rebind_config_reload_refused 0", "nvmet_rebind_saved_config_unreadable 1")
	st = metrics.ConfigState{}
	want(scrape(t, c), "nvmet_rebind_config_reload_refused 0", "nvmet_rebind_saved_config_unreadable 0")
}

// A saved config the engine could not read whole counts as unreadable
// without the daemon's word.
func TestMetricsSavedConfigCorrupt(t *testing.T) {
	t.Parallel()
	k, j := portWorld(t)
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{"ports": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := rebind.DefaultConfig()
	cfg.NvmetConfig = p
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: cfg, Declared: saved.Load})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, metrics.NewCollector(e, nil)); !strings.Contains(body, "\nnvmet_rebind_saved_config_unreadable 1\n") {
		t.Errorf("a corrupt saved config is not counted:\n%s", body)
	}
}
