package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestNeverRepeats: every port handed out is free and none is handed out
// twice, although each listener is closed before the next pick (the
// kernel hands the same port out again within a few hundred picks).
func TestNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	check := func(p int) {
		t.Helper()
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < low || p >= ephemeralLow() {
			t.Fatalf("port %d is outside %d…%d, below the kernel's ephemeral ports", p, low, ephemeralLow()-1)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d handed out, but it is not free: %v", p, err)
		}
		l.Close()
	}
	for range 200 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		check(p)
	}
	ps, err := Ports(200)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		check(p)
	}
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.ResolveTCPAddr("tcp", a); err != nil {
		t.Errorf("Addr() = %q: %v", a, err)
	}
}
