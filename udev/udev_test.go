package udev

import (
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/udev/backoff"

	"github.com/google/go-cmp/cmp"
)

func TestRelevant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ev   Event
		want Hint
		ok   bool
	}{
		{
			name: "infiniband add",
			ev:   Event{Action: "add", Subsystem: "infiniband", Devpath: "/devices/virtual/infiniband/rxe0", Name: "rxe0"},
			want: Hint{Source: SourceUevent, Reason: "infiniband add rxe0"},
			ok:   true,
		},
		{
			name: "infiniband remove",
			ev:   Event{Action: "remove", Subsystem: "infiniband", Name: "mlx5_0"},
			want: Hint{Source: SourceUevent, Reason: "infiniband remove mlx5_0"},
			ok:   true,
		},
		{
			name: "infiniband rename",
			ev: Event{Action: "move", Subsystem: "infiniband", Name: "mlx5_bond_0",
				DevpathOld: "/devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0"},
			want: Hint{Source: SourceUevent, Reason: "infiniband move mlx5_bond_0 (was mlx5_0)"},
			ok:   true,
		},
		{
			name: "net add",
			ev:   Event{Action: "add", Subsystem: "net", Name: "veth0"},
			want: Hint{Source: SourceUevent, Reason: "net add veth0"},
			ok:   true,
		},
		{
			name: "net remove",
			ev:   Event{Action: "remove", Subsystem: "net", Name: "veth0"},
			want: Hint{Source: SourceUevent, Reason: "net remove veth0"},
			ok:   true,
		},
		{name: "net change", ev: Event{Action: "change", Subsystem: "net", Name: "veth0"}},
		{name: "block add", ev: Event{Action: "add", Subsystem: "block", Name: "dm-3"},
			want: Hint{Source: SourceUevent, Reason: "block add dm-3", Disk: true}, ok: true},
		{name: "block change", ev: Event{Action: "change", Subsystem: "block", Name: "nullb4"},
			want: Hint{Source: SourceUevent, Reason: "block change nullb4", Disk: true}, ok: true},
		{name: "block remove", ev: Event{Action: "remove", Subsystem: "block", Name: "sdb"}},
		{name: "infiniband change", ev: Event{Action: "change", Subsystem: "infiniband", Name: "rxe0"}},
		{name: "verbs add", ev: Event{Action: "add", Subsystem: "infiniband_verbs", Name: "uverbs0"}},
		{name: "mad add", ev: Event{Action: "add", Subsystem: "infiniband_mad", Name: "umad0"}},
		{name: "module add", ev: Event{Action: "add", Subsystem: "module", Name: "crc32_generic"}},
		{
			name: "nvmet loaded",
			ev:   Event{Action: "add", Subsystem: "module", Devpath: "/module/nvmet", Name: "nvmet"},
			want: Hint{Source: SourceUevent, Reason: "module add nvmet", Configfs: true},
			ok:   true,
		},
		{
			name: "iscsi_target_mod unloaded",
			ev:   Event{Action: "remove", Subsystem: "module", Devpath: "/module/iscsi_target_mod", Name: "iscsi_target_mod"},
			want: Hint{Source: SourceUevent, Reason: "module remove iscsi_target_mod", Configfs: true},
			ok:   true,
		},
		{name: "module change", ev: Event{Action: "change", Subsystem: "module", Name: "nvmet"}},
		{name: "zero", ev: Event{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Relevant(tt.ev)
			if ok != tt.ok {
				t.Fatalf("Relevant ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Relevant hint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	var got []time.Duration
	for range 8 {
		got = append(got, b.Next())
	}
	b.Reset()
	got = append(got, b.Next())
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms, 100 * ms}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	o := Options{}.withDefaults()
	if o.Stats == nil || o.MinBackoff != 100*time.Millisecond || o.MaxBackoff != 5*time.Second || o.ReceiveBuffer != 16<<20 {
		t.Errorf("Options{}.withDefaults() = %+v", o)
	}
}

func TestStatsSnapshot(t *testing.T) {
	t.Parallel()
	var s Stats
	s.uevent.events.Add(3)
	s.uevent.hints.Add(1)
	s.rtnetlink.reconnects.Add(2)
	s.rtnetlink.resyncs.Add(3)
	want := StatsSnapshot{
		Uevent:    Counts{Events: 3, Hints: 1},
		Rtnetlink: Counts{Reconnects: 2, Resyncs: 3},
	}
	if diff := cmp.Diff(want, s.Snapshot()); diff != "" {
		t.Errorf("Snapshot (-want +got):\n%s", diff)
	}
}
