package configfs_test

// Writes never follow a symlink (the real kernel's OSOps on a temporary
// tree shaped like configfs): a symlink on the way to a link or an
// attribute, or as the attribute, is refused and nothing outside the root
// changes. Each case runs with openat2 and with the walk of kernels
// without it.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

const notFollowed = ": a symlink where configfs has a directory; not followed: "

type resolver struct {
	name string
	ops  func(root string) configfs.Ops
}

var resolvers = []resolver{
	{"openat2", func(root string) configfs.Ops { return configfs.OSOps{Root: root} }},
	{"walk", func(root string) configfs.Ops { return configfs.OSOpsWalk(root) }},
}

// osTree makes nvmet/ports/<id>/{addr_*,subsystems/} for each id,
// nvmet/subsystems/<nqn>/ for each nqn, under a new root.
func osTree(t *testing.T, ids, nqns []string) string {
	t.Helper()
	root := t.TempDir()
	for _, id := range ids {
		d := filepath.Join(root, "nvmet/ports", id)
		for n, v := range map[string]string{"addr_trtype": "rdma\n", "addr_adrfam": "ipv4\n", "addr_traddr": "192.0.2.1\n", "addr_trsvcid": "4420\n"} {
			put(t, filepath.Join(d, n), v)
		}
		mustMkdir(t, filepath.Join(d, "subsystems"))
	}
	for _, n := range nqns {
		mustMkdir(t, filepath.Join(root, "nvmet/subsystems", n))
	}
	return root
}

func mustMkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func wantRefused(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("write accepted; want an error with %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func TestWritesThroughOSOps(t *testing.T) {
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, []string{"1"}, []string{"nqn.a"})
			f := configfs.NewWithOps(root, r.ops(root))
			l := configfs.Link{Name: "nqn.a", NQN: "nqn.a"}
			if err := f.Relink("1", l); err != nil {
				t.Fatal(err)
			}
			if p, err := f.Port("1"); err != nil || len(p.Links) != 1 || p.Links[0] != l || p.Err != nil {
				t.Fatalf("after relink: %+v %v", p, err)
			}
			if err := f.Relink("1", l); !errors.Is(err, fs.ErrExist) {
				t.Errorf("relink again: %v, want EEXIST", err)
			}
			if err := f.Unlink("1", l); err != nil {
				t.Fatal(err)
			}
			if err := f.Unlink("1", l); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("unlink again: %v, want ENOENT", err)
			}
			if err := f.Relink("9", l); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("relink on a missing port: %v, want ENOENT", err)
			}
			portal := "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"
			iser := portalDir(t, root, "iqn.2024-01.lab:t", "tpgt_1", "192.0.2.1:3260", "0\n")
			if err := f.SetISER(portal, true); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(iser, "iser")); string(b) != "1\n" {
				t.Errorf("iser reads %q after SetISER", b)
			}
		})
	}
}

// The tester's case: ports/<id>/subsystems is a symlink to a directory
// outside the root. Relink and Unlink are refused; outside, nothing changes.
func TestSymlinkedSubsystemsRefused(t *testing.T) {
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, []string{"2"}, []string{"nqn.a", "nqn.b"})
			out := outsidePort(t)
			d := filepath.Join(root, "nvmet/ports/1")
			for n, v := range map[string]string{"addr_trtype": "rdma\n", "addr_adrfam": "ipv4\n", "addr_traddr": "192.0.2.1\n", "addr_trsvcid": "4421\n"} {
				put(t, filepath.Join(d, n), v)
			}
			symlink(t, filepath.Join(out, "subsystems"), filepath.Join(d, "subsystems"))
			// A link that reads as valid: it points into this root.
			victim := filepath.Join(out, "subsystems", "nqn.a")
			symlink(t, filepath.Join(root, "nvmet/subsystems/nqn.a"), victim)

			f := configfs.NewWithOps(root, r.ops(root))
			sub := filepath.Join(d, "subsystems")
			err := f.Unlink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"})
			wantRefused(t, err, "configfs: "+sub+notFollowed, "remove it")
			if !errors.Is(err, syscall.ELOOP) || errors.Is(err, fs.ErrNotExist) {
				t.Errorf("unlink error %v: want ELOOP, not ENOENT (the engine takes ENOENT for done)", err)
			}
			if _, err := os.Lstat(victim); err != nil {
				t.Errorf("the link outside the root was removed: %v", err)
			}
			if errs, err := unlinkAll(f, "1", "nqn.a"); len(errs) != 0 || err == nil {
				t.Errorf("UnlinkAll through a symlinked subsystems: %v, %v; want the port's error and no unlink", errs, err)
			} else {
				wantRefused(t, err, "configfs: "+sub+notFollowed)
			}
			if _, err := os.Lstat(victim); err != nil {
				t.Errorf("the link outside the root was removed by UnlinkAll: %v", err)
			}
			err = f.Relink("1", configfs.Link{Name: "nqn.b", NQN: "nqn.b"})
			wantRefused(t, err, "configfs: "+sub+notFollowed)
			if _, err := os.Lstat(filepath.Join(out, "subsystems", "nqn.b")); !os.IsNotExist(err) {
				t.Errorf("a link was made outside the root: %v", err)
			}
			if errs, err := relinkAll(f, "1", "nqn.b"); len(errs) != 0 || err == nil {
				t.Errorf("RelinkAll through a symlinked subsystems: %v, %v; want the port's error and no link", errs, err)
			} else {
				wantRefused(t, err, "configfs: "+sub+notFollowed)
			}
			if _, err := os.Lstat(filepath.Join(out, "subsystems", "nqn.b")); !os.IsNotExist(err) {
				t.Errorf("a link was made outside the root by RelinkAll: %v", err)
			}
			// The port next to it is written as usual.
			if err := f.Relink("2", configfs.Link{Name: "nqn.b", NQN: "nqn.b"}); err != nil {
				t.Errorf("healthy port 2: %v", err)
			}
		})
	}
}

// Symlinks higher up: ports/ itself, nvmet/ itself.
func TestSymlinkedParentsRefused(t *testing.T) {
	for _, r := range resolvers {
		for _, up := range []string{"nvmet/ports/1", "nvmet/ports", "nvmet"} {
			t.Run(r.name+" "+up, func(t *testing.T) {
				root := osTree(t, nil, nil)
				other := osTree(t, []string{"1"}, []string{"nqn.a"})
				victim := filepath.Join(other, "nvmet/ports/1/subsystems/nqn.a")
				symlink(t, filepath.Join(other, "nvmet/subsystems/nqn.a"), victim)
				if err := os.RemoveAll(filepath.Join(root, up)); err != nil {
					t.Fatal(err)
				}
				symlink(t, filepath.Join(other, up), filepath.Join(root, up))
				f := configfs.NewWithOps(root, r.ops(root))
				wantRefused(t, f.Unlink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}), "configfs: "+filepath.Join(root, up)+notFollowed)
				_, err := unlinkAll(f, "1", "nqn.a")
				wantRefused(t, err, "configfs: "+filepath.Join(root, up)+notFollowed)
				if _, err := os.Lstat(victim); err != nil {
					t.Errorf("the link outside the root was removed: %v", err)
				}
			})
		}
	}
}

// A Remove removes a symlink only, never a directory or a file.
func TestRemoveOnlyLinks(t *testing.T) {
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, []string{"1"}, nil)
			sub := filepath.Join(root, "nvmet/ports/1/subsystems")
			mustMkdir(t, filepath.Join(sub, "dir"))
			put(t, filepath.Join(sub, "file"), "x")
			f := configfs.NewWithOps(root, r.ops(root))
			for _, n := range []string{"dir", "file"} {
				wantRefused(t, f.Unlink("1", configfs.Link{Name: n, NQN: n}), filepath.Join(sub, n)+": ", "not a symlink; not removed")
				if _, err := os.Lstat(filepath.Join(sub, n)); err != nil {
					t.Errorf("%s removed: %v", n, err)
				}
			}
			// The same through one open of the directory (a heal's
			// unlinks): off configfs, each entry is looked at first.
			errs, err := unlinkAll(f, "1", "dir", "file")
			if err != nil || len(errs) != 2 {
				t.Fatalf("UnlinkAll: %v, %d results", err, len(errs))
			}
			for i, n := range []string{"dir", "file"} {
				wantRefused(t, errs[i], filepath.Join(sub, n)+": ", "not a symlink; not removed")
				if _, err := os.Lstat(filepath.Join(sub, n)); err != nil {
					t.Errorf("%s removed by UnlinkAll: %v", n, err)
				}
			}
		})
	}
}

// unlinkAll runs f.UnlinkAll on names (links named as their subsystem),
// collecting each unlink's result.
func unlinkAll(f *configfs.FS, id string, names ...string) ([]error, error) {
	return eachLink(f.UnlinkAll, id, names)
}

// relinkAll runs f.RelinkAll on names (links named as their subsystem),
// collecting each link's result.
func relinkAll(f *configfs.FS, id string, names ...string) ([]error, error) {
	return eachLink(f.RelinkAll, id, names)
}

func eachLink(run func(string, []configfs.Link, func(int, error) bool) error, id string, names []string) ([]error, error) {
	var links []configfs.Link
	for _, n := range names {
		links = append(links, configfs.Link{Name: n, NQN: n})
	}
	var errs []error
	err := run(id, links, func(_ int, err error) bool {
		errs = append(errs, err)
		return true
	})
	return errs, err
}

// RelinkAll makes a port's links through one open of its directory, in
// order, each pointing at its subsystem: one already there is EEXIST and
// the rest go on, done's false stops the rest, a bad name or a missing
// port is the call's error and nothing is made.
func TestRelinkAll(t *testing.T) {
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, []string{"1"}, []string{"nqn.a", "nqn.b", "nqn.c"})
			f := configfs.NewWithOps(root, r.ops(root))
			sub := filepath.Join(root, "nvmet/ports/1/subsystems")
			if err := f.Relink("1", configfs.Link{Name: "nqn.b", NQN: "nqn.b"}); err != nil {
				t.Fatal(err)
			}
			errs, err := relinkAll(f, "1", "nqn.a", "nqn.b", "nqn.c")
			if err != nil || len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], fs.ErrExist) {
				t.Fatalf("RelinkAll: %v, %v; want nqn.b EEXIST, the others made", errs, err)
			}
			for _, n := range []string{"nqn.a", "nqn.b", "nqn.c"} {
				if got, err := os.Readlink(filepath.Join(sub, n)); err != nil || got != filepath.Join(root, "nvmet/subsystems", n) {
					t.Errorf("%s: %q, %v", n, got, err)
				}
			}
			links, err := f.Links("1")
			if err != nil || len(links) != 3 {
				t.Errorf("Links after RelinkAll: %v, %v", links, err)
			}
			for _, n := range []string{"nqn.a", "nqn.c"} {
				if err := os.Remove(filepath.Join(sub, n)); err != nil {
					t.Fatal(err)
				}
			}
			n := 0
			err = f.RelinkAll("1", []configfs.Link{{Name: "nqn.a", NQN: "nqn.a"}, {Name: "nqn.c", NQN: "nqn.c"}}, func(int, error) bool { n++; return false })
			if err != nil || n != 1 {
				t.Fatalf("stopped RelinkAll: %v, %d calls", err, n)
			}
			if _, err := os.Lstat(filepath.Join(sub, "nqn.c")); !os.IsNotExist(err) {
				t.Errorf("linked after done said stop: %v", err)
			}
			for _, bad := range [][2]string{{"../x", "nqn.a"}, {"nqn.x", "../x"}} {
				n = 0
				err := f.RelinkAll("1", []configfs.Link{{Name: "nqn.c", NQN: "nqn.c"}, {Name: bad[0], NQN: bad[1]}}, func(int, error) bool { n++; return true })
				if err == nil || n != 0 {
					t.Errorf("a link %q -> %q: %v, %d made; want the call refused, nothing made", bad[0], bad[1], err, n)
				}
			}
			if _, err := relinkAll(f, "9", "nqn.a"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a missing port: %v, want ENOENT", err)
			}
		})
	}
}

// UnlinkAll removes a port's links through one open of its directory:
// each must be a symlink (a directory or a file there is refused, the
// rest go on), done's false stops the rest, a missing link is ENOENT.
func TestUnlinkAll(t *testing.T) {
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, []string{"1"}, []string{"nqn.a", "nqn.b", "nqn.c"})
			f := configfs.NewWithOps(root, r.ops(root))
			sub := filepath.Join(root, "nvmet/ports/1/subsystems")
			for _, n := range []string{"nqn.a", "nqn.b", "nqn.c"} {
				if err := f.Relink("1", configfs.Link{Name: n, NQN: n}); err != nil {
					t.Fatal(err)
				}
			}
			mustMkdir(t, filepath.Join(sub, "dir"))
			put(t, filepath.Join(sub, "file"), "x")
			errs, err := unlinkAll(f, "1", "nqn.a", "dir", "file", "gone", "nqn.b")
			if err != nil || len(errs) != 5 {
				t.Fatalf("UnlinkAll: %v, %v", errs, err)
			}
			for i, want := range []string{"", "not a symlink; not removed", "not a symlink; not removed", "no such file", ""} {
				switch {
				case want == "" && errs[i] != nil:
					t.Errorf("unlink %d: %v", i, errs[i])
				case want != "" && (errs[i] == nil || !strings.Contains(errs[i].Error(), want)):
					t.Errorf("unlink %d: %v, want %q", i, errs[i], want)
				}
			}
			if !errors.Is(errs[3], fs.ErrNotExist) {
				t.Errorf("a missing link: %v, want ENOENT", errs[3])
			}
			for _, n := range []string{"dir", "file", "nqn.c"} {
				if _, err := os.Lstat(filepath.Join(sub, n)); err != nil {
					t.Errorf("%s removed: %v", n, err)
				}
			}
			// done's false stops the rest.
			if err := f.Relink("1", configfs.Link{Name: "nqn.a", NQN: "nqn.a"}); err != nil {
				t.Fatal(err)
			}
			n := 0
			err = f.UnlinkAll("1", []configfs.Link{{Name: "nqn.a", NQN: "nqn.a"}, {Name: "nqn.c", NQN: "nqn.c"}}, func(int, error) bool { n++; return false })
			if err != nil || n != 1 {
				t.Fatalf("stopped UnlinkAll: %v, %d calls", err, n)
			}
			if _, err := os.Lstat(filepath.Join(sub, "nqn.c")); err != nil {
				t.Errorf("unlinked after done said stop: %v", err)
			}
			if _, err := unlinkAll(f, "1", "../x"); err == nil {
				t.Error("a link name with .. accepted")
			}
			if _, err := unlinkAll(f, "9", "nqn.a"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a missing port: %v, want ENOENT", err)
			}
		})
	}
}

// An iser attribute that is a symlink (to a file outside), an np or tpgt
// directory that is one: SetISER is refused and the file outside keeps its
// content.
func TestSymlinkedAttributeRefused(t *testing.T) {
	const iqn, np = "iqn.2024-01.lab:t", "192.0.2.1:3260"
	portal := iqn + "/tpgt_1/" + np
	for _, r := range resolvers {
		for _, tc := range []struct {
			name string
			make func(t *testing.T, root, out string) (link string)
			has  string
		}{
			{"attribute", func(t *testing.T, root, out string) string {
				put(t, filepath.Join(out, "iser"), "0\n")
				l := filepath.Join(root, "target/iscsi", iqn, "tpgt_1/np", np, "iser")
				symlink(t, filepath.Join(out, "iser"), l)
				return l
			}, "an attribute"},
			{"np dir", func(t *testing.T, root, out string) string {
				put(t, filepath.Join(out, "iser"), "0\n")
				l := filepath.Join(root, "target/iscsi", iqn, "tpgt_1/np", np)
				symlink(t, out, l)
				return l
			}, "a directory"},
			{"tpgt dir", func(t *testing.T, root, out string) string {
				put(t, filepath.Join(out, "np", np, "iser"), "0\n")
				l := filepath.Join(root, "target/iscsi", iqn, "tpgt_1")
				symlink(t, out, l)
				return l
			}, "a directory"},
			{"dangling attribute", func(t *testing.T, root, out string) string {
				l := filepath.Join(root, "target/iscsi", iqn, "tpgt_1/np", np, "iser")
				symlink(t, filepath.Join(out, "iser"), l)
				return l
			}, "an attribute"},
		} {
			t.Run(r.name+" "+tc.name, func(t *testing.T) {
				root := osTree(t, nil, nil)
				out := t.TempDir()
				link := tc.make(t, root, out)
				before := snapshotDir(t, out)
				f := configfs.NewWithOps(root, r.ops(root))
				err := f.SetISER(portal, true)
				wantRefused(t, err, "configfs: "+link+": a symlink where configfs has "+tc.has+"; not followed: ")
				if after := snapshotDir(t, out); after != before {
					t.Errorf("outside the root changed:\n%s\nwas\n%s", after, before)
				}
			})
		}
	}
}

// snapshotDir lists every file under dir with its content.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p)
		if d.Type().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A write outside the root, or by an OSOps without one, is refused.
func TestWritesOutsideRootRefused(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(t.TempDir(), "f")
	put(t, out, "keep")
	wantRefused(t, configfs.OSOps{Root: root}.WriteAttr(out, "x"), "outside the configfs root")
	wantRefused(t, configfs.OSOps{Root: root}.WriteAttr(root, "x"), "outside the configfs root")
	wantRefused(t, configfs.OSOps{}.WriteAttr(out, "x"), "OSOps has no Root")
	wantRefused(t, configfs.OSOps{Root: root}.Remove(filepath.Join(root, "../x")), "outside the configfs root")
	if b, _ := os.ReadFile(out); string(b) != "keep" {
		t.Errorf("written outside the root: %q", b)
	}
}

// swapISER is f.SwapISERs of one portal: what it read, or the error.
func swapISER(f *configfs.FS, id string, on bool) (was bool, err error) {
	rerr := f.SwapISERs([]string{id}, on, func(_ int, w bool, werr error) bool {
		was, err = w, werr
		return true
	})
	if rerr != nil {
		return false, rerr
	}
	return was, err
}

// SwapISER reads iser and writes the other value on the same file only
// when it reads what the step expects; it refuses what WriteAttr refuses
// (a symlink as the attribute or on the way, a FIFO) without writing.
func TestSwapISER(t *testing.T) {
	const iqn, np = "iqn.2024-01.lab:t", "192.0.2.1:3260"
	portal := iqn + "/tpgt_1/" + np
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, nil, nil)
			dir := portalDir(t, root, iqn, "tpgt_1", np, "1\n")
			iser := filepath.Join(dir, "iser")
			f := configfs.NewWithOps(root, r.ops(root))
			swap := func(id string, on bool) (bool, error) { return swapISER(f, id, on) }
			for _, c := range []struct {
				on, was bool
				after   string
			}{
				{false, true, "0\n"},  // reads 1: written
				{false, false, "0\n"}, // reads 0: not written (the admin's 0)
				{true, false, "1\n"},  // reads 0: written
				{true, true, "1\n"},   // reads 1: done already
			} {
				was, err := swap(portal, c.on)
				if err != nil || was != c.was {
					t.Fatalf("SwapISER(%v) = %v, %v; want %v", c.on, was, err, c.was)
				}
				if b, _ := os.ReadFile(iser); string(b) != c.after {
					t.Fatalf("after SwapISER(%v) iser holds %q, want %q", c.on, b, c.after)
				}
			}
			put(t, iser, "2\n")
			if _, err := swap(portal, true); err == nil || !strings.Contains(err.Error(), `iser reads "2"`) {
				t.Errorf("iser reading 2: %v", err)
			}
			if b, _ := os.ReadFile(iser); string(b) != "2\n" {
				t.Errorf("iser reading 2 was written: %q", b)
			}
			if _, err := swap(iqn+"/tpgt_1/192.0.2.9:3260", true); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a missing portal: %v, want ErrNotExist", err)
			}
			if err := os.Remove(iser); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(iser, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := swap(portal, true)
			wantRefused(t, err, "FIFO")
			// A character device (configfs cannot hold one; a test's tree
			// can): refused, nothing read or written through it (it is
			// /dev/zero's: a read would give zeros, not "0" or "1").
			if err := os.Remove(iser); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mknod(iser, syscall.S_IFCHR|0o644, 1<<8|5); err == nil {
				_, err = swap(portal, true)
				wantRefused(t, err, "character device")
				os.Remove(iser)
			} else {
				t.Logf("no mknod here (%v): the device case is not tried", err)
			}
			out := t.TempDir()
			put(t, filepath.Join(out, "iser"), "0\n")
			symlink(t, filepath.Join(out, "iser"), iser)
			_, err = swap(portal, true)
			wantRefused(t, err, "a symlink where configfs has an attribute; not followed")
			if b, _ := os.ReadFile(filepath.Join(out, "iser")); string(b) != "0\n" {
				t.Errorf("written through a symlink: %q", b)
			}
		})
	}
}

// SwapISERs makes a run of swaps in order through one open of the root:
// each told to done as made (a missing portal and an admin's 0 among
// them do not stop the rest), done's false stops the run, and an id that
// names no portal refuses the run before any write.
func TestSwapISERsRun(t *testing.T) {
	const np = "192.0.2.1:3260"
	iqn := func(i int) string { return fmt.Sprintf("iqn.2024-01.lab:t%d", i) }
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			root := osTree(t, nil, nil)
			var ids, isers []string
			for i, v := range []string{"1\n", "", "0\n", "1\n"} {
				ids = append(ids, iqn(i)+"/tpgt_1/"+np)
				if v != "" {
					isers = append(isers, filepath.Join(portalDir(t, root, iqn(i), "tpgt_1", np, v), "iser"))
				} else {
					isers = append(isers, "")
				}
			}
			f := configfs.NewWithOps(root, r.ops(root))
			read := func() (s []string) {
				for _, p := range isers {
					b, _ := os.ReadFile(p)
					s = append(s, strings.TrimSpace(string(b)))
				}
				return s
			}
			bad := ids[len(ids)-1] + "/x"
			if err := f.SwapISERs(append(slices.Clone(ids), bad), false, func(int, bool, error) bool {
				t.Error("done called for a run refused")
				return true
			}); err == nil || !strings.Contains(err.Error(), "want <iqn>/tpgt_<N>/<ip>:<port>") {
				t.Errorf("a run naming %q: %v, want it refused", bad, err)
			}
			if got := read(); !slices.Equal(got, []string{"1", "", "0", "1"}) {
				t.Fatalf("a refused run wrote: %q", got)
			}
			var told []string
			err := f.SwapISERs(ids, false, func(i int, was bool, err error) bool {
				told = append(told, fmt.Sprintf("%d:%v:%v", i, was, errors.Is(err, fs.ErrNotExist)))
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("portal %d: %v", i, err)
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"0:true:false", "1:false:true", "2:false:false", "3:true:false"}; !slices.Equal(told, want) {
				t.Errorf("told %q, want %q", told, want)
			}
			if got := read(); !slices.Equal(got, []string{"0", "", "0", "0"}) {
				t.Errorf("after the run: %q, want every present portal at 0", got)
			}
			told = nil
			if err := f.SwapISERs(ids, true, func(i int, was bool, err error) bool {
				told = append(told, fmt.Sprint(i))
				return false
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(told, []string{"0"}) {
				t.Errorf("told %q after done stopped the run at its first", told)
			}
			if got := read(); !slices.Equal(got, []string{"1", "", "0", "0"}) {
				t.Errorf("after a run stopped at its first: %q, want only the first at 1", got)
			}
		})
	}
}
