package rdma

import (
	"errors"
	"os"
	"testing"
)

// openRDMA opens the real socket or skips when this kernel has no RDMA netlink.
func openRDMA(t *testing.T) *RDMA {
	t.Helper()
	r, err := OpenRDMA()
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("skipping: this kernel has no RDMA netlink (NETLINK_RDMA): %v", err)
	}
	if err != nil {
		t.Fatalf("OpenRDMA: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func TestRDMALive(t *testing.T) {
	r := openRDMA(t)
	devs, err := r.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, d := range devs {
		if d.Name == "" {
			t.Errorf("device %d without a name", d.Index)
		}
	}
	ids, err := r.CMIDs(devs)
	if err != nil {
		t.Fatalf("CMIDs: %v", err)
	}
	for _, c := range ids {
		if c.Src.Addr().Is4In6() {
			t.Errorf("cm_id %s/%d: IPv4-mapped source %v", c.DevName, c.CMIDN, c.Src)
		}
	}
	// A device index that never existed is skipped, not an error.
	if _, err := r.CMIDs([]Device{{Index: 1<<32 - 1, Name: "gone"}}); err != nil {
		t.Errorf("CMIDs of a missing device: %v", err)
	}
	t.Logf("%d devices, %d cm_ids", len(devs), len(ids))
}

func TestRDMAClosed(t *testing.T) {
	r := openRDMA(t)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Devices(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Devices after Close: err %v, want os.ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
