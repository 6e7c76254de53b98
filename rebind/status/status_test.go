package status_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

func boolp(b bool) *bool { return &b }

// listener is a managed, expected nvmet listener that listens; cases
// change what they are about.
func listener(id string, mod func(*status.ListenerStatus)) status.ListenerStatus {
	l := status.ListenerStatus{
		Kind: "nvmet", ID: id, Address: "192.0.2.1", Service: "4420",
		Managed: true, Expected: true, Listening: boolp(true), State: "listening",
		Reason: "listening on mlx5_0",
	}
	if mod != nil {
		mod(&l)
	}
	return l
}

func dead(l *status.ListenerStatus) {
	l.Listening, l.State, l.Reason = boolp(false), "dead", "no listener"
}

func unknown(l *status.ListenerStatus) {
	l.Listening, l.State, l.Reason = nil, "unknown", "no RDMA netlink"
}

func tableReport() status.StatusReport {
	return status.StatusReport{
		Source: "daemon",
		Listeners: []status.ListenerStatus{
			{
				Kind: "nvmet", ID: "1", Address: "192.0.2.1", Service: "4420", State: "listening",
				Device: "mlx5_0", RDMADevice: "mlx5_0", RDMAPort: 1, Netdev: "eth0", Managed: true,
				Listening: boolp(true), Expected: true, Reason: "listening on mlx5_0",
			},
			{
				Kind: "lio", ID: "iqn.x/tpgt_1/np", Address: "2001:db8::1", Service: "3260", State: "dead",
				Sharers: 2, Device: "mlx5_1", Managed: false, Listening: boolp(false), Expected: true,
				LastAction: "rebind", LastResult: "EADDRINUSE", Reason: "no listener",
			},
		},
	}
}

// TestWriteTableGolden pins the whole layout: header, aligned rows, the
// source line and the trailer.
func TestWriteTableGolden(t *testing.T) {
	const rows = "" +
		"KIND   ID               ADDRESS             STATE      SHARERS  LISTENER ON  CARRIED BY  NETDEV  MANAGED  LAST ACTION         RETRY  REASON\n" +
		"nvmet  1                192.0.2.1:4420      listening  -        mlx5_0       mlx5_0/1    eth0    yes      -                   -      listening on mlx5_0\n" +
		"lio    iqn.x/tpgt_1/np  [2001:db8::1]:3260  dead       2        -            -           -       no       rebind: EADDRINUSE  -      no listener\n"
	tests := []struct {
		name   string
		mod    func(*status.StatusReport)
		want   string
		wantOK bool
	}{
		{
			name: "listening known",
			want: rows + "\n(source: daemon)\n",
		},
		{
			name: "listening unknown adds the trailer",
			mod: func(r *status.StatusReport) {
				r.Source = "direct"
				r.ListenersError = "rdma netlink: operation not supported"
			},
			want: rows + "\n(source: direct)\n\nlistening is unknown: rdma netlink: operation not supported\n",
		},
		{
			name: "no listeners",
			mod:  func(r *status.StatusReport) { r.Listeners = nil },
			want: "KIND  ID  ADDRESS  STATE  SHARERS  LISTENER ON  CARRIED BY  NETDEV  MANAGED  LAST ACTION  RETRY  REASON\n" +
				"\n(source: daemon)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tableReport()
			if tt.mod != nil {
				tt.mod(&r)
			}
			var b bytes.Buffer
			if err := status.WriteTable(&b, r); err != nil {
				t.Fatalf("WriteTable() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("WriteTable() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

var tableHeader = []string{"KIND", "ID", "ADDRESS", "STATE", "SHARERS", "LISTENER ON", "CARRIED BY", "NETDEV", "MANAGED", "LAST ACTION", "RETRY", "REASON"}

// tableCells parses the rows of WriteTable by the columns of its header,
// so that a case checks cells, not spaces. It returns one map per row.
func tableCells(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	header := lines[0]
	starts := make([]int, len(tableHeader))
	from := 0
	for i, h := range tableHeader {
		j := strings.Index(header[from:], h)
		if j < 0 {
			t.Fatalf("header %q lacks column %q after offset %d", header, h, from)
		}
		starts[i] = from + j
		from = starts[i] + len(h)
	}
	if got := strings.Join(strings.Fields(header), " "); got != strings.Join(tableHeader, " ") {
		t.Fatalf("header = %q, want columns %q", header, tableHeader)
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		if line == "" {
			break // the blank line before (source: …)
		}
		row := map[string]string{}
		for i, h := range tableHeader {
			end := len(line)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(line))
			}
			if starts[i] > len(line) {
				t.Fatalf("row %q is shorter than column %q", line, h)
			}
			row[h] = strings.TrimSpace(line[starts[i]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

func TestWriteTableCells(t *testing.T) {
	lastAt := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name string
		l    status.ListenerStatus
		want map[string]string
	}{
		{
			name: "empty fields are dashes",
			l:    status.ListenerStatus{Kind: "nvmet", ID: "9"},
			want: map[string]string{
				"KIND": "nvmet", "ID": "9", "ADDRESS": "-", "STATE": "-", "SHARERS": "-", "LISTENER ON": "-",
				"CARRIED BY": "-", "NETDEV": "-", "MANAGED": "no", "LAST ACTION": "-", "RETRY": "-", "REASON": "",
			},
		},
		{
			name: "address without service is printed bare",
			l:    status.ListenerStatus{Kind: "nvmet", ID: "9", Address: "192.0.2.9", Managed: true, Reason: "r"},
			want: map[string]string{
				"KIND": "nvmet", "ID": "9", "ADDRESS": "192.0.2.9", "STATE": "-", "SHARERS": "-", "LISTENER ON": "-",
				"CARRIED BY": "-", "NETDEV": "-", "MANAGED": "yes", "LAST ACTION": "-", "RETRY": "-", "REASON": "r",
			},
		},
		{
			name: "stranded shows the device it listens on and the one carrying the address",
			l: status.ListenerStatus{
				Kind: "nvmet", ID: "2", Address: "192.0.2.2", Service: "4420", State: "stranded", Device: "mlx5_0",
				RDMADevice: "mlx5_1", RDMAPort: 2, Netdev: "eth1", Managed: true, Sharers: 1, Reason: "moved",
			},
			want: map[string]string{
				"KIND": "nvmet", "ID": "2", "ADDRESS": "192.0.2.2:4420", "STATE": "stranded", "SHARERS": "1",
				"LISTENER ON": "mlx5_0", "CARRIED BY": "mlx5_1/2", "NETDEV": "eth1", "MANAGED": "yes",
				"LAST ACTION": "-", "RETRY": "-", "REASON": "moved",
			},
		},
		{
			name: "listening without a device is a dash",
			l:    status.ListenerStatus{Kind: "nvmet", ID: "3", State: "listening", Reason: "r"},
			want: map[string]string{
				"KIND": "nvmet", "ID": "3", "ADDRESS": "-", "STATE": "listening", "SHARERS": "-", "LISTENER ON": "-",
				"CARRIED BY": "-", "NETDEV": "-", "MANAGED": "no", "LAST ACTION": "-", "RETRY": "-", "REASON": "r",
			},
		},
		{
			name: "dead and unknown hide the device",
			l: status.ListenerStatus{
				Kind: "lio", ID: "iqn/tpgt_1/np", Address: "2001:db8::1", Service: "3260", State: "unknown",
				Device: "mlx5_0", RDMADevice: "mlx5_0", RDMAPort: 1, Reason: "r",
			},
			want: map[string]string{
				"KIND": "lio", "ID": "iqn/tpgt_1/np", "ADDRESS": "[2001:db8::1]:3260", "STATE": "unknown", "SHARERS": "-",
				"LISTENER ON": "-", "CARRIED BY": "mlx5_0/1", "NETDEV": "-", "MANAGED": "no", "LAST ACTION": "-",
				"RETRY": "-", "REASON": "r",
			},
		},
		{
			name: "last action with its time",
			l: status.ListenerStatus{
				Kind: "nvmet", ID: "4", State: "dead", Device: "mlx5_0", LastAction: "rebind", LastResult: "ok",
				LastAt: &lastAt, Reason: "r",
			},
			want: map[string]string{
				"KIND": "nvmet", "ID": "4", "ADDRESS": "-", "STATE": "dead", "SHARERS": "-", "LISTENER ON": "-",
				"CARRIED BY": "-", "NETDEV": "-", "MANAGED": "no",
				"LAST ACTION": "rebind: ok (" + lastAt.Local().Format(time.TimeOnly) + ")", "RETRY": "-", "REASON": "r",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := status.WriteTable(&b, status.StatusReport{Source: "test", Listeners: []status.ListenerStatus{tt.l}}); err != nil {
				t.Fatalf("WriteTable() error = %v", err)
			}
			rows := tableCells(t, b.String())
			if len(rows) != 1 {
				t.Fatalf("WriteTable() printed %d rows, want 1:\n%s", len(rows), b.String())
			}
			if diff := cmp.Diff(tt.want, rows[0]); diff != "" {
				t.Errorf("WriteTable() cells mismatch (-want +got):\n%s\noutput:\n%s", diff, b.String())
			}
		})
	}
}

func TestWriteTableRetry(t *testing.T) {
	retryAt := time.Now().Add(time.Hour)
	var b bytes.Buffer
	r := status.StatusReport{Source: "test", Listeners: []status.ListenerStatus{
		{Kind: "nvmet", ID: "1", State: "dead", RetryAt: &retryAt, Reason: "r"},
	}}
	if err := status.WriteTable(&b, r); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	rows := tableCells(t, b.String())
	if len(rows) != 1 {
		t.Fatalf("WriteTable() printed %d rows, want 1:\n%s", len(rows), b.String())
	}
	retry := rows[0]["RETRY"]
	rest, ok := strings.CutPrefix(retry, "in ")
	if !ok {
		t.Fatalf("RETRY = %q, want prefix %q", retry, "in ")
	}
	d, err := time.ParseDuration(rest)
	if err != nil {
		t.Fatalf("RETRY = %q: %v", retry, err)
	}
	if d <= 0 || d > time.Hour {
		t.Errorf("RETRY = %q, want a duration in (0, 1h]", retry)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestWriteTableWriteError(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    status.StatusReport
	}{
		{name: "table", r: tableReport()},
		{name: "with trailer", r: status.StatusReport{Source: "direct", ListenersError: "no netlink"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := status.WriteTable(failWriter{}, tt.r); err == nil {
				t.Error("WriteTable() to a failing writer returned nil, want an error")
			}
		})
	}
}

// fullReport sets every field, so that every key is marshalled.
func fullReport() status.StatusReport {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	dead, last, retry := at.Add(-time.Minute), at.Add(-time.Second), at.Add(time.Second)
	lat := 12.5
	return status.StatusReport{
		Listeners: []status.ListenerStatus{{
			Kind: "nvmet", ID: "1", Address: "192.0.2.1", Service: "4420", Managed: true, Reason: "no listener",
			Listening: boolp(false), Device: "mlx5_0", Netdev: "eth0", Endpoint: "nvmet 192.0.2.1:4420",
			Sharers: 2, State: "dead", RDMADevice: "mlx5_0", RDMAPort: 1, Expected: true, DeadSince: &dead,
			LastAction: "rebind", LastResult: "EADDRINUSE", LastAt: &last, LatencyMS: &lat, RetryAt: &retry,
			Heal: "rebind", GaveUp: true,
			History: []status.HealRecord{{At: last, Action: "rebind", Result: "error", Error: "EADDRINUSE"}, {At: at, Action: "rebind", Result: "ok", LatencyMS: &lat}},
		}},
		SchemaVersion:  status.SchemaVersion,
		ListenersError: "no netlink",
		AddressesError: "rtnetlink: EPERM",
		Configfs: &status.ConfigfsStatus{Root: "/sys/kernel/config", Error: "gone", Mounted: true, Nvmet: true, LIO: true,
			NvmetWanted: true, LIOWanted: true},
		Unreadable:    []string{"nvmet port 3: addr_traddr: EIO"},
		JournalErrors: []string{"journal: short write"},
		Source:        "daemon",
		At:            at,
	}
}

var (
	reportKeys = []string{"addresses_error", "at", "configfs", "journal_errors", "listeners", "listeners_error",
		"schema_version", "source", "unreadable"}
	reportKeysMinimal = []string{"at", "listeners", "schema_version", "source"}
	listenerKeys      = []string{
		"address", "dead_since", "device", "endpoint", "expected", "gave_up", "heal", "history", "id", "kind", "last_action",
		"last_action_at", "last_latency_ms", "last_result", "listening", "managed", "netdev",
		"rdma_device", "rdma_port", "reason", "retry_at", "service", "sharers", "state",
	}
	// listenerKeysMinimal are the keys that stay when every omitempty field is empty.
	listenerKeysMinimal = []string{
		"address", "device", "expected", "id", "kind", "listening", "managed", "netdev",
		"rdma_device", "rdma_port", "reason", "service", "state",
	}
)

func keys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// jsonKeys marshals r and returns its top-level keys, the keys of each
// listener and the decoded objects.
func jsonKeys(t *testing.T, r status.StatusReport) ([]string, [][]string, map[string]json.RawMessage, []map[string]json.RawMessage) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("json.Marshal() error = %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("json.Unmarshal(%s) error = %v", b, err)
	}
	var ls []map[string]json.RawMessage
	if raw, ok := top["listeners"]; ok {
		if err := json.Unmarshal(raw, &ls); err != nil {
			t.Fatalf("json.Unmarshal(listeners %s) error = %v", raw, err)
		}
	}
	var lk [][]string
	for _, l := range ls {
		lk = append(lk, keys(l))
	}
	return keys(top), lk, top, ls
}

func TestJSONKeys(t *testing.T) {
	minimal := status.StatusReport{
		Listeners: []status.ListenerStatus{{Kind: "nvmet", ID: "1"}},
		Source:    "direct",
	}
	tests := []struct {
		name         string
		r            status.StatusReport
		wantKeys     []string
		wantListener [][]string
	}{
		{name: "every field set", r: fullReport(), wantKeys: reportKeys, wantListener: [][]string{listenerKeys}},
		{name: "omitempty fields vanish", r: minimal, wantKeys: reportKeysMinimal, wantListener: [][]string{listenerKeysMinimal}},
		{
			name: "empty slices vanish too",
			r: status.StatusReport{
				Listeners: []status.ListenerStatus{}, JournalErrors: []string{}, Source: "direct",
			},
			wantKeys: reportKeysMinimal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, gotListener, _, _ := jsonKeys(t, tt.r)
			if diff := cmp.Diff(tt.wantKeys, got); diff != "" {
				t.Errorf("report keys mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantListener, gotListener); diff != "" {
				t.Errorf("listener keys mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJSONValues pins how values are encoded where scripts depend on it:
// unknown listening is null (not absent), times are RFC 3339.
func TestJSONValues(t *testing.T) {
	unknownListener := fullReport()
	unknownListener.Listeners[0].Listening = nil
	tests := []struct {
		name string
		r    status.StatusReport
		want map[string]string // listener key -> raw JSON
	}{
		{
			name: "every field set",
			r:    fullReport(),
			want: map[string]string{
				"kind": `"nvmet"`, "id": `"1"`, "address": `"192.0.2.1"`, "service": `"4420"`, "managed": `true`,
				"reason": `"no listener"`, "listening": `false`, "device": `"mlx5_0"`, "netdev": `"eth0"`,
				"endpoint": `"nvmet 192.0.2.1:4420"`, "sharers": `2`, "state": `"dead"`, "rdma_device": `"mlx5_0"`,
				"rdma_port": `1`, "expected": `true`, "dead_since": `"2025-03-04T05:05:07Z"`,
				"last_action": `"rebind"`, "last_result": `"EADDRINUSE"`, "last_action_at": `"2025-03-04T05:06:06Z"`,
				"last_latency_ms": `12.5`, "retry_at": `"2025-03-04T05:06:08Z"`, "heal": `"rebind"`, "gave_up": `true`,
				"history": `[{"at":"2025-03-04T05:06:06Z","action":"rebind","result":"error","error":"EADDRINUSE"},{"at":"2025-03-04T05:06:07Z","action":"rebind","result":"ok","latency_ms":12.5}]`,
			},
		},
		{
			name: "listening unknown is null",
			r:    unknownListener,
			want: map[string]string{
				"kind": `"nvmet"`, "id": `"1"`, "address": `"192.0.2.1"`, "service": `"4420"`, "managed": `true`,
				"reason": `"no listener"`, "listening": `null`, "device": `"mlx5_0"`, "netdev": `"eth0"`,
				"endpoint": `"nvmet 192.0.2.1:4420"`, "sharers": `2`, "state": `"dead"`, "rdma_device": `"mlx5_0"`,
				"rdma_port": `1`, "expected": `true`, "dead_since": `"2025-03-04T05:05:07Z"`,
				"last_action": `"rebind"`, "last_result": `"EADDRINUSE"`, "last_action_at": `"2025-03-04T05:06:06Z"`,
				"last_latency_ms": `12.5`, "retry_at": `"2025-03-04T05:06:08Z"`, "heal": `"rebind"`, "gave_up": `true`,
				"history": `[{"at":"2025-03-04T05:06:06Z","action":"rebind","result":"error","error":"EADDRINUSE"},{"at":"2025-03-04T05:06:07Z","action":"rebind","result":"ok","latency_ms":12.5}]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, top, ls := jsonKeys(t, tt.r)
			if len(ls) != 1 {
				t.Fatalf("got %d listeners, want 1", len(ls))
			}
			got := map[string]string{}
			for k, v := range ls[0] {
				got[k] = string(v)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("listener values mismatch (-want +got):\n%s", diff)
			}
			gotTop := map[string]string{}
			for k, v := range top {
				if k != "listeners" {
					gotTop[k] = string(v)
				}
			}
			wantTop := map[string]string{
				"schema_version": `2`, "listeners_error": `"no netlink"`, "journal_errors": `["journal: short write"]`,
				"source": `"daemon"`, "at": `"2025-03-04T05:06:07Z"`, "addresses_error": `"rtnetlink: EPERM"`,
				"configfs":   `{"root":"/sys/kernel/config","error":"gone","mounted":true,"nvmet":true,"lio":true,"nvmet_wanted":true,"lio_wanted":true}`,
				"unreadable": `["nvmet port 3: addr_traddr: EIO"]`,
			}
			if diff := cmp.Diff(wantTop, gotTop); diff != "" {
				t.Errorf("report values mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJSONRoundTrip: `check` and `status` of a client decode what the
// daemon encodes; nothing may be lost on the way.
func TestJSONRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    status.StatusReport
	}{
		{name: "every field set", r: fullReport()},
		{name: "minimal", r: status.StatusReport{Listeners: []status.ListenerStatus{{Kind: "lio", ID: "x"}}, Source: "direct"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.r)
			if err != nil {
				t.Fatalf("json.Marshal() error = %v", err)
			}
			var got status.StatusReport
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("json.Unmarshal(%s) error = %v", b, err)
			}
			if diff := cmp.Diff(tt.r, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
			// The verdict of a decoded report is that of the original.
			want, gotV := status.Check(tt.r), status.Check(got)
			if diff := cmp.Diff(want, gotV, cmp.AllowUnexported(status.Verdict{})); diff != "" {
				t.Errorf("Check(decoded) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestYesNo(t *testing.T) {
	tests := []struct {
		name string
		in   *bool
		want string
	}{
		{name: "nil is unknown", in: nil, want: "unknown"},
		{name: "true", in: boolp(true), want: "yes"},
		{name: "false", in: boolp(false), want: "no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, status.YesNo(tt.in)); diff != "" {
				t.Errorf("YesNo(%v) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
