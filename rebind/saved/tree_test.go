package saved_test

import (
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// A file as nvmetcli 0.9 saves it decodes whole, in its order.
func TestParseNvmetcliTree(t *testing.T) {
	t.Parallel()
	b := `{"hosts": [{"dhchap": {"ctrl_key": "", "dhgroup": "null", "hash": "hmac(sha256)", "key": ""}, "nqn": "nqn.h1"}],
 "ports": [{"addr": {"adrfam": "ipv4", "traddr": "192.0.2.1", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"},
   "ana_groups": [{"ana": {"state": "optimized"}, "grpid": 1}, {"ana": {"state": "inaccessible"}, "grpid": 3}],
   "param": {"inline_data_size": "-1", "pi_enable": "0"}, "portid": 1,
   "referrals": [{"addr": {"adrfam": "ipv4", "traddr": "192.0.2.2", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"}, "enable": 1, "name": "r"}],
   "subsystems": ["nqn.s1"]}],
 "subsystems": [{"allowed_hosts": ["nqn.h1"], "attr": {"allow_any_host": "0", "model": "Linux", "serial": "abc", "version": "1.3"},
   "namespaces": [{"ana": {"grpid": "3"}, "ana_grpid": 3, "device": {"nguid": "00000000-0000-0000-0000-000000000001", "path": "/dev/vg/lv1", "uuid": "4b0a1b2c-0000-4000-8000-000000000001"}, "enable": 1, "nsid": 7}],
   "nqn": "nqn.s1"}]}`
	tr, errs, err := saved.ParseNvmetcliTree("f.json", []byte(b))
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	ns := tr.Subsystems[0].Namespaces[0]
	if ns.NSID != 7 || !ns.Enable || ns.ANAGrp != 3 || ns.Device != "/dev/vg/lv1" {
		t.Errorf("namespace = %+v", ns)
	}
	if got := ns.Attrs[0]; got.File != "device_nguid" || got.Value != "00000000-0000-0000-0000-000000000001" {
		t.Errorf("first namespace attribute = %+v; want device_nguid, in the file's order", got)
	}
	p := tr.Ports[0]
	if p.ID != "1" || len(p.ANAGroups) != 2 || p.ANAGroups[1].Attrs[0] != (saved.Attr{File: "ana_state", Value: "inaccessible"}) ||
		p.Referrals[0].Name != "r" || !p.Referrals[0].Enable || p.Attrs[len(p.Attrs)-1] != (saved.Attr{File: "param_pi_enable", Value: "0"}) {
		t.Errorf("port = %+v", p)
	}
	if tr.Hosts[0].NQN != "nqn.h1" || len(tr.Hosts[0].Attrs) != 4 {
		t.Errorf("host = %+v", tr.Hosts[0])
	}
}

// Hostile entries are named with their file and entry and left out; the
// rest is declared.
func TestParseNvmetcliTreeHostile(t *testing.T) {
	t.Parallel()
	good := `{"nqn": "nqn.good", "namespaces": [], "allowed_hosts": [], "attr": {}}`
	for _, tt := range []struct {
		name, sub, want string
	}{
		{"slash in an nqn", `{"nqn": "nqn/../x"}`, `subsystem nqn "nqn/../x" contains '/'`},
		{"dot-dot", `{"nqn": ".."}`, `is not a name`},
		{"control character", `{"nqn": "nqn.\u0007"}`, "control character"},
		{"too long", `{"nqn": "` + strings.Repeat("n", 300) + `"}`, "over the kernel's 223"},
		{"nsid 0", `{"nqn": "nqn.x", "namespaces": [{"nsid": 0}]}`, "nsid \"0\" is not a namespace id"},
		{"nsid twice", `{"nqn": "nqn.x", "namespaces": [{"nsid": 1}, {"nsid": 1}]}`, "nsid 1 is declared again"},
		{"relative device path", `{"nqn": "nqn.x", "namespaces": [{"nsid": 1, "device": {"path": "dev/sda"}}]}`, "is not an absolute path"},
		{"dot-dot device path", `{"nqn": "nqn.x", "namespaces": [{"nsid": 1, "device": {"path": "/dev/../proc/kcore"}}]}`, "is not an absolute path"},
		{"attribute name with a slash", `{"nqn": "nqn.x", "attr": {"../../x": "1"}}`, "is not one configfs has"},
		{"a value with a newline", `{"nqn": "nqn.x", "attr": {"model": "a\nb"}}`, "newline"},
		{"an object as a value", `{"nqn": "nqn.x", "attr": {"model": {"a": 1}}}`, "is not a string or a number"},
		{"deeply nested", `{"nqn": "nqn.x", "attr": {"model": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`, "is not a string or a number"},
		{"a huge value", `{"nqn": "nqn.x", "attr": {"model": "` + strings.Repeat("m", 5000) + `"}}`, "over a configfs page"},
		{"enable 2", `{"nqn": "nqn.x", "namespaces": [{"nsid": 1, "enable": 2}]}`, `enable "2" is not 0 or 1`},
		{"duplicate", good, "subsystem nqn.good is declared again"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := `{"hosts": [], "ports": [], "subsystems": [` + good + `, ` + tt.sub + `]}`
			tr, errs, err := saved.ParseNvmetcliTree("f.json", []byte(b))
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) || !strings.Contains(errs[0].Error(), "f.json: subsystems[1]") {
				t.Fatalf("errs = %v; want one naming f.json: subsystems[1] and %q", errs, tt.want)
			}
			if len(tr.Subsystems) != 1 || tr.Subsystems[0].NQN != "nqn.good" {
				t.Fatalf("declared %+v; want only nqn.good", tr.Subsystems)
			}
		})
	}
	for _, tt := range []struct{ name, port, want string }{
		{"port id out of range", `{"portid": 70000}`, "is not a port number"},
		{"ANA group 0", `{"portid": 1, "ana_groups": [{"grpid": 0}]}`, "is not a new group id"},
		{"referral named ..", `{"portid": 1, "referrals": [{"name": ".."}]}`, "is not a name"},
		{"link twice", `{"portid": 1, "subsystems": ["nqn.a", "nqn.a"]}`, "linked twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errs, err := saved.ParseNvmetcliTree("f.json", []byte(`{"ports": [`+tt.port+`]}`))
			if err != nil || len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("errs = %v, %v; want %q", errs, err, tt.want)
			}
		})
	}
}

// targetcli's storage objects, LUNs and mapped LUNs; hostile entries named
// and left out.
func TestParseSaveconfigTree(t *testing.T) {
	t.Parallel()
	b := `{"storage_objects": [
  {"plugin": "block", "name": "b0", "dev": "/dev/vg/lv0", "wwn": "w0", "readonly": false, "write_back": false, "attributes": {"emulate_tpu": 1}},
  {"plugin": "fileio", "name": "f0", "dev": "/srv/f0.img", "size": 1048576, "write_back": true},
  {"plugin": "block", "name": "bad/name", "dev": "/dev/x"},
  {"plugin": "block", "name": "b1", "dev": "dev/relative"},
  {"plugin": "block", "name": "b2", "dev": "/dev/a,udev_path=/etc/shadow"},
  {"plugin": "block", "name": "b0", "dev": "/dev/vg/lv9"}],
 "targets": [
  {"fabric": "iscsi", "wwn": "iqn.t", "tpgs": [{"tag": 1, "luns": [{"index": 0, "storage_object": "/backstores/block/b0"}],
    "node_acls": [{"node_wwn": "iqn.i", "mapped_luns": [{"index": 3, "tpg_lun": 0, "write_protect": true}]}]}]},
  {"fabric": "iscsi", "wwn": "iqn.u", "tpgs": [{"tag": 1, "luns": [{"index": 0, "storage_object": "../../etc"}]}]}]}`
	tr, errs, err := saved.ParseSaveconfigTree("s.json", []byte(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.StorageObjects) != 2 || tr.StorageObjects[0].Key() != "block/b0" || tr.StorageObjects[1].Size != 1048576 || !tr.StorageObjects[1].WriteBack {
		t.Errorf("storage objects = %+v", tr.StorageObjects)
	}
	if len(tr.TPGs) != 1 || tr.TPGs[0].Dir() != "target/iscsi/iqn.t/tpgt_1" || tr.TPGs[0].LUNs[0].SO != "block/b0" ||
		tr.TPGs[0].ACLs[0].MappedLUNs[0] != (saved.MappedLUN{Index: 3, TPGLUN: 0, WriteProtect: true}) {
		t.Errorf("TPGs = %+v", tr.TPGs)
	}
	all := ""
	for _, e := range errs {
		all += e.Error() + "\n"
	}
	for _, want := range []string{"storage_objects[2]: storage object name \"bad/name\" contains '/'", "storage_objects[3]: storage object block/b1: dev \"dev/relative\" is not an absolute path",
		"storage_objects[4]", "storage_objects[5]: storage object block/b0 is declared again", "targets[1]: target iqn.u tpg 1: lun 0: storage_object \"../../etc\""} {
		if !strings.Contains(all, want) {
			t.Errorf("errors lack %q:\n%s", want, all)
		}
	}
}
