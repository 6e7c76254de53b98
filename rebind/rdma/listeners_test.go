package rdma

import (
	"net/netip"
	"testing"
)

func TestSameListeners(t *testing.T) {
	listen := func(dev uint32, name, src, owner string, idn uint32) CMID {
		return CMID{DevIndex: dev, DevName: name, Port: 1, State: CMStateListen, Src: netip.MustParseAddrPort(src), KernName: owner, CMIDN: idn, PID: idn}
	}
	conn := CMID{DevIndex: 1, DevName: "rxe0", Port: 1, State: 5, Src: netip.MustParseAddrPort("192.0.2.1:4420"), KernName: "nvmet_rdma"}
	a := listen(1, "rxe0", "192.0.2.1:4420", "nvmet_rdma", 1)
	b := listen(1, "rxe0", "192.0.2.1:3260", "ib_isert", 2)
	tests := []struct {
		name string
		x, y []CMID
		want bool
	}{
		{"both empty", nil, nil, true},
		{"the same", []CMID{a, b}, []CMID{a, b}, true},
		{"host connections and cm_id numbers do not count", []CMID{a, conn, b}, []CMID{listen(1, "rxe0", "192.0.2.1:4420", "nvmet_rdma", 9), b}, true},
		{"one gone", []CMID{a, b}, []CMID{a}, false},
		{"on another device", []CMID{a}, []CMID{listen(2, "rxe0", "192.0.2.1:4420", "nvmet_rdma", 1)}, false},
		{"another owner", []CMID{a}, []CMID{listen(1, "rxe0", "192.0.2.1:4420", "ib_isert", 1)}, false},
		{"another order", []CMID{a, b}, []CMID{b, a}, false},
	}
	for _, tt := range tests {
		if got := SameListeners(tt.x, tt.y); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
