package config

import (
	"net/netip"
	"testing"
)

func TestPublicAddr(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		// Global unicast, also when embedded in a form that reaches it.
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"172.32.0.1", true},
		{"198.20.0.1", true},
		{"192.0.1.1", true},
		{"223.255.255.254", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::808:808", true},
		{"2002:808:808::1", true},
		{"2606:4700:4700::1111", true},
		{"2a00:1450:4001:80b::200e", true},
		{"2001:200::1", true},

		// IPv4 special-purpose blocks.
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"10.0.0.1", false},
		{"100.64.0.1", false},
		{"100.127.255.254", false},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"169.254.169.254", false},
		{"172.16.0.1", false},
		{"172.31.255.254", false},
		{"192.0.0.1", false},
		{"192.0.0.170", false},
		{"192.0.2.1", false},
		{"192.88.99.1", false},
		{"192.168.1.1", false},
		{"198.18.0.1", false},
		{"198.19.255.254", false},
		{"198.51.100.1", false},
		{"203.0.113.1", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},

		// Those blocks through IPv4-mapped, NAT64 and 6to4 addresses.
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:0.0.0.0", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::a00:1", false},
		{"64:ff9b::c612:1", false},
		{"2002:7f00:1::1", false},
		{"2002:a9fe:a9fe::1", false},
		{"2002:c0a8:101::1", false},
		{"2002::1", false},

		// IPv6 outside global unicast, and its special blocks.
		{"::", false},
		{"::1", false},
		{"::127.0.0.1", false},
		{"::8.8.8.8", false},
		{"100::1", false},
		{"64:ff9b:1::a9fe:a9fe", false},
		{"64:ff9b:1::808:808", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"fec0::1", false},
		{"feff::1", false},
		{"ff02::1", false},
		{"ff0e::1", false},
		{"5f00::1", false},
		{"2001::1", false},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false},
		{"2001:2::1", false},
		{"2001:20::1", false},
		{"2001:db8::1", false},
		{"2001:db8:ffff::1", false},
		{"3fff::1", false},
		{"4000::1", false},
	}
	for _, tt := range tests {
		ip, err := netip.ParseAddr(tt.give)
		if err != nil {
			t.Fatalf("ParseAddr(%q): %v", tt.give, err)
		}
		if got := PublicAddr(ip); got != tt.want {
			t.Errorf("PublicAddr(%s) = %v, want %v", tt.give, got, tt.want)
		}
	}
	if PublicAddr(netip.Addr{}) {
		t.Errorf("PublicAddr(zero Addr) = true, want false")
	}
}

// FuzzPublicAddr checks that no address PublicAddr accepts is one the
// standard library calls non-public, and that an IPv4 address is judged
// the same through its IPv4-mapped, NAT64 and 6to4 forms.
func FuzzPublicAddr(f *testing.F) {
	for _, s := range []string{"8.8.8.8", "169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "::ffff:10.0.0.1", "2606:4700::1", "fe80::1"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		got := PublicAddr(ip)
		u := ip.Unmap()
		if got && (u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsMulticast() || u.IsUnspecified() || !u.IsGlobalUnicast()) {
			t.Fatalf("PublicAddr(%s) = true for a non-public address", ip)
		}
		if !u.Is4() {
			return
		}
		v4 := u.As4()
		var nat64, sixToFour [16]byte
		copy(nat64[:], netip.MustParseAddr("64:ff9b::").AsSlice())
		copy(nat64[12:], v4[:])
		sixToFour[0], sixToFour[1] = 0x20, 0x02
		copy(sixToFour[2:6], v4[:])
		sixToFour[15] = 1
		for _, form := range []netip.Addr{netip.AddrFrom16(u.As16()), netip.AddrFrom16(nat64), netip.AddrFrom16(sixToFour)} {
			if PublicAddr(form) != PublicAddr(u) {
				t.Fatalf("PublicAddr(%s) = %v, but PublicAddr(%s) = %v", form, PublicAddr(form), u, PublicAddr(u))
			}
		}
	})
}
