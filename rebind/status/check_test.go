package status_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

var checkAt = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// seen is a configfs that shows both trees.
func seen() *status.ConfigfsStatus {
	return &status.ConfigfsStatus{Root: "/sys/kernel/config", Mounted: true, Nvmet: true, LIO: true}
}

func report(ls ...status.ListenerStatus) status.StatusReport {
	return status.StatusReport{SchemaVersion: 2, Listeners: ls, Source: "daemon", At: checkAt, Configfs: seen()}
}

func downFor(d time.Duration) func(*status.ListenerStatus) {
	return func(l *status.ListenerStatus) { l.DeadSince = ptr(checkAt.Add(-d)) }
}

func all(mods ...func(*status.ListenerStatus)) func(*status.ListenerStatus) {
	return func(l *status.ListenerStatus) {
		for _, m := range mods {
			m(l)
		}
	}
}

func stranded(l *status.ListenerStatus) {
	l.Listening, l.State, l.Reason = boolp(false), "stranded", "LISTEN on mlx5_0, address on mlx5_1"
}

func TestCheck(t *testing.T) {
	healing := func(l *status.ListenerStatus) { l.Heal = "rebind" }
	gaveUp := func(l *status.ListenerStatus) { l.GaveUp = true; l.Reason = "gave up" }
	tests := []struct {
		name    string
		r       status.StatusReport
		want    status.Health
		line    string // the whole status line
		details []string
	}{
		{
			name: "nothing managed, everything seen: OK, and it says so",
			r:    report(),
			want: status.OK,
			line: "NVMET-REBIND OK - 0 managed listeners | alive=0 dead=0 stranded=0 unknown=0 managed=0 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name: "every managed expected listener listens",
			r:    report(listener("1", nil), listener("2", nil)),
			want: status.OK,
			line: "NVMET-REBIND OK - 2 of 2 listeners alive | alive=2 dead=0 stranded=0 unknown=0 managed=2 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name:    "one dead is critical",
			r:       report(listener("1", nil), listener("2", dead)),
			want:    status.Critical,
			line:    "NVMET-REBIND CRITICAL - 1 of 2 listeners dead: nvmet 2 192.0.2.1:4420 | alive=1 dead=1 stranded=0 unknown=0 managed=2 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"CRITICAL: nvmet 2 (192.0.2.1:4420): dead: no listener"},
		},
		{
			name:    "dead with the daemon's heal due: warning",
			r:       report(listener("1", nil), listener("2", all(dead, healing))),
			want:    status.Warning,
			line:    "NVMET-REBIND WARNING - 1 of 2 listeners dead, healing: nvmet 2 192.0.2.1:4420 | alive=1 dead=1 stranded=0 unknown=0 managed=2 healing=1 gave_up=0 unreadable=0 missing=0",
			details: []string{"WARNING: nvmet 2 (192.0.2.1:4420): dead, healing (rebind): no listener"},
		},
		{
			name: "a planned heal without a daemon is nobody's: critical",
			r: func() status.StatusReport {
				r := report(listener("2", all(dead, healing)))
				r.Source = "direct"
				return r
			}(),
			want:    status.Critical,
			details: []string{"CRITICAL: nvmet 2 (192.0.2.1:4420): dead: no listener"},
		},
		{
			name:    "gave up is critical, even with a heal",
			r:       report(listener("2", all(dead, gaveUp, healing))),
			want:    status.Critical,
			line:    "NVMET-REBIND CRITICAL - 1 of 1 listener dead, given up: nvmet 2 192.0.2.1:4420 | alive=0 dead=1 stranded=0 unknown=0 managed=1 healing=0 gave_up=1 unreadable=0 missing=0",
			details: []string{"CRITICAL: nvmet 2 (192.0.2.1:4420): dead, given up: gave up"},
		},
		{
			name:    "stranded within the repair grace: warning",
			r:       report(listener("7", all(stranded, downFor(2*time.Second)))),
			want:    status.Warning,
			line:    "NVMET-REBIND WARNING - 1 of 1 listener stranded, within the kernel's repair grace: nvmet 7 192.0.2.1:4420 | alive=0 dead=0 stranded=1 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"WARNING: nvmet 7 (192.0.2.1:4420): stranded, within the kernel's repair grace: LISTEN on mlx5_0, address on mlx5_1"},
		},
		{
			name:    "stranded past the grace: critical",
			r:       report(listener("7", all(stranded, downFor(rebind.StrandedGrace)))),
			want:    status.Critical,
			details: []string{"CRITICAL: nvmet 7 (192.0.2.1:4420): stranded past the repair grace: LISTEN on mlx5_0, address on mlx5_1"},
		},
		{
			name:    "stranded without a time is past the grace",
			r:       report(listener("7", stranded)),
			want:    status.Critical,
			details: []string{"CRITICAL: nvmet 7 (192.0.2.1:4420): stranded past the repair grace: LISTEN on mlx5_0, address on mlx5_1"},
		},
		{
			name: "a state this version does not know is unknown, whatever listening says",
			r: report(listener("3", func(l *status.ListenerStatus) {
				l.Listening, l.State, l.Reason = boolp(false), "half-open", "gone"
			})),
			want:    status.Unknown,
			details: []string{"UNKNOWN: nvmet 3 (192.0.2.1:4420): state unknown: gone"},
		},
		{
			name: "RDMA netlink unavailable: unknown, and the line says why",
			r: func() status.StatusReport {
				r := report(listener("1", unknown), listener("2", unknown))
				r.ListenersError = "rdma netlink: protocol not supported"
				return r
			}(),
			want: status.Unknown,
			line: "NVMET-REBIND UNKNOWN - 2 of 2 listeners unknown (RDMA netlink unavailable: rdma netlink: protocol not supported): nvmet 1 192.0.2.1:4420, nvmet 2 192.0.2.1:4420 | alive=0 dead=0 stranded=0 unknown=2 managed=2 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name: "RDMA netlink unavailable with nothing managed: OK, noted",
			r: func() status.StatusReport {
				r := report()
				r.ListenersError = "no rdma"
				return r
			}(),
			want:    status.OK,
			line:    "NVMET-REBIND OK - 0 managed listeners | alive=0 dead=0 stranded=0 unknown=0 managed=0 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"note: RDMA netlink unavailable (no rdma); no managed listener needs it"},
		},
		{
			name: "dead and unknown: critical wins, both detailed, worst first",
			r:    report(listener("1", unknown), listener("2", dead), listener("3", all(dead, healing))),
			want: status.Critical,
			details: []string{
				"CRITICAL: nvmet 2 (192.0.2.1:4420): dead: no listener",
				"UNKNOWN: nvmet 1 (192.0.2.1:4420): state unknown: no RDMA netlink",
				"WARNING: nvmet 3 (192.0.2.1:4420): dead, healing (rebind): no listener",
			},
		},
		{
			name: "unmanaged and not expected listeners are not counted",
			r: report(
				listener("1", func(l *status.ListenerStatus) { dead(l); l.Managed = false }),
				listener("2", func(l *status.ListenerStatus) { unknown(l); l.Managed = false }),
				listener("3", func(l *status.ListenerStatus) { dead(l); l.Expected = false; l.State = "none" }),
				listener("4", func(l *status.ListenerStatus) { l.Expected = false; l.State = "" }), // schema 1
				listener("5", func(l *status.ListenerStatus) { l.Managed, l.Expected, l.State = false, false, "not-applicable" }),
				listener("6", nil),
			),
			want: status.OK,
			line: "NVMET-REBIND OK - 1 of 1 listener alive | alive=1 dead=0 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name: "many dead: three named, the rest counted",
			r:    report(listener("1", dead), listener("2", dead), listener("3", dead), listener("4", dead), listener("5", dead)),
			want: status.Critical,
			line: "NVMET-REBIND CRITICAL - 5 of 5 listeners dead: nvmet 1 192.0.2.1:4420, nvmet 2 192.0.2.1:4420, nvmet 3 192.0.2.1:4420, and 2 more | alive=0 dead=5 stranded=0 unknown=0 managed=5 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name: "a LIO portal's id says its address",
			r: report(listener("iqn.2003-01.org.linux-iscsi.h:t/tpgt_1/198.51.100.7:3260", func(l *status.ListenerStatus) {
				dead(l)
				l.Kind, l.Address, l.Service = "lio", "198.51.100.7", "3260"
			})),
			want:    status.Critical,
			line:    "NVMET-REBIND CRITICAL - 1 of 1 listener dead: lio iqn.2003-01.org.linux-iscsi.h:t/tpgt_1/198.51.100.7:3260 | alive=0 dead=1 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"CRITICAL: lio iqn.2003-01.org.linux-iscsi.h:t/tpgt_1/198.51.100.7:3260 (198.51.100.7:3260): dead: no listener"},
		},
		{
			name: "configfs root missing: unknown, never OK",
			r: func() status.StatusReport {
				r := report()
				r.Configfs = &status.ConfigfsStatus{Root: "/sys/kernel/config", Error: "configfs root /sys/kernel/config does not exist (configfs not mounted, or not built into this kernel)"}
				return r
			}(),
			want:    status.Unknown,
			line:    "NVMET-REBIND UNKNOWN - configfs not visible: configfs root /sys/kernel/config does not exist (configfs not mounted, or not built into this kernel) | alive=0 dead=0 stranded=0 unknown=0 managed=0 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"UNKNOWN: configfs: configfs root /sys/kernel/config does not exist (configfs not mounted, or not built into this kernel)"},
		},
		{
			name: "neither nvmet nor LIO loaded: unknown",
			r: func() status.StatusReport {
				r := report()
				r.Configfs.Nvmet, r.Configfs.LIO = false, false
				return r
			}(),
			want: status.Unknown,
			line: "NVMET-REBIND UNKNOWN - neither nvmet nor LIO iSCSI is loaded (no /sys/kernel/config/nvmet, no /sys/kernel/config/target/iscsi) | alive=0 dead=0 stranded=0 unknown=0 managed=0 healing=0 gave_up=0 unreadable=0 missing=0",
		},
		{
			name: "only nvmet loaded, LIO not needed: OK with a note",
			r: func() status.StatusReport {
				r := report(listener("1", nil))
				r.Configfs.LIO = false
				return r
			}(),
			want:    status.OK,
			details: []string{"note: LIO iSCSI not loaded (no /sys/kernel/config/target/iscsi)"},
		},
		{
			name: "nvmet not loaded but a saved config names nvmet objects: unknown",
			r: func() status.StatusReport {
				r := report()
				r.Configfs.Nvmet, r.Configfs.NvmetWanted = false, true
				return r
			}(),
			want:    status.Unknown,
			details: []string{"UNKNOWN: nvmet not loaded (no /sys/kernel/config/nvmet), but the journal or a saved config names nvmet objects"},
		},
		{
			name: "objects unreadable: unknown, each detailed",
			r: func() status.StatusReport {
				r := report(listener("1", nil))
				r.Unreadable = []string{"nvmet port 3: addr_traddr: input/output error", "lio target iqn.x: permission denied"}
				return r
			}(),
			want: status.Unknown,
			line: "NVMET-REBIND UNKNOWN - 2 objects unreadable: nvmet port 3: addr_traddr: input/output error | alive=1 dead=0 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=2 missing=0",
			details: []string{
				"UNKNOWN: unreadable: nvmet port 3: addr_traddr: input/output error",
				"UNKNOWN: unreadable: lio target iqn.x: permission denied",
			},
		},
		{
			name: "journal entries ignored: warning",
			r: func() status.StatusReport {
				r := report(listener("1", nil))
				r.JournalErrors = []string{"journal/x.json: quarantined"}
				return r
			}(),
			want:    status.Warning,
			line:    "NVMET-REBIND WARNING - 1 intent journal entry unreadable or ignored (a heal may be left half done) | alive=1 dead=0 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=0",
			details: []string{"WARNING: journal: journal/x.json: quarantined"},
		},
		{
			name: "addresses unreadable with listeners managed: warning",
			r: func() status.StatusReport {
				r := report(listener("1", nil))
				r.AddressesError = "rtnetlink: EPERM"
				return r
			}(),
			want:    status.Warning,
			details: []string{"WARNING: netdev addresses unreadable, no heal can run: rtnetlink: EPERM"},
		},
		{
			name: "a daemon of schema 1 (no configfs): judged by the listeners, noted",
			r: func() status.StatusReport {
				r := report(listener("1", nil))
				r.Configfs, r.SchemaVersion = nil, 0
				return r
			}(),
			want:    status.OK,
			details: []string{"note: the report says nothing of configfs (a daemon older than this command: restart it)"},
		},
		{
			name: "a name with a newline or a '|' stays on the status line, escaped",
			r:    report(listener("1\nx|y", dead)),
			want: status.Critical,
			line: `NVMET-REBIND CRITICAL - 1 of 1 listener dead: nvmet "1\nx¦y" 192.0.2.1:4420 | alive=0 dead=1 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := status.Check(tt.r)
			if v.Health != tt.want {
				t.Errorf("Check() = %v, want %v\n%s\n%s", v.Health, tt.want, v.StatusLine(), strings.Join(v.Details, "\n"))
			}
			if tt.line != "" && v.StatusLine() != tt.line {
				t.Errorf("status line\n got %s\nwant %s", v.StatusLine(), tt.line)
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
			var b bytes.Buffer
			if err := v.Write(&b); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if lines[0] != v.StatusLine() || len(lines) != 1+len(v.Details) {
				t.Errorf("output is not the status line then the details:\n%s", b.String())
			}
			if strings.Count(b.String(), "|") != 1 {
				t.Errorf("the output holds a '|' besides the perf data's:\n%s", b.String())
			}
			if last := lines[len(lines)-1]; last != "source: daemon" && last != "source: direct" {
				t.Errorf("last detail %q, want the source", last)
			}
		})
	}
}

// The health values are the plugin convention's exit codes.
func TestCheckExitCodes(t *testing.T) {
	want := map[status.Health]int{status.OK: 0, status.Warning: 1, status.Critical: 2, status.Unknown: 3}
	names := map[status.Health]string{status.OK: "OK", status.Warning: "WARNING", status.Critical: "CRITICAL", status.Unknown: "UNKNOWN"}
	for h, code := range want {
		if int(h) != code || h.String() != names[h] {
			t.Errorf("%v = %d, want %s = %d", h, int(h), names[h], code)
		}
	}
}

// A check that could not read anything is UNKNOWN, with no perf data.
func TestCheckFailed(t *testing.T) {
	v := status.Failed(errorString("nvmet ports: open /sys/kernel/config/nvmet/ports: permission denied"))
	if v.Health != status.Unknown || v.StatusLine() != "NVMET-REBIND UNKNOWN - cannot read the status: nvmet ports: open /sys/kernel/config/nvmet/ports: permission denied" {
		t.Errorf("Failed: %v %q", v.Health, v.StatusLine())
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// schema_version leads the JSON, and every listener has a state.
func TestReportSchema(t *testing.T) {
	r := status.Report(rebind.Snapshot{At: checkAt, Items: []rebind.Item{
		{Key: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, Reason: "transport \"tcp\" is not rdma"},
	}}, "direct")
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"schema_version":2,`)) {
		t.Errorf("JSON does not start with schema_version 2: %s", b)
	}
	if r.Listeners[0].State != status.StateNotApplicable || r.Listeners[0].Listening != nil {
		t.Errorf("state %q listening %v, want not-applicable and null", r.Listeners[0].State, r.Listeners[0].Listening)
	}
	if r.Configfs != nil {
		t.Errorf("configfs %+v from a snapshot that probed nothing", r.Configfs)
	}
}

func TestTableEscapesNames(t *testing.T) {
	r := status.StatusReport{Source: "daemon", Listeners: []status.ListenerStatus{
		{Kind: "nvmet", ID: "1\nnvmet  2  fake", State: "dead", Reason: "line one\nline two\ttab"},
		{Kind: "lio", ID: "iqn.x\x1b[2J/tpgt_1/192.0.2.1:3260", State: "none", Reason: "ok"},
		{Kind: "lio", ID: "iqn.bad\xff/tpgt_1/192.0.2.1:3260", State: "none", Reason: "ok"},
	}}
	var b bytes.Buffer
	if err := status.WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := strings.Split(out, "\n")
	// header, three rows, blank, source
	if len(rows) < 5 || !strings.HasPrefix(rows[1], `nvmet  "1\nnvmet  2  fake"`) {
		t.Fatalf("the newline of an id broke the table:\n%s", out)
	}
	for _, want := range []string{`line one\nline two\ttab`, `"iqn.x\x1b[2J/tpgt_1/192.0.2.1:3260"`, `"iqn.bad\xff/tpgt_1/192.0.2.1:3260"`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %s:\n%s", want, out)
		}
	}
	if strings.ContainsRune(out, '\x1b') || strings.ContainsRune(out, '\t') {
		t.Errorf("raw control characters in the table:\n%q", out)
	}
	if diff := cmp.Diff(7, len(rows)); diff != "" { // header, 3 rows, blank, source, ""
		t.Errorf("rows (-want +got):\n%s\n%s", diff, out)
	}
}

// What a saved config declares and configfs lacks is counted and named:
// WARNING within the boot window (the restore, or boot completion, may
// still make it), CRITICAL after it; a refused entry of a saved config is
// a WARNING naming the file and the entry.
func TestCheckDeclaredMissing(t *testing.T) {
	missing := func(id string) status.ListenerStatus {
		return status.ListenerStatus{Kind: "nvmet", ID: id, Address: "192.0.2.1", Service: "4420", State: status.StateNone, Missing: true,
			Reason: "declared in /etc/nvmet/config.json but not in configfs: not created"}
	}
	for _, tt := range []struct {
		name    string
		until   time.Duration // the boot window's end after checkAt (0: none)
		saved   string
		want    status.Health
		line    string
		details []string
	}{
		{"within the boot window", time.Minute, "", status.Warning,
			"NVMET-REBIND WARNING - 2 objects declared by a saved config, not in configfs (boot window open): nvmet 3 192.0.2.1:4420, nvmet 4 192.0.2.1:4420 | alive=1 dead=0 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=2",
			[]string{"WARNING: nvmet 3 (192.0.2.1:4420): declared in /etc/nvmet/config.json but not in configfs: not created"}},
		{"after the boot window", -time.Minute, "", status.Critical,
			"NVMET-REBIND CRITICAL - 2 objects declared by a saved config, not in configfs: nvmet 3 192.0.2.1:4420, nvmet 4 192.0.2.1:4420 | alive=1 dead=0 stranded=0 unknown=0 managed=1 healing=0 gave_up=0 unreadable=0 missing=2",
			[]string{"CRITICAL: nvmet 4 (192.0.2.1:4420): declared in /etc/nvmet/config.json but not in configfs: not created"}},
		{"no window known", 0, "", status.Critical, "", nil},
		{"a refused entry besides", time.Minute, "nvmetcli config /etc/nvmet/config.json: ports[2]: portid \"x\" is not a port number (0-65535); this port is not completed\ntargetcli config /etc/target/saveconfig.json: unexpected end of JSON input", status.Warning, "",
			[]string{"WARNING: saved config: nvmetcli config /etc/nvmet/config.json: ports[2]: portid \"x\" is not a port number (0-65535); this port is not completed",
				"WARNING: saved config: targetcli config /etc/target/saveconfig.json: unexpected end of JSON input"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := report(listener("1", nil), missing("3"), missing("4"))
			if tt.until != 0 {
				r.BootWindowUntil = ptr(checkAt.Add(tt.until))
			}
			r.SavedConfigsError = tt.saved
			v := status.Check(r)
			if v.Health != tt.want || v.Counts.Missing != 2 {
				t.Fatalf("health %v, missing %d; want %v, 2\n%s", v.Health, v.Counts.Missing, tt.want, v.StatusLine())
			}
			if tt.line != "" && v.StatusLine() != tt.line {
				t.Errorf("status line\n got %s\nwant %s", v.StatusLine(), tt.line)
			}
			for _, d := range tt.details {
				if !strings.Contains(strings.Join(v.Details, "\n"), d) {
					t.Errorf("details lack %q:\n%s", d, strings.Join(v.Details, "\n"))
				}
			}
		})
	}
	// Nothing missing, the file read whole, all alive: the saved config is
	// complete (the unit's Status: line says so); not with a missing object.
	r0 := report(listener("1", nil))
	r0.BootWindowUntil = ptr(checkAt.Add(time.Minute))
	if v := status.Check(r0); !v.SavedComplete {
		t.Errorf("nothing missing, all alive: SavedComplete false (%s)", v.StatusLine())
	}
	r0.Listeners = append(r0.Listeners, missing("3"))
	if v := status.Check(r0); v.SavedComplete {
		t.Error("port 3 missing: SavedComplete true")
	}
	if v := status.Check(report(listener("1", nil))); v.SavedComplete {
		t.Error("no saved config named: SavedComplete true")
	}
	// Only a refused entry: WARNING, naming it on the status line.
	r := report(listener("1", nil))
	r.SavedConfigsError = "nvmetcli config /etc/nvmet/config.json: ports[2]: portid \"x\" is not a port number (0-65535); this port is not completed"
	v := status.Check(r)
	if v.Health != status.Warning || !strings.Contains(v.Summary, "saved config: 1 entry or file refused, not completed: nvmetcli config /etc/nvmet/config.json: ports[2]") {
		t.Errorf("a refused entry: %v %s", v.Health, v.StatusLine())
	}
}
