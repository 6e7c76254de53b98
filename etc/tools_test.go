package etc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/tests/vm"
)

// aptMu serializes apt-get runs of parallel tests (a second one would fail
// on dpkg's lock instead of waiting).
var aptMu sync.Mutex

// lookTool is the VM harness's: PATH, then the sbin folders a non-root
// PATH may lack.
var lookTool = vm.LookTool

// ensureTool returns the path of tool. When it is missing it installs the
// Debian package pkg with apt-get as root (like tests/vm does for the VM's
// tools) and skips the test with the reason otherwise.
func ensureTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	if p, err := lookTool(tool); err == nil {
		return p
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s not installed, and not root to install it (apt-get install -y --no-install-recommends %s)", tool, pkg)
	}
	if _, err := lookTool("apt-get"); err != nil {
		t.Skipf("%s not installed, and no apt-get to install %s with", tool, pkg)
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	if p, err := lookTool(tool); err == nil {
		return p // another test installed it meanwhile
	}
	t.Logf("installing %s for %s (apt-get)", pkg, tool)
	if err := aptInstall(pkg); err != nil {
		t.Fatalf("apt-get install %s: %v", pkg, err)
	}
	p, err := lookTool(tool)
	if err != nil {
		t.Fatalf("apt-get installed %s, but %v", pkg, err)
	}
	return p
}

const policyRcD = "/usr/sbin/policy-rc.d"

// aptInstall installs Debian packages without their recommends, and
// without starting their services: while it runs, a policy-rc.d that
// refuses every start is in place unless one already is (prometheus ships a
// server that would listen on :9090; only its promtool is wanted). An
// apt-get update is run once when the first try fails.
func aptInstall(pkgs ...string) error {
	if _, err := os.Lstat(policyRcD); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(policyRcD, []byte("#!/bin/sh\n# nvmet-rebind's tests: install, do not start (invoke-rc.d, deb-systemd-invoke)\nexit 101\n"), 0o755); err != nil {
			return err
		}
		defer os.Remove(policyRcD)
	}
	install := func() error {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w\n%s", err, tail(out, 2000))
		}
		return nil
	}
	if err := install(); err != nil {
		if out, uerr := exec.Command("apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			return fmt.Errorf("%v; apt-get update: %v\n%s", err, uerr, tail(out, 2000))
		}
		return install()
	}
	return nil
}

// tail is the end of a command's output, for error messages.
func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// run runs a command and returns its stdout; the error carries stderr.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, tail(stdout.Bytes(), 2000), tail(stderr.Bytes(), 4000))
	}
	return stdout.String()
}
