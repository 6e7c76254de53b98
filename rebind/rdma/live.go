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

// Devices returns the RDMA devices with their ports' GID tables. A port
// whose table cannot be read has GIDsKnown false.
func (l *Live) Devices() ([]Device, error) { return l.DevicesReusingGIDs(nil) }

// DevicesReusingGIDs is Devices, with the GID tables of prev (an earlier
// listing) for the ports of the same device index, name and port that it
// read then; other ports' tables are read (all of them when prev is nil).
//
// A RoCE port's table is read only as far as the entries that can matter
// (RoCENeeds over the links and addresses read just before it,
// ReadSysfsGIDsNeeded): an rxe port has 1,024 entry files, a few in use
// at the start. A port whose keys cannot be told (not RoCE, no netdev,
// the links unreadable) is read whole.
func (l *Live) DevicesReusingGIDs(prev []Device) ([]Device, error) {
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
	var needs *GIDNeeds // read once, when a table is
	for i := range devs {
		for j := range devs[i].Ports {
			p := &devs[i].Ports[j]
			if g, ok := known[pk{devs[i].Index, devs[i].Name, p.Index}]; ok {
				p.GIDs, p.GIDsKnown = g, true
				continue
			}
			if needs == nil {
				needs = new(GIDNeeds)
				if links, addrs, err := NetdevsAndAddrs(); err == nil {
					*needs = RoCENeeds(devs, links, addrs)
				}
			}
			l.fillPort(devs[i], p, *needs)
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
