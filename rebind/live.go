package rebind

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/kernel"
)

// LiveKernel is the running kernel: RDMA netlink for devices and cm_ids
// (sysfs for devices when RDMA netlink is missing), rtnetlink for
// addresses. The RDMA socket is opened lazily and re-opened after errors,
// so that ib_core being loaded after the daemon started is noticed.
type LiveKernel struct {
	sysfsRoot string

	mu   sync.Mutex
	rdma *kernel.RDMA
}

// NewLiveKernel returns the running kernel's view with sysfs at sysfsRoot.
func NewLiveKernel(sysfsRoot string) *LiveKernel { return &LiveKernel{sysfsRoot: sysfsRoot} }

func (l *LiveKernel) conn() (*kernel.RDMA, error) {
	if l.rdma != nil {
		return l.rdma, nil
	}
	r, err := kernel.OpenRDMA()
	if err != nil {
		return nil, err
	}
	l.rdma = r
	return r, nil
}

func (l *LiveKernel) drop(err error) {
	if err != nil && l.rdma != nil && !errors.Is(err, kernel.ErrUnsupported) {
		l.rdma.Close()
		l.rdma = nil
	}
}

// Devices implements Kernel.
func (l *LiveKernel) Devices() ([]kernel.Device, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, err := l.conn()
	if err == nil {
		var devs []kernel.Device
		devs, err = r.Devices()
		if err == nil {
			l.readGIDs(devs)
			return devs, nil
		}
		l.drop(err)
	}
	// Without RDMA netlink, sysfs still tells which devices exist (none
	// when ib_core is not loaded), but the listeners stay unknown.
	devs, serr := kernel.ReadSysfsDevices(l.sysfsRoot)
	if serr != nil && !errors.Is(serr, fs.ErrNotExist) {
		return nil, fmt.Errorf("rdma devices: netlink: %w; sysfs: %w", err, serr)
	}
	l.readGIDs(devs)
	return devs, nil
}

// readGIDs fills every port's GID table from sysfs. A port whose table
// cannot be read (device renamed or removed meanwhile, sysfs of another
// netns) keeps GIDsKnown false: the address lookup then falls back to the
// port's netdev for it, so the error is not one of the call.
func (l *LiveKernel) readGIDs(devs []kernel.Device) {
	for i := range devs {
		for j := range devs[i].Ports {
			p := &devs[i].Ports[j]
			gids, err := kernel.ReadSysfsGIDs(l.sysfsRoot, devs[i].Name, p.Index)
			if err != nil {
				continue
			}
			p.GIDs, p.GIDsKnown = gids, true
		}
	}
}

// CMIDs implements Kernel: one dump per device.
func (l *LiveKernel) CMIDs(devs []kernel.Device) ([]kernel.CMID, error) {
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

// Addrs implements Kernel.
func (l *LiveKernel) Addrs() ([]kernel.Addr, error) { return kernel.Addrs() }

// Close releases the RDMA socket.
func (l *LiveKernel) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rdma == nil {
		return nil
	}
	err := l.rdma.Close()
	l.rdma = nil
	return err
}
