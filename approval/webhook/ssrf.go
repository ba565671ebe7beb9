package webhook

import (
	"net"
	"net/netip"
	"syscall"
	"time"
)

// blockedPrefixes are the ranges the SSRF guard refuses beyond those netip
// classifies itself (loopback, private, link-local, multicast, unspecified).
var blockedPrefixes = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT, RFC 6598)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses reach the
// IPv4 address in their last four bytes.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// blockedReason names the range addr is in when the SSRF guard must refuse
// it, and returns "" for a publicly routable address.
func blockedReason(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid():
		return "invalid"
	case addr.IsUnspecified():
		return "unspecified"
	case addr.IsLoopback():
		return "loopback"
	case addr.IsPrivate():
		if addr.Is4() {
			return "private (RFC 1918)"
		}
		return "unique local (fc00::/7)"
	case addr.IsLinkLocalUnicast():
		return "link-local"
	case addr.IsMulticast(), addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, b := range blockedPrefixes {
		if b.prefix.Contains(addr) {
			return b.reason
		}
	}
	if nat64.Contains(addr) {
		b := addr.As16()
		if reason := blockedReason(netip.AddrFrom4([4]byte(b[12:]))); reason != "" {
			return "NAT64 of a " + reason
		}
	}
	return ""
}

// guardControl is the dialer's Control func: it runs after DNS resolution,
// just before connect(2), with the address about to be connected to, so
// the check cannot be bypassed by a name that resolves differently later.
func guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &BlockedAddressError{Address: address, Reason: "unparseable"}
	}
	if reason := blockedReason(ap.Addr()); reason != "" {
		return &BlockedAddressError{Address: address, Reason: reason}
	}
	return nil
}

// newDialer returns the dialer of the package-built client: guarded unless
// allowPrivate.
func newDialer(allowPrivate bool) *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = guardControl
	}
	return d
}
