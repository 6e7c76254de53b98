package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
)

// FuzzParseConfig: any input either parses into a valid config or gives an
// error naming the file; never a panic, never an unbounded echo.
func FuzzParseConfig(f *testing.F) {
	ref, err := os.ReadFile(filepath.Join("..", "..", "etc", "nvmet-rebind", "config.toml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(ref),
		"[[watch]]\nsubnet = \"192.0.2.0/24\"\n[policy]\ngive_up_after = \"0\"\n",
		"[[watch]]\nsubnet = \"2001:db8::/64\"\n[[watch]]\nsubnet = \"192.0.2.1/32\"\n",
		"[boot]\nnvmet_config = \"/etc/nvmet/config.json\"\nwindow = \"5m\"\n",
		"[policy]\nresync_interval = \"-1s\"\n",
		"[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/nvmet-rebind.prom\"\n",
		"[polcy]\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := config.Parse("fuzz.toml", []byte(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if c.GiveUpAfter < 0 || c.ResyncInterval < 1e9 || c.BootWindow < 0 {
			t.Fatalf("invalid durations accepted: %+v", c)
		}
		if p := c.MetricsTextfile; p != "" && (!filepath.IsAbs(p) || !strings.HasSuffix(p, ".prom")) {
			t.Fatalf("metrics textfile %q accepted", p)
		}
		for i, a := range c.Watch {
			if !a.IsValid() || a != a.Masked() {
				t.Fatalf("invalid prefix %v", a)
			}
			for _, b := range c.Watch[:i] {
				if a.Overlaps(b) {
					t.Fatalf("overlapping %v %v", a, b)
				}
			}
		}
	})
}
