package watch

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
)

// rescanOnSwap runs a rescan once an iser write has landed and before
// the model marks it: what a periodic rescan does when it falls there.
type rescanOnSwap struct {
	configfs.Ops
	rescan func()
}

func (o rescanOnSwap) SwapAttr(path, from, to string) (string, error) {
	got, err := o.Ops.SwapAttr(path, from, to)
	o.rescan()
	return got, err
}

// TestRescanDuringASwap: SwapISER writes outside the model's lock (the
// sharers of a shared portal are written side by side); a rescan that
// falls between the write and its mark must not call the write a
// disagreement (make test, configfs-model on 6.12: "the model disagreed
// with a rescan", iser=false in the model and true in the rescan).
func TestRescanDuringASwap(t *testing.T) {
	k := configfstest.NewAt(t.TempDir(), binder{})
	basic(k)
	var m *Model
	logs := &bytes.Buffer{}
	fsys := configfs.NewWithOps(k.Root, rescanOnSwap{Ops: k.FS().Ops(), rescan: func() { m.Rescan() }})
	m, err := New(fsys, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	id := "iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260"
	if p, err := m.Portal(id); err != nil || p.ISER {
		t.Fatalf("before: %+v, %v", p, err)
	}
	if _, err := m.Portals(); err != nil { // the whole answer, memoised
		t.Fatal(err)
	}
	if was, err := m.SwapISER(id, true); err != nil || was {
		t.Fatalf("SwapISER: %v, %v", was, err)
	}
	if s := m.Stats(); s.Rescans < 2 || s.Disagreements != 0 {
		t.Errorf("stats %+v: want the rescan during the write, and no disagreement:\n%s", s, logs)
	}
	if p, err := m.Portal(id); err != nil || !p.ISER {
		t.Errorf("after: %+v, %v", p, err)
	}
}
