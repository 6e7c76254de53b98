package vm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// HostPackages are the Debian packages the harness needs on the host.
var HostPackages = []string{"qemu-system-x86", "busybox-static", "dash", "kmod", "iproute2", "nvme-cli", "cpio", "open-iscsi"}

// hostTools maps each tool the harness uses to its Debian package.
var hostTools = []struct{ tool, pkg string }{
	{"qemu-system-x86_64", "qemu-system-x86"},
	{"busybox", "busybox-static"},
	{"dash", "dash"},
	{"kmod", "kmod"},
	{"depmod", "kmod"},
	{"ip", "iproute2"},
	{"rdma", "iproute2"},
	{"nvme", "nvme-cli"},
	{"iscsid", "open-iscsi"}, // the guest's iSCSI/TCP initiator (shared-iser-tcp)
	{"iscsiadm", "open-iscsi"},
	{"cpio", "cpio"},
	{"dpkg-deb", "dpkg"},
	{"apt-get", "apt"},
	{"ldd", "libc-bin"},
}

// ErrSkip marks an error that should skip the tests, not fail them.
type ErrSkip struct{ Msg string }

func (e ErrSkip) Error() string { return e.Msg }

// Log is where progress is reported (defaults to stderr).
var Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "vm: "+format+"\n", args...) }

// LookTool finds a host tool in PATH or the sbin folders (which a non-root
// PATH may lack).
func LookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

var aptMu sync.Mutex
var aptUpdated bool

// AptUpdate runs apt-get update once per process.
func AptUpdate() error {
	aptMu.Lock()
	defer aptMu.Unlock()
	if aptUpdated {
		return nil
	}
	if _, err := run("", "apt-get", "update"); err != nil {
		return err
	}
	aptUpdated = true
	return nil
}

// AptInstall installs Debian packages (root only).
func AptInstall(pkgs ...string) error {
	if os.Geteuid() != 0 {
		return ErrSkip{fmt.Sprintf("not root: cannot install %s (apt-get install -y %s)", strings.Join(pkgs, " "), strings.Join(pkgs, " "))}
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if _, err := runEnv("", []string{"DEBIAN_FRONTEND=noninteractive"}, "apt-get", args...); err != nil {
		if err2 := AptUpdate(); err2 != nil {
			return fmt.Errorf("apt-get install: %v; apt-get update: %v", err, err2)
		}
		if _, err := runEnv("", []string{"DEBIAN_FRONTEND=noninteractive"}, "apt-get", args...); err != nil {
			return err
		}
	}
	return nil
}

// EnsureHostTools checks the host tools and installs missing packages when
// running as root. It returns ErrSkip when they are missing and cannot be
// installed.
func EnsureHostTools() error {
	var missing []string
	seen := map[string]bool{}
	for _, t := range hostTools {
		if _, err := LookTool(t.tool); err != nil && !seen[t.pkg] {
			missing = append(missing, t.pkg)
			seen[t.pkg] = true
		}
	}
	// The busybox in the initramfs must be the static one.
	if bb, err := LookTool("busybox"); err == nil && !seen["busybox-static"] {
		if !isStatic(bb) {
			missing = append(missing, "busybox-static")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return ErrSkip{fmt.Sprintf("missing host packages %s and not root to install them: apt-get install -y %s",
			strings.Join(missing, " "), strings.Join(HostPackages, " "))}
	}
	Log("installing host packages: %s", strings.Join(missing, " "))
	return AptInstall(missing...)
}

func isStatic(bin string) bool {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	return err != nil || bytes.Contains(out, []byte("not a dynamic executable")) || bytes.Contains(out, []byte("statically linked"))
}

// run runs a command and returns its stdout; the error carries stderr.
func run(dir, name string, args ...string) (string, error) {
	return runEnv(dir, nil, name, args...)
}

func runEnv(dir string, env []string, name string, args ...string) (string, error) {
	p, err := LookTool(name)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(p, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// CacheDir is the folder holding downloaded packages, unpacked kernels,
// built modules and initramfs pieces.
func CacheDir() (string, error) {
	if d := os.Getenv("NVMET_REBIND_VM_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache")
	}
	d := filepath.Join(base, "nvmet-rebind-vm")
	return d, os.MkdirAll(d, 0o755)
}

// Libs lists the shared libraries (and the loader) a dynamic executable
// needs, as ldd prints them. A static executable has none.
func Libs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "linux-vdso") || strings.Contains(line, "statically linked") {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, line)
		}
		var p string
		if i := strings.Index(line, "=>"); i >= 0 {
			p = strings.TrimSpace(line[i+2:])
		} else {
			p = line
		}
		if j := strings.Index(p, " ("); j >= 0 {
			p = p[:j]
		}
		if strings.HasPrefix(p, "/") {
			libs = append(libs, p)
		}
	}
	return libs, nil
}

// AddBinary copies a host executable into the archive at dst together with
// the shared libraries it needs (at their host paths).
func (a *Archive) AddBinary(dst, src string) error {
	if err := a.File(dst, src, 0o755); err != nil {
		return err
	}
	libs, err := Libs(src)
	if err != nil {
		return err
	}
	for _, l := range libs {
		if a.Has(l) {
			continue
		}
		if err := a.File(l, l, 0o755); err != nil {
			return err
		}
	}
	return nil
}
