package saved_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// Check wants every file [boot] names there, read whole, with no bad
// entry; its error names the file, and the first bad entry.
func TestCheck(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile("../testdata/nvmet-config.json")
	if err != nil {
		t.Fatal(err)
	}
	lio, err := os.ReadFile("../testdata/saveconfig.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nvmet, target := write("config.json", good), write("saveconfig.json", lio)
	corrupt := write("corrupt.json", []byte(`{"ports": [`))
	badEntry := write("bad.json", []byte(`{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"}, "subsystems": []},
		{"portid": 2, "addr": {"trtype": "rdma", "traddr": "not-an-ip", "trsvcid": "4420"}, "subsystems": []}]}`))
	missing := filepath.Join(dir, "missing.json")

	tests := []struct {
		name          string
		nvmet, target string
		want          []string // in the error; none: valid
		notExist      bool
	}{
		{name: "none named", want: nil},
		{name: "both valid", nvmet: nvmet, target: target},
		{name: "missing", nvmet: missing, want: []string{"nvmetcli config " + missing, "does not exist"}, notExist: true},
		{name: "missing targetcli", nvmet: nvmet, target: missing, want: []string{"targetcli config " + missing}, notExist: true},
		{name: "corrupt JSON", nvmet: corrupt, want: []string{"nvmetcli config " + corrupt, "unexpected end of JSON"}},
		{name: "corrupt targetcli", target: corrupt, want: []string{"targetcli config " + corrupt}},
		{name: "bad entry named", nvmet: badEntry, want: []string{"nvmetcli config " + badEntry + ": ports[1]: port 2: traddr \"not-an-ip\""}},
		{name: "a directory", nvmet: dir, want: []string{"nvmetcli config", dir}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := rebind.DefaultConfig()
			cfg.NvmetConfig, cfg.TargetConfig = tt.nvmet, tt.target
			c, err := saved.Check(cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if tt.nvmet != "" && (c.Nvmet != tt.nvmet || c.Ports == 0 || c.Objects == 0) || tt.target != "" && (c.LIO != tt.target || c.Portals == 0) {
					t.Errorf("Check counted %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check accepted it (%+v)", c)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v; want it to say %q", err, w)
				}
			}
			if errors.Is(err, fs.ErrNotExist) != tt.notExist {
				t.Errorf("Check: %v: errors.Is(fs.ErrNotExist) = %v", err, !tt.notExist)
			}
		})
	}
}
