package failover_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/test/failover"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func beat(id, token int64, holder string, s float64) failover.Beat {
	return failover.Beat{ID: id, Lease: failover.LeaseName, Token: token, Holder: holder, At: at(s)}
}

// TestCheck makes sure the checker catches what the scenarios rely on it
// to catch: a checker that passes everything would make them worthless.
func TestCheck(t *testing.T) {
	a := failover.Term{Identity: "a", Token: 10, OpenedAt: at(0), Start: at(0), Stop: at(20)}
	b := failover.Term{Identity: "b", Token: 20, OpenedAt: at(30), Start: at(30)}
	tests := []struct {
		name            string
		give            failover.History
		wantStale       []int64 // beat ids
		wantInterleaved []int64
		wantUnknown     []int64
		wantOverlapping int
		wantUnordered   int
	}{
		{
			name: "clean handover",
			give: failover.History{Terms: []failover.Term{a, b}, Beats: []failover.Beat{
				beat(1, 10, "a", 1), beat(2, 10, "a", 19), beat(3, 20, "b", 30.01), beat(4, 20, "b", 31),
			}},
		},
		{
			name: "old term writes after the new term opened",
			give: failover.History{Terms: []failover.Term{a, b}, Beats: []failover.Beat{
				beat(1, 10, "a", 1), beat(2, 10, "a", 30.5),
			}},
			wantStale: []int64{2},
		},
		{
			name: "writes interleave",
			give: failover.History{Terms: []failover.Term{a, b}, Beats: []failover.Beat{
				beat(1, 10, "a", 1), beat(2, 20, "b", 31), beat(3, 10, "a", 32),
			}},
			wantStale: []int64{3}, wantInterleaved: []int64{3},
		},
		{
			name: "write of no term, or under another holder's token",
			give: failover.History{Terms: []failover.Term{a}, Beats: []failover.Beat{
				beat(1, 10, "b", 1), beat(2, 15, "a", 2),
			}},
			wantUnknown: []int64{1, 2},
		},
		{
			name: "terms overlap in the logs",
			give: failover.History{Terms: []failover.Term{
				{Identity: "a", Token: 10, OpenedAt: at(0), Start: at(0), Stop: at(31)}, b,
			}},
			wantOverlapping: 1,
		},
		{
			name: "a term that never logged its stop overlaps its successor",
			give: failover.History{Terms: []failover.Term{
				{Identity: "a", Token: 10, OpenedAt: at(0), Start: at(0)}, b,
			}},
			wantOverlapping: 1,
		},
		{
			name: "terms opened out of token order",
			give: failover.History{Terms: []failover.Term{
				{Identity: "a", Token: 30, OpenedAt: at(0), Start: at(0), Stop: at(20)}, b,
			}},
			wantUnordered: 1,
		},
	}
	ids := func(bs []failover.Beat) []int64 {
		var out []int64
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := failover.Check(tt.give)
			if diff := cmp.Diff(tt.wantStale, ids(v.Stale)); diff != "" {
				t.Errorf("Check().Stale (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantInterleaved, ids(v.Interleaved)); diff != "" {
				t.Errorf("Check().Interleaved (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUnknown, ids(v.Unknown)); diff != "" {
				t.Errorf("Check().Unknown (-want +got):\n%s", diff)
			}
			if len(v.Overlapping) != tt.wantOverlapping {
				t.Errorf("Check() found %d overlapping terms, want %d", len(v.Overlapping), tt.wantOverlapping)
			}
			if len(v.Unordered) != tt.wantUnordered {
				t.Errorf("Check() found %d unordered terms, want %d", len(v.Unordered), tt.wantUnordered)
			}
			clean := tt.wantStale == nil && tt.wantInterleaved == nil && tt.wantUnknown == nil && tt.wantUnordered == 0
			if err := v.Err(); (err == nil) != clean {
				t.Errorf("Check().Err() = %v, want error: %v", err, !clean)
			}
		})
	}
}

func TestStatsOf(t *testing.T) {
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	got := failover.StatsOf(ds)
	want := failover.Stats{N: 10, Min: time.Second, P50: 5 * time.Second, Max: 10 * time.Second}
	if got != want {
		t.Errorf("StatsOf(10s..1s) = %+v, want %+v", got, want)
	}
}
