package rdma

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/sockdiag"
)

// Live is the running kernel: RDMA netlink for devices and cm_ids, sysfs
// for the ports' GID tables, rtnetlink for addresses. The RDMA socket is
// opened lazily and re-opened after errors, so that ib_core being loaded
// after the daemon started is noticed. Without RDMA netlink nothing is
// known about devices or listeners (ErrUnsupported), and the engine writes
// nothing.
type Live struct {
	sysfsRoot string

	mu   sync.Mutex
	rdma *RDMA
}

// NewLive returns the running kernel's view with sysfs at sysfsRoot.
func NewLive(sysfsRoot string) *Live { return &Live{sysfsRoot: sysfsRoot} }

func (l *Live) conn() (*RDMA, error) {
	if l.rdma != nil {
		return l.rdma, nil
	}
	r, err := OpenRDMA()
	if err != nil {
		return nil, err
	}
	l.rdma = r
	return r, nil
}

func (l *Live) drop(err error) {
	if err != nil && l.rdma != nil && !errors.Is(err, ErrUnsupported) {
		l.rdma.Close()
		l.rdma = nil
	}
}

// Devices returns the RDMA devices with their ports' GID tables (Read,
// without the addresses). A port whose table cannot be read has GIDsKnown
// false.
func (l *Live) Devices() ([]Device, error) {
	r := l.Read(nil)
	return r.Devices, r.DevicesErr
}

// Reading is the devices and the addresses of one pass (Live.Read).
type Reading struct {
	Devices    []Device
	DevicesErr error
	Addrs      []Addr
	AddrsErr   error
}

// Read lists the addresses, then the devices with their ports' GID tables,
// from one rtnetlink reading: the addresses read are those that tell how
// far each RoCE port's table is read (RoCENeeds), so the netdevs and
// addresses are read once per pass, not once for the tables and again for
// the caller. With prev (an earlier listing), the GID tables of prev are
// kept for the ports of the same device index, name and port; other
// ports' tables are read (all of them when prev is nil).
//
// A RoCE port's table is read only as far as the entries that can matter
// (ReadSysfsGIDsNeeded): an rxe port has 1,024 entry files, a few in use
// at the start. A port whose keys cannot be told (not RoCE, no netdev,
// the addresses unreadable) is read whole.
func (l *Live) Read(prev []Device) Reading {
	links, addrs, err := NetdevsAndAddrs()
	r := Reading{Addrs: addrs, AddrsErr: err}
	r.Devices, r.DevicesErr = l.devices(prev, func(devs []Device) GIDNeeds {
		if err != nil {
			return GIDNeeds{} // every table read whole
		}
		return RoCENeeds(devs, links, addrs)
	})
	return r
}

// devices lists the devices, with prev's GID tables where they apply and
// the others read as far as needs (called once, when a table is read)
// says.
func (l *Live) devices(prev []Device, needs func([]Device) GIDNeeds) ([]Device, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.conn()
	if err != nil {
		return nil, err
	}
	devs, err := r.Devices()
	if err != nil {
		l.drop(err)
		return nil, err
	}
	type pk struct {
		dev  uint32
		name string
		port uint32
	}
	known := map[pk][]GID{}
	for _, d := range prev {
		for _, p := range d.Ports {
			if p.GIDsKnown {
				known[pk{d.Index, d.Name, p.Index}] = p.GIDs
			}
		}
	}
	var need *GIDNeeds // asked once, when a table is read
	for i := range devs {
		for j := range devs[i].Ports {
			p := &devs[i].Ports[j]
			if g, ok := known[pk{devs[i].Index, devs[i].Name, p.Index}]; ok {
				p.GIDs, p.GIDsKnown = g, true
				continue
			}
			if need == nil {
				n := needs(devs)
				need = &n
			}
			l.fillPort(devs[i], p, *need)
		}
	}
	return devs, nil
}

func (l *Live) fillPort(d Device, p *Port, needs GIDNeeds) {
	var gids []GID
	var err error
	if keys, ok := needs.Of(d, *p); ok {
		gids, err = ReadSysfsGIDsNeeded(l.sysfsRoot, d.Name, p.Index, keys)
	} else {
		gids, err = ReadSysfsGIDs(l.sysfsRoot, d.Name, p.Index)
	}
	p.GIDs, p.GIDsKnown = gids, err == nil
}

// CMIDs returns the rdma_cm identifiers of devs: one dump per device.
func (l *Live) CMIDs(devs []Device) ([]CMID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.conn()
	if err != nil {
		return nil, err
	}
	c, err := r.CMIDs(devs)
	l.drop(err)
	return c, err
}

// Addrs returns the IP addresses of every netdev.
func (l *Live) Addrs() ([]Addr, error) { return Addrs() }

// TCPListeners returns the local address:port of every TCP socket in
// LISTEN (sock_diag): nvmet-tcp's listeners among them. It needs no RDMA
// stack.
func (l *Live) TCPListeners() ([]netip.AddrPort, error) { return sockdiag.TCPListeners() }

// Close releases the RDMA socket.
func (l *Live) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rdma == nil {
		return nil
	}
	err := l.rdma.Close()
	l.rdma = nil
	return err
}
