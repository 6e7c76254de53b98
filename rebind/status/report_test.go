package status_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// Report renders a round's snapshot: listening, the state and the verdict
// of check are all derived from the item's one state.
func TestReport(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ap := netip.MustParseAddrPort("192.0.2.1:4420")
	ep := rebind.Endpoint{Kind: rebind.KindNvmet, Addr: ap}
	k1, k2 := rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, rebind.Key{Kind: rebind.KindNvmet, ID: "2"}
	snap := rebind.Snapshot{At: at, ListenersErr: nil, JournalErrs: []error{errors.New("journal/x.json: quarantined")},
		Items: []rebind.Item{
			{Key: k1, Endpoint: ep, Address: ap.Addr(), Service: 4420, Managed: true, Expected: true, State: rebind.StateDead,
				Reason: "listener dead", Carrier: "rxe1", CarrierPort: 1, Device: "rxe1", Netdev: "veth1", Sharers: 1, DeadSince: at.Add(-time.Second), RetryAt: at.Add(time.Second)},
			{Key: k2, Address: netip.IPv4Unspecified(), Service: 4420, State: rebind.StateListening, Reason: "wildcard address"},
		},
		History: map[rebind.Key][]rebind.Outcome{k1: {
			{Action: rebind.ActRebindPort, At: at.Add(-time.Minute), Result: rebind.ResultOK, Latency: 1500 * time.Microsecond},
			{Action: rebind.ActDropJournal, At: at.Add(-time.Minute), Result: rebind.ResultNone},
			{Action: rebind.ActRebindPort, At: at, Result: rebind.ResultRefused, Err: errors.New("bind: cannot assign requested address")},
		}},
	}
	r := status.Report(snap, "daemon")
	f := false
	tr := true
	want := []status.ListenerStatus{
		{Kind: "nvmet", ID: "1", Address: "192.0.2.1", Service: "4420", Managed: true, Expected: true, Reason: "listener dead", Listening: &f,
			Device: "rxe1", Netdev: "veth1", Endpoint: "nvmet_rdma 192.0.2.1:4420", Transport: "rdma", Sharers: 1, State: "dead", RDMADevice: "rxe1", RDMAPort: 1,
			DeadSince: ptr(at.Add(-time.Second)), RetryAt: ptr(at.Add(time.Second)), LastAction: "rebind", LastResult: "bind: cannot assign requested address", LastAt: &at,
			History: []status.HealRecord{
				{At: at.Add(-time.Minute), Action: "rebind", Result: "ok", LatencyMS: ptr(1.5)},
				{At: at.Add(-time.Minute), Action: "drop-journal", Result: "none"},
				{At: at, Action: "rebind", Result: "refused", Error: "bind: cannot assign requested address"},
			}},
		{Kind: "nvmet", ID: "2", Address: "0.0.0.0", Service: "4420", Reason: "wildcard address", Listening: &tr, State: "listening"},
	}
	if diff := cmp.Diff(want, r.Listeners); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	if r.Source != "daemon" || !r.At.Equal(at) || len(r.JournalErrors) != 1 || r.ListenersError != "" {
		t.Errorf("report %+v", r)
	}
	if v := status.Check(r); v.Health != status.Critical || v.Counts.Dead != 1 || v.Counts.Managed != 1 {
		t.Errorf("check: %s %q, want critical for port 1 only", v.StatusLine(), v.Details)
	}
}

func ptr[T any](v T) *T { return &v }
