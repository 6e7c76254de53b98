package state

import (
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// What was settled is kept for the boot that saw it, and only that one.
func TestSettledIsOfOneBoot(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.boot = "b1"
	want := map[rebind.Settled]bool{{Key: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, NQN: "nqn.a"}: true, {Key: rebind.Key{Kind: rebind.KindLIO, ID: "iqn.x/tpgt_1/192.0.2.1:3260"}}: true}
	if err := s.SaveSettled(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Settled()
	if err != nil || len(got) != 2 || !got[rebind.Settled{Key: rebind.Key{Kind: rebind.KindNvmet, ID: "1"}, NQN: "nqn.a"}] {
		t.Fatalf("Settled = %v, %v", got, err)
	}
	ro := OpenReadOnly(dir)
	ro.boot = s.boot
	if got, _ := ro.Settled(); len(got) != 2 {
		t.Fatalf("read-only Settled = %v", got)
	}
	s.boot = "b2"
	if got, err := s.Settled(); err != nil || len(got) != 0 {
		t.Fatalf("another boot: Settled = %v, %v; want nothing", got, err)
	}
	if err := ro.SaveSettled(want); err == nil {
		t.Fatal("a read-only store saved")
	}
}
