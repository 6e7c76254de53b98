package status_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// status <id> names every field of the listener as --json names it, one a
// line, then its heals.
func TestWriteListener(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 11, 12, 0, time.Local)
	lat := 1.5
	port := fullReport().Listeners[0]
	port.History = []status.HealRecord{
		{At: at, Action: "rebind", Result: "refused", Error: "bind: cannot assign requested address " + strings.Repeat("and more words ", 8)},
		{At: at.Add(time.Second), Action: "rebind", Result: "ok", LatencyMS: &lat},
	}
	portal := status.ListenerStatus{Kind: "lio", ID: "iqn.2003-01.org.linux-iscsi.x:sn.1/tpgt_1/192.0.2.5:3260", Address: "192.0.2.5",
		Service: "3260", State: "dead", Managed: true, Reason: "listener dead (iser reads 1)", Listening: boolp(false), Sharers: 2}
	tests := []struct {
		name   string
		source string
		l      status.ListenerStatus
		want   map[string]string // label -> value
		after  string            // what follows the fields
	}{
		{
			name: "a port with its heals", source: "daemon", l: port,
			want: map[string]string{"kind": "nvmet", "id": "1", "state": "dead", "listening": "no", "rdma_port": "1",
				"last_latency_ms": "12.5 ms", "gave_up": "yes", "missing": "no", "sharers": "2", "endpoint": "nvmet 192.0.2.1:4420",
				"dead_since": port.DeadSince.Local().Format(time.DateTime + " MST")},
			after: "\nhistory (the last 2 heals, oldest first):\n" +
				"  AT                   ACTION           RESULT        LATENCY  ERROR\n" +
				"  2026-01-01 10:11:12  rebind           refused             -  bind: cannot assign requested address and more words and\n" +
				"                                                               more words and more words and more words and more words\n" +
				"                                                               and more words and more words and more words\n" +
				"  2026-01-01 10:11:13  rebind           ok             1.5 ms\n" +
				"\n(source: daemon)\n",
		},
		{
			name: "a portal, no heal since the daemon started", source: "daemon", l: portal,
			want: map[string]string{"kind": "lio", "id": portal.ID, "state": "dead", "listening": "no", "rdma_port": "-",
				"rdma_device": "-", "last_action": "-", "retry_at": "-", "sharers": "2", "reason": "listener dead (iser reads 1)"},
			after: "\nhistory: no heal since the daemon started\n\n(source: daemon)\n",
		},
		{
			name: "read directly, no daemon to keep heals", source: "direct", l: portal,
			want:  map[string]string{"kind": "lio", "managed": "yes"},
			after: "\nhistory: none here (the daemon keeps it in memory, and no daemon answered)\n\n(source: direct)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := status.WriteListener(&b, status.StatusReport{Source: tt.source}, tt.l); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			fields, after, _ := strings.Cut(out, "\n\n")
			got := map[string]string{}
			var labels []string
			for _, line := range strings.Split(fields, "\n") {
				if n := utf8.RuneCountInString(line); n > status.Width {
					t.Errorf("line of %d columns:\n%s", n, line)
				}
				if strings.HasPrefix(line, " ") {
					continue // a wrapped value
				}
				k, v, ok := strings.Cut(line, ":")
				if !ok {
					t.Fatalf("line %q is no field:\n%s", line, out)
				}
				got[k] = strings.TrimSpace(v)
				labels = append(labels, k)
			}
			if diff := cmp.Diff(jsonFieldNames(t), labels); diff != "" {
				t.Errorf("the fields are not those of --json, in order (-want +got):\n%s", diff)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q", k, got[k], v)
				}
			}
			if diff := cmp.Diff(tt.after, "\n"+after); diff != "" {
				t.Errorf("after the fields (-want +got):\n%s", diff)
			}
		})
	}
}

// jsonFieldNames are the keys of a listener of --json but its history, in
// the struct's order.
func jsonFieldNames(t *testing.T) []string {
	t.Helper()
	l := fullReport().Listeners[0]
	l.Transport, l.Missing = "rdma", true // omitted when empty
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	var names []string
	if _, err := d.Token(); err != nil {
		t.Fatal(err)
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if k != "history" {
			names = append(names, k.(string))
		}
	}
	return names
}
