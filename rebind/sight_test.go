package rebind

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

func TestProbeConfigfs(t *testing.T) {
	mk := func(t *testing.T, dirs ...string) string {
		root := t.TempDir()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	tests := []struct {
		name       string
		root       func(t *testing.T) string
		wantErr    string // substring; "" = none
		nvmet, lio bool
	}{
		{name: "missing root", root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "config") }, wantErr: "does not exist"},
		{name: "a file, not a directory", root: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "config")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: "is not a directory"},
		// An empty directory that is not a configfs mount is what an
		// unmounted /sys/kernel/config looks like.
		{name: "empty, not a configfs mount", root: func(t *testing.T) string { return mk(t) }, wantErr: "is not a configfs mount"},
		{name: "a copy with nvmet only", root: func(t *testing.T) string { return mk(t, "nvmet/ports") }, nvmet: true},
		{name: "a copy with LIO only", root: func(t *testing.T) string { return mk(t, "target/iscsi") }, lio: true},
		{name: "target without iscsi is no LIO iSCSI", root: func(t *testing.T) string { return mk(t, "nvmet", "target/core") }, nvmet: true},
		{name: "both", root: func(t *testing.T) string { return mk(t, "nvmet", "target/iscsi") }, nvmet: true, lio: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tt.root(t)
			c := ProbeConfigfs(root)
			if !c.Probed || c.Root != root {
				t.Errorf("probe %+v", c)
			}
			switch {
			case tt.wantErr == "" && c.Err != nil:
				t.Errorf("err %v, want none", c.Err)
			case tt.wantErr != "" && (c.Err == nil || !strings.Contains(c.Err.Error(), tt.wantErr)):
				t.Errorf("err %v, want %q", c.Err, tt.wantErr)
			}
			if c.Nvmet != tt.nvmet || c.LIO != tt.lio {
				t.Errorf("nvmet %v lio %v, want %v %v", c.Nvmet, c.LIO, tt.nvmet, tt.lio)
			}
			if c.Mounted {
				t.Errorf("a temporary directory is not a configfs mount")
			}
		})
	}
}

// sight counts an object unreadable when the engine might manage it: an
// RDMA, TCP (or unknown) transport and a watched (or unknown) address.
func TestSightUnreadable(t *testing.T) {
	bad := errors.New("garbage")
	portal := func(np string, err error) configfs.Portal {
		p := configfs.Portal{IQN: "iqn.2024-01.lab:t", TPG: "tpgt_1", NP: np, Err: err}
		p.Addr, _ = configfs.ParseNP(np)
		return p
	}
	obs := Observed{
		Ports: []configfs.Port{
			{ID: "1", Trtype: "rdma", Adrfam: "ipv4", Traddr: "192.0.2.1", Trsvcid: "4420", Err: errors.New("nvmet port 1: link outside")},
			{ID: "2", Trtype: "rdma", Adrfam: "ipv4", Traddr: "198.51.100.1", Trsvcid: "4420", Err: bad}, // outside the watched subnets
			{ID: "3", Trtype: "", Err: errors.New("nvmet port 3: addr_trtype: EIO")},                     // transport unknown
			{ID: "4", Trtype: "tcp", Err: errors.New("nvmet port 4: addr_traddr: EIO")},                  // TCP, address unknown
			{ID: "7", Trtype: "fc", Err: bad},                                               // neither RDMA nor TCP
			{ID: "5", Trtype: "rdma", Traddr: "0.0.0.0", Trsvcid: "4420", Err: bad},         // wildcard: never managed
			{ID: "6", Trtype: "rdma", Adrfam: "ipv4", Traddr: "192.0.2.6", Trsvcid: "4420"}, // fine
		},
		Portals: []configfs.Portal{
			portal("192.0.2.1:3260", errors.New("lio portal a: iser: EIO")),
			portal("198.51.100.1:3260", bad),
			portal("192.0.2.2:3260", nil),
		},
		PortalsErr: errors.Join(errors.New("lio target iqn.x: EACCES"), errors.New("lio target iqn.y: EIO")),
		Journal:    map[Key]Intent{{KindLIO, "iqn.z/tpgt_1/192.0.2.9:3260"}: {}},
	}
	cfg := Config{Watch: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	s := obs.sight(cfg)
	want := []string{"nvmet port 1: link outside", "nvmet port 3: addr_trtype: EIO", "nvmet port 4: addr_traddr: EIO", "lio portal a: iser: EIO", "lio target iqn.x: EACCES", "lio target iqn.y: EIO"}
	if strings.Join(s.Unreadable, "|") != strings.Join(want, "|") {
		t.Errorf("unreadable\n got %q\nwant %q", s.Unreadable, want)
	}
	if s.NvmetWanted || !s.LIOWanted {
		t.Errorf("wanted nvmet %v lio %v: the journal names a LIO portal only", s.NvmetWanted, s.LIOWanted)
	}
	if s := (&Observed{}).sight(Config{NvmetConfig: "/etc/nvmet/config.json"}); !s.NvmetWanted || s.LIOWanted || s.Unreadable != nil {
		t.Errorf("a saved nvmet config: %+v", s)
	}
}
