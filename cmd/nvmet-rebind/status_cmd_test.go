package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

const longPortal = "iqn.2003-01.org.linux-iscsi.storage-node-01.example.com:sn.0123456789ab/tpgt_1/192.0.2.5:3260"

// statusEnv is newDaemonEnv's tree (TCP port 1, no subsystem) with an
// RDMA port 2 that has a subsystem and a LIO portal of a long IQN.
func statusEnv(t *testing.T) *daemonEnv {
	d := newDaemonEnv(t)
	cfs := filepath.Join(d.dir, "cfs")
	for _, dir := range []string{"nvmet/ports/2/subsystems", "target/iscsi/" + strings.ReplaceAll(longPortal, "/192", "/np/192")} {
		must(t, os.MkdirAll(filepath.Join(cfs, dir), 0o755))
	}
	for f, v := range map[string]string{"addr_trtype": "rdma", "addr_adrfam": "ipv4", "addr_traddr": "192.0.2.2", "addr_trsvcid": "4420"} {
		must(t, os.WriteFile(filepath.Join(cfs, "nvmet/ports/2", f), []byte(v+"\n"), 0o644))
	}
	must(t, os.Symlink("../../../subsystems/nqn.a", filepath.Join(cfs, "nvmet/ports/2/subsystems/nqn.a")))
	must(t, os.WriteFile(filepath.Join(cfs, "target/iscsi", strings.ReplaceAll(longPortal, "/192", "/np/192"), "iser"), []byte("1\n"), 0o644))
	return d
}

// status fits 120 columns and says each shared condition once; -o wide
// is one line per listener; status <id> shows one listener, --json that
// one object; an unknown id exits 2 naming the ids and changes nothing —
// with and without a daemon.
func TestStatusCommand(t *testing.T) {
	d := statusEnv(t)
	tree := func() map[string]string { return snapshotDir(t, d.dir) }
	check := func(source string) {
		t.Helper()
		out, code := d.run("status")
		if code != 0 {
			t.Fatalf("status: exit %d:\n%s", code, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > status.Width {
				t.Errorf("status: a line of %d columns:\n%s", n, l)
			}
		}
		for _, id := range []string{"1", "2", longPortal} {
			if !regexp.MustCompile(`(?m)^\S+\s+` + regexp.QuoteMeta(id) + `(\s|$)`).MatchString(out) {
				t.Errorf("status lacks the row of %s:\n%s", id, out)
			}
		}
		if n := strings.Count(out, "rdma netlink is not available"); n > 1 {
			t.Errorf("status says the netlink error %d times:\n%s", n, out)
		}
		if !strings.Contains(out, "(source: "+source+")") {
			t.Errorf("status: not from the %s:\n%s", source, out)
		}

		out, code = d.run("status", "-o", "wide")
		if lines := strings.Split(out, "\n"); code != 0 || len(lines) < 4 || !strings.HasPrefix(lines[3], "lio ") || !strings.HasSuffix(lines[0], "REASON") {
			t.Errorf("status -o wide: exit %d, want a header and one line per listener:\n%s", code, out)
		}

		for _, id := range []string{"2", longPortal} {
			out, code = d.run("status", id)
			if code != 0 || !regexp.MustCompile(`(?m)^id:\s+`+regexp.QuoteMeta(id)+`$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^state:\s+\S+$`).MatchString(out) || !strings.Contains(out, "\nhistory") {
				t.Errorf("status %s: exit %d, want its fields and history:\n%s", id, code, out)
			}
			for _, args := range [][]string{{"status", id, "--json"}, {"status", "--json", id}, {"status", id, "-o", "json"}} {
				out, code = d.run(args...)
				var l status.ListenerStatus
				if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.ID != id {
					t.Errorf("%q: exit %d, %v, want the one object of %s:\n%s", args, code, err, id, out)
				}
			}
		}

		before := tree()
		out, code = d.run("status", "9")
		want := "nvmet-rebind: status: nvmet port 9: no such port or portal; the ids are 1, 2, " + longPortal + "\n"
		if code != 2 || out != want {
			t.Errorf("status 9: exit %d, %q; want exit 2, %q", code, out, want)
		}
		if diff := cmp.Diff(before, tree()); diff != "" {
			t.Errorf("status 9 changed the tree (-before +after):\n%s", diff)
		}
	}
	check("direct")
	d.start()
	check("daemon")
}

func TestStatusCommandUsage(t *testing.T) {
	d := statusEnv(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "tall"}, `nvmet-rebind: status: --output "tall": use wide or json`},
		{[]string{"status", "1", "2"}, `nvmet-rebind: status: give at most one port id or portal id, not "1" and "2"`},
		{[]string{"status", "1", "--bogus"}, "nvmet-rebind: status: unknown flag --bogus (see nvmet-rebind status --help)"},
		{[]string{"status", "1", "-o"}, "nvmet-rebind: status: -o needs a value: wide or json"},
	} {
		out, code := d.run(tt.args...)
		if code != 2 || strings.TrimSpace(out) != tt.want {
			t.Errorf("%q: exit %d, %q; want exit 2, %q", tt.args, code, out, tt.want)
		}
	}
}
