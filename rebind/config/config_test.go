package config_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/config"
)

func TestReferenceConfigParses(t *testing.T) {
	path := filepath.Join("..", "..", "etc", "nvmet-rebind", "config.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Parse(path, b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rebind.DefaultConfig(), got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("reference config differs from the defaults (-want +got):\n%s", diff)
	}
	// Uncommenting the examples gives a valid config too.
	un := strings.NewReplacer("# [[watch]]", "[[watch]]", "# subnet", "subnet", "# textfile", "textfile",
		"# [boot]", "[boot]", "# nvmet_config", "nvmet_config", "# target_config", "target_config", "# window", "window").Replace(string(b))
	got, err = config.Parse(path, []byte(un))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Watch) != 2 {
		t.Errorf("watch = %v", got.Watch)
	}
	// The example is node_exporter's textfile directory on Debian, which the
	// shipped unit's ReadWritePaths= allows.
	if want := "/var/lib/prometheus/node-exporter/nvmet-rebind.prom"; got.MetricsTextfile != want {
		t.Errorf("metrics.textfile = %q, want %q", got.MetricsTextfile, want)
	}
	// The [boot] example names nvmetcli's and Debian's targetcli's files.
	if got.NvmetConfig != "/etc/nvmet/config.json" || got.TargetConfig != "/etc/rtslib-fb-target/saveconfig.json" || got.BootWindow != 10*time.Minute {
		t.Errorf("[boot]: nvmet_config %q, target_config %q, window %v", got.NvmetConfig, got.TargetConfig, got.BootWindow)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"syntax", "[policy\n", "cfg.toml: line "},
		{"unknown key", "[policy]\ngive_up_after = \"1m\"\ngive_up = \"1m\"\n", `line 3: unknown key "policy.give_up"`},
		{"unknown table", "[polcy]\n", `unknown key "polcy"`},
		{"bad prefix", "[[watch]]\nsubnet = \"192.0.2.0/33\"\n", `line 2`},
		{"host bits", "[[watch]]\nsubnet = \"192.0.2.1/24\"\n", `did you mean "192.0.2.0/24"`},
		{"overlap", "[[watch]]\nsubnet = \"192.0.2.0/24\"\n[[watch]]\nsubnet = \"192.0.2.0/25\"\n", "overlaps"},
		{"duplicate", "[[watch]]\nsubnet = \"192.0.2.0/24\"\n[[watch]]\nsubnet = \"192.0.2.0/24\"\n", "overlaps"},
		{"negative", "[policy]\ngive_up_after = \"-1m\"\n", "line 2"},
		{"not a duration", "[policy]\nresync_interval = \"soon\"\n", `line 2: policy.resync_interval: "soon" is not a duration`},
		{"not a subnet", "[[watch]]\nsubnet = \"10.0.0.300/24\"\n", `line 2: watch.subnet: "10.0.0.300/24" is not a subnet`},
		{"too fast", "[policy]\nresync_interval = \"10ms\"\n", "below 1s"},
		{"wrong type", "[policy]\npin_device = \"yes\"\n", "line 2"},
		{"watch without subnet", "[[watch]]\n", "has no subnet"},
		{"relative textfile", "[metrics]\ntextfile = \"m.prom\"\n", `line 2: metrics.textfile "m.prom" must be an absolute path`},
		{"textfile not .prom", "[metrics]\n\ntextfile = \"/var/lib/m.txt\"\n", `line 3: metrics.textfile "/var/lib/m.txt" must end in .prom`},
		{"textfile a directory", "[metrics]\ntextfile = \"/var/lib/.prom\"\n", "must end in .prom"},
		{"unknown metrics key", "[metrics]\nlisten = \"127.0.0.1:9767\"\n", `unknown key "metrics.listen"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("cfg.toml", []byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestConfigValues(t *testing.T) {
	c, err := config.Parse("c", []byte("[[watch]]\nsubnet = \"2001:db8::/64\"\n[policy]\ngive_up_after = \"0\"\npin_device = true\nresync_interval = \"5s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.GiveUpAfter != 0 || !c.PinDevice || c.ResyncInterval != 5*time.Second || c.Watch[0] != netip.MustParsePrefix("2001:db8::/64") {
		t.Errorf("config = %+v", c)
	}
}

func TestConfigMetricsTextfile(t *testing.T) {
	for text, want := range map[string]string{
		"":                             "",
		"[metrics]\n":                  "",
		"[metrics]\ntextfile = \"\"\n": "",
		"[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/nvmet-rebind.prom\"\n": "/var/lib/prometheus/node-exporter/nvmet-rebind.prom",
	} {
		c, err := config.Parse("c", []byte(text))
		if err != nil || c.MetricsTextfile != want {
			t.Errorf("Parse(%q): textfile %q, %v; want %q", text, c.MetricsTextfile, err, want)
		}
	}
}

func TestLoadConfigRefusesWritableByOthers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(p); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("err = %v", err)
	}
	if _, err := config.Load(p + ".missing"); err == nil || !strings.Contains(err.Error(), "reference config") {
		t.Errorf("err = %v", err)
	}
}

// An unknown key is reported at the line that defines it, also when the
// decoder has no position for it: a [table] or [[table]] header, a dotted
// key, a sub-table.
func TestUnknownKeyLine(t *testing.T) {
	for text, want := range map[string]string{
		"[polcy]\n": `line 1: unknown key "polcy"`,
		"# comment\n\n[policy]\nresync_interval = \"30s\"\n\n[polcy]\nx = 1\n": `line 6: unknown key "polcy"`,
		"[policy]\npin_device = true\n\n[[wat]]\nsubnet = \"192.0.2.0/24\"\n":  `line 4: unknown key "wat"`,
		"[policy]\n[ policy.sub ]\nx = 1\n":                                    `line 2: unknown key "policy.sub"`,
		"[policy]\npin_device = true\n[metrics]\npolicy.bogus = 1\n":           `line 4: unknown key "metrics.policy.bogus"`,
		"policy.bogus = 1\n":               `line 1: unknown key "policy.bogus"`,
		"[policy]\n\"give_up\" = \"1m\"\n": `line 2: unknown key "policy.give_up"`,
	} {
		_, err := config.Parse("cfg.toml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want it to contain %q", text, err, want)
		}
	}
}

// A value of the wrong TOML type: the whole message, naming the key and
// both types, at its line, and what to write instead.
func TestTypeErrorsInFull(t *testing.T) {
	for text, want := range map[string]string{
		"[policy]\n\nresync_interval = [1]\n": `config cfg.toml: line 3: policy.resync_interval: incompatible types: TOML value has type []any; destination has type primitive (string-like): write a quoted duration, e.g. resync_interval = "30s"`,
		"[policy]\npin_device = \"yes\"\n":    `config cfg.toml: line 2: policy.pin_device: incompatible types: TOML value has type string; destination has type boolean: write true or false, without quotes`,
		"watch = 5\n":                         `config cfg.toml: line 1: watch: incompatible types: TOML value has type int64; destination has type slice: write [[watch]] on a line of its own`,
		"\npolicy = 5\n":                      `config cfg.toml: line 2: policy: incompatible types: TOML value has type int64; destination has type table: write [policy] on a line of its own`,
		"[metrics]\ntextfile = 1\n":           `config cfg.toml: line 2: metrics.textfile: incompatible types: TOML value has type int64; destination has type string: write a quoted absolute path ending in .prom`,
	} {
		_, err := config.Parse("cfg.toml", []byte(text))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) = %v\nwant it to start with %q", text, err, want)
		}
	}
}

// A syntax error is reported at the line that holds it, not the line the
// decoder's lexer had reached (past the newline a broken header stops
// at); without a key to name, the line's text is quoted.
func TestSyntaxErrorLine(t *testing.T) {
	for text, want := range map[string]string{
		"[[watch]]\nsubnet = \"192.0.2.0/24\"\n[policy\ngive_up_after = \"10m\"\n": `line 3: "[policy": expected '.' or ']' to end table name`,
		"[policy\n":                           `line 1: "[policy": expected`,
		"[policy]\ngive_up_after = 10m\n":     `line 2: policy: expected a top-level item`,
		"[policy]\nresync_interval = \"30s\n": `line 2: `,
	} {
		_, err := config.Parse("cfg.toml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want it to contain %q", text, err, want)
		}
	}
}
