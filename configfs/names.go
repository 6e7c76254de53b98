package configfs

// The kernel's naming rules for configfs objects and the ids built of them.

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseNP parses an np directory name: "192.0.2.1:3260" or
// "[2001:db8::1]:3260" (the form iscsi_target_configfs.c accepts).
func ParseNP(name string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(name)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("np %q is not <ip>:<port> or [<ipv6>]:<port>", name)
	}
	if ap.Addr().Zone() != "" || ap.Addr().Is4In6() {
		return netip.AddrPort{}, fmt.Errorf("np %q: zoned or IPv4-mapped addresses are not supported", name)
	}
	return ap, nil
}

// ParsePortalID splits "<iqn>/<tpgt_N>/<np>", each part a name configfs
// takes (checkName).
func ParsePortalID(id string) (iqn, tpg, np string, err error) {
	iqn, tpg, np, ok := SplitPortalID(id)
	if !ok {
		return "", "", "", fmt.Errorf("portal %q: want <iqn>/tpgt_<N>/<ip>:<port>", id)
	}
	for _, p := range [...]string{iqn, tpg, np} {
		if err := checkName(p); err != nil {
			return "", "", "", fmt.Errorf("portal %q: %w", id, err)
		}
	}
	return iqn, tpg, np, nil
}

// SplitPortalID is ParsePortalID's split alone, for an id already parsed
// (the portal a write of it was made to): three parts, with no check of
// what each holds.
func SplitPortalID(id string) (iqn, tpg, np string, ok bool) {
	iqn, rest, ok1 := strings.Cut(id, "/")
	tpg, np, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || strings.IndexByte(np, '/') >= 0 {
		return "", "", "", false
	}
	return iqn, tpg, np, true
}

// The kernel's naming rules for the objects a journal entry names, so that
// an entry is refused before any write, as the kernel would refuse it
// after the first.
const (
	maxName = 255 // NAME_MAX: a configfs directory entry
	maxNQN  = 223 // NVMF_NQN_SIZE less its NUL (include/linux/nvme.h)
	maxIQN  = 223 // ISCSI_IQN_LEN less its NUL (target/iscsi_target_core.h)
)

// CheckPortID checks an nvmet port id as nvmet_ports_make does: a u16 as
// kstrtou16(name, 0) reads it (decimal, 0x hex, 0 octal).
func CheckPortID(id string) error {
	if err := checkName(id); err != nil {
		return fmt.Errorf("nvmet port id: %w", err)
	}
	digits, base := id, 10
	switch {
	case len(id) > 2 && (id[:2] == "0x" || id[:2] == "0X"):
		digits, base = id[2:], 16
	case len(id) > 1 && id[0] == '0':
		digits, base = id[1:], 8
	}
	if strings.ContainsAny(digits, "+-_") {
		digits = ""
	}
	if _, err := strconv.ParseUint(digits, base, 16); err != nil {
		return fmt.Errorf("nvmet port id %q: not a number from 0 to 65535", id)
	}
	return nil
}

// CheckLink checks a port's link: its name a configfs entry, its target
// an NQN the kernel can have (nvmet_subsys_make).
func CheckLink(l Link) error {
	if err := checkName(l.Name); err != nil {
		return fmt.Errorf("link name: %w", err)
	}
	if err := checkName(l.NQN); err != nil {
		return fmt.Errorf("link target: %w", err)
	}
	if len(l.NQN) > maxNQN {
		return fmt.Errorf("link target %.40q…: an NQN is at most %d bytes", l.NQN, maxNQN)
	}
	return nil
}

// CheckPortalID checks "<iqn>/tpgt_<N>/<np>" as LIO's configfs makes them:
// an IQN of at most 223 bytes, tpgt_ and a u16, an np that ParseNP reads.
func CheckPortalID(id string) error {
	iqn, tpg, np, err := ParsePortalID(id)
	if err != nil {
		return err
	}
	if len(iqn) > maxIQN {
		return fmt.Errorf("portal %q: an IQN is at most %d bytes", id, maxIQN)
	}
	n, ok := strings.CutPrefix(tpg, "tpgt_")
	if _, err := strconv.ParseUint(n, 10, 16); !ok || err != nil {
		return fmt.Errorf("portal %q: %q is not tpgt_<0-65535>", id, tpg)
	}
	if _, err := ParseNP(np); err != nil {
		return fmt.Errorf("portal %q: %w", id, err)
	}
	return nil
}

// checkName refuses a directory entry that could lead out of the tree or
// confuse a line-oriented reader.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid name %q", name)
	}
	if len(name) > maxName {
		return fmt.Errorf("invalid name %.40q…: longer than %d bytes", name, maxName)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("invalid name %q: control character", name)
		}
	}
	return nil
}
