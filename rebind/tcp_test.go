package rebind_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// An nvmet TCP port restored before its address was up: the kernel
// refused the link (EADDRNOTAVAIL) and nothing listens. When the address
// appears — on a netdev with no RDMA device at all — the declared link is
// made and the port listens; after that the address going away changes
// nothing (the socket outlives it) and nothing is written.
func TestTCPBootCompletion(t *testing.T) {
	w := newWorld(t)
	w.k.AddNetdev("eth1")
	w.k.AddPort("2", "tcp", "ipv4", "192.0.2.7", "4420")
	if err := w.k.AdminLink("2", nqnA); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("the restore's link with the address absent: %v, want EADDRNOTAVAIL", err)
	}
	dir := t.TempDir()
	cfgJSON := `{"ports": [{"portid": 2, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "192.0.2.7", "trsvcid": "4420"}, "subsystems": ["` + nqnA + `"]}]}`
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfgJSON), 0o600))
	w.cfg.NvmetConfig = filepath.Join(dir, "config.json")
	w.cfg.BootWindow = time.Minute
	e := w.engine()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("wrote before the address exists: %q", log)
	}
	it := item(items, "2")
	if it.State != rebind.StateDead || !it.Managed || !strings.Contains(it.Reason, "waiting for 192.0.2.7 to appear on a netdev") {
		t.Errorf("before the address: state %v managed %v reason %q", it.State, it.Managed, it.Reason)
	}

	w.k.AddAddr("eth1", "192.0.2.7")
	items = w.reconcile(e)
	if diff := cmp.Diff([]string{nqnA}, w.links("2")); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if !w.k.Listening("nvmet_tcp", "2") {
		t.Fatalf("not listening after the address came: %s", w.k)
	}
	if it := item(items, "2"); it.State != rebind.StateListening || it.Endpoint.Kind != rebind.KindTCP {
		t.Errorf("after: state %v kind %v reason %q", it.State, it.Endpoint.Kind, it.Reason)
	}

	w.k.DelAddr("eth1", "192.0.2.7")
	w.k.ResetLog()
	items = w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("wrote after the address went (the socket outlives it): %q", log)
	}
	if it := item(items, "2"); it.State != rebind.StateListening {
		t.Errorf("address gone: state %v %q, want listening", it.State, it.Reason)
	}

	// Within the window, the admin unlinks the declared subsystem: that
	// is respected (the link was seen in place), not completed again.
	w.clk.advance(10 * time.Second)
	must(t, w.k.AdminUnlink("2", nqnA))
	w.k.ResetLog()
	items = w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Errorf("fought the admin's unlink within the window: %q", log)
	}
	if it := item(items, "2"); it.State != rebind.StateNone {
		t.Errorf("after the admin's unlink: state %v %q, want none", it.State, it.Reason)
	}
}

// A host without RDMA: the RDMA tables fail, TCP ports are still judged
// and completed; the RDMA port is unknown, never touched.
func TestTCPWithoutRDMA(t *testing.T) {
	w := newWorld(t)
	w.k.AddNetdev("eth1")
	w.k.AddAddr("eth1", "192.0.2.8")
	w.k.TCPPort("3", "192.0.2.8", "4420", nqnA)
	w.k.CMIDsErr = errors.New("RDMA netlink: protocol not supported")
	e := w.engine()
	items := w.reconcile(e)
	if log := w.k.LogStrings(); len(log) != 0 {
		t.Fatalf("writes: %q", log)
	}
	if it := item(items, "3"); it.State != rebind.StateListening {
		t.Errorf("tcp port: %v %q", it.State, it.Reason)
	}
	if it := item(items, "1"); it.State != rebind.StateUnknown {
		t.Errorf("rdma port: %v %q, want unknown", it.State, it.Reason)
	}
	w.k.TCPErr = errors.New("sock_diag: permission denied")
	items = w.reconcile(e)
	if it := item(items, "3"); it.State != rebind.StateUnknown || !strings.Contains(it.Reason, "sock_diag: permission denied") {
		t.Errorf("tcp port with sock_diag failing: %v %q", it.State, it.Reason)
	}
}
