package state_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// An existing state directory keeps its mode; a missing journal in it is
// created 0700; a directory others can write is refused, unchanged.
func TestOpenKeepsExistingDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
		t.Errorf("existing state dir: mode %v, want 0755 kept", st.Mode().Perm())
	}
	if st, _ := os.Stat(s.JournalDir()); st.Mode().Perm()&0o077 != 0 {
		t.Errorf("created journal dir: mode %v, want 0700", st.Mode().Perm())
	}

	for _, tc := range []struct {
		dir  func(s string) string // the one made too open
		mode os.FileMode
		want string
	}{
		{func(s string) string { return s }, 0o777 | os.ModeSticky, "world-writable (mode 1777)"},
		{func(s string) string { return filepath.Join(s, "journal") }, 0o777, "world-writable (mode 0777)"},
		{func(s string) string { return s }, 0o775, "group-writable (mode 0775)"},
	} {
		sd := filepath.Join(t.TempDir(), "state")
		if _, err := state.Open(sd); err != nil {
			t.Fatal(err)
		}
		bad := tc.dir(sd)
		if err := os.Chmod(bad, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := state.Open(sd)
		if err == nil || !strings.Contains(err.Error(), bad+": "+tc.want) || !strings.Contains(err.Error(), "chmod go-w") {
			t.Errorf("%s mode %v: %v", bad, tc.mode, err)
		}
		if st, _ := os.Stat(bad); st.Mode()&(os.ModePerm|os.ModeSticky) != tc.mode {
			t.Errorf("refused %s changed: %v", bad, st.Mode())
		}
	}
}
