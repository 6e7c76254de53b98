package saved_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

func TestParseSavedConfigs(t *testing.T) {
	b, err := os.ReadFile("../testdata/nvmet-config.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := saved.ParseNvmetcli("nvmet-config.json", b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range d {
		got = append(got, x.Kind.String()+" "+x.ID+" "+x.Addr.String()+" "+strings.Join(x.NQNs, ","))
	}
	b, err = os.ReadFile("../testdata/saveconfig.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err = saved.ParseSaveconfig("saveconfig.json", b)
	if err != nil {
		t.Fatal(err)
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
	for _, bad := range []string{`{"ports":[{"portid":"x"}]}`, `{"ports":[{"portid":1,"addr":{"trtype":"rdma","traddr":"nope","trsvcid":"1"}}]}`, `[`} {
		if _, err := saved.ParseNvmetcli("bad.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("ParseNvmetcli(%s) err = %v", bad, err)
		}
	}
	if _, err := saved.ParseSaveconfig("bad.json", []byte(`{"targets":[{"wwn":"iqn.x","fabric":"iscsi","tpgs":[{"tag":1,"portals":[{"ip_address":"x","port":3260,"iser":true}]}]}]}`)); err == nil {
		t.Error("bad ip_address accepted")
	}
}
