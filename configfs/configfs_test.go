package configfs_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

func TestParseNP(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"192.0.2.1:3260", "192.0.2.1:3260", true},
		{"[2001:db8::1]:3260", "[2001:db8::1]:3260", true},
		{"0.0.0.0:3260", "0.0.0.0:3260", true},
		{"[::]:3260", "[::]:3260", true},
		{"2001:db8::1:3260", "", false},
		{"192.0.2.1", "", false},
		{"host.example:3260", "", false},
		{"192.0.2.1:99999", "", false},
		{"[fe80::1%eth0]:3260", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := configfs.ParseNP(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseNP(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && got.String() != tt.want {
			t.Errorf("ParseNP(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseNP(f *testing.F) {
	for _, s := range []string{"192.0.2.1:3260", "[2001:db8::1]:3260", "[::]:0", "a:b", "[", "]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := configfs.ParseNP(s)
		if err != nil {
			return
		}
		if !ap.IsValid() {
			t.Fatalf("ParseNP(%q) = invalid without error", s)
		}
		back, err := configfs.ParseNP(ap.String())
		if err != nil || back != ap {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
	})
}

func setup(t *testing.T) (*fakeKernel, *configfs.FS) {
	k := newFakeKernel(t)
	k.AddSubsystem("nqn.a")
	k.AddSubsystem("nqn.b")
	k.AddPort("1", "rdma", "ipv4", "192.0.2.1", "4420")
	k.AddPort("2", "rdma", "ipv6", "2001:db8::1", "4420")
	k.AddPortal("iqn.2024-01.lab:t", "tpgt_1", "192.0.2.1:3260")
	k.AddPortal("iqn.2024-01.lab:t", "tpgt_1", "[2001:db8::1]:3260")
	return k, k.FS()
}

func TestReadTree(t *testing.T) {
	k, f := setup(t)
	k.AddAddr("veth0", "192.0.2.1")
	k.AddDevice("rxe0", 1, "veth0")
	if err := f.Relink("1", configfs.Link{Name: "nqn.b", NQN: "nqn.b"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Relink("1", configfs.Link{Name: "alias", NQN: "nqn.a"}); err != nil {
		t.Fatal(err)
	}
	ports, err := portsWithLinks(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []configfs.Port{
		{ID: "1", Trtype: "rdma", Adrfam: "ipv4", Traddr: "192.0.2.1", Trsvcid: "4420", Links: []configfs.Link{{Name: "nqn.b", NQN: "nqn.b"}, {Name: "alias", NQN: "nqn.a"}}},
		{ID: "2", Trtype: "rdma", Adrfam: "ipv6", Traddr: "2001:db8::1", Trsvcid: "4420"},
	}
	if diff := cmp.Diff(want, ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	portals, err := f.Portals()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range portals {
		ids = append(ids, p.ID()+" "+p.Addr.String())
	}
	if diff := cmp.Diff([]string{
		"iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260 192.0.2.1:3260",
		"iqn.2024-01.lab:t/tpgt_1/[2001:db8::1]:3260 [2001:db8::1]:3260",
	}, ids); diff != "" {
		t.Errorf("portals (-want +got):\n%s", diff)
	}
	if ap, err := ports[1].Addr(); err != nil || ap != netip.MustParseAddrPort("[2001:db8::1]:4420") {
		t.Errorf("ipv6 port addr = %v, %v", ap, err)
	}
}

func TestKernelRules(t *testing.T) {
	k, f := setup(t)
	link := configfs.Link{Name: "nqn.a", NQN: "nqn.a"}
	// No netdev holds the address: EADDRNOTAVAIL, and no link is left.
	err := f.Relink("1", link)
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("link without address: %v", err)
	}
	// The address but no RDMA device: ENODEV.
	k.AddAddr("veth0", "192.0.2.1")
	if err := f.Relink("1", link); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("link without device: %v", err)
	}
	if p, _ := f.Port("1"); len(p.Links) != 0 {
		t.Fatalf("a refused link was left behind: %v", p.Links)
	}
	if err := f.SetISER("iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260", true); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("iser=1 without device: %v", err)
	}
	if p, _ := f.Portal("iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260"); p.ISER {
		t.Fatal("refused iser=1 reads 1")
	}
	k.AddDevice("rxe0", 1, "veth0")
	if err := f.Relink("1", link); err != nil {
		t.Fatal(err)
	}
	if !k.Listening("nvmet_rdma", "1") {
		t.Fatal("first link did not enable the port")
	}
	// addr_* writes fail with EACCES while enabled.
	if err := k.WriteAttr(filepath.Join(k.Root, "nvmet/ports/1/addr_traddr"), "192.0.2.2"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("addr write on an enabled port: %v", err)
	}
	if err := f.SetISER("iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260", true); err != nil {
		t.Fatal(err)
	}
	// Device removal: listeners gone, configfs unchanged.
	k.RemoveDevice("rxe0")
	if k.Listening("nvmet_rdma", "1") || k.Listening("ib_isert", "iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260") {
		t.Fatal("listeners survived device removal")
	}
	p, _ := f.Port("1")
	pl, _ := f.Portal("iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260")
	if len(p.Links) != 1 || !pl.ISER {
		t.Errorf("device removal changed configfs: links %v iser %v", p.Links, pl.ISER)
	}
	if err := f.SetISER("iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260", false); err != nil {
		t.Fatal(err)
	}
	if err := k.WriteAttr(filepath.Join(k.Root, "target/iscsi/iqn.2024-01.lab:t/tpgt_1/np/192.0.2.1:3260/iser"), "2"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("iser=2: %v", err)
	}
	// Unlinking the last subsystem disables; addr writes work again.
	if err := f.Unlink("1", link); err != nil {
		t.Fatal(err)
	}
	if err := k.WriteAttr(filepath.Join(k.Root, "nvmet/ports/1/addr_traddr"), "192.0.2.2"); err != nil {
		t.Errorf("addr write on a disabled port: %v", err)
	}
	want := []string{
		"symlink nvmet/ports/1/subsystems/nqn.a nqn.a -> cannot assign requested address",
		"symlink nvmet/ports/1/subsystems/nqn.a nqn.a -> no such device",
		"write target/iscsi/iqn.2024-01.lab:t/tpgt_1/np/192.0.2.1:3260/iser 1 -> open " + k.Root + "/target/iscsi/iqn.2024-01.lab:t/tpgt_1/np/192.0.2.1:3260/iser: no such device",
	}
	got := k.LogStrings()[:3]
	// PathError text varies; compare the errno parts.
	for i := range want {
		if !strings.HasSuffix(got[i], want[i][strings.LastIndex(want[i], " ")+1:]) {
			t.Errorf("log[%d] = %q, want like %q", i, got[i], want[i])
		}
	}
}

func TestHostileTree(t *testing.T) {
	k, f := setup(t)
	ports := filepath.Join(k.Root, "nvmet/ports")
	// A link pointing outside the tree.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ports, "1/subsystems/evil")); err != nil {
		t.Fatal(err)
	}
	// Garbage and huge attributes.
	if err := os.WriteFile(filepath.Join(ports, "2/addr_traddr"), []byte("\x00\xffgarbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ports, "3"), 0o755)
	if err := os.WriteFile(filepath.Join(ports, "3/addr_traddr"), []byte(strings.Repeat("1", 100000)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A name with a newline.
	os.MkdirAll(filepath.Join(ports, "4\nx"), 0o755)
	got, err := portsWithLinks(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[3].ID != "4\nx" || got[3].Err == nil {
		t.Fatalf("ports (the one named with a newline shown, with Err): %+v", got)
	}
	if got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "outside") {
		t.Errorf("port 1 err = %v", got[0].Err)
	}
	if _, err := got[1].Addr(); err == nil {
		t.Error("garbage traddr parsed")
	}
	if got[2].Err == nil || !strings.Contains(got[2].Err.Error(), "larger than") {
		t.Errorf("port 3 err = %v", got[2].Err)
	}
	for _, bad := range []string{"..", "../x", "a/b", "x\ny", ""} {
		if err := f.Relink("1", configfs.Link{Name: bad, NQN: "nqn.a"}); err == nil {
			t.Errorf("Relink name %q accepted", bad)
		}
		if err := f.Unlink(bad, configfs.Link{Name: "nqn.a", NQN: "nqn.a"}); err == nil {
			t.Errorf("Unlink port %q accepted", bad)
		}
		if _, err := f.Port(bad); err == nil {
			t.Errorf("Port(%q) accepted", bad)
		}
	}
	if _, err := f.Port("9"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing port: %v", err)
	}
	if len(k.Log()) != 0 {
		t.Errorf("hostile input caused writes: %v", k.LogStrings())
	}
}

func TestMissingTreesAreEmpty(t *testing.T) {
	f := configfs.New(t.TempDir())
	if p, err := f.Ports(); err != nil || len(p) != 0 {
		t.Errorf("Ports on an empty root = %v, %v", p, err)
	}
	if p, err := f.Portals(); err != nil || len(p) != 0 {
		t.Errorf("Portals on an empty root = %v, %v", p, err)
	}
}

// portsWithLinks reads what the engine reads for a port it needs links of:
// Ports, then Links of each readable port (an error goes to Port.Err).
func portsWithLinks(f *configfs.FS) ([]configfs.Port, error) {
	ports, err := f.Ports()
	if err != nil {
		return nil, err
	}
	for i := range ports {
		if ports[i].Err != nil {
			continue
		}
		links, err := f.Links(ports[i].ID)
		ports[i].Links = links
		if err != nil {
			ports[i].Err = err
		}
	}
	return ports, nil
}

// fakeKernel is the tests' fake kernel: both fakes wired together.
type fakeKernel = rdmatest.System

var newFakeKernel = rdmatest.NewSystem

func TestCheckNames(t *testing.T) {
	for _, tt := range []struct {
		what string
		err  error
		ok   bool
	}{
		{"port 1", configfs.CheckPortID("1"), true},
		{"port 65535", configfs.CheckPortID("65535"), true},
		{"port 0x10 (kstrtou16 base 0)", configfs.CheckPortID("0x10"), true},
		{"port 010 (octal)", configfs.CheckPortID("010"), true},
		{"port 65536", configfs.CheckPortID("65536"), false},
		{"port 08 (not octal)", configfs.CheckPortID("08"), false},
		{"port -1", configfs.CheckPortID("-1"), false},
		{"port 1_0", configfs.CheckPortID("1_0"), false},
		{"port a", configfs.CheckPortID("a"), false},
		{"port ..", configfs.CheckPortID(".."), false},
		{"link nqn", configfs.CheckLink(configfs.Link{Name: "nqn.a", NQN: "nqn.a"}), true},
		{"link a/b", configfs.CheckLink(configfs.Link{Name: "a/b", NQN: "nqn.a"}), false},
		{"link to ../x", configfs.CheckLink(configfs.Link{Name: "a", NQN: ".."}), false},
		{"link of 256 bytes", configfs.CheckLink(configfs.Link{Name: strings.Repeat("a", 256), NQN: "nqn.a"}), false},
		{"portal", configfs.CheckPortalID("iqn.a/tpgt_1/192.0.2.1:3260"), true},
		{"portal v6", configfs.CheckPortalID("iqn.a/tpgt_1/[2001:db8::1]:3260"), true},
		{"portal tpgt_x", configfs.CheckPortalID("iqn.a/tpgt_x/192.0.2.1:3260"), false},
		{"portal np host", configfs.CheckPortalID("iqn.a/tpgt_1/host:3260"), false},
		{"portal of 4 parts", configfs.CheckPortalID("iqn.a/tpgt_1/192.0.2.1:3260/x"), false},
	} {
		if (tt.err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.what, tt.err, tt.ok)
		}
	}
}
