package rebind_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// After a reset both listeners are dead: a manual rebind of one heals that
// one alone, and the other waits for a full round.
func TestReconcileKeyActsOnItsEndpointOnly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		key   rebind.Key
		want  []string
		still string // the listener left dead
	}{
		{"nvmet port", rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, []string{
			"remove nvmet/ports/1/subsystems/" + nqnA,
			"remove nvmet/ports/1/subsystems/" + nqnB,
			"symlink nvmet/ports/1/subsystems/" + nqnA + " " + nqnA,
			"symlink nvmet/ports/1/subsystems/" + nqnB + " " + nqnB,
		}, portal},
		{"lio portal", rebind.Key{Kind: rebind.KindLIO, ID: portal}, []string{
			"write target/iscsi/" + iqn + "/tpgt_1/np/192.0.2.1:3260/iser 0",
			"write target/iscsi/" + iqn + "/tpgt_1/np/192.0.2.1:3260/iser 1",
		}, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.reset()
			e := w.engine()
			items, err := e.ReconcileKey(context.Background(), tc.key)
			must(t, err)
			if diff := cmp.Diff(tc.want, w.k.LogStrings()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if it := item(items, tc.key.ID); it.Listening() == nil || !*it.Listening() {
				t.Errorf("%s after its rebind: %+v", tc.key, it)
			}
			if it := item(items, tc.still); it.Listening() == nil || *it.Listening() {
				t.Errorf("%s, not named, after the rebind of %s: %+v", tc.still, tc.key, it)
			}
			// A full round then heals the other one.
			w.k.ResetLog()
			w.reconcile(e)
			if len(w.k.LogStrings()) == 0 {
				t.Errorf("the full round after the rebind of %s healed nothing", tc.key)
			}
		})
	}
}

// An id configfs does not hold writes nothing, not even the heals of the
// endpoints that need one, and names the ids there are.
func TestReconcileKeyUnknownWritesNothing(t *testing.T) {
	w := newWorld(t)
	w.reset()
	e := w.engine()
	_, err := e.ReconcileKey(context.Background(), rebind.Key{Kind: rebind.KindNvmet, ID: "9"})
	if !errors.Is(err, rebind.ErrNoSuchObject) {
		t.Fatalf("rebind of port 9: err %v, want ErrNoSuchObject", err)
	}
	for _, id := range []string{"nvmet ports 1", "lio portals " + portal} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not name %q", err, id)
		}
	}
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("writes for an unknown id: %q", log)
	}
}

func TestResolve(t *testing.T) {
	items := []rebind.Item{{Key: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}}, {Key: rebind.Key{Kind: rebind.KindLIO, ID: portal}},
		{Key: rebind.Key{Kind: rebind.KindNvmet, ID: "7"}, Missing: true}}
	for _, tc := range []struct {
		name string
		key  rebind.Key
		err  string // "" for found
	}{
		{"port", rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, ""},
		{"portal", rebind.Key{Kind: rebind.KindLIO, ID: portal}, ""},
		{"typo", rebind.Key{Kind: rebind.KindNvmet, ID: "9"}, "nvmet port 9: no such port or portal in configfs (the ids `nvmet-rebind status` shows: nvmet ports 1; lio portals " + portal + ")"},
		{"declared, not in configfs", rebind.Key{Kind: rebind.KindNvmet, ID: "7"}, "nvmet port 7: no such port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rebind.Resolve(items, tc.key)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Resolve: %v", err)
			case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err) || !errors.Is(err, rebind.ErrNoSuchObject)):
				t.Errorf("Resolve: %v, want %q…", err, tc.err)
			}
		})
	}
	if err := rebind.Resolve(nil, rebind.Key{Kind: rebind.KindNvmet, ID: "1"}); err == nil || !strings.Contains(err.Error(), "configfs holds no port or portal") {
		t.Errorf("Resolve over nothing: %v", err)
	}
}
