package status_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

const portal = "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"

func TestKeyOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, id string
		want     rebind.Key
		err      string // a substring of the error; "" for none
	}{
		{name: "port", id: "1", want: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}},
		{name: "port, any name", id: "port-a", want: rebind.Key{Kind: rebind.KindNvmet, ID: "port-a"}},
		{name: "portal", id: portal, want: rebind.Key{Kind: rebind.KindLIO, ID: portal}},
		{name: "nothing", id: "", err: "give one port id or portal id"},
		{name: "portal, two parts", id: "iqn.2024-01.lab:t/tpgt_1", err: "want <iqn>/tpgt_<N>/<ip>:<port>"},
		{name: "portal, empty part", id: "iqn.2024-01.lab:t//192.0.2.1:3260", err: `invalid name ""`},
		{name: "portal, dot-dot", id: "iqn.2024-01.lab:t/../192.0.2.1:3260", err: `invalid name ".."`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := status.KeyOf(tt.id)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("KeyOf(%q) = %v, %v; want an error with %q", tt.id, got, err, tt.err)
				}
				if got != (rebind.Key{}) {
					t.Errorf("KeyOf(%q) returned key %v with its error", tt.id, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("KeyOf(%q): %v", tt.id, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("KeyOf(%q) (-want +got):\n%s", tt.id, diff)
			}
		})
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	item := func(kind rebind.Kind, id, reason string) rebind.Item {
		return rebind.Item{Key: rebind.Key{Kind: kind, ID: id}, Reason: reason, Managed: true}
	}
	items := []rebind.Item{
		item(rebind.KindNvmet, "1", "port 1"),
		item(rebind.KindNvmet, "10", "port 10"),
		item(rebind.KindLIO, portal, "the portal"),
	}
	// The snapshot's own items are older than the round's: Find reads the
	// round's.
	snap := rebind.Snapshot{Items: []rebind.Item{item(rebind.KindNvmet, "1", "stale"), item(rebind.KindNvmet, "2", "gone")}}
	type line struct{ Kind, ID, Reason string }
	for _, tt := range []struct {
		name string
		key  rebind.Key
		want line
		err  string
	}{
		{name: "port", key: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, want: line{"nvmet", "1", "port 1"}},
		{name: "port, not a prefix", key: rebind.Key{Kind: rebind.KindNvmet, ID: "10"}, want: line{"nvmet", "10", "port 10"}},
		{name: "portal", key: rebind.Key{Kind: rebind.KindLIO, ID: portal}, want: line{"lio", portal, "the portal"}},
		{name: "only in the snapshot", key: rebind.Key{Kind: rebind.KindNvmet, ID: "2"},
			err: "nvmet port 2: no such port or portal in configfs"},
		{name: "the id of another kind", key: rebind.Key{Kind: rebind.KindLIO, ID: "1"},
			err: "lio portal 1: no such port or portal in configfs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := status.Find(items, snap, tt.key)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Find(%v) = %+v, %v; want an error with %q", tt.key, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Find(%v): %v", tt.key, err)
			}
			if !got.Managed {
				t.Errorf("Find(%v) is not the item's line: %+v", tt.key, got)
			}
			if diff := cmp.Diff(tt.want, line{got.Kind, got.ID, got.Reason}); diff != "" {
				t.Errorf("Find(%v) (-want +got):\n%s", tt.key, diff)
			}
		})
	}
}
