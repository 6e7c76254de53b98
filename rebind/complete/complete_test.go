package complete

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// nobind binds nothing: these tests make objects, not listeners.
type nobind struct{}

func (nobind) Bind(owner, id string, a netip.AddrPort) error { return nil }
func (nobind) Unbind(owner, id string)                       {}
func (nobind) Bound(owner, id string) (string, bool)         { return "", false }

// memStore is a Store in memory; a restart keeps it.
type memStore struct{ b []byte }

func (m *memStore) Completion() ([]byte, error)   { return m.b, nil }
func (m *memStore) SaveCompletion(b []byte) error { m.b = slices.Clone(b); return nil }

// config is a saved config of two subsystems (the first with two
// namespaces on disks that come late, an allowed host and attributes), a
// host, two ports (an ANA group, a referral), as nvmetcli saves it.
func config(disk1, disk2 string) string {
	return fmt.Sprintf(`{
 "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:host1", "dhchap": {}}],
 "subsystems": [
  {"nqn": "nqn.2024-01.io.t:s1", "attr": {"allow_any_host": "0", "model": "cinder"},
   "allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:host1"],
   "namespaces": [
    {"nsid": 1, "enable": 1, "ana_grpid": 2, "device": {"path": %q, "nguid": "11111111-2222-3333-4444-555555555555"}},
    {"nsid": 2, "enable": 1, "device": {"path": %q}}]},
  {"nqn": "nqn.2024-01.io.t:s2", "attr": {"allow_any_host": "1"}, "allowed_hosts": [], "namespaces": []}
 ],
 "ports": [
  {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "192.0.2.1", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"},
   "param": {"inline_data_size": "16384"},
   "subsystems": ["nqn.2024-01.io.t:s1", "nqn.2024-01.io.t:s2"],
   "ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}, {"grpid": 2, "ana": {"state": "non-optimized"}}],
   "referrals": [{"name": "r1", "addr": {"adrfam": "ipv4", "traddr": "192.0.2.9", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"}, "enable": 1}]},
  {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "192.0.2.1", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"},
   "subsystems": ["nqn.2024-01.io.t:s2"], "ana_groups": [], "referrals": []}
 ]}`, disk1, disk2)
}

type world struct {
	t     *testing.T
	k     *configfstest.Fake
	store *memStore
	dir   string // where the disks are
	tree  *saved.Tree
	boot  string
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, k: configfstest.New(t, nobind{}), store: &memStore{}, dir: t.TempDir(), boot: "boot-1"}
	tree, errs, err := saved.ParseNvmetcliTree("config.json", []byte(config(w.disk(1), w.disk(2))))
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	w.tree = tree
	return w
}

func (w *world) disk(n int) string { return filepath.Join(w.dir, fmt.Sprintf("disk%d", n)) }

func (w *world) plug(n int) {
	if err := os.WriteFile(w.disk(n), nil, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// completer is a fresh process's completer over the world (a restart).
func (w *world) completer() *Completer {
	return &Completer{Ops: w.k, Root: w.k.Root, Store: w.store, BootID: func() (string, error) { return w.boot, nil },
		Load: func(rebind.Config) (*saved.Tree, error) { return w.tree, nil }}
}

func (w *world) run(c *Completer, open bool) rebind.Completion {
	w.t.Helper()
	return c.Complete(context.Background(), rebind.CompletionInput{Config: rebind.Config{BootWindow: time.Hour}, Open: open, Now: time.Now()})
}

func (w *world) nvmet(p string) string { return filepath.Join(w.k.Root, "nvmet", p) }

func (w *world) read(p string) string {
	b, err := os.ReadFile(w.nvmet(p))
	if err != nil {
		w.t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSpace(string(b))
}

func (w *world) exists(p string) bool {
	_, err := os.Lstat(w.nvmet(p))
	return err == nil
}

// stoppedRestore leaves what nvmetcli's restore leaves when namespace 1's
// disk is missing: the host, subsystem 1, its namespace 1 with its
// attributes and enable refused; nothing after it.
func (w *world) stoppedRestore() {
	a := w.k.Admin()
	for _, d := range []string{"hosts/nqn.2014-08.org.nvmexpress:uuid:host1", "subsystems/nqn.2024-01.io.t:s1", "subsystems/nqn.2024-01.io.t:s1/namespaces/1"} {
		if err := a.Mkdir(w.nvmet(d)); err != nil {
			w.t.Fatal(err)
		}
	}
	ns := "subsystems/nqn.2024-01.io.t:s1/namespaces/1/"
	for f, v := range map[string]string{"device_path": w.disk(1), "device_nguid": "11111111-2222-3333-4444-555555555555"} {
		if err := a.WriteAttr(w.nvmet(ns+f), v); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := os.Stat(w.disk(1)); err == nil {
		return // the disk is there: as if the restore stopped at it all the same
	}
	if err := a.WriteAttr(w.nvmet(ns+"enable"), "1"); err == nil {
		w.t.Fatal("enable accepted without its disk")
	}
}

func missing(c rebind.Completion) map[string]string {
	m := map[string]string{}
	for _, p := range c.Missing {
		m[p.Object] = p.Waiting
	}
	return m
}

// The restore stopped at a namespace whose disk is late: everything after
// it is made at once, the namespaces are enabled when their disks come.
func TestCompleteAfterARestoreThatStopped(t *testing.T) {
	w := newWorld(t)
	w.stoppedRestore()
	c := w.completer()
	got := w.run(c, true)
	if got.Err != nil {
		t.Fatal(got.Err)
	}
	m := missing(got)
	s1 := "subsystems/nqn.2024-01.io.t:s1"
	if len(m) != 2 || m[s1+"/namespaces/1#enable"] != "waiting for "+w.disk(1) || m[s1+"/namespaces/2#enable"] != "waiting for "+w.disk(2) {
		t.Fatalf("missing = %v; want both enables waiting for their disks", m)
	}
	if got.Again == 0 {
		t.Error("waiting for a device path without asking to look again")
	}
	for _, p := range []string{s1 + "/namespaces/2", s1 + "/allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:host1", "subsystems/nqn.2024-01.io.t:s2",
		"ports/1", "ports/1/ana_groups/2", "ports/1/referrals/r1", "ports/2"} {
		if !w.exists(p) {
			t.Errorf("%s not made", p)
		}
	}
	// Subsystem 1's attributes come after its namespaces in the restore:
	// it never wrote them, so they are written.
	if v := w.read(s1 + "/attr_model"); v != "cinder" {
		t.Errorf("attr_model = %q, want cinder", v)
	}
	if v := w.read("subsystems/nqn.2024-01.io.t:s2/attr_allow_any_host"); v != "1" {
		t.Errorf("s2 allow_any_host = %q", v)
	}
	for p, want := range map[string]string{"ports/1/addr_traddr": "192.0.2.1", "ports/1/addr_trtype": "rdma", "ports/1/param_inline_data_size": "16384",
		"ports/1/ana_groups/2/ana_state": "non-optimized", "ports/1/referrals/r1/enable": "1", "ports/2/addr_trtype": "tcp"} {
		if v := w.read(p); v != want {
			t.Errorf("%s = %q, want %q", p, v, want)
		}
	}
	if w.exists("ports/1/subsystems/nqn.2024-01.io.t:s1") {
		t.Error("a link was made: links are the endpoints'")
	}

	w.plug(1)
	got = w.run(c, true)
	if m := missing(got); len(m) != 1 {
		t.Fatalf("after disk1: missing = %v", m)
	}
	if w.read(s1+"/namespaces/1/enable") != "1" || w.read(s1+"/namespaces/1/ana_grpid") != "2" {
		t.Errorf("namespace 1: enable %s ana_grpid %s", w.read(s1+"/namespaces/1/enable"), w.read(s1+"/namespaces/1/ana_grpid"))
	}
	w.plug(2)
	got = w.run(c, true)
	if len(got.Missing) != 0 || got.Again != 0 {
		t.Fatalf("after both disks: %+v", got)
	}
	before := w.k.LogStrings()
	if got = w.run(c, true); len(got.Made) != 0 || !slices.Equal(before, w.k.LogStrings()) {
		t.Fatalf("a settled tree was written again: %v", got.Made)
	}
}

// An object seen and then removed is the admin's: never made again, by
// this process or the next.
func TestCompleteRespectsRemovals(t *testing.T) {
	w := newWorld(t)
	w.plug(1)
	w.plug(2)
	c := w.completer()
	w.run(c, true)
	s2 := w.nvmet("subsystems/nqn.2024-01.io.t:s2")
	ns2 := w.nvmet("subsystems/nqn.2024-01.io.t:s1/namespaces/2")
	for _, p := range []string{s2, ns2} {
		if err := w.k.RemoveObject(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.k.Admin().WriteAttr(w.nvmet("subsystems/nqn.2024-01.io.t:s1/namespaces/1/enable"), "0"); err != nil {
		t.Fatal(err)
	}
	for i, c := range []*Completer{c, w.completer()} {
		got := w.run(c, true)
		if len(got.Made) != 0 || len(got.Missing) != 0 {
			t.Fatalf("run %d: made %v, missing %v after the admin's removals", i, got.Made, got.Missing)
		}
	}
	if w.exists("subsystems/nqn.2024-01.io.t:s2") || w.exists("subsystems/nqn.2024-01.io.t:s1/namespaces/2") ||
		w.read("subsystems/nqn.2024-01.io.t:s1/namespaces/1/enable") != "0" {
		t.Fatal("an admin's removal was undone")
	}
	// Another boot: the record is forgotten (the restore made it again).
	w.boot = "boot-2"
	if got := w.run(w.completer(), true); !slices.Contains(got.Made, "subsystems/nqn.2024-01.io.t:s2") {
		t.Fatalf("after a reboot: made %v", got.Made)
	}
}

// A restore that went through leaves nothing to do: attributes the admin
// changed are reported, never written.
func TestCompleteNeverChangesWhatExists(t *testing.T) {
	w := newWorld(t)
	w.plug(1)
	w.plug(2)
	w.run(w.completer(), true) // as the restore would
	a := w.k.Admin()
	if err := a.WriteAttr(w.nvmet("ports/2/addr_trsvcid"), "4421"); err != nil {
		t.Fatal(err)
	}
	w.store.b = nil // a daemon that never saw any of it
	w.k.ResetLog()
	got := w.run(w.completer(), true)
	if len(got.Made) != 0 || len(w.k.Log()) != 0 {
		t.Fatalf("made %v, wrote %v", got.Made, w.k.LogStrings())
	}
	if len(got.Differs) != 1 || !strings.Contains(got.Differs[0], `addr_trsvcid is "4421", the file says "4420"`) {
		t.Fatalf("differs = %q", got.Differs)
	}
}

// Outside the boot window nothing is made; what is missing is said.
func TestCompleteWindowClosed(t *testing.T) {
	w := newWorld(t)
	w.stoppedRestore()
	got := w.run(w.completer(), false)
	if len(got.Made) != 0 || len(w.k.Log()) != 0 {
		t.Fatalf("made %v after the window", got.Made)
	}
	if m := missing(got); !strings.HasPrefix(m["ports/1"], "not made: the boot window closed at ") {
		t.Fatalf("missing = %v", m)
	}
}

// A device_path that is not a disk is refused, never enabled.
func TestCompleteHostileDevice(t *testing.T) {
	w := newWorld(t)
	if err := syscall.Mkfifo(w.disk(1), 0o600); err != nil {
		t.Fatal(err)
	}
	w.tree.Subsystems[0].Namespaces[1].Device = "/dev/null"
	got := w.run(w.completer(), true)
	m := missing(got)
	s1 := "subsystems/nqn.2024-01.io.t:s1"
	if !strings.Contains(m[s1+"/namespaces/1#enable"], "is a FIFO") || !strings.Contains(m[s1+"/namespaces/2#enable"], "character device") {
		t.Fatalf("missing = %v", m)
	}
	if w.read(s1+"/namespaces/1/enable") != "0" {
		t.Fatal("a FIFO was enabled")
	}
}

// A crash at any write of the completion loses nothing: the next start
// (same boot, the record as the crash left it) ends with the tree an
// uninterrupted completion makes.
func TestCompleteCrashAtEveryWrite(t *testing.T) {
	crashAtEveryWrite(t, "nvmet", 20, func(w *world) { w.stoppedRestore() }, func(w *world) {
		w.plug(1)
		w.plug(2)
	})
}

// crashAtEveryWrite crashes a completion at each of its writes in turn
// (the fake kernel panics there: nothing after it runs), then starts
// again with the record as the crash left it: the tree under top must end
// as an uninterrupted completion leaves it. setup leaves what the restore
// left; plug makes the disks (in the reference world's directory, shared).
func crashAtEveryWrite(t *testing.T, top string, min int, setup, plug func(*world)) {
	t.Helper()
	ref := newWorld(t)
	setup(ref)
	plug(ref)
	ref.run(ref.completer(), true)
	want := snapshotRoot(t, ref, top)
	writes := len(ref.k.Log())
	if writes < min {
		t.Fatalf("only %d writes", writes)
	}
	for n := range writes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			w := newWorld(t)
			w.dir = ref.dir // the same disk paths, plugged
			w.tree = ref.tree
			setup(w)
			w.k.Fault = func(i int, _ configfstest.Write) error {
				if i == n {
					panic("crash")
				}
				return nil
			}
			func() {
				defer func() { _ = recover() }()
				w.run(w.completer(), true)
				t.Fatalf("no crash at write %d", n)
			}()
			w.k.Fault = nil
			if got := w.run(w.completer(), true); len(got.Missing) != 0 {
				t.Fatalf("after the restart: missing %v", got.Missing)
			}
			if s := snapshotRoot(t, w, top); s != want {
				t.Fatalf("after a crash at write %d (%s):\n%s\nwant\n%s", n, ref.k.Log()[n], s, want)
			}
		})
	}
}

// snapshotRoot renders the tree under top (nvmet, target).
func snapshotRoot(t *testing.T, w *world, top string) string {
	var b strings.Builder
	root := filepath.Join(w.k.Root, top)
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			if filepath.IsAbs(l) {
				l, _ = filepath.Rel(w.k.Root, l)
			}
			fmt.Fprintf(&b, "%s -> %s\n", rel, l)
		case fi.Mode().IsRegular():
			v, _ := os.ReadFile(p)
			if strings.HasSuffix(rel, "device_path") {
				v = []byte(filepath.Base(strings.TrimSpace(string(v))))
			}
			fmt.Fprintf(&b, "%s = %s\n", rel, strings.TrimSpace(string(v)))
		default:
			fmt.Fprintf(&b, "%s/\n", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A dry run says what it would make, and makes nothing.
func TestCompleteDryRun(t *testing.T) {
	w := newWorld(t)
	w.stoppedRestore()
	c := w.completer()
	got := c.Complete(context.Background(), rebind.CompletionInput{Config: rebind.Config{BootWindow: time.Hour}, Open: true, DryRun: true, Now: time.Now()})
	if len(w.k.Log()) != 0 || len(w.store.b) != 0 {
		t.Fatal("a dry run wrote")
	}
	all := strings.Join(got.Planned, "\n")
	for _, want := range []string{"mkdir " + w.nvmet("ports/1"), `echo "rdma" > ` + w.nvmet("ports/1/addr_trtype"),
		"ln -s " + w.nvmet("hosts/nqn.2014-08.org.nvmexpress:uuid:host1") + " " + w.nvmet("subsystems/nqn.2024-01.io.t:s1/allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:host1")} {
		if !strings.Contains(all, want) {
			t.Errorf("plan lacks %q:\n%s", want, all)
		}
	}
}

// From nothing (no restore ran), everything is made in nvmetcli restore's
// order: hosts, then each subsystem (its namespaces and their enable, its
// allowed hosts, its attributes), then each port (its attributes, ANA
// groups, referrals).
func TestCompleteOrder(t *testing.T) {
	w := newWorld(t)
	w.plug(1)
	w.plug(2)
	got := w.run(w.completer(), true)
	s1, s2 := "subsystems/nqn.2024-01.io.t:s1", "subsystems/nqn.2024-01.io.t:s2"
	want := []string{"hosts/nqn.2014-08.org.nvmexpress:uuid:host1",
		s1, s1 + "/namespaces/1", s1 + "/namespaces/1#enable", s1 + "/namespaces/2", s1 + "/namespaces/2#enable",
		s1 + "/allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:host1", s1 + "#attr",
		s2, s2 + "#attr",
		"ports/1", "ports/1/ana_groups/2", "ports/1/referrals/r1", "ports/2"}
	if !slices.Equal(got.Made, want) {
		t.Fatalf("made\n%q\nwant\n%q", got.Made, want)
	}
	// And the writes themselves: a namespace's attributes before its
	// enable, a subsystem's attributes after its allowed hosts.
	log := strings.Join(w.k.LogStrings(), "\n")
	for _, pair := range [][2]string{
		{"namespaces/1/device_path", "namespaces/1/enable"},
		{"namespaces/1/enable", "namespaces/1/ana_grpid"},
		{"allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:host1", "s1/attr_model"},
		{"s2/attr_allow_any_host", "mkdir nvmet/ports/1"},
	} {
		if i, j := strings.Index(log, pair[0]), strings.Index(log, pair[1]); i < 0 || j < 0 || i > j {
			t.Errorf("%s not before %s in:\n%s", pair[0], pair[1], log)
		}
	}
}

// targetcli's file: rtslib's restore skipped a fileio storage object whose
// file was missing, and failed its LUN and mapped LUN; the one whose file
// was there it made. Once the file comes, the storage object is made in a
// backstore of its own (the lowest free index), enabled, and linked into
// its LUN, the LUN into the mapped LUN; what the restore made is left.
func TestCompleteLIOStorageObjectLUNs(t *testing.T) {
	w := newWorld(t)
	lioWorld(t, w)
	const iqn, node = "iqn.2024-01.io.t:tgt", "iqn.2024-01.io.t:host"
	f1 := filepath.Join(w.dir, "f1.img")
	core := filepath.Join(w.k.Root, "target/core")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := w.completer()
	got := w.run(c, true)
	m := missing(got)
	lun1, map1 := "target/iscsi/"+iqn+"/tpgt_1/lun/lun_1", "target/iscsi/"+iqn+"/tpgt_1/acls/"+node+"/lun_1"
	if m["target/core/fileio/f1"] != "waiting for "+f1 || m[lun1] != "waiting for target/core/fileio/f1" || m[map1] != "waiting for "+lun1 || len(m) != 3 {
		t.Fatalf("missing = %v", m)
	}
	if len(w.k.Log()) != 0 {
		t.Fatalf("wrote before f1's file exists: %v", w.k.LogStrings())
	}
	must(os.WriteFile(f1, nil, 0o600))
	got = w.run(c, true)
	if len(got.Missing) != 0 || !slices.Equal(got.Made, []string{"target/core/fileio/f1", lun1, map1}) {
		t.Fatalf("made %v, missing %v", got.Made, got.Missing)
	}
	so := filepath.Join(core, "fileio_1/f1")
	for p, want := range map[string]string{"control": "fd_dev_name=" + f1 + ",fd_dev_size=1048576,fd_buffered_io=1", "udev_path": f1, "enable": "1",
		"attrib/block_size": "4096", "attrib/emulate_write_cache": "1", "wwn/vpd_unit_serial": "bbb"} {
		b, err := os.ReadFile(filepath.Join(so, p))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("f1 %s = %q, %v; want %q", p, b, err, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(w.k.Root, lun1, "a1")); err != nil || l != so {
		t.Errorf("lun_1/a1 -> %q, %v; want %s", l, err, so)
	}
	if l, err := os.Readlink(filepath.Join(w.k.Root, map1, "m1")); err != nil || l != filepath.Join(w.k.Root, lun1) {
		t.Errorf("mapped lun_1/m1 -> %q, %v", l, err)
	}
	if b, _ := os.ReadFile(filepath.Join(w.k.Root, map1, "write_protect")); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("write_protect = %q", b)
	}
	for _, wr := range w.k.Log() {
		if strings.Contains(wr.Path, "fileio_0") || strings.Contains(wr.Path, "lun_0") || strings.Contains(wr.Path, "hw_block_size") {
			t.Errorf("wrote %s", wr)
		}
	}
}

// A crash at any write of a LIO completion: the next start ends with the
// tree an uninterrupted one makes (the same backstore index, one link).
func TestCompleteLIOCrashAtEveryWrite(t *testing.T) {
	crashAtEveryWrite(t, "target", 8, func(w *world) { lioWorld(t, w) }, func(w *world) {
		if err := os.WriteFile(filepath.Join(w.dir, "f1.img"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	})
}

// lioWorld declares targetcli's file in w and leaves what rtslib's restore
// leaves when f1's file is missing: f0 in fileio_0 with its LUN and mapped
// LUN, the TPG and its ACL, nothing of f1.
func lioWorld(t *testing.T, w *world) {
	t.Helper()
	const iqn, node = "iqn.2024-01.io.t:tgt", "iqn.2024-01.io.t:host"
	f0, f1 := filepath.Join(w.dir, "f0.img"), filepath.Join(w.dir, "f1.img")
	w.k.ResetLog()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(f0, nil, 0o600))
	lio, errs, err := saved.ParseSaveconfigTree("saveconfig.json", []byte(fmt.Sprintf(`{
 "storage_objects": [
  {"plugin": "fileio", "name": "f0", "dev": %q, "size": 1048576, "write_back": false, "wwn": "aaa", "attributes": {"block_size": 512, "hw_block_size": 512}},
  {"plugin": "fileio", "name": "f1", "dev": %q, "size": 1048576, "write_back": true, "wwn": "bbb", "attributes": {"block_size": 4096, "hw_block_size": 512}},
  {"plugin": "ramdisk", "name": "r0", "size": 1048576}],
 "targets": [{"fabric": "iscsi", "wwn": %q, "tpgs": [{"tag": 1,
   "luns": [{"index": 0, "storage_object": "/backstores/fileio/f0", "alias": "a0"}, {"index": 1, "storage_object": "/backstores/fileio/f1", "alias": "a1"}],
   "node_acls": [{"node_wwn": %q, "mapped_luns": [{"index": 0, "tpg_lun": 0, "write_protect": false}, {"index": 1, "tpg_lun": 1, "write_protect": true, "alias": "m1"}]}]}]}]}`, f0, f1, iqn, node)))
	must(err)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	w.tree = &saved.Tree{LIO: lio}
	// What rtslib's restore left: f0 in fileio_0 with its LUN and mapped
	// LUN; the TPG and ACL; nothing of f1.
	w.k.AddTPG("iscsi", iqn, "tpgt_1", node)
	a := w.k.Admin()
	core := filepath.Join(w.k.Root, "target/core")
	tpg := filepath.Join(w.k.Root, "target/iscsi", iqn, "tpgt_1")
	must(a.Mkdir(filepath.Join(core, "fileio_0")))
	must(a.Mkdir(filepath.Join(core, "fileio_0/f0")))
	must(a.WriteAttr(filepath.Join(core, "fileio_0/f0/control"), "fd_dev_name="+f0+",fd_dev_size=1048576"))
	must(a.WriteAttr(filepath.Join(core, "fileio_0/f0/udev_path"), f0))
	must(a.WriteAttr(filepath.Join(core, "fileio_0/f0/enable"), "1"))
	must(a.Mkdir(filepath.Join(tpg, "lun/lun_0")))
	must(a.Symlink(filepath.Join(core, "fileio_0/f0"), filepath.Join(tpg, "lun/lun_0/a0")))
	must(a.Mkdir(filepath.Join(tpg, "acls", node, "lun_0")))
	must(a.Symlink(filepath.Join(tpg, "lun/lun_0"), filepath.Join(tpg, "acls", node, "lun_0/x")))

}
