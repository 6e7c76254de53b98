package tests

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/tests/vm"
)

// rdmamonInit is the guest's /init: the udev package's test binary, first
// without RDMA netlink (TestRDMAMonitorKernelNoRDMA), then with the
// suite's modules loaded (TestRDMAMonitorKernel).
const rdmamonInit = `#!/bin/sh
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /run
mkdir -p /tmp/e2e
echo 4 > /proc/sys/kernel/printk 2>/dev/null
. /e2e/lib.sh
echo "E2E BEGIN rdmamon"
# No RDMA netlink: nothing loaded yet, and no module autoloading (a
# NETLINK_RDMA socket would load ib_core).
cd /tmp
MP=$(cat /proc/sys/kernel/modprobe)
echo /nonexistent > /proc/sys/kernel/modprobe
NVMET_REBIND_RDMAMON_NORDMA=1 /usr/local/bin/udev.test -test.run '^TestRDMAMonitorKernelNoRDMA$' -test.v -test.count=1 >/tmp/rdmamon-nordma.out 2>&1
rc0=$?
echo "$MP" > /proc/sys/kernel/modprobe
sed 's/^/  /' /tmp/rdmamon-nordma.out
load_modules || {
	echo "E2E RESULT rdmamon FAIL module loading failed"
	echo "E2E DONE rc=1"
	poweroff -f
}
ip link set lo up
if [ -e /e2e/rdmamon-record ]; then
	# Recording (NVMET_REBIND_RDMAMON_RECORD on the host): first, so that
	# device indices start at 0; the files go out on the console.
	echo "E2E INFO iproute2: $(ip -V) / $(rdma -V)"
	NVMET_REBIND_RDMAMON_RECORD=/tmp/rdmamon-rec /usr/local/bin/udev.test -test.run '^TestRDMAMonitorRecord$' -test.v -test.count=1 >/tmp/rdmamon-rec.out 2>&1
	rc0=$((rc0 + $?))
	sed 's/^/  /' /tmp/rdmamon-rec.out
	for f in /tmp/rdmamon-rec/*; do
		[ -f "$f" ] || continue
		n=${f##*/}
		sed "s|^|E2E REC $n |" "$f"
		echo "E2E REC $n EOF"
	done
fi
NVMET_REBIND_RDMAMON_KERNEL=1 /usr/local/bin/udev.test -test.run '^TestRDMAMonitorKernel$' -test.v -test.count=1 >/tmp/rdmamon.out 2>&1
rc=$?
sed 's/^/  /' /tmp/rdmamon.out
if [ $rc -eq 0 ] && [ $rc0 -eq 0 ]; then
	echo "E2E RESULT rdmamon PASS $(uname -r)"
else
	echo "E2E RESULT rdmamon FAIL exit $rc0 (no RDMA netlink, and the recording if asked) $rc (rxe0)"
	rc=1
fi
echo "E2E DONE rc=$rc"
sync
poweroff -f
sleep 10
`

// envRDMAMonRecord names a folder: TestRDMAMonitor then also records the
// kernel's monitor datagrams (udev TestRDMAMonitorRecord) and writes them
// there as .hex files (a relative path is taken from the repository's
// root). One kernel at a time: NVMET_REBIND_E2E_KERNELS=newest
// NVMET_REBIND_RDMAMON_RECORD=udev/testdata/rdmamon-7.3 go test ./tests
// -run '^TestRDMAMonitor$' (udev/testdata/rdmamon-7.3/README.md).
const envRDMAMonRecord = "NVMET_REBIND_RDMAMON_RECORD"

// TestRDMAMonitor boots each kernel and runs udev's real-kernel tests
// inside: on 6.12 and later udev.WatchRDMAMonitor sees rxe0 register,
// attach veth0 and unregister (and on 6.13 and later rename, and its
// netdev rename); on 6.1, and on any kernel before ib_core is loaded, it
// ends at once with udev.ErrRDMAMonitorUnsupported. About half a minute
// per kernel.
func TestRDMAMonitor(t *testing.T) {
	skipUnlessVM(t)
	recordDir := os.Getenv(envRDMAMonRecord)
	if recordDir != "" && len(kernelSeries()) != 1 {
		t.Fatalf("%s: record one kernel at a time (%s names %d)", envRDMAMonRecord, envKernels, len(kernelSeries()))
	}
	if recordDir != "" && !filepath.IsAbs(recordDir) {
		recordDir = filepath.Join(repoRoot(t), recordDir)
	}
	for _, series := range kernelSeries() {
		t.Run(series, func(t *testing.T) {
			k, err := vm.PrepareKernel(series)
			if err != nil {
				if s, ok := err.(vm.ErrSkip); ok {
					t.Skip(s.Msg)
				}
				t.Fatalf("kernel %s: %v", series, err)
			}
			base, err := vm.BaseInitramfs(k, nil)
			if err != nil {
				t.Fatalf("base initramfs: %v", err)
			}
			dir := t.TempDir()
			bin := filepath.Join(dir, "udev.test")
			cmd := exec.Command(goTool(), "test", "-c", "-trimpath", "-o", bin, "./udev")
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go test -c ./udev: %v\n%s", err, out)
			}
			ov := vm.Overlay{
				Files: map[string]string{
					"/e2e/lib.sh":              filepath.Join("guest", "lib.sh"),
					"/usr/local/bin/udev.test": bin,
				},
				Data: map[string][]byte{"/init": []byte(rdmamonInit)},
			}
			if recordDir != "" {
				ov.Data["/e2e/rdmamon-record"] = []byte("1\n")
			}
			overlay := filepath.Join(dir, "overlay.cpio.gz")
			if err := ov.Write(overlay); err != nil {
				t.Fatalf("overlay: %v", err)
			}
			initrd := filepath.Join(dir, "initrd.img")
			if err := vm.ConcatFiles(initrd, base, overlay); err != nil {
				t.Fatal(err)
			}
			img := &vmImage{kernel: k, initrd: initrd}
			res := bootVM(t, img, nil, 4*time.Minute, nil)
			if _, ok := res.Events.Results["rdmamon"]; !ok && panickedMidway(res) {
				// As the systemd test does: the boot holds nothing but this
				// check, so a kernel that panicked in it (under TCG) is
				// booted once more, the panic kept as a warning.
				p := saveConsole(t, k.Series+"-rdmamon-panicked.log", res.Console)
				t.Logf("WARNING: the kernel panicked during the check (console: %s): booting once more; its tail:\n%s", p, tail(res.Console, 30))
				res = bootVM(t, img, nil, 4*time.Minute, nil)
			}
			r, ok := res.Events.Results["rdmamon"]
			if !ok || r.Status != "PASS" {
				p := saveConsole(t, k.Series+"-rdmamon-console.log", res.Console)
				t.Fatalf("rdmamon on %s: %v %s (timed out %v)\nconsole log: %s\n%s", k.Release, ok, r.Detail, res.TimedOut, p, tail(res.Console, 60))
			}
			t.Logf("%s in %v:\n%s", k.Release, res.Elapsed.Round(time.Second), guestOutput(res.Console))
			if recordDir != "" {
				writeRecording(t, recordDir, res.Console)
				t.Logf("guest: %s", strings.Join(res.Events.Info, "; "))
			}
		})
	}
}

// guestOutput is the test binary's output: the console lines it indented.
func guestOutput(console []byte) string {
	var out []string
	for _, l := range strings.Split(string(console), "\n") {
		if strings.HasPrefix(l, "  ") {
			out = append(out, strings.TrimRight(l, "\r"))
		}
	}
	return strings.Join(out, "\n")
}

// writeRecording writes the files the guest printed as "E2E REC <name>
// <line>" lines, each ended by "E2E REC <name> EOF", into dir. Every
// datagram line must be hex; a file without its EOF line is an error.
func writeRecording(t *testing.T, dir string, console []byte) {
	t.Helper()
	files := map[string][]string{}
	ended := map[string]bool{}
	var order []string
	for _, l := range strings.Split(string(console), "\n") {
		l = strings.TrimRight(l, "\r")
		i := strings.Index(l, "E2E REC ")
		if i < 0 {
			continue
		}
		name, line, _ := strings.Cut(l[i+len("E2E REC "):], " ")
		if name == "" || strings.ContainsAny(name, "/\\") || !strings.HasSuffix(name, ".hex") {
			t.Fatalf("recording: bad file name in %q", l)
		}
		if _, ok := files[name]; !ok {
			order = append(order, name)
		}
		if line == "EOF" {
			ended[name] = true
			continue
		}
		if !strings.HasPrefix(line, "#") {
			if _, err := hex.DecodeString(line); err != nil {
				t.Fatalf("recording: %s: a datagram line that is not hex (console interleaving?): %q", name, line)
			}
		}
		files[name] = append(files[name], line)
	}
	if len(order) == 0 {
		t.Fatal("recording: the guest printed no file")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range order {
		if !ended[name] {
			t.Fatalf("recording: %s has no EOF line", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(files[name], "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("recording: %d files in %s", len(order), dir)
}
