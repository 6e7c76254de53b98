package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withRoot is d's command line with another --configfs-root.
func (d *daemonEnv) withRoot(root string) *daemonEnv {
	args := append([]string{}, d.args...)
	for i := range args {
		if args[i] == "--configfs-root" {
			args[i+1] = root
		}
	}
	return &daemonEnv{t: d.t, dir: d.dir, args: args}
}

// status, plan and check over a configfs root that shows nothing: a
// non-zero exit, the reason first; a root one level off names the right
// one.
func TestWrongConfigfsRoot(t *testing.T) {
	d := newDaemonEnv(t)
	cfs := filepath.Join(d.dir, "cfs")
	empty := filepath.Join(d.dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, reason string
	}{
		{"missing", filepath.Join(d.dir, "nope"), "configfs root " + filepath.Join(d.dir, "nope") + " does not exist"},
		{"plain empty dir", empty, empty + " is not a configfs mount"},
		{"one level deep", filepath.Join(cfs, "nvmet"), "use --configfs-root " + cfs},
		{"one level deep, LIO", filepath.Join(cfs, "target"), "use --configfs-root " + cfs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := d.withRoot(tc.root)
			for _, cmd := range []struct {
				name  string
				code  int
				first string
			}{
				{"status", 2, "nvmet-rebind: not seen: configfs: "},
				{"plan", 2, "nvmet-rebind: not seen: configfs: "},
				{"check", 3, "NVMET-REBIND UNKNOWN - configfs not visible: "},
			} {
				out, code := w.run(cmd.name)
				if code != cmd.code || !strings.HasPrefix(out, cmd.first) || !strings.Contains(strings.SplitN(out, "\n", 2)[0], tc.reason) {
					t.Errorf("%s: exit %d, want %d, first line %q…%q:\n%s", cmd.name, code, cmd.code, cmd.first, tc.reason, out)
				}
				if strings.Contains(out, "nothing to do") {
					t.Errorf("%s says nothing to do:\n%s", cmd.name, out)
				}
			}
		})
	}
}

// A relative root is made absolute: the links of a port read as they are
// (not as leaving the tree).
func TestRelativeRoots(t *testing.T) {
	d := newDaemonEnv(t)
	d.deadTCPPort()
	w := &daemonEnv{t: t, dir: d.dir, args: []string{"--config", "config.toml", "--configfs-root", "cfs", "--sysfs-root", "sys", "--state-dir", "state", "--run-dir", "run"}}
	for _, cmd := range []string{"status", "plan"} {
		c := w.cmd(nil, cmd)
		c.Dir = d.dir
		out, err := c.CombinedOutput()
		if err != nil || strings.Contains(string(out), "unreadable") || strings.Contains(string(out), "outside") || strings.Contains(string(out), "not seen") {
			t.Errorf("%s with relative roots: %v:\n%s", cmd, err, out)
		}
	}
}

// A root its user cannot read (mode 000), for a non-root user allowed the
// rest: exit 2, the rights (every refusal's one message), then not seen
// and the permission named.
func TestUnreadableConfigfsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another uid")
	}
	d := newDaemonEnv(t)
	exe := copyBinary(t)
	for _, p := range []string{filepath.Dir(d.dir), d.dir, d.args[1]} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.args[1], 0o644); err != nil { // the config
		t.Fatal(err)
	}
	cfs := filepath.Join(d.dir, "cfs")
	if err := os.Chmod(cfs, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(cfs, 0o755)
	for _, cmd := range []string{"status", "plan"} {
		c := d.cmd(nil, cmd)
		c.Path, c.Args[0], c.Dir = exe, exe, filepath.Dir(exe)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := c.CombinedOutput()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 2 || !strings.HasPrefix(string(out), "nvmet-rebind: "+needsRoot+": not seen: configfs: configfs root unreadable") || !strings.Contains(string(out), "permission denied") {
			t.Errorf("%s as uid 65534 over a root of mode 000: %v:\n%s", cmd, err, out)
		}
	}
}

// copyBinary copies the test binary where any user can run it (its own
// directory is root's alone).
func copyBinary(t *testing.T) string {
	t.Helper()
	bin, err := os.MkdirTemp("", "nvmet-rebind-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "nvmet-rebind")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
