package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// inNetns runs the command in a network namespace of its own, where
// 192.0.2.1 is up on lo and nothing listens: a dead TCP port on it is one
// a full reconcile relinks.
func (d *daemonEnv) inNetns(args ...string) (string, int) {
	d.t.Helper()
	if os.Geteuid() != 0 {
		d.t.Skip("needs root for a network namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		d.t.Skip("needs unshare (util-linux)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		d.t.Skip("needs ip (iproute2)")
	}
	c := d.cmd(nil, args...)
	script := `ip link set lo up && ip addr add 192.0.2.1/24 dev lo && exec "$0" "$@"`
	c.Args = append([]string{unshare, "--net", "sh", "-c", script}, c.Args...)
	c.Path = unshare
	out, err := c.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		d.t.Fatalf("%v: %s", err, out)
	}
	return string(out), 0
}

// deadTCPPort adds nvmet TCP port 2 on 192.0.2.1:4421 with nqn.a linked.
func (d *daemonEnv) deadTCPPort() {
	d.t.Helper()
	port := filepath.Join(d.dir, "cfs/nvmet/ports/2")
	if err := os.MkdirAll(filepath.Join(port, "subsystems"), 0o755); err != nil {
		d.t.Fatal(err)
	}
	for f, v := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": "192.0.2.1", "addr_trsvcid": "4421"} {
		if err := os.WriteFile(filepath.Join(port, f), []byte(v+"\n"), 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../subsystems/nqn.a", filepath.Join(port, "subsystems/nqn.a")); err != nil {
		d.t.Fatal(err)
	}
}

// treeState is every entry under root: its kind, inode, symlink target
// or content (an unlink and relink makes a new inode).
func treeState(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := fmt.Sprintf("%s %v ino=%d", rel, info.Mode().Type(), info.Sys().(*syscall.Stat_t).Ino)
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + strings.TrimSpace(string(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rebind with an id configfs does not hold, no daemon running, beside a
// dead TCP port whose address is up: exit 2 naming the ids, and the tree
// as it was (a full reconcile would have relinked port 2). A known id
// acts on its own endpoint only.
func TestRebindUnknownIDChangesNothing(t *testing.T) {
	d := newDaemonEnv(t)
	d.deadTCPPort()
	cfs := filepath.Join(d.dir, "cfs")
	before := treeState(t, cfs)

	out, code := d.inNetns("rebind", "9")
	if code != 2 || !strings.Contains(out, "nvmet port 9: no such port or portal in configfs") || !strings.Contains(out, "nvmet ports 1, 2") {
		t.Errorf("rebind 9: exit %d: %s", code, out)
	}
	if diff := cmp.Diff(before, treeState(t, cfs)); diff != "" {
		t.Errorf("rebind 9 changed the tree (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "state")); err == nil {
		t.Errorf("rebind 9 made the state directory")
	}

	// Port 1 is known (and not enabled: nothing to do); port 2 is not its
	// endpoint and stays as it is.
	if out, code := d.inNetns("rebind", "1"); code != 1 || !strings.Contains(out, "nvmet 1: listening=") {
		t.Errorf("rebind 1: exit %d: %s", code, out)
	}
	if diff := cmp.Diff(before, treeState(t, cfs)); diff != "" {
		t.Errorf("rebind 1 changed port 2 (-before +after):\n%s", diff)
	}

	// The test sees a relink: rebind 2 does relink its port.
	d.inNetns("rebind", "2")
	if cmp.Equal(before, treeState(t, cfs)) {
		t.Errorf("rebind 2 left the dead port 2 as it was: the test cannot see a relink")
	}
}
