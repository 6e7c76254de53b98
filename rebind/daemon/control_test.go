package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
)

// A rebind of an id configfs does not hold, with listeners dead beside it:
// an error naming the ids, and no round (no write, no reconcile).
func TestControlRebindUnknownIDRunsNoRound(t *testing.T) {
	f := startFake(t)
	waitFor(t, "the first reconcile", func() bool { return f.d.env.Engine.Snapshot().Stats.Reconciles > 0 })
	f.k.RemoveDevice("rxe0")
	f.k.AddDevice("rxe0", 0x11, "veth0")
	f.k.ResetLog()
	rounds := f.d.env.Engine.Snapshot().Stats.Reconciles
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := control.Call(ctx, f.sock, control.Request{Cmd: "rebind", ID: "9"}, nil)
	if err == nil || !strings.Contains(err.Error(), "nvmet port 9: no such port or portal in configfs") ||
		!strings.Contains(err.Error(), "nvmet ports 1") || !strings.Contains(err.Error(), portal) {
		t.Fatalf("rebind 9: %v", err)
	}
	if n := f.d.env.Engine.Snapshot().Stats.Reconciles; n != rounds {
		t.Errorf("rebind 9 ran %d rounds", n-rounds)
	}
	if log := f.k.LogStrings(); len(log) != 0 {
		t.Errorf("rebind 9 wrote %q", log)
	}
	// A known id runs its round.
	if err := control.Call(ctx, f.sock, control.Request{Cmd: "rebind", ID: "1"}, nil); err != nil {
		t.Fatal(err)
	}
	if !f.k.Listening("nvmet_rdma", "1") {
		t.Errorf("rebind 1 did not heal port 1: %s", f.k)
	}
}
