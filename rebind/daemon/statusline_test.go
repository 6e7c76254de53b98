package daemon

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// The status line is check's verdict of the last round, sent when it
// changes: not for an idle round, at once for a dead listener and a
// refused reload, and back when they are over.
func TestStatusLine(t *testing.T) {
	k := rdmatest.NewTargetPair(t, nqn, iqn)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := rebind.DefaultConfig()
	eng := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: st, Config: cfg})
	var sent []string
	var conf *status.ConfigStatus
	w := &statusLine{eng: eng, notify: func(s string) { sent = append(sent, s) }, config: func() *status.ConfigStatus { return conf }}
	round := func() {
		t.Helper()
		if _, err := eng.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.update()
	}
	want := func(n int, sub string) {
		t.Helper()
		if len(sent) != n || !strings.Contains(sent[n-1], sub) {
			t.Fatalf("sent %q, want %d lines, the last with %q", sent, n, sub)
		}
	}
	w.update()
	if len(sent) != 0 {
		t.Fatalf("a status before the first round: %q", sent)
	}
	round()
	want(1, "STATUS=OK: 2 of 2 listeners alive")
	round()
	round()
	want(1, "OK") // idle rounds: nothing sent
	msg := "config /etc/x.toml: line 2: unknown key"
	conf = &status.ConfigStatus{ReloadRefused: msg}
	w.update()
	want(2, "STATUS=WARNING: reload refused, the daemon runs on its previous config: "+msg)
	conf = nil
	w.update()
	want(3, "STATUS=OK: 2 of 2 listeners alive")
	conf = &status.ConfigStatus{SavedUnreadable: "nvmetcli config /etc/nvmet/config.json: file does not exist"}
	w.update()
	want(4, "STATUS=WARNING: saved config unreadable, not completed: nvmetcli config /etc/nvmet/config.json: file does not exist")
	conf = &status.ConfigStatus{ReloadRefused: msg}
	w.update()
	want(5, "STATUS=WARNING: reload refused")
	// The device goes and does not come back: both listeners dead.
	k.RemoveDevice("rxe0")
	round()
	if last := sent[len(sent)-1]; !strings.HasPrefix(last, "STATUS=CRITICAL: ") && !strings.HasPrefix(last, "STATUS=WARNING: ") || !strings.Contains(last, "dead") {
		t.Fatalf("after the device went: %q", sent)
	}
	// A worse verdict outranks the refusal in check's summary: the line
	// still says it.
	if last := sent[len(sent)-1]; !strings.Contains(last, "reload refused") || !strings.Contains(last, msg) {
		t.Fatalf("the refusal is gone from the line: %q", last)
	}
}

// With saved configs named, the line says "completed the saved config"
// once everything they declare is in configfs and listening, and not while
// something they declare is missing.
func TestStatusLineSavedComplete(t *testing.T) {
	k := rdmatest.NewTargetPair(t, nqn, iqn)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := rebind.DefaultConfig()
	cfg.NvmetConfig = "/etc/nvmet/config.json"
	declared := []rebind.Declared{{Source: cfg.NvmetConfig, Kind: rebind.KindNvmet, ID: "1", Addr: netip.MustParseAddrPort("192.0.2.1:4420"), NQNs: []string{nqn}}}
	eng := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: st, Config: cfg,
		Declared: func(rebind.Config) ([]rebind.Declared, error) { return declared, nil }})
	var sent []string
	w := &statusLine{eng: eng, notify: func(s string) { sent = append(sent, s) }, config: func() *status.ConfigStatus { return nil }}
	if _, err := eng.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.update()
	if len(sent) != 1 || sent[0] != "STATUS=OK: 2 of 2 listeners alive; completed the saved config" {
		t.Fatalf("sent %q", sent)
	}
	// A port the file declares that configfs lacks: not completed.
	declared = append(declared, rebind.Declared{Source: cfg.NvmetConfig, Kind: rebind.KindNvmet, ID: "2", Addr: netip.MustParseAddrPort("192.0.2.1:4421"), NQNs: []string{nqn}})
	eng.SetConfig(cfg) // a reload reads the saved configs again
	if _, err := eng.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.update()
	if last := sent[len(sent)-1]; strings.Contains(last, "completed") || !strings.HasPrefix(last, "STATUS=WARNING: ") {
		t.Fatalf("with port 2 missing: %q", sent)
	}
}
