package config

import "net/netip"

// PublicAddr reports whether ip is a global unicast address: one an async
// MDN may be sent to without allow_private_mdn_targets. It is an allow
// list, so that a range this code does not know is refused:
//
//   - IPv4 outside the blocks of IANA's special-purpose registry that are
//     not globally reachable (this network 0/8, RFC 1918, CGNAT
//     100.64/10, loopback, link-local, IETF protocol assignments
//     192.0.0/24, the documentation and benchmarking ranges, the 6to4
//     relay anycast 192.88.99/24, multicast and the reserved 240/4 with
//     the broadcast address);
//   - IPv6 inside the global unicast block 2000::/3, outside the IETF
//     protocol assignments 2001::/23 (Teredo among them), the
//     documentation ranges 2001:db8::/32 and 3fff::/20. Everything outside
//     2000::/3 (loopback, unspecified, IPv4-compatible, discard-only
//     100::/64, unique local fc00::/7, link-local, the deprecated
//     site-local fec0::/10, multicast, local-use NAT64 64:ff9b:1::/48
//     whose IPv4 embedding only its network knows) is refused.
//
// An address that embeds the IPv4 address a packet ends up at is judged
// by that address: IPv4-mapped (::ffff:0:0/96), NAT64's well-known prefix
// (64:ff9b::/96: the metadata address 169.254.169.254 is
// 64:ff9b::a9fe:a9fe) and 6to4 (2002::/16). An address with a zone is
// link-scoped and refused.
func PublicAddr(ip netip.Addr) bool {
	if !ip.IsValid() || ip.Zone() != "" {
		return false
	}
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			ip = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(ip):
			ip = netip.AddrFrom4([4]byte(b[2:6]))
		default:
			return globalUnicast6.Contains(ip) && !inAny(ip, nonPublic6)
		}
	}
	return !inAny(ip, nonPublic4)
}

func inAny(ip netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

var (
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	globalUnicast6 = netip.MustParsePrefix("2000::/3")

	// nonPublic6 are the blocks of 2000::/3 that are not global unicast
	// (6to4 is unwrapped before).
	nonPublic6 = prefixes(
		"2001::/23",     // IETF protocol assignments: Teredo, benchmarking, ORCHID
		"2001:db8::/32", // documentation
		"3fff::/20",     // documentation (RFC 9637)
	)

	// nonPublic4 are the IPv4 blocks that are not globally reachable
	// unicast (RFC 6890 and IANA's special-purpose registry).
	nonPublic4 = prefixes(
		"0.0.0.0/8",       // this network
		"10.0.0.0/8",      // private
		"100.64.0.0/10",   // shared address space (CGNAT)
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local (cloud metadata)
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation (TEST-NET-1)
		"192.88.99.0/24",  // deprecated 6to4 relay anycast
		"192.168.0.0/16",  // private
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation (TEST-NET-2)
		"203.0.113.0/24",  // documentation (TEST-NET-3)
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, and the broadcast 255.255.255.255
	)
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}
