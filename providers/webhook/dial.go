package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Extra non-public ranges that netip's predicates do not cover.
var specialRanges = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (cloud metadata)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	// IPv6 forms that carry an IPv4 address or reach a local network.
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated)"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
}

// blockedReason names why ip may not be dialled, or returns "" when it may.
func blockedReason(ip netip.Addr, allowed []netip.Prefix) string {
	for _, p := range allowed {
		if p.Contains(ip) {
			return ""
		}
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local (cloud metadata)"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	if ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "broadcast"
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	return ""
}

// CheckAllowedNetworks says what is wrong with networks given as
// AllowedNetworks, or nil. A prefix of IPv4-mapped IPv6 addresses
// (::ffff:0:0/96, ::ffff:10.0.0.0/104) is refused: every address is
// compared in its IPv4 form, so it would match nothing and read as if it
// allowed something; written as IPv4 it says what it allows.
func CheckAllowedNetworks(networks []netip.Prefix) error {
	for _, p := range networks {
		if p.Addr().Is4In6() {
			ipv4 := "an IPv4 network"
			if bits := p.Bits() - 96; bits >= 0 {
				ipv4 = netip.PrefixFrom(p.Addr().Unmap(), bits).Masked().String()
			}
			return fmt.Errorf("%s is a network of IPv4-mapped IPv6 addresses, which are checked as IPv4: write it as %s", p, ipv4)
		}
	}
	return nil
}

// BlockedError reports a destination refused by the dial-time check.
type BlockedError struct {
	Addr   netip.Addr
	Reason string
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("destination %s is a %s address: refused (allow its network in the webhook provider's AllowedNetworks, outboxd's --webhook-allow-cidrs, if intended)", e.Addr, e.Reason)
}

// guardedDialer checks the address actually being connected to, after DNS
// resolution, so a hostname that resolves (or re-resolves) to an internal
// address is refused as surely as an IP literal.
func guardedDialer(base *net.Dialer, allowed []netip.Prefix) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := *base
	d.Control = func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook dial: parse %q: %w", address, err)
		}
		ip := ap.Addr().Unmap()
		if reason := blockedReason(ip, allowed); reason != "" {
			return &BlockedError{Addr: ip, Reason: reason}
		}
		return nil
	}
	return d.DialContext
}
