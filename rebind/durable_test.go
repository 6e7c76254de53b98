package rebind_test

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// orderStore logs the journal's puts and syncs into the log the fake
// kernel's configfs writes go to.
type orderStore struct {
	*state.Store
	log *[]string
}

func (s orderStore) PutAll(ins []rebind.Intent) error {
	*s.log = append(*s.log, "put")
	return s.Store.PutAll(ins)
}

func (s orderStore) Sync() error {
	*s.log = append(*s.log, "sync")
	return s.Store.Sync()
}

// journalOrder runs one reset of k's rxe0 through an engine whose store
// and configfs writes go to one log (fail, when set, answers the fake's
// writes), and returns the healing round's log.
func journalOrder(t *testing.T, k *fakeKernel, fail func(configfstest.Write) error) []string {
	t.Helper()
	var log []string
	j, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: orderStore{j, &log}, Config: rebind.DefaultConfig()})
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.RemoveDevice("rxe0")
	k.AddDevice("rxe0", 0x11, "veth0")
	log = nil
	k.Fault = func(_ int, w configfstest.Write) error {
		if fail != nil {
			if err := fail(w); err != nil {
				return err
			}
		}
		log = append(log, w.Op+" "+w.Value)
		return nil
	}
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.Fault = nil
	return log
}

// TestJournalDurableOnceListening: a heal's writes do not wait for the
// journal's fsyncs (state's "Visible, then durable"): the intents are put
// before the first configfs write, synced once the binding write is made
// (before the rest of the sharers' iser=1), and synced before the round
// ends when the heal binds nothing (its first link refused).
func TestJournalDurableOnceListening(t *testing.T) {
	t.Run("sharers", func(t *testing.T) {
		k, _, _ := sharedWorld(t, 4)
		log := journalOrder(t, k, nil)
		// The 4 sharers' heal: put, 4 zeros, the binding 1, sync, 3 ones.
		want := "put write 0 write 0 write 0 write 0 write 1 sync write 1 write 1 write 1"
		if got := strings.Join(log, " "); !strings.Contains(got, want) {
			t.Errorf("round: %s\nwant in it: %s", got, want)
		}
		if log[len(log)-1] != "sync" {
			t.Errorf("round ends with %q, want a sync", log[len(log)-1])
		}
	})
	t.Run("first link refused", func(t *testing.T) {
		k := newFakeKernel(t)
		k.AddAddr("veth0", "192.0.2.1")
		k.AddDevice("rxe0", 0x11, "veth0")
		k.LinkedPort("1", "192.0.2.1", "4420", "nqn.2024-01.lab:a", "nqn.2024-01.lab:b")
		log := journalOrder(t, k, func(w configfstest.Write) error {
			if w.Op == "symlink" {
				return syscall.ENODEV
			}
			return nil
		})
		if got, want := strings.Join(log, " "), "put remove  remove  sync"; got != want {
			t.Errorf("round: %q, want %q", got, want)
		}
	})
}
