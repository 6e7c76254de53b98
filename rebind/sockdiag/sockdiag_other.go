//go:build !linux

package sockdiag

import (
	"errors"
	"net/netip"
)

// TCPListeners is Linux only.
func TCPListeners() ([]netip.AddrPort, error) {
	return nil, errors.New("sock_diag: not Linux")
}
