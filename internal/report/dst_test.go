package report_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/report"
)

// TestDaylightSavingDays: on the days clocks change, in two zones, the
// day has 23 or 25 hours, every message falls in exactly one day, and
// every hour bucket holds the messages of exactly that hour.
func TestDaylightSavingDays(t *testing.T) {
	tests := []struct {
		zone      string
		day       string
		hours     int
		firstFour []string
	}{
		{"Europe/Berlin", "2026-03-29", 23, []string{"00:00 CET", "01:00 CET", "03:00 CEST", "04:00 CEST"}},
		{"Europe/Berlin", "2026-10-25", 25, []string{"00:00 CEST", "01:00 CEST", "02:00 CEST", "02:00 CET"}},
		{"America/New_York", "2026-03-08", 23, []string{"00:00 EST", "01:00 EST", "03:00 EDT", "04:00 EDT"}},
		{"America/New_York", "2026-11-01", 25, []string{"00:00 EDT", "01:00 EDT", "01:00 EST", "02:00 EST"}},
		{"Europe/Berlin", "2026-11-30", 24, []string{"00:00", "01:00", "02:00", "03:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.zone+"/"+tt.day, func(t *testing.T) {
			loc := mustLoad(t, tt.zone)
			day, err := report.ParseDay(tt.day, loc)
			if err != nil {
				t.Fatal(err)
			}
			if got := day.End().Sub(day.Start()); got != time.Duration(tt.hours)*time.Hour {
				t.Fatalf("%s lasts %s, want %d hours", day, got, tt.hours)
			}
			// A message every 20 minutes of absolute time, from the
			// start of the day before to the end of the day after, one
			// of them exactly on each midnight.
			from, to := day.AddDays(-1).Start(), day.AddDays(1).End()
			s := &seed{}
			for at := from; at.Before(to); at = at.Add(20 * time.Minute) {
				c := at
				s.msgs = append(s.msgs, seedMsg{partner: "ACME CORP", direction: "inbound", status: "processed",
					disposition: dispProcessed, size: 1, attempts: 1, created: at, completed: &c})
				s.msgs = append(s.msgs, seedMsg{partner: "ACME CORP", direction: "outbound", status: "sent",
					size: 1, attempts: 1, created: at, completed: &c})
			}
			st := newSeededStore(t, s)
			b := &report.Builder{Source: st, Station: "EDIHUB", Lease: testLease, Now: func() time.Time { return to.Add(time.Hour) }}
			var total int64
			for _, d := range []report.Day{day.AddDays(-1), day, day.AddDays(1)} {
				r, err := b.Build(context.Background(), d)
				if err != nil {
					t.Fatal(err)
				}
				total += r.Hub.Received
				if d != day {
					continue
				}
				if r.Hub.Received != int64(3*tt.hours) {
					t.Errorf("day received %d, want %d (3 an hour)", r.Hub.Received, 3*tt.hours)
				}
				if len(r.Hours) != tt.hours {
					t.Fatalf("%d hour buckets, want %d", len(r.Hours), tt.hours)
				}
				var labels []string
				for i, h := range r.Hours {
					labels = append(labels, h.Label)
					if h.In != 3 || h.Out != 3 {
						t.Errorf("bucket %d (%s) holds %d in, %d out; want 3 and 3", i, h.Label, h.In, h.Out)
					}
					if want := day.Start().Add(time.Duration(i) * time.Hour); !h.Start.Equal(want) {
						t.Errorf("bucket %d starts %s, want %s", i, h.Start, want)
					}
				}
				if diff := cmp.Diff(tt.firstFour, labels[:4]); diff != "" {
					t.Errorf("first hour labels (-want +got):\n%s", diff)
				}
				t.Logf("%s: %d hours, labels %v ... %v", day, len(r.Hours), labels[:4], labels[len(labels)-1])
			}
			if total != int64(len(s.msgs)/2) {
				t.Errorf("the three days count %d messages received, %d were stored: some counted twice or never",
					total, len(s.msgs)/2)
			}
		})
	}
}
