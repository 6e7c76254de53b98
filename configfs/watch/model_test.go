package watch

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

var _ rebind.Tree = (*Model)(nil)

// binder binds everything, and nothing is ever alive for another port:
// the model does not care about listeners.
type binder struct{}

func (binder) Bind(owner, id string, addr netip.AddrPort) error { return nil }
func (binder) Unbind(owner, id string)                          {}
func (binder) Bound(owner, id string) (string, bool)            { return "", false }

// world is a fake configfs with a model on it.
type world struct {
	t    testing.TB
	k    *configfstest.Fake
	fsys *configfs.FS // fresh reads
	m    *Model
	logs *bytes.Buffer
}

func newWorld(t testing.TB, root string, setup func(k *configfstest.Fake), opts Options) *world {
	t.Helper()
	k := configfstest.NewAt(root, binder{})
	if setup != nil {
		setup(k)
	}
	w := &world{t: t, k: k, fsys: k.FS(), logs: &bytes.Buffer{}}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(k.FS(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	w.m = m
	return w
}

func basic(k *configfstest.Fake) {
	k.AddSubsystem("nqn.2014-08.org.example:a")
	k.AddSubsystem("nqn.2014-08.org.example:b")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPort("2", "rdma", "ipv4", "192.0.2.2", "4420")
	k.AddPort("10", "tcp", "ipv4", "192.0.2.3", "4420")
	k.AddPortal("iqn.2003-01.org.example:t1", "tpgt_1", "192.0.2.1:3260")
	k.AddPortal("iqn.2003-01.org.example:t1", "tpgt_1", "[2001:db8::1]:3260")
	k.AddPortal("iqn.2003-01.org.example:t2", "tpgt_2", "192.0.2.2:3260")
}

// view is everything a Tree answers, as text.
func view(tr interface {
	Ports() ([]configfs.Port, error)
	Links(string) ([]configfs.Link, error)
	Portals() ([]configfs.Portal, error)
	Portal(string) (configfs.Portal, error)
	Subsystems() ([]string, error)
}) string {
	var b strings.Builder
	ports, err := tr.Ports()
	fmt.Fprintf(&b, "ports err=%v\n", err)
	for _, p := range ports {
		fmt.Fprintf(&b, "port %+v\n", p)
		links, err := tr.Links(p.ID)
		fmt.Fprintf(&b, "  links %v err=%v\n", links, err)
	}
	portals, err := tr.Portals()
	fmt.Fprintf(&b, "portals err=%v\n", err)
	for _, p := range portals {
		fmt.Fprintf(&b, "portal %+v\n", p)
		one, err := tr.Portal(p.ID())
		fmt.Fprintf(&b, "  one %+v err=%v\n", one, err)
	}
	subs, err := tr.Subsystems()
	fmt.Fprintf(&b, "subsystems %q err=%v\n", subs, err)
	return b.String()
}

// same fails unless the model answers what fresh reads of the tree do.
func (w *world) same(what string) {
	w.t.Helper()
	got, want := view(w.m), view(w.fsys)
	if got != want {
		w.t.Fatalf("%s: model differs from a fresh read:\nmodel:\n%s\nfresh:\n%s", what, got, want)
	}
}

func (w *world) admin() configfs.Ops { return w.k.Admin() }

func (w *world) path(elem ...string) string {
	return filepath.Join(append([]string{w.k.Root}, elem...)...)
}

func (w *world) link(port, nqn string) error {
	return w.admin().Symlink(w.path("nvmet/subsystems", nqn), w.path("nvmet/ports", port, "subsystems", nqn))
}

func (w *world) iser(portal string, on bool) error {
	iqn, tpg, np, _ := configfs.ParsePortalID(portal)
	v := "0"
	if on {
		v = "1"
	}
	return w.admin().WriteAttr(w.path("target/iscsi", iqn, tpg, "np", np, "iser"), v)
}

// reads returns how many Ops reads went to configfs since the last call.
func (w *world) reads() uint64 {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	r := w.m.stats.Reads
	w.m.stats.Reads = 0
	return r
}

func TestEquivalenceAfterAdminChanges(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	const a = "nqn.2014-08.org.example:a"
	steps := []struct {
		name string
		do   func() error
	}{
		{"link", func() error { return w.link("1", a) }},
		{"second link", func() error { return w.link("1", "nqn.2014-08.org.example:b") }},

		{"link named a to b", func() error {
			if err := w.admin().Remove(w.path("nvmet/ports/1/subsystems/nqn.2014-08.org.example:b")); err != nil {
				return err
			}
			if err := w.admin().Remove(w.path("nvmet/ports/1/subsystems", a)); err != nil {
				return err
			}
			return w.admin().Symlink(w.path("nvmet/subsystems/nqn.2014-08.org.example:b"), w.path("nvmet/ports/1/subsystems", a))
		}},
		{"unlink", func() error {
			return w.admin().Remove(w.path("nvmet/ports/1/subsystems", a))
		}},
		{"addr on a disabled port", func() error {
			return w.admin().WriteAttr(w.path("nvmet/ports/2/addr_traddr"), "198.51.100.7")
		}},
		{"garbage addr", func() error {
			return w.admin().WriteAttr(w.path("nvmet/ports/2/addr_trsvcid"), "x")
		}},
		{"add port", func() error { w.k.AddPort("3", "rdma", "ipv6", "2001:db8::3", "4420"); return nil }},
		{"remove port", func() error { return w.k.RemovePort("10") }},
		{"iser 1", func() error { return w.iser("iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", true) }},
		{"iser 0", func() error { return w.iser("iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", false) }},
		{"add portal in a new target", func() error {
			w.k.AddPortal("iqn.2003-01.org.example:t3", "tpgt_1", "192.0.2.9:3260")
			return nil
		}},
		{"add portal in a new tpg", func() error {
			w.k.AddPortal("iqn.2003-01.org.example:t1", "tpgt_7", "192.0.2.8:3260")
			return nil
		}},
		{"remove portal", func() error { return w.k.RemovePortal("iqn.2003-01.org.example:t2/tpgt_2/192.0.2.2:3260") }},
		{"add subsystem", func() error { w.k.AddSubsystem("nqn.2014-08.org.example:c"); return nil }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		w.same(s.name)
	}
	if s := w.m.Stats(); s.Disagreements != 0 || s.Rescans != 1 || s.Events == 0 {
		t.Errorf("stats %+v: want 1 rescan (New's), some events, no disagreement", s)
	}
}

// TestReadsComeFromTheModel: after a change to one port only that port is
// read again, not the tree.
func TestReadsComeFromTheModel(t *testing.T) {
	w := newWorld(t, t.TempDir(), func(k *configfstest.Fake) {
		basic(k)
		for i := 100; i < 150; i++ {
			k.AddPort(fmt.Sprint(i), "rdma", "ipv4", fmt.Sprintf("192.0.2.%d", i), "4420")
		}
	}, Options{})
	w.same("start")
	w.reads()
	if _, err := w.m.Ports(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Portals(); err != nil {
		t.Fatal(err)
	}
	if r := w.reads(); r != 0 {
		t.Errorf("unchanged tree: %d reads went to configfs, want 0", r)
	}
	// Unchanged since the last answer: the whole answer is reused.
	hits := w.m.Stats().MemoHits
	if _, err := w.m.Ports(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Portals(); err != nil {
		t.Fatal(err)
	}
	if h := w.m.Stats().MemoHits - hits; h != 2 {
		t.Errorf("unchanged tree: %d whole answers reused, want 2", h)
	}
	// Links too, port by port.
	if _, err := w.m.Links("1"); err != nil {
		t.Fatal(err)
	}
	hits = w.m.Stats().MemoHits
	if _, err := w.m.Links("1"); err != nil {
		t.Fatal(err)
	}
	if h := w.m.Stats().MemoHits - hits; h != 1 {
		t.Errorf("unchanged tree: Links answered %d times from the memo, want 1", h)
	}
	if err := w.admin().WriteAttr(w.path("nvmet/ports/120/addr_traddr"), "198.51.100.1"); err != nil {
		t.Fatal(err)
	}
	ports, _ := w.m.Ports()
	if r := w.reads(); r != 1 {
		t.Errorf("one attribute written: %d reads, want 1 (the port's attributes)", r)
	}
	for _, p := range ports {
		if p.ID == "120" && p.Traddr != "198.51.100.1" {
			t.Errorf("port 120 reads %s", p.Traddr)
		}
	}
	// A caller changing its copy does not change the next answer.
	ports[0].Traddr = "mutated"
	again, _ := w.m.Ports()
	if again[0].Traddr == "mutated" {
		t.Error("the memoised answer is shared with callers")
	}
}

// TestOwnWritesMarkDirty: the model's own writes are seen even when no
// event arrives.
func TestOwnWritesMarkDirty(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	w.m.mu.Lock()
	w.m.discardEvents = true
	w.m.noIdentCheck = true
	w.m.mu.Unlock()
	const a = "nqn.2014-08.org.example:a"
	err := w.m.RelinkAll("1", []configfs.Link{{Name: a, NQN: a}}, func(_ int, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	w.same("relink")
	if err := w.m.SetISER("iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", true); err != nil {
		t.Fatal(err)
	}
	w.same("iser 1")
	if err := w.m.Unlink("1", configfs.Link{Name: a, NQN: a}); err != nil {
		t.Fatal(err)
	}
	w.same("unlink")
}

// TestOverflowRescans: events lost, then IN_Q_OVERFLOW: the rescan
// recovers.
func TestOverflowRescans(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	w.m.mu.Lock()
	w.m.discardEvents = true
	w.m.mu.Unlock()
	if err := w.iser("iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", true); err != nil {
		t.Fatal(err)
	}
	w.m.Ports() // the event is lost
	w.m.mu.Lock()
	w.m.discardEvents = false
	w.m.overflowNext = true
	w.m.mu.Unlock()
	w.same("after overflow")
	if s := w.m.Stats(); s.Overflows != 1 || s.Rescans != 2 || s.Disagreements != 0 {
		t.Errorf("stats %+v: want 1 overflow, 2 rescans, no disagreement (an overflow's rescan is not a bug)", s)
	}
}

// TestRealOverflow overflows the kernel's queue (max_queued_events) with
// writes to two attributes in two directories (identical events merge).
func TestRealOverflow(t *testing.T) {
	q, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip(err)
	}
	var max int
	fmt.Sscan(string(q), &max)
	if max > 70000 {
		t.Skipf("max_queued_events %d: too many writes", max)
	}
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	a := w.path("target/iscsi/iqn.2003-01.org.example:t1/tpgt_1/np/192.0.2.1:3260/iser")
	b := w.path("target/iscsi/iqn.2003-01.org.example:t2/tpgt_2/np/192.0.2.2:3260/iser")
	for i := 0; i <= max/2+1; i++ {
		os.WriteFile(a, []byte("0\n"), 0o644)
		os.WriteFile(b, []byte("0\n"), 0o644)
	}
	if err := w.iser("iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", true); err != nil {
		t.Fatal(err)
	}
	w.same("after a real overflow")
	if s := w.m.Stats(); s.Overflows == 0 || s.Rescans < 2 {
		t.Errorf("stats %+v: want an overflow and its rescan", s)
	}
}

// TestTreeReplacedWithEvents: the nvmet tree removed and made again
// (rmmod; modprobe on a file system that reports it).
func TestTreeReplacedWithEvents(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	if err := os.RemoveAll(w.path("nvmet")); err != nil {
		t.Fatal(err)
	}
	w.same("nvmet gone")
	if err := os.RemoveAll(w.path("target")); err != nil {
		t.Fatal(err)
	}
	w.same("target gone")
	w.k.AddSubsystem("nqn.2014-08.org.example:z")
	w.k.AddPort("7", "rdma", "ipv4", "192.0.2.7", "4420")
	w.k.AddPortal("iqn.2003-01.org.example:t9", "tpgt_1", "192.0.2.7:3260")
	w.same("trees back")
	if s := w.m.Stats(); s.Disagreements != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestTreeReplacedWithoutEvents: configfs reports no event when a module
// is loaded or unloaded; the identity check at every read notices the
// tree replaced (here by renames the model is kept from seeing).
func TestTreeReplacedWithoutEvents(t *testing.T) {
	dir := t.TempDir()
	w := newWorld(t, dir, basic, Options{IdentEvery: -1})
	w.same("start")
	w.m.mu.Lock()
	w.m.discardEvents = true
	w.m.mu.Unlock()
	// A second tree beside the first, then swapped in.
	k2 := configfstest.NewAt(filepath.Join(dir, "other"), binder{})
	k2.AddSubsystem("nqn.2014-08.org.example:a")
	k2.AddPort("1", "tcp", "ipv4", "203.0.113.1", "4420")
	k2.AddPortal("iqn.2003-01.org.example:t1", "tpgt_1", "203.0.113.1:3260")
	for _, sub := range []string{"nvmet", "target"} {
		if err := os.Rename(w.path(sub), w.path("old-"+sub)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "other", sub), w.path(sub)); err != nil {
			t.Fatal(err)
		}
	}
	w.same("trees swapped")
	if s := w.m.Stats(); s.Rescans != 2 {
		t.Errorf("stats %+v: want the identity check's rescan", s)
	}
}

// TestWatchDropped: the kernel ends a watch the model did not remove
// (IN_IGNORED): the model rescans instead of trusting a directory it no
// longer watches.
func TestWatchDropped(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	w.m.mu.Lock()
	wd := w.m.find(w.path("nvmet/ports")).wd
	w.m.mu.Unlock()
	if _, err := unix.InotifyRmWatch(w.m.fd, uint32(wd)); err != nil {
		t.Fatal(err)
	}
	w.k.AddPort("5", "rdma", "ipv4", "192.0.2.5", "4420") // no event: unwatched
	w.same("after the watch was dropped")
	if s := w.m.Stats(); s.Rescans != 2 {
		t.Errorf("stats %+v: want a rescan", s)
	}
	w.k.AddPort("6", "rdma", "ipv4", "192.0.2.6", "4420")
	w.same("watched again")
}

// TestUnmount: a file system unmounted under a watched directory
// (IN_UNMOUNT) makes a rescan. Root only: it mounts a tmpfs.
func TestUnmount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skip("cannot mount a tmpfs:", err)
	}
	mounted := true
	defer func() {
		if mounted {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	}()
	root := filepath.Join(dir, "config")
	os.Mkdir(root, 0o755)
	w := newWorld(t, root, basic, Options{})
	w.same("start")
	w.m.mu.Lock()
	w.m.noIdentCheck = true // IN_UNMOUNT alone must do it
	w.m.mu.Unlock()
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	w.k.Root = root // nothing there any more
	w.same("unmounted")
	if s := w.m.Stats(); s.Rescans != 2 {
		t.Errorf("stats %+v: want the IN_UNMOUNT rescan", s)
	}
}

// TestWatchAddFails: inotify_add_watch failing (ENOSPC) makes every read a
// full read, logged with the sysctl to raise; a rescan that can watch
// again leaves the fallback.
func TestWatchAddFails(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	w.m.mu.Lock()
	w.m.addWatchHook = func(string) error { return unix.ENOSPC }
	w.m.mu.Unlock()
	w.k.AddPort("5", "rdma", "ipv4", "192.0.2.5", "4420")
	w.k.AddPortal("iqn.2003-01.org.example:t5", "tpgt_1", "192.0.2.5:3260")
	w.same("watches fail")
	if err := w.iser("iqn.2003-01.org.example:t5/tpgt_1/192.0.2.5:3260", true); err != nil {
		t.Fatal(err)
	}
	w.same("watches fail, then a write")
	s := w.m.Stats()
	if !s.Fallback || s.WatchErrors == 0 {
		t.Errorf("stats %+v: want the fallback", s)
	}
	if !strings.Contains(w.logs.String(), maxWatchesSysctl) {
		t.Errorf("log does not name %s:\n%s", maxWatchesSysctl, w.logs)
	}
	w.reads()
	w.m.Ports()
	if r := w.reads(); r != 0 {
		t.Errorf("fallback reads went through the cache (%d Ops reads counted)", r)
	}
	w.m.mu.Lock()
	w.m.addWatchHook = nil
	w.m.mu.Unlock()
	w.m.Rescan()
	w.same("watches work again")
	if s := w.m.Stats(); s.Fallback || s.Disagreements != 0 {
		t.Errorf("stats %+v: want the fallback left", s)
	}
}

// TestPeriodicRescanFindsDisagreement: a model wrong without knowing it
// (here: corrupted on purpose) is caught by the periodic rescan, logged
// and counted, and the rescan wins.
func TestPeriodicRescanFindsDisagreement(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: time.Minute, Now: func() time.Time { return now }})
	w.same("start")
	w.m.mu.Lock()
	n := w.m.find(w.path("nvmet/ports/2"))
	vals := slices.Clone(n.vals())
	vals[2] = "203.0.113.99"
	n.setVals(vals)
	w.m.gen++ // the whole answers are rebuilt from the (corrupt) cache
	w.m.mu.Unlock()
	if p, _ := w.m.Ports(); p[1].Traddr != "203.0.113.99" {
		t.Fatalf("corruption did not take: %+v", p[1])
	}
	now = now.Add(time.Minute)
	w.same("after the periodic rescan")
	s := w.m.Stats()
	if s.Rescans != 2 || s.Disagreements != 1 {
		t.Errorf("stats %+v: want 1 periodic rescan finding 1 disagreement", s)
	}
	if !strings.Contains(w.logs.String(), "configfs model disagreed with a rescan") || !strings.Contains(w.logs.String(), "nvmet port 2") {
		t.Errorf("disagreement not logged:\n%s", w.logs)
	}
}

// TestPeriodicRescanThatAgreesKeepsTheModel: a periodic rescan that
// finds the model right leaves it as it is: no watch set again, no read
// answered differently, the generation held; the model still follows the
// tree after it.
func TestPeriodicRescanThatAgreesKeepsTheModel(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: time.Minute, Now: func() time.Time { return now }})
	w.same("start")
	tok, _ := w.m.Generation()
	watches := w.m.Stats().Watches
	var added []string
	w.m.mu.Lock()
	w.m.addWatchHook = func(path string) error { added = append(added, path); return nil }
	w.m.mu.Unlock()
	now = now.Add(time.Minute)
	if got, _ := w.m.Generation(); got != tok {
		t.Errorf("Generation %d after a rescan that agreed, want %d", got, tok)
	}
	s := w.m.Stats()
	if s.Rescans != 2 || s.Disagreements != 0 || s.Watches != watches || len(added) != 0 {
		t.Errorf("stats %+v, watches set again %q: want the periodic rescan, no disagreement, the %d watches kept", s, added, watches)
	}
	w.same("after the periodic rescan")
	if err := w.admin().WriteAttr(w.path("nvmet/ports/1/addr_traddr"), "198.51.100.1"); err != nil {
		t.Fatal(err)
	}
	w.same("an admin write after it")
	if s := w.m.Stats(); s.Rescans != 2 {
		t.Errorf("stats %+v: the admin write after the rescan was not followed by its event", s)
	}
}

// TestPeriodicRescanRebuildsAfterAWatchFailed: a watch that fails during
// the periodic check (the model watches what it reads for the first time)
// puts it in fallback; the rescan then rebuilds, watching again, rather
// than keeping a model that reads configfs whole until the next one.
func TestPeriodicRescanRebuildsAfterAWatchFailed(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: time.Minute, Now: func() time.Time { return now }})
	w.same("start")
	w.k.AddPort("5", "rdma", "ipv4", "192.0.2.5", "4420") // not read yet: not watched yet
	failed := 0
	w.m.mu.Lock()
	w.m.addWatchHook = func(path string) error {
		if failed == 0 && strings.HasSuffix(path, "/ports/5") {
			failed++
			return unix.EMFILE
		}
		return nil
	}
	w.m.mu.Unlock()
	now = now.Add(time.Minute)
	w.same("after the periodic rescan")
	if s := w.m.Stats(); failed != 1 || s.Fallback || s.Rescans != 2 || s.Disagreements != 0 {
		t.Errorf("stats %+v, %d watches failed: want one failure during the check, then a rebuild that leaves the fallback", s, failed)
	}
}

// TestPeriodicRescanChecksWholeAnswers: a stale whole answer (the memo
// of Ports) is a disagreement too.
func TestPeriodicRescanChecksWholeAnswers(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: time.Minute, Now: func() time.Time { return now }})
	w.same("start")
	w.m.Ports()
	w.m.mu.Lock()
	if !w.m.memoPorts.ok {
		w.m.mu.Unlock()
		t.Fatal("Ports not memoised on an unchanged tree")
	}
	w.m.memoPorts.v = slices.Clone(w.m.memoPorts.v)
	w.m.memoPorts.v[1].Trsvcid = "4499"
	w.m.mu.Unlock()
	if p, _ := w.m.Ports(); p[1].Trsvcid != "4499" {
		t.Fatalf("corruption did not take: %+v", p[1])
	}
	now = now.Add(time.Minute)
	w.same("after the periodic rescan")
	if s := w.m.Stats(); s.Disagreements != 1 {
		t.Errorf("stats %+v: want the stale whole answer found", s)
	}
}

// TestIdentChecksAreSpaced: a burst of reads checks the top directories'
// identity once per IdentEvery; a read after that sees a tree replaced
// without events.
func TestIdentChecksAreSpaced(t *testing.T) {
	dir := t.TempDir()
	w := newWorld(t, dir, basic, Options{IdentEvery: time.Hour})
	w.same("start")
	w.m.mu.Lock()
	w.m.discardEvents = true
	w.m.mu.Unlock()
	if err := os.Rename(filepath.Join(dir, "nvmet"), filepath.Join(dir, "nvmet.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "nvmet"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ports", "subsystems"} {
		os.Mkdir(filepath.Join(dir, "nvmet", d), 0o755)
	}
	if p, _ := w.m.Ports(); len(p) == 0 {
		t.Fatal("within IdentEvery: the model was expected to answer from its cache (no check yet)")
	}
	w.m.mu.Lock()
	w.m.lastIdent = time.Time{} // IdentEvery has passed
	w.m.mu.Unlock()
	if p, _ := w.m.Ports(); len(p) != 0 {
		t.Errorf("after IdentEvery: %d ports, want the new empty tree", len(p))
	}
}

// TestPeriodicRescanChecksMemoisedLinks: a stale memoised Links answer is
// a disagreement too; an admin link after the answer is seen at once.
func TestPeriodicRescanChecksMemoisedLinks(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: time.Minute, Now: func() time.Time { return now }})
	for _, n := range []string{"nqn.2014-08.org.example:a", "nqn.2014-08.org.example:b"} {
		if err := w.admin().Symlink(w.path("nvmet/subsystems", n), w.path("nvmet/ports/1/subsystems", n)); err != nil {
			t.Fatal(err)
		}
	}
	w.same("start")
	before, err := w.m.Links("1")
	if err != nil || len(before) != 2 {
		t.Fatalf("port 1 links: %v %v", before, err)
	}
	if err := w.admin().Remove(w.path("nvmet/ports/1/subsystems", before[0].Name)); err != nil {
		t.Fatal(err)
	}
	if after, _ := w.m.Links("1"); len(after) != len(before)-1 {
		t.Fatalf("after an admin unlink: %v, want one link fewer than %v", after, before)
	}
	w.m.mu.Lock()
	w.m.memoLinks["1"] = append(w.m.memoLinks["1"], configfs.Link{Name: "stale", NQN: "stale"})
	w.m.mu.Unlock()
	now = now.Add(time.Minute)
	w.same("after the periodic rescan")
	if s := w.m.Stats(); s.Disagreements != 1 {
		t.Errorf("stats %+v: want the stale Links answer found", s)
	}
}

func TestInvalidate(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	w.m.Invalidate()
	w.m.Ports()
	if s := w.m.Stats(); s.Rescans != 2 {
		t.Errorf("stats %+v: want Invalidate's rescan", s)
	}
}

func TestClose(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{})
	w.same("start")
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// Generation holds while nothing changes, reads and a rescan that finds
// the model right included, and moves at every change: the model's own
// writes, an admin's (its event), a rebuild.
func TestGenerationMovesAtEveryChange(t *testing.T) {
	w := newWorld(t, t.TempDir(), basic, Options{RescanEvery: -1})
	const a = "nqn.2014-08.org.example:a"
	const portal = "iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260"
	gen := func() uint64 {
		t.Helper()
		tok, ok := w.m.Generation()
		if !ok {
			t.Fatal("no generation")
		}
		return tok
	}
	w.same("start")
	tok := gen()
	// moved checks that change moved the token, then that reading
	// everything (the model again up to date) does not move it.
	moved := func(what string, change func() error) {
		t.Helper()
		if err := change(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		next := gen()
		if next == tok {
			t.Fatalf("%s: Generation still %d", what, tok)
		}
		w.same(what)
		if again := gen(); again != next {
			t.Fatalf("%s: Generation %d, then %d after reads alone", what, next, again)
		}
		tok = next
	}
	w.same("read again")
	if got := gen(); got != tok {
		t.Fatalf("nothing changed: Generation %d, then %d", tok, got)
	}
	moved("model relink", func() error { return relink(w.m, "1", configfs.Link{Name: a, NQN: a}) })
	moved("model unlink", func() error { return w.m.Unlink("1", configfs.Link{Name: a, NQN: a}) })
	moved("model iser", func() error { return w.m.SetISER(portal, true) })
	moved("admin link", func() error { return w.link("2", a) })
	moved("admin attribute", func() error {
		return w.admin().WriteAttr(w.path("nvmet/ports/10/addr_trsvcid"), "4421")
	})
	moved("admin iser", func() error { return w.iser(portal, false) })
	moved("add port", func() error { w.k.AddPort("3", "rdma", "ipv4", "192.0.2.4", "4420"); return nil })
	moved("remove portal", func() error { return w.k.RemovePortal(portal) })
	w.m.Rescan()
	if got := gen(); got != tok {
		t.Fatalf("a rescan that found the model right: Generation %d, then %d", tok, got)
	}
	moved("rebuild", func() error { w.m.Invalidate(); return nil })
	for i := range 100 { // a heal writes as often, reading between writes
		moved("model iser again", func() error { return w.m.SetISER("iqn.2003-01.org.example:t2/tpgt_2/192.0.2.2:3260", i%2 == 0) })
	}
}

// relink is one link made by the model's RelinkAll: its error, or the
// link's.
func relink(m *Model, id string, l configfs.Link) error {
	var lerr error
	if err := m.RelinkAll(id, []configfs.Link{l}, func(_ int, err error) bool { lerr = err; return true }); err != nil {
		return err
	}
	return lerr
}

// TestBigDirectoryIsItsIndex: a directory with many children (a port with
// hundreds of subsystems linked) keeps them only in its index, not also in
// a chain, so that the port's unlinks each remove a child in one map
// delete (a chain made that quadratic: 1,000 unlinks walked 500,000
// nodes); after every link is unlinked through the model, the index is
// empty and the model answers what configfs does.
func TestBigDirectoryIsItsIndex(t *testing.T) {
	const n = 200
	var nqns []string
	w := newWorld(t, t.TempDir(), func(k *configfstest.Fake) {
		k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
		for i := range n {
			nqn := fmt.Sprintf("nqn.2014-08.org.example:vol-%d", i)
			k.AddSubsystem(nqn)
			nqns = append(nqns, nqn)
		}
	}, Options{})
	for _, nqn := range nqns {
		if err := w.link("1", nqn); err != nil {
			t.Fatal(err)
		}
	}
	w.same("linked")
	links, err := w.m.Links("1")
	if err != nil || len(links) != n {
		t.Fatalf("Links: %d, %v", len(links), err)
	}
	w.m.mu.Lock()
	d := w.m.find(w.path("nvmet/ports/1/subsystems"))
	bad := d == nil || !d.has(fBig) || d.first != nil || len(w.m.big[d]) != n
	state := fmt.Sprintf("node %v, indexed %v, chained %v, %d indexed", d != nil, d != nil && d.has(fBig), d != nil && d.first != nil, len(w.m.big[d]))
	w.m.mu.Unlock()
	if bad {
		t.Fatalf("ports/1/subsystems: %s; want indexed, not chained, %d indexed", state, n)
	}
	if err := w.m.UnlinkAll("1", links, func(_ int, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	w.m.mu.Lock()
	left := 0
	if d := w.m.find(w.path("nvmet/ports/1/subsystems")); d != nil {
		left = len(w.m.big[d])
	}
	w.m.mu.Unlock()
	if left != 0 {
		t.Fatalf("after unlinking all %d links the index still holds %d", n, left)
	}
	w.same("unlinked")
}

// TestForgettingABigDirectoryUnwatchesItsChildren: with every directory
// indexed (BigDir 1), an admin's removal of a port forgets the port and
// its subsystems directory, watches and indexes included: the model then
// holds the watches and indexes a model made afresh on the same tree
// holds.
func TestForgettingABigDirectoryUnwatchesItsChildren(t *testing.T) {
	root := t.TempDir()
	w := newWorld(t, root, basic, Options{BigDir: 1, RescanEvery: -1})
	if err := w.link("2", "nqn.2014-08.org.example:a"); err != nil {
		t.Fatal(err)
	}
	w.same("start")
	if err := w.k.RemovePort("2"); err != nil {
		t.Fatal(err)
	}
	w.same("port 2 removed")
	fresh, err := New(w.k.FS(), Options{BigDir: 1, RescanEvery: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := view(fresh); got != view(w.fsys) {
		t.Fatalf("fresh model:\n%s", got)
	}
	held := func(m *Model) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		return fmt.Sprintf("%d watches, %d indexed directories", len(m.byWD), len(m.big))
	}
	if got, want := held(w.m), held(fresh); got != want {
		t.Errorf("after the removal the model holds %s, a fresh one %s", got, want)
	}
}
