package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
)

func TestRights(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"permission", fmt.Errorf("config x: %w", fs.ErrPermission), needsRoot + ": config x: permission denied"},
		{"refused", fmt.Errorf("%w: uid 1000 is not allowed", control.ErrRefused), needsRoot + ": the control socket refused this caller: uid 1000 is not allowed"},
		{"said once", fmt.Errorf("%s: %w", needsRoot, fs.ErrPermission), needsRoot + ": permission denied"},
		{"other", errors.New("no such file"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rights(tc.err).Error(); got != tc.want {
				t.Errorf("rights: %q, want %q", got, tc.want)
			}
		})
	}
	if rights(nil) != nil {
		t.Error("rights(nil) is not nil")
	}
}

// Commands run by a user without the rights say so, one way; with the
// daemon running, the refusal is not "no daemon".
func TestRefusedNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another uid")
	}
	d := newDaemonEnv(t)
	exe := copyBinary(t)
	for _, p := range []string{filepath.Dir(d.dir), d.dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	asNobody := func(args ...string) (string, int) {
		c := d.cmd(nil, args...)
		c.Path, c.Args[0], c.Dir = exe, exe, filepath.Dir(exe)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := c.CombinedOutput()
		var ee interface{ ExitCode() int }
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	want := map[string]int{"status": 2, "plan": 2, "check": 3, "rebind": 2, "reload": 2, "trigger": 1}
	try := func(when string, refused bool) {
		for cmd, code := range want {
			args := []string{cmd}
			if cmd == "rebind" {
				args = append(args, "1")
			}
			out, got := asNobody(args...)
			if got != code || !strings.Contains(out, needsRoot) {
				t.Errorf("%s as uid 65534, %s: exit %d (want %d), no %q:\n%s", cmd, when, got, code, needsRoot, out)
			}
			if refused && (cmd == "reload" || cmd == "rebind") && (!strings.Contains(out, "refused") || strings.Contains(out, "no daemon")) {
				t.Errorf("%s as uid 65534, %s: not told refused:\n%s", cmd, when, out)
			}
		}
	}
	try("no daemon", false)
	d.start()
	try("the daemon running", true)
}
