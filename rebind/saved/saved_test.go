package saved_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

func TestParseSavedConfigs(t *testing.T) {
	b, err := os.ReadFile("../testdata/nvmet-config.json")
	if err != nil {
		t.Fatal(err)
	}
	d, bad, err := saved.ParseNvmetcli("nvmet-config.json", b)
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	var got []string
	for _, x := range d {
		got = append(got, x.Kind.String()+" "+x.ID+" "+x.Addr.String()+" "+strings.Join(x.NQNs, ","))
	}
	b, err = os.ReadFile("../testdata/saveconfig.json")
	if err != nil {
		t.Fatal(err)
	}
	d, bad, err = saved.ParseSaveconfig("saveconfig.json", b)
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	for _, x := range d {
		got = append(got, x.Kind.String()+" "+x.ID+" "+x.Addr.String())
	}
	want := []string{
		"nvmet 1 192.0.2.1:4420 nqn.2024-01.lab:a,nqn.2024-01.lab:b,nqn.2024-01.lab:deleted",
		"nvmet 2 192.0.2.1:4420 nqn.2024-01.lab:a", // tcp: completed as rdma ports are
		"nvmet 9 [2001:db8::1]:4420 nqn.2024-01.lab:a",
		"lio iqn.2024-01.lab:t/tpgt_1/192.0.2.1:3260 192.0.2.1:3260",
		"lio iqn.2024-01.lab:t/tpgt_1/[2001:db8::1]:3260 [2001:db8::1]:3260",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("declared (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`[`, `{"ports":{}}`, `{"ports":[` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `]}`} {
		if _, _, err := saved.ParseNvmetcli("bad.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "nvmetcli config bad.json") {
			t.Errorf("ParseNvmetcli(%.40s) err = %v", bad, err)
		}
	}
}

// A malformed or hostile entry is reported with the file and the entry
// and left out; the entries around it are declared.
func TestParseBadEntries(t *testing.T) {
	good := func(id string) string {
		return `{"portid":` + id + `,"addr":{"trtype":"rdma","adrfam":"ipv4","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":["nqn.2024-01.lab:a"]}`
	}
	port := func(id, nqn string) string {
		return `{"portid":` + id + `,"addr":{"trtype":"rdma","adrfam":"ipv4","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":[` + nqn + `]}`
	}
	for _, tt := range []struct {
		name, entry, want string
	}{
		{"port id not a number", `{"portid":"x"}`, `ports[1]: portid "x" is not a port number (0-65535)`},
		{"port id out of range", port("70000", `"nqn.a"`), `ports[1]: portid "70000" is not a port number`},
		{"negative port id", port("-1", `"nqn.a"`), `ports[1]: portid "-1" is not a port number`},
		{"traddr", `{"portid":2,"addr":{"trtype":"rdma","traddr":"nope","trsvcid":"1"}}`, `ports[1]: port 2: traddr "nope" is not an IP address`},
		{"a slash in a subsystem", port("2", `"../../../etc"`), `ports[1]: port 2: subsystem "../../../etc" contains '/'`},
		{"dot-dot subsystem", port("2", `".."`), `ports[1]: port 2: subsystem ".." is not a name`},
		{"control character", port("2", `"nqn.a\u0001b"`), `ports[1]: port 2: subsystem "nqn.a\x01b" contains a control character`},
		{"over NQN length", port("2", `"`+strings.Repeat("n", 224)+`"`), `ports[1]: port 2: subsystem "` + strings.Repeat("n", 40) + `"… is 224 bytes, over the kernel's 223`},
		{"missing port id", `{"addr":{"trtype":"rdma"}}`, `ports[1]: portid "" is not a port number (0-65535)`},
		{"empty subsystem", port("2", `""`), `ports[1]: port 2: subsystem is empty`},
		{"linked twice", port("2", `"nqn.a","nqn.a"`), `ports[1]: port 2: subsystem nqn.a is linked twice`},
		{"duplicate port", good("1"), `ports[1]: port 1 is declared again (ports[0] declares it first)`},
		{"not an object", `42`, `ports[1]: json: cannot unmarshal number`},
		{"subsystems not a list", `{"portid":2,"addr":{"trtype":"rdma","traddr":"192.0.2.2","trsvcid":"4420"},"subsystems":{"a":1}}`, `ports[1]: json: cannot unmarshal object`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := `{"ports":[` + good("1") + `,` + tt.entry + `,` + good("3") + `]}`
			d, bad, err := saved.ParseNvmetcli("/etc/nvmet/config.json", []byte(b))
			if err != nil {
				t.Fatalf("the file refused: %v", err)
			}
			if len(bad) != 1 || !strings.Contains(bad[0].Error(), "nvmetcli config /etc/nvmet/config.json: "+tt.want) || !strings.Contains(bad[0].Error(), "not completed") {
				t.Fatalf("errors %v; want one with %q", bad, tt.want)
			}
			var ids []string
			for _, x := range d {
				ids = append(ids, x.ID)
			}
			if strings.Join(ids, ",") != "1,3" {
				t.Errorf("declared %v; want the ports around the bad entry: 1,3", ids)
			}
		})
	}
	for _, tt := range []struct {
		name, target, want string
	}{
		{"ip_address", `{"wwn":"iqn.x","fabric":"iscsi","tpgs":[{"tag":1,"portals":[{"ip_address":"x","port":3260,"iser":true}]}]}`, `targets[1]: target iqn.x tpg 1: ip_address "x" is not an IP address`},
		{"wwn with a slash", `{"wwn":"iqn.x/../y","fabric":"iscsi","tpgs":[]}`, `targets[1]: wwn "iqn.x/../y" contains '/'`},
		{"tag", `{"wwn":"iqn.x","fabric":"iscsi","tpgs":[{"tag":0,"portals":[]}]}`, `targets[1]: target iqn.x: tpg tag 0 is not 1-65535`},
		{"duplicate target", `{"wwn":"iqn.t","fabric":"iscsi","tpgs":[{"tag":1,"portals":[{"ip_address":"192.0.2.1","port":3260,"iser":true}]}]}`, `targets[1]: portal iqn.t/tpgt_1/192.0.2.1:3260 is declared twice`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tgt := func(w string) string {
				return `{"wwn":"` + w + `","fabric":"iscsi","tpgs":[{"tag":1,"portals":[{"ip_address":"192.0.2.1","port":3260,"iser":true}]}]}`
			}
			b := `{"targets":[` + tgt("iqn.t") + `,` + tt.target + `,` + tgt("iqn.u") + `]}`
			d, bad, err := saved.ParseSaveconfig("/etc/target/saveconfig.json", []byte(b))
			if err != nil {
				t.Fatalf("the file refused: %v", err)
			}
			if len(bad) != 1 || !strings.Contains(bad[0].Error(), "targetcli config /etc/target/saveconfig.json: "+tt.want) {
				t.Fatalf("errors %v; want one with %q", bad, tt.want)
			}
			if len(d) != 2 || d[0].ID != "iqn.t/tpgt_1/192.0.2.1:3260" || d[1].ID != "iqn.u/tpgt_1/192.0.2.1:3260" {
				t.Errorf("declared %+v; want iqn.t's and iqn.u's portals", d)
			}
		})
	}
}

// Load declares what the good files and entries say, and names every bad
// one in its error.
func TestLoadPartial(t *testing.T) {
	dir := t.TempDir()
	nv := filepath.Join(dir, "config.json")
	tg := filepath.Join(dir, "saveconfig.json")
	if err := os.WriteFile(nv, []byte(`{"ports":[{"portid":"x"},{"portid":1,"addr":{"trtype":"rdma","traddr":"192.0.2.1","trsvcid":"4420"},"subsystems":["nqn.a"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg, []byte(`{"targets":`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := saved.Load(rebind.Config{NvmetConfig: nv, TargetConfig: tg})
	if len(d) != 1 || d[0].ID != "1" || d[0].Source != nv {
		t.Errorf("declared %+v; want port 1 of %s", d, nv)
	}
	for _, want := range []string{"nvmetcli config " + nv + ": ports[0]: portid", "targetcli config " + tg + ": unexpected end of JSON input"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load error %v; want %q", err, want)
		}
	}
}
