package owndir_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/owndir"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetgid | os.ModeSetuid)
}

func mkdir(t *testing.T, path string, m os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, m); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want an error with %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func TestCreatesMissingWithParents(t *testing.T) {
	base := mkdir(t, filepath.Join(t.TempDir(), "base"), 0o755)
	dir := filepath.Join(base, "a", "b")
	if err := owndir.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "a"), dir} {
		if m := mode(t, d); m&0o077 != 0 || !isDir(t, d) {
			t.Errorf("created %s: mode %v, want a directory only its owner can use", d, m)
		}
	}
	// Only the directories it created got a mode.
	if m := mode(t, base); m != 0o755 {
		t.Errorf("existing parent %s: mode %v, want it kept at 0755", base, m)
	}
	// Again: nothing changes.
	if err := owndir.Ensure(dir); err != nil {
		t.Fatal(err)
	}
}

func isDir(t *testing.T, p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func TestExistingKeepsItsMode(t *testing.T) {
	for _, m := range []os.FileMode{0o755, 0o711, 0o700, 0o500, 0o755 | os.ModeSticky} {
		dir := mkdir(t, filepath.Join(t.TempDir(), "d"), m)
		if err := owndir.Ensure(dir); err != nil {
			t.Errorf("mode %v: %v", m, err)
		}
		if got := mode(t, dir); got != m {
			t.Errorf("mode %v changed to %v", m, got)
		}
	}
}

func TestWritableByOthersRefused(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{
		{0o777 | os.ModeSticky, "world-writable (mode 1777)"},
		{0o777, "world-writable (mode 0777)"},
		{0o703, "world-writable (mode 0703)"},
		{0o775, "group-writable (mode 0775)"},
		{0o730, "group-writable (mode 0730)"},
	} {
		dir := mkdir(t, filepath.Join(t.TempDir(), "x"), tc.mode)
		err := owndir.Ensure(dir)
		wantErr(t, err, dir+": "+tc.want, "chmod go-w it")
		if got := mode(t, dir); got != tc.mode {
			t.Errorf("refused dir's mode %v changed to %v", tc.mode, got)
		}
	}
	if os.Geteuid() == 0 {
		dir := mkdir(t, filepath.Join(t.TempDir(), "x"), 0o777|os.ModeSticky)
		// The example of the message, in full.
		if err := owndir.Ensure(dir); err == nil || err.Error() != dir+": world-writable (mode 1777): use a directory only root can write, or chmod go-w it" {
			t.Errorf("message: %v", err)
		}
	}
}

func TestNotOwnedByRootRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the owner check applies to root only")
	}
	dir := mkdir(t, filepath.Join(t.TempDir(), "nobody"), 0o755)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	wantErr(t, owndir.Ensure(dir), dir+": owned by uid 65534, not root", "chown root")
	st, _ := os.Stat(dir)
	if st.Sys().(*syscall.Stat_t).Uid != 65534 || mode(t, dir) != 0o755 {
		t.Error("the refused directory was changed")
	}
}

func TestSymlink(t *testing.T) {
	base := t.TempDir()
	good := mkdir(t, filepath.Join(base, "good"), 0o755)
	open := mkdir(t, filepath.Join(base, "open"), 0o777|os.ModeSticky)
	link := func(name, target string) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// To a directory that passes: followed, nothing changed.
	if err := owndir.Ensure(link("to-good", good)); err != nil {
		t.Errorf("symlink to a good dir: %v", err)
	}
	if mode(t, good) != 0o755 {
		t.Error("target's mode changed")
	}
	// To a world-writable one: refused, naming both.
	l := link("to-open", open)
	wantErr(t, owndir.Ensure(l), l+" (a symlink to "+open+"): world-writable (mode 1777)")
	// Dangling: refused, and its target is not created.
	missing := filepath.Join(base, "missing")
	l = link("dangling", missing)
	wantErr(t, owndir.Ensure(l), l+": a symlink to "+missing+", which is not usable")
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		t.Errorf("the target of a dangling symlink was created: %v", err)
	}
	// To a file.
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, owndir.Ensure(link("to-file", file)), "not a directory")
	// A link root does not own (when root): refused, even to a good dir.
	if os.Geteuid() == 0 {
		l := link("foreign", good)
		if err := os.Lchown(l, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		wantErr(t, owndir.Ensure(l), l+": a symlink (to "+good+") owned by uid 65534, not root, so not followed")
	}
}

func TestNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, owndir.Ensure(file), file+": not a directory")
	wantErr(t, owndir.Ensure(filepath.Join(file, "sub")), "not a directory")
}
