package configfs_test

// Hostile input (issue 5): a tree another tool (or a bug, or an attacker
// with write access to a test root) has filled with garbage. Every bad
// object must be reported (Port.Err, Portal.Err, an Addr error) or skipped,
// must not stop the healing of the good objects next to it, and must not
// cause a single write. See RELIABILITY.md.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

const (
	hNQNA   = "nqn.2024-01.lab:a"
	hNQNB   = "nqn.2024-01.lab:b"
	hIQN    = "iqn.2024-01.lab:t"
	hGUID   = 0x80dd69fffe0d1e0b
	goodNP  = "192.0.2.1:3261"
	goodIQN = "iqn.2024-01.lab:good"
)

// hostileKernel: rxe0 on veth0 with 192.0.2.1 and 2001:db8::1; port 1
// (192.0.2.1:4420, link a) is the victim of each case; port 2
// (192.0.2.1:4421, link b) and the portal goodIQN/tpgt_1/192.0.2.1:3261 are
// healthy bystanders that must be healed after a reset.
func hostileKernel(t *testing.T) *fakeKernel {
	t.Helper()
	k := newFakeKernel(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth0", "2001:db8::1")
	k.AddDevice("rxe0", hGUID, "veth0")
	k.AddSubsystem(hNQNA)
	k.AddSubsystem(hNQNB)
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPort("2", "rdma", "ipv4", "192.0.2.1", "4421")
	k.AddPortal(goodIQN, "tpgt_1", goodNP)
	admin := configfs.NewWithOps(k.Root, k.Admin())
	for _, err := range []error{
		admin.Relink("1", configfs.Link{Name: hNQNA, NQN: hNQNA}),
		admin.Relink("2", configfs.Link{Name: hNQNB, NQN: hNQNB}),
		admin.SetISER(goodIQN+"/tpgt_1/"+goodNP, true),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func put(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// portalDir makes target/iscsi/<iqn>/<tpg>/np/<np> with iser=1 written
// directly (no listener: a valid portal like this one would be rebound).
func portalDir(t *testing.T, root, iqn, tpg, np, iser string) string {
	t.Helper()
	dir := filepath.Join(root, "target/iscsi", iqn, tpg, "np", np)
	put(t, filepath.Join(dir, "iser"), iser)
	return dir
}

// outsideTree returns a directory outside the configfs root that looks like
// a port or portal, to be pointed at by symlinks; check reports whether
// anything in it was changed.
func outsidePort(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for n, v := range map[string]string{"addr_trtype": "rdma\n", "addr_adrfam": "ipv4\n", "addr_traddr": "192.0.2.1\n", "addr_trsvcid": "4430\n"} {
		put(t, filepath.Join(d, n), v)
	}
	if err := os.MkdirAll(filepath.Join(d, "subsystems"), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

type hostileCase struct {
	name string
	// make damages the tree and returns the id of the hostile object ("" when
	// it is a port or portal that must not be listed at all) and the files
	// outside the tree that must keep their content.
	make func(t *testing.T, k *fakeKernel) (outside map[string]string)
	// port: check port 1 as read; portal: check the portals as read.
	port   func(t *testing.T, ports []configfs.Port)
	portal func(t *testing.T, portals []configfs.Portal)
	// victim: port 1 itself is damaged (otherwise it is one more healthy
	// bystander to heal).
	victim bool
	// bug, when set, names an open bug this case exposes (RELIABILITY.md);
	// it is printed when the case fails.
	bug string
}

func (tc hostileCase) explain(t *testing.T) {
	if t.Failed() && tc.bug != "" {
		t.Errorf("known open bug: %s", tc.bug)
	}
}

func findPort(ports []configfs.Port, id string) (configfs.Port, bool) {
	for _, p := range ports {
		if p.ID == id {
			return p, true
		}
	}
	return configfs.Port{}, false
}

// reported: port 1 is listed and either carries Err or its address does
// not parse, or it is not an rdma ipv4/ipv6 port (so nothing manages it).
func reported(want string) func(t *testing.T, ports []configfs.Port) {
	return func(t *testing.T, ports []configfs.Port) {
		t.Helper()
		p, ok := findPort(ports, "1")
		if !ok {
			t.Fatalf("port 1 not listed: %+v", ports)
		}
		var msg string
		switch _, aerr := p.Addr(); {
		case p.Err != nil:
			msg = p.Err.Error()
		case aerr != nil:
			msg = aerr.Error()
		case p.Trtype != "rdma" || (p.Adrfam != "ipv4" && p.Adrfam != "ipv6"):
			msg = "not rdma ipv4/ipv6: " + string(p.Trtype) + " " + string(p.Adrfam)
		default:
			t.Fatalf("port 1 read without complaint: %+v", p)
		}
		if !strings.Contains(msg, want) {
			t.Errorf("port 1: %q does not mention %q", msg, want)
		}
		if len(msg) > 8192 {
			t.Errorf("port 1: error of %d bytes echoes the input unbounded", len(msg))
		}
	}
}

// skippedPort: only the bystander port 2 (and port 1, untouched) are listed.
func skippedPort(t *testing.T, ports []configfs.Port) {
	t.Helper()
	for _, p := range ports {
		if p.ID != "1" && p.ID != "2" {
			t.Errorf("hostile port %q listed: %+v", p.ID, p)
		}
	}
}

// shownNotRead: each hostile name is listed, with Err naming it, and
// nothing of it read (no attribute, no link); the bystanders as they are.
func shownNotRead(names ...string) func(t *testing.T, ports []configfs.Port) {
	return func(t *testing.T, ports []configfs.Port) {
		t.Helper()
		for _, n := range names {
			p, ok := findPort(ports, n)
			switch {
			case !ok:
				t.Errorf("port %q not listed: a port status cannot show is a port check cannot see", n)
			case p.Err == nil || !strings.Contains(p.Err.Error(), "create it again"):
				t.Errorf("port %q: Err = %v, want one saying what to do", n, p.Err)
			case p.Trtype != "" || p.Traddr != "" || len(p.Links) > 0:
				t.Errorf("port %q was read: %+v", n, p)
			}
		}
	}
}

// portalReported: the portal with this np name is listed with Err, or not
// listed at all.
func portalReported(np, want string) func(t *testing.T, portals []configfs.Portal) {
	return func(t *testing.T, portals []configfs.Portal) {
		t.Helper()
		for _, p := range portals {
			if p.NP != np || p.IQN != hIQN {
				continue
			}
			if p.Err == nil {
				t.Fatalf("portal %q read without complaint: %+v", p.ID(), p)
			}
			if !strings.Contains(p.Err.Error(), want) {
				t.Errorf("portal %q: %v does not mention %q", p.ID(), p.Err, want)
			}
			if len(p.Err.Error()) > 8192 {
				t.Errorf("portal %q: error of %d bytes echoes the input unbounded", p.ID(), len(p.Err.Error()))
			}
		}
	}
}

// portalSkipped: nothing but the good portal is listed.
func portalSkipped(t *testing.T, portals []configfs.Portal) {
	t.Helper()
	for _, p := range portals {
		if p.IQN != goodIQN {
			t.Errorf("hostile portal %q listed: %+v", p.ID(), p)
		}
	}
}

func hostileCases() []hostileCase {
	port1 := func(k *fakeKernel, elem ...string) string {
		return filepath.Join(append([]string{k.Root, "nvmet/ports/1"}, elem...)...)
	}
	attr := func(name, v, want string) hostileCase {
		return hostileCase{
			name: name + "=" + strings.ToValidUTF8(v[:min(len(v), 12)], "?"),
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				put(t, port1(k, name), v)
				return nil
			},
			port: reported(want), victim: true,
		}
	}
	huge := strings.Repeat("1", 1<<20)
	np := func(name, want string) hostileCase {
		return hostileCase{
			name: "np " + name,
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				portalDir(t, k.Root, hIQN, "tpgt_1", name, "1")
				return nil
			},
			portal: portalReported(name, want),
		}
	}
	iser := func(label, v, want string) hostileCase {
		return hostileCase{
			name: "iser " + label,
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				portalDir(t, k.Root, hIQN, "tpgt_1", "192.0.2.1:3260", v)
				return nil
			},
			portal: portalReported("192.0.2.1:3260", want),
		}
	}
	cases := []hostileCase{
		{
			name: "no addr_traddr",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				if err := os.Remove(port1(k, "addr_traddr")); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			port: reported("addr_traddr"), victim: true,
		},
		attr("addr_traddr", "\x00\xff\xfe\x01garbage", "addr_traddr"),
		attr("addr_traddr", "192.0.2.1\n192.0.2.2\n", "addr_traddr"),
		attr("addr_traddr", "fe80::1%veth0", "addr_traddr"),
		attr("addr_traddr", "", "addr_traddr"),
		attr("addr_traddr", huge, "larger than"),
		attr("addr_trtype", "rdma\x00", "not rdma"),
		attr("addr_trtype", "\xff\xfe", "not rdma"),
		attr("addr_adrfam", "ipv4\x00junk", "not rdma"),
		attr("addr_trsvcid", "99999", "addr_trsvcid"),
		attr("addr_trsvcid", "-1", "addr_trsvcid"),
		attr("addr_trsvcid", "0x10", "addr_trsvcid"),
		attr("addr_trsvcid", "4420 4421", "addr_trsvcid"),
		attr("addr_trsvcid", "\x00\x01\x02", "addr_trsvcid"),
		attr("addr_trsvcid", huge, "larger than"),
		{
			name: "subsystems link to an absolute path outside the tree",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				symlink(t, t.TempDir(), port1(k, "subsystems", "evil"))
				return nil
			},
			port: reported("outside"), victim: true,
		},
		{
			name: "subsystems link with ../../.. leaving the tree",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				symlink(t, "../../../../../../../../../../etc", port1(k, "subsystems", "evil"))
				return nil
			},
			port: reported("outside"), victim: true,
		},
		{
			name: "subsystems link to another port",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				symlink(t, "../../2", port1(k, "subsystems", "evil"))
				return nil
			},
			port: reported("outside"), victim: true,
		},
		{
			name: "subsystems link through .. back into subsystems of another root",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				other := t.TempDir()
				if err := os.MkdirAll(filepath.Join(other, "nvmet/subsystems", hNQNB), 0o755); err != nil {
					t.Fatal(err)
				}
				symlink(t, filepath.Join(other, "nvmet/subsystems", hNQNB), port1(k, "subsystems", "evil"))
				return nil
			},
			port: reported("outside"), victim: true,
		},
		{
			// The reader drops names it cannot represent; a link it drops
			// still keeps the port enabled, so a rebind that does not see
			// it cannot work and must not be tried.
			name: "subsystems link whose name has a newline",
			bug:  "BUG-1 configfs.links drops link names it cannot represent (checkName) without setting Port.Err: the port looks complete, the engine rebinds it and the hidden link keeps the port enabled, so the rebind cannot work",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				symlink(t, "../../../../nvmet/subsystems/"+hNQNB, port1(k, "subsystems", "b\nx"))
				return nil
			},
			port: reported("subsystems"), victim: true,
		},
		{
			name: "subsystems link whose name has an escape sequence",
			bug:  "BUG-1 configfs.links drops link names it cannot represent (checkName) without setting Port.Err: the port looks complete, the engine rebinds it and the hidden link keeps the port enabled, so the rebind cannot work",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				symlink(t, "../../../../nvmet/subsystems/"+hNQNB, port1(k, "subsystems", "\x1b[2J"))
				return nil
			},
			port: reported("subsystems"), victim: true,
		},
		{
			name: "port dir is a symlink to elsewhere",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				out := outsidePort(t)
				symlink(t, out, filepath.Join(k.Root, "nvmet/ports/7"))
				symlink(t, filepath.Join(k.Root, "nvmet/subsystems", hNQNA), filepath.Join(out, "subsystems", hNQNA))
				return map[string]string{filepath.Join(out, "addr_trsvcid"): "4430\n"}
			},
			port: skippedPort,
		},
		{
			name: "port names with newline, escape, DEL",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				for _, n := range []string{"8\n9", "\x1b]0;x\x07", "1\x7f", "\t"} {
					d := filepath.Join(k.Root, "nvmet/ports", n)
					for a, v := range map[string]string{"addr_trtype": "rdma", "addr_adrfam": "ipv4", "addr_traddr": "192.0.2.1", "addr_trsvcid": "4440"} {
						put(t, filepath.Join(d, a), v)
					}
					symlink(t, "../../../../nvmet/subsystems/"+hNQNA, filepath.Join(d, "subsystems", hNQNA))
				}
				return nil
			},
			port: shownNotRead("8\n9", "\x1b]0;x\x07", "1\x7f", "\t"),
		},
		{
			name: "port named ... (dots, not ..)",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				d := filepath.Join(k.Root, "nvmet/ports", "...")
				put(t, filepath.Join(d, "addr_trtype"), "tcp")
				if err := os.MkdirAll(filepath.Join(d, "subsystems"), 0o755); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			port: func(t *testing.T, ports []configfs.Port) {
				p, ok := findPort(ports, "...")
				if ok && p.Trtype != "tcp" {
					t.Errorf("port ... read as %+v", p)
				}
			},
		},
		np("foo", "not <ip>:<port>"),
		np("1.2.3.4", "not <ip>:<port>"),
		np("[::1]", "not <ip>:<port>"),
		np("1.2.3.4:0x10", "not <ip>:<port>"),
		np("1.2.3.4:99999", "not <ip>:<port>"),
		np("..:3260", "not <ip>:<port>"),
		np("[fe80::1%veth0]:3260", "zoned"),
		np("[::ffff:192.0.2.1]:3260", "IPv4-mapped"),
		iser("2", "2", "want 0 or 1"),
		iser("two lines", "1\n1", "want 0 or 1"),
		iser("binary", "\x01\xff", "want 0 or 1"),
		iser("1 MiB", huge, "larger than"),
		{
			name: "np name with a newline",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				portalDir(t, k.Root, hIQN, "tpgt_1", "192.0.2.1:3260\n", "1")
				return nil
			},
			portal: portalSkipped,
		},
		{
			name: "np dir is a symlink to elsewhere",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				out := t.TempDir()
				put(t, filepath.Join(out, "iser"), "1")
				symlink(t, out, filepath.Join(k.Root, "target/iscsi", hIQN, "tpgt_1/np/192.0.2.1:3260"))
				return map[string]string{filepath.Join(out, "iser"): "1"}
			},
			portal: portalSkipped,
		},
		{
			name: "target dir is a symlink to elsewhere",
			bug:  "BUG-2 configfs.Portals follows a symlinked target/tpgt directory out of the root (only the np dir itself is Lstat-ed): SetISER then writes outside the configfs root",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				out := t.TempDir()
				put(t, filepath.Join(out, "tpgt_1/np/192.0.2.1:3260/iser"), "1")
				symlink(t, out, filepath.Join(k.Root, "target/iscsi", hIQN))
				return map[string]string{filepath.Join(out, "tpgt_1/np/192.0.2.1:3260/iser"): "1"}
			},
			portal: portalSkipped,
		},
		{
			name: "tpgt dir is a symlink to elsewhere",
			bug:  "BUG-2 configfs.Portals follows a symlinked target/tpgt directory out of the root (only the np dir itself is Lstat-ed): SetISER then writes outside the configfs root",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				out := t.TempDir()
				put(t, filepath.Join(out, "np/192.0.2.1:3260/iser"), "1")
				symlink(t, out, filepath.Join(k.Root, "target/iscsi", hIQN, "tpgt_1"))
				return map[string]string{filepath.Join(out, "np/192.0.2.1:3260/iser"): "1"}
			},
			portal: portalSkipped,
		},
		{
			name: "a regular file where a target dir should be",
			bug:  "BUG-3 one unreadable LIO directory (ENOTDIR) makes Portals, and so Observe and the whole Reconcile, fail: no nvmet port or other portal is healed",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				put(t, filepath.Join(k.Root, "target/iscsi", hIQN), "not a directory")
				return nil
			},
			portal: portalSkipped,
		},
		{
			name: "a regular file where np/ should be",
			bug:  "BUG-3 one unreadable LIO directory (ENOTDIR) makes Portals, and so Observe and the whole Reconcile, fail: no nvmet port or other portal is healed",
			make: func(t *testing.T, k *fakeKernel) map[string]string {
				put(t, filepath.Join(k.Root, "target/iscsi", hIQN, "tpgt_1/np"), "not a directory")
				return nil
			},
			portal: portalSkipped,
		},
	}
	return cases
}

// TestHostileReads reads each damaged tree with configfs alone.
func TestHostileReads(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer tc.explain(t)
			k := hostileKernel(t)
			tc.make(t, k)
			f := k.FS()
			if tc.port != nil {
				ports, err := portsWithLinks(f)
				if err != nil {
					t.Fatalf("Ports failed as a whole (one bad port hides the good ones): %v", err)
				}
				tc.port(t, ports)
			}
			if tc.portal != nil {
				// Unreadable parts are reported in err; every readable
				// portal must still be returned.
				portals, err := f.Portals()
				if err != nil {
					t.Logf("reported: %v", err)
				}
				tc.portal(t, portals)
			}
			if log := k.LogStrings(); len(log) != 0 {
				t.Errorf("reading caused writes: %q", log)
			}
		})
	}
}

// TestHostileNoWrites runs the engine on each damaged tree after a device
// reset: the hostile object gets no write, the healthy bystanders are healed.
func TestHostileNoWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer tc.explain(t)
			k := hostileKernel(t)
			outside := tc.make(t, k)
			j, err := state.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			e := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: j, Config: rebind.DefaultConfig()})
			k.RemoveDevice("rxe0")
			k.AddDevice("rxe0", hGUID, "veth0")
			if _, err := e.Reconcile(context.Background()); err != nil {
				t.Errorf("reconcile failed as a whole: %v", err)
			}
			var bad []string
			for _, w := range k.LogStrings() {
				if strings.Contains(w, "ports/2/") || strings.Contains(w, goodIQN) || (!tc.victim && strings.Contains(w, "ports/1/")) {
					continue
				}
				bad = append(bad, w)
			}
			if len(bad) != 0 {
				t.Errorf("writes to the hostile object: %q", bad)
			}
			if !tc.victim && !k.Listening("nvmet_rdma", "1") {
				t.Errorf("the healthy port 1 was not healed: %s", k)
			}
			if !k.Listening("nvmet_rdma", "2") || !k.Listening("ib_isert", goodIQN+"/tpgt_1/"+goodNP) {
				t.Errorf("the healthy bystanders were not healed: %s", k)
			}
			for path, want := range outside {
				b, err := os.ReadFile(path)
				if err != nil || string(b) != want {
					t.Errorf("file outside the tree %s changed: %q, %v", path, b, err)
				}
			}
		})
	}
}
