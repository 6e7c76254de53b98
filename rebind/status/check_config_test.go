package status_test

import (
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// A refused reload and saved configs unreadable at start are WARNING,
// named, until the daemon clears them; a listener's trouble still wins.
func TestCheckConfigTrouble(t *testing.T) {
	t.Parallel()
	const refused = `config /etc/nvmet-rebind/config.toml: [boot]: nvmetcli config /etc/nvmet/config.json: ports[1]: port 2: traddr "x" is not an IP address`
	with := func(c *status.ConfigStatus, mod func(*status.StatusReport)) status.StatusReport {
		r := report(listener("1", nil))
		r.Config = c
		if mod != nil {
			mod(&r)
		}
		return r
	}
	tests := []struct {
		name    string
		r       status.StatusReport
		want    status.Health
		line    string // the status line starts with it
		details []string
	}{
		{name: "none", r: with(nil, nil), want: status.OK, line: "NVMET-REBIND OK - 1 of 1 listener alive |"},
		{name: "empty", r: with(&status.ConfigStatus{}, nil), want: status.OK},
		{
			name: "reload refused", r: with(&status.ConfigStatus{ReloadRefused: refused}, nil), want: status.Warning,
			line:    "NVMET-REBIND WARNING - reload refused, the daemon runs on its previous config: " + refused + " |",
			details: []string{"WARNING: reload refused, the daemon runs on its previous config: " + refused + " (fix it, nvmet-rebind config check, then reload)"},
		},
		{
			name: "saved config missing at start", r: with(&status.ConfigStatus{SavedUnreadable: "nvmetcli config /etc/nvmet/config.json: file does not exist"}, nil),
			want:    status.Warning,
			line:    "NVMET-REBIND WARNING - saved config unreadable, not completed: nvmetcli config /etc/nvmet/config.json: file does not exist |",
			details: []string{"WARNING: saved config unreadable, not completed: nvmetcli config /etc/nvmet/config.json: file does not exist"},
		},
		{
			name: "the engine's saved config error says it once",
			r: with(&status.ConfigStatus{SavedUnreadable: "nvmetcli config /x: bad"}, func(r *status.StatusReport) {
				r.SavedConfigsError = "nvmetcli config /x: bad"
			}),
			want: status.Warning,
			line: "NVMET-REBIND WARNING - saved config: 1 entry or file refused, not completed: nvmetcli config /x: bad |",
		},
		{
			name: "a dead listener outweighs it",
			r:    with(&status.ConfigStatus{ReloadRefused: refused}, func(r *status.StatusReport) { r.Listeners = append(r.Listeners, listener("2", dead)) }),
			want: status.Critical, details: []string{"WARNING: reload refused, the daemon runs on its previous config: " + refused + " (fix it, nvmet-rebind config check, then reload)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := status.Check(tt.r)
			if v.Health != tt.want {
				t.Errorf("Check() = %v, want %v\n%s\n%s", v.Health, tt.want, v.StatusLine(), strings.Join(v.Details, "\n"))
			}
			if !strings.HasPrefix(v.StatusLine(), tt.line) {
				t.Errorf("status line\n got %s\nwant %s…", v.StatusLine(), tt.line)
			}
			for _, d := range tt.details {
				found := false
				for _, g := range v.Details {
					found = found || g == d
				}
				if !found {
					t.Errorf("details lack %q:\n%s", d, strings.Join(v.Details, "\n"))
				}
			}
		})
	}
}
