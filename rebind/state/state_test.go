package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
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

// TestPutAllNamesTheKey: a journal write that fails is an error naming
// the object, or the first of a batch and how many more (the journal
// directory replaced by a file: no user, root included, can create an
// entry in it; or a failed rename).
func TestPutAllNamesTheKey(t *testing.T) {
	for _, tt := range []struct {
		name  string
		n     int
		fault string // the operation that fails; none: the journal is a file
		want  string
	}{
		{"one, journal is a file", 1, "", "journal nvmet port 7: "},
		{"batch, journal is a file", 256, "", "journal nvmet port 7 and 255 more: "},
		{"one, rename fails", 1, "rename", "journal nvmet port 7: "},
		{"batch, rename fails", 256, "rename", "journal nvmet port 7 and 255 more: "},
		// The sync of the batch before (PutAll makes it durable first).
		{"batch, sync of the one before fails", 256, "syncdir", "journal nvmet port 7 and 255 more: "},
		{"batch, fsync of the one before fails", 256, "fsync", "journal nvmet port 7 and 255 more: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := state.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tt.fault == "" {
				j := filepath.Join(dir, "journal")
				if err := os.RemoveAll(j); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(j, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := s.PutAll([]rebind.Intent{nv("1", "before")}); err != nil {
					t.Fatal(err)
				}
				defer state.SetFault(s, func(op, path string) error {
					if op == tt.fault {
						return errors.New("injected")
					}
					return nil
				})()
			}
			var ins []rebind.Intent
			for i := range tt.n {
				ins = append(ins, rebind.Intent{Kind: rebind.KindNvmet, ID: strconv.Itoa(7 + i)})
			}
			err = s.PutAll(ins)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("PutAll: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestDeleteAllNamesTheKey: so does a removal that fails.
func TestDeleteAllNamesTheKey(t *testing.T) {
	s, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ins := []rebind.Intent{nv("7", "a"), nv("8", "a"), nv("9", "a")}
	if err := s.PutAll(ins); err != nil {
		t.Fatal(err)
	}
	defer state.SetFault(s, func(op, path string) error {
		if op == "rename" {
			return errors.New("injected")
		}
		return nil
	})()
	err = s.DeleteAll([]rebind.Key{nk("7"), nk("8")})
	if err == nil || !strings.Contains(err.Error(), "journal nvmet port 7 and 1 more: ") {
		t.Fatalf("DeleteAll: %v, want an error naming nvmet port 7 and 1 more", err)
	}
}
