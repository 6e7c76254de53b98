package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

func TestPutAllDeleteAll(t *testing.T) {
	dir := t.TempDir()
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ins := []rebind.Intent{
		{Kind: rebind.KindLIO, ID: "iqn.a/tpgt_1/192.0.2.1:3260", ISER: true},
		{Kind: rebind.KindLIO, ID: "iqn.b/tpgt_1/192.0.2.1:3260", ISER: true},
	}
	if err := s.PutAll(ins); err != nil {
		t.Fatal(err)
	}
	got, bad := s.Load()
	if len(got) != 2 || len(bad) != 0 {
		t.Fatalf("Load after PutAll: %v %v", got, bad)
	}
	for _, in := range ins {
		if _, ok := got[rebind.Key{Kind: in.Kind, ID: in.ID}]; !ok {
			t.Errorf("%s not journaled", in.ID)
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", ".tmp-*"))
	if len(tmps) != 0 {
		t.Errorf("temp files left: %v", tmps)
	}
	keys := []rebind.Key{{Kind: rebind.KindLIO, ID: ins[0].ID}, {Kind: rebind.KindLIO, ID: ins[1].ID}, {Kind: rebind.KindNvmet, ID: "9"}}
	if err := s.DeleteAll(keys); err != nil {
		t.Fatalf("DeleteAll (one key never journaled): %v", err)
	}
	if got, _ := s.Load(); len(got) != 0 {
		t.Errorf("Load after DeleteAll: %v", got)
	}
}

func TestBatchReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := state.Open(dir); err != nil {
		t.Fatal(err)
	}
	ro := state.OpenReadOnly(dir)
	if err := ro.PutAll([]rebind.Intent{{Kind: rebind.KindNvmet, ID: "1"}}); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("read-only PutAll: %v, want ErrReadOnly", err)
	}
	if err := ro.DeleteAll([]rebind.Key{{Kind: rebind.KindNvmet, ID: "1"}}); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("read-only DeleteAll: %v, want ErrReadOnly", err)
	}
}

// TestPutAllNamesTheKey: a journal entry that cannot be written is an
// error naming the object (the journal directory replaced by a file: no
// user, root included, can create an entry in it).
func TestPutAllNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	j := filepath.Join(dir, "journal")
	if err := os.RemoveAll(j); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = s.PutAll([]rebind.Intent{{Kind: rebind.KindNvmet, ID: "7"}})
	if err == nil || !strings.Contains(err.Error(), "nvmet port 7") {
		t.Fatalf("PutAll into a journal that is a file: %v, want an error naming nvmet port 7", err)
	}
}
