package rdma

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// addrAttempts bounds the retries of an rtnetlink dump that the kernel
// marked interrupted (NLM_F_DUMP_INTR: the table changed under it).
const addrAttempts = 3

// Addrs lists the IP addresses of all netdevs (rtnetlink RTM_GETADDR and
// RTM_GETLINK dumps), IPv4 as plain IPv4, with the link's hardware
// address. An address whose link vanished between the two dumps has an
// empty Netdev and no HWAddr.
func Addrs() ([]Addr, error) {
	_, addrs, err := NetdevsAndAddrs()
	return addrs, err
}

// NetdevsAndAddrs is Addrs with the links of the same reading (the
// relations RoCENeeds follows).
func NetdevsAndAddrs() ([]Netdev, []Addr, error) {
	var err error
	for range addrAttempts {
		var links []Netdev
		var addrs []Addr
		links, addrs, err = addrsOnce()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, addrs, err
		}
	}
	return nil, nil, fmt.Errorf("%d attempts: %w", addrAttempts, err)
}

func addrsOnce() ([]Netdev, []Addr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("rtnetlink: link dump: %w", err)
	}
	type link struct {
		name string
		hw   []byte
	}
	byIndex := make(map[int]link, len(links))
	nds := make([]Netdev, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		byIndex[a.Index] = link{name: a.Name, hw: a.HardwareAddr}
		kind := l.Type()
		if _, generic := l.(*netlink.Device); generic {
			kind = "" // no IFLA_INFO_KIND
		}
		nds = append(nds, Netdev{Index: a.Index, Name: a.Name, Kind: kind, Parent: a.ParentIndex, ParentNS: a.NetNsID >= 0,
			Master: a.MasterIndex, Loopback: a.Flags&net.FlagLoopback != 0})
	}
	nas, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("rtnetlink: address dump: %w", err)
	}
	addrs := make([]Addr, 0, len(nas))
	for _, na := range nas {
		if na.IPNet == nil {
			continue
		}
		// IFA_LOCAL when present (it differs from IFA_ADDRESS on
		// point-to-point links), else IFA_ADDRESS.
		ip, ok := netip.AddrFromSlice(na.IP)
		if !ok {
			continue
		}
		l := byIndex[na.LinkIndex]
		addrs = append(addrs, Addr{Ifindex: na.LinkIndex, Netdev: l.name, IP: ip.Unmap(), HWAddr: bytes.Clone(l.hw)})
	}
	return nds, addrs, nil
}
