package status_test

import (
	"fmt"
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

func TestLookup(t *testing.T) {
	t.Parallel()
	r := status.StatusReport{Listeners: []status.ListenerStatus{
		{Kind: "nvmet", ID: "1", Reason: "port 1"},
		{Kind: "nvmet", ID: "10", Reason: "port 10"},
		{Kind: "lio", ID: portal, Reason: "the portal"},
	}}
	var many status.StatusReport
	for i := range 25 {
		many.Listeners = append(many.Listeners, status.ListenerStatus{Kind: "nvmet", ID: fmt.Sprint(i)})
	}
	const ids = "; the ids are 1, 10, " + portal
	for _, tt := range []struct {
		name, id string
		r        status.StatusReport
		want     string // the reason of the listener found
		err      string // the whole error; "" for none
	}{
		{name: "port", id: "1", r: r, want: "port 1"},
		{name: "port, not a prefix", id: "10", r: r, want: "port 10"},
		{name: "portal", id: portal, r: r, want: "the portal"},
		{name: "unknown port", id: "9", r: r, err: "nvmet port 9: no such port or portal" + ids},
		{name: "unknown portal", id: "iqn.2024-01.lab:t/tpgt_2/192.0.2.1:3260", r: r,
			err: "lio portal iqn.2024-01.lab:t/tpgt_2/192.0.2.1:3260: no such port or portal" + ids},
		{name: "not a portal id", id: "iqn.2024-01.lab:t/tpgt_1", r: r,
			err: "portal \"iqn.2024-01.lab:t/tpgt_1\": want <iqn>/tpgt_<N>/<ip>:<port>" + ids},
		{name: "nothing to show", id: "1", r: status.StatusReport{}, err: "nvmet port 1: no such port or portal; status shows no port or portal"},
		{name: "many ids, the first 20 named", id: "x", r: many,
			err: "nvmet port x: no such port or portal; the ids are 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19 and 5 more (see nvmet-rebind status)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := status.Lookup(tt.r, tt.id)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("Lookup(%q) = %+v, %v; want the error %q", tt.id, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%q): %v", tt.id, err)
			}
			if got.Reason != tt.want {
				t.Errorf("Lookup(%q) = %+v, want the line with reason %q", tt.id, got, tt.want)
			}
		})
	}
}
