package udev

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/udev/rdmanl"
)

// envRDMAMonitorKernel runs TestRDMAMonitorKernel: it creates and deletes
// veth0/veth1 and rxe0, so only in a VM (tests/rdmamon_test.go boots one).
const envRDMAMonitorKernel = "NVMET_REBIND_RDMAMON_KERNEL"

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	f := strings.FieldsFunc(rel, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		t.Fatalf("kernel release %q", rel)
	}
	ma, _ := strconv.Atoi(f[0])
	mi, _ := strconv.Atoi(f[1])
	return ma > major || ma == major && mi >= minor
}

// The watcher on the real kernel: from 6.12 on it sees rxe0 register (and
// its port attach veth0) and unregister, keyed by index, and from 6.13 on
// rxe0's rename and veth0's; before 6.12 it ends at once with
// ErrRDMAMonitorUnsupported.
func TestRDMAMonitorKernel(t *testing.T) {
	if os.Getenv(envRDMAMonitorKernel) != "1" {
		t.Skip(envRDMAMonitorKernel + "=1 runs this in the test VM (go test ./tests -run TestRDMAMonitor)")
	}
	sh := shell(t)
	vethPair(t, sh)

	hints := make(chan Hint, 256)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := new(Stats)
	done := make(chan error, 1)
	go func() {
		done <- WatchRDMAMonitor(ctx, func(h Hint) {
			select {
			case hints <- h:
			default:
				t.Error("hint channel full")
			}
		}, Options{Stats: st})
	}()

	if !kernelAtLeast(t, 6, 12) {
		select {
		case err := <-done:
			if !errors.Is(err, ErrRDMAMonitorUnsupported) {
				t.Fatalf("WatchRDMAMonitor on a kernel before 6.12: %v, want ErrRDMAMonitorUnsupported", err)
			}
			t.Logf("unsupported, as expected: %v", err)
		case h := <-hints:
			t.Fatalf("hint %+v on a kernel before 6.12", h)
		case <-time.After(10 * time.Second):
			t.Fatal("WatchRDMAMonitor did not end on a kernel before 6.12")
		}
		return
	}

	// want waits for a hint whose reason starts with prefix.
	want := func(prefix string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case h := <-hints:
				t.Logf("hint %+v", h)
				if strings.HasPrefix(h.Reason, prefix) && h.Source == SourceRDMAMonitor {
					return
				}
			case err := <-done:
				t.Fatalf("WatchRDMAMonitor ended: %v", err)
			case <-deadline:
				t.Fatalf("no hint %q within 10 s", prefix)
			}
		}
	}
	want("rdma monitor subscribed")
	start := time.Now()
	sh("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "veth0")
	want("rdma monitor register rxe0")
	t.Logf("register seen %v after starting rdma link add", time.Since(start).Round(time.Millisecond))
	want("rdma monitor netdev_attach rxe0 port 1 veth0")
	wantHints := 3
	if kernelAtLeast(t, 6, 13) {
		// RENAME and NETDEV_RENAME (testdata/rdmamon-7.3): the device
		// keeps its index through its rename, the netdev rename names
		// only the netdev.
		sh("rdma", "dev", "set", "rxe0", "name", "rxe9")
		want("rdma monitor rename rxe9 (was rxe0)")
		sh("rdma", "dev", "set", "rxe9", "name", "rxe0")
		want("rdma monitor rename rxe0 (was rxe9)")
		sh("ip", "link", "set", "veth0", "name", "veth9")
		want("rdma monitor netdev_rename veth9")
		sh("ip", "link", "set", "veth9", "name", "veth0")
		want("rdma monitor netdev_rename veth0")
		wantHints += 4
	}
	sh("rdma", "link", "delete", "rxe0")
	want("rdma monitor unregister rxe0")

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchRDMAMonitor after cancel: %v", err)
	}
	c := st.Snapshot().RDMAMonitor
	if c.Errors != 0 || c.Reconnects != 0 || c.Hints < uint64(wantHints) {
		t.Errorf("counts %+v: want no errors, no reconnects, ≥ %d hints", c, wantHints)
	}
}

// envRDMAMonitorNoRDMA runs TestRDMAMonitorKernelNoRDMA: in the test VM
// before any RDMA module is loaded, with module autoloading off.
const envRDMAMonitorNoRDMA = "NVMET_REBIND_RDMAMON_NORDMA"

// A host without RDMA netlink (ib_core not loaded): one error, at once.
func TestRDMAMonitorKernelNoRDMA(t *testing.T) {
	if os.Getenv(envRDMAMonitorNoRDMA) != "1" {
		t.Skip(envRDMAMonitorNoRDMA + "=1 runs this in the test VM (go test ./tests -run TestRDMAMonitor)")
	}
	if _, err := os.Stat("/sys/module/ib_core"); err == nil {
		t.Fatal("ib_core is loaded")
	}
	errc := make(chan error, 1)
	go func() {
		errc <- WatchRDMAMonitor(context.Background(), func(h Hint) { t.Errorf("hint %+v without RDMA netlink", h) }, Options{})
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrRDMAMonitorUnsupported) || !errors.Is(err, rdmanl.ErrUnsupported) {
			t.Fatalf("WatchRDMAMonitor without ib_core: %v, want ErrRDMAMonitorUnsupported and rdmanl.ErrUnsupported", err)
		}
		t.Logf("unsupported, as expected: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("WatchRDMAMonitor did not end without ib_core")
	}
}

// shell returns a runner of commands that fails t on an error.
func shell(t *testing.T) func(args ...string) {
	return func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// vethPair makes veth0/veth1, up, removed when t ends.
func vethPair(t *testing.T, sh func(args ...string)) {
	sh("ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	t.Cleanup(func() { exec.Command("ip", "link", "del", "veth0").Run() })
	sh("ip", "link", "set", "veth0", "up")
	sh("ip", "link", "set", "veth1", "up")
}
