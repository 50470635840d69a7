package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestHeapFloorPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		live, floor uint64
		want        int
	}{
		{live: 6 * mib, floor: 64 * mib, want: 966}, // goal 64 MiB, not 12
		{live: 32 * mib, floor: 64 * mib, want: 100},
		{live: 500 * mib, floor: 64 * mib, want: 100}, // a large message: as GOGC=100
		{live: 0, floor: 64 * mib, want: 100},
		{live: 1, floor: 64 * mib, want: 1 << 20}, // bounded
	} {
		if got := heapFloorPercent(tt.live, tt.floor); got != tt.want {
			t.Errorf("heapFloorPercent(%d, %d) = %d, want %d", tt.live, tt.floor, got, tt.want)
		}
		// The goal the percent gives is max(floor, 2 × live), within 1%.
		if p := heapFloorPercent(tt.live, tt.floor); tt.live > 0 && p < 1<<20 {
			goal, want := float64(tt.live)*float64(100+p)/100, float64(max(tt.floor, 2*tt.live))
			if goal < 0.99*want || goal > 1.01*want {
				t.Errorf("live %d, floor %d: goal %.0f, want %.0f", tt.live, tt.floor, goal, want)
			}
		}
	}
}

// TestApplyHeapFloor: after a collection the GC percent is raised to
// keep a small live heap's goal at the floor, and back to 100 when what
// is live is over half the floor; stop restores it. GOGC and a zero
// floor leave the collector alone.
func TestApplyHeapFloor(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	if f := applyHeapFloor(zap.NewNop(), func(k string) string { return map[string]string{"GOGC": "200"}[k] }, 64<<20); f != nil {
		t.Error("applied with GOGC set")
	}
	if f := applyHeapFloor(zap.NewNop(), func(string) string { return "" }, 0); f != nil {
		t.Error("applied with no floor")
	}
	f := applyHeapFloor(zap.NewNop(), func(string) string { return "" }, 1<<30)
	defer f.stop()
	waitPercent := func(ok func(int) bool) int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			runtime.GC()
			if p := f.gcPercent(); ok(p) || time.Now().After(deadline) {
				return p
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if p := waitPercent(func(p int) bool { return p > 100 }); p <= 100 {
		t.Fatalf("GC percent %d with a small live heap and a 1 GiB floor, want above 100", p)
	}
	live := make([]byte, 600<<20) // over half the floor
	if p := waitPercent(func(p int) bool { return p == 100 }); p != 100 {
		t.Errorf("GC percent %d with %d bytes live and a 1 GiB floor, want 100", p, len(live))
	}
	runtime.KeepAlive(live)
	f.stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent after stop = %d, want 100 restored", p)
	}
}
