package rebind

import (
	"net/netip"
	"slices"
)

// Declared is a port→subsystems or iSER portal that a saved configuration
// (nvmetcli's /etc/nvmet/config.json, targetcli's /etc/target/saveconfig.json)
// declares. At boot, the restore of such a file fails for listeners whose
// address or RDMA device is not there yet (the kernel refuses the link or
// iser=1); the engine completes them once they can bind.
type Declared struct {
	Source string // the file
	Kind   Kind
	ID     string // port id, or <iqn>/tpgt_<N>/<np>
	Addr   netip.AddrPort
	NQNs   []string // nvmet: the subsystems the port links, in file order
}

// equal tells whether two declarations say the same.
func (d Declared) equal(o Declared) bool {
	return d.Source == o.Source && d.Kind == o.Kind && d.ID == o.ID && d.Addr == o.Addr && slices.Equal(d.NQNs, o.NQNs)
}
