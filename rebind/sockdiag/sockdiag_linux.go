//go:build linux

package sockdiag

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TCPListeners returns the local address:port of every TCP socket in
// LISTEN, IPv4 and IPv6 (an IPv4-mapped address unmapped), sorted, without
// duplicates. An interrupted dump (the table changed meanwhile) is read
// again, up to three times, then reported. Where the kernel answers that
// it has no TCP sock_diag (ENOENT: tcp_diag not loaded, and not loadable),
// /proc/net/tcp and tcp6 are read instead.
func TCPListeners() ([]netip.AddrPort, error) {
	out, err := diag()
	if errors.Is(err, unix.ENOENT) {
		var perr error
		if out, perr = procNet(); perr != nil {
			return nil, fmt.Errorf("%w; and %w (modprobe tcp_diag)", err, perr)
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// maxProcNet bounds a read of /proc/net/tcp (150 bytes a socket: some
// 400,000 sockets).
const maxProcNet = 64 << 20

func procNet() ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := bounded.ReadFile(f, maxProcNet, true)
		if errors.Is(err, fs.ErrNotExist) && f == "/proc/net/tcp6" {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		got, err := parseProcNet(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func diag() ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, fam := range []uint8{afInet, afInet6} {
		var got []netip.AddrPort
		var err error
		for try := 0; try < 3; try++ {
			if got, err = dump(fam); !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sock_diag (NETLINK_SOCK_DIAG) TCP listeners, family %d: %w", fam, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

func dump(family uint8) ([]netip.AddrPort, error) {
	req := nl.NewNetlinkRequest(sockDiagByFamily, unix.NLM_F_DUMP)
	req.AddData(request{family})
	var out []netip.AddrPort
	var bad error
	err := req.ExecuteIter(unix.NETLINK_INET_DIAG, sockDiagByFamily, func(msg []byte) bool {
		ap, listening, err := parse(msg)
		if err != nil {
			bad = err
			return false
		}
		if listening {
			out = append(out, ap)
		}
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, err
	}
	return out, err
}
