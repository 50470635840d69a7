package report_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// recount counts the seeded messages of [start, end) one by one, the way
// docs/report.md defines the figures, without the store's grouping.
func recount(s *seed, start, end time.Time) report.Period {
	in := func(t time.Time) bool { return !t.Before(start) && t.Before(end) }
	figs := map[string]*report.Figures{}
	lat := map[string][]float64{}
	get := func(p string) *report.Figures {
		if figs[p] == nil {
			figs[p] = &report.Figures{FailuresByKind: map[string]int64{}}
		}
		return figs[p]
	}
	kind := func(m seedMsg) string {
		switch m.disposition {
		case dispAuth:
			return "authentication-failed"
		case dispDecrypt:
			return "decryption-failed"
		case dispUnknown:
			return "unknown-trading-relationship"
		case "":
			return report.KindNotDelivered
		}
		return report.KindMDNMismatch
	}
	for _, m := range s.msgs {
		if !in(m.created) {
			continue
		}
		f := get(m.partner)
		if m.direction == "inbound" {
			f.Received++
			f.ReceivedBytes += m.size
			if m.status == "error" {
				f.Refused++
				f.FailuresByKind[kind(m)]++
			}
			continue
		}
		f.Sent++
		f.SentBytes += m.size
		f.Retries += int64(m.attempts - 1)
		switch m.status {
		case "delivered":
			f.Delivered++
		case "sent":
			f.Accepted++
		case "failed":
			f.Failed++
			f.FailuresByKind[kind(m)]++
		case "awaiting-mdn":
			if m.overdue {
				f.OverdueMDN++
			} else {
				f.PendingMDN++
			}
		default:
			f.Queued++
		}
		if (m.status == "delivered" || m.status == "failed") && m.disposition != "" {
			d := m.completed.Sub(m.created).Seconds()
			lat[m.partner] = append(lat[m.partner], d)
			lat[""] = append(lat[""], d)
		}
	}
	for _, d := range s.dups {
		if in(d.at) {
			get(d.partner).Duplicates++
		}
	}
	setLat := func(f *report.Figures, v []float64) {
		if len(v) == 0 {
			return
		}
		p50, p95 := round3(percentile(v, 0.5)), round3(percentile(v, 0.95))
		f.LatencyCount, f.LatencyP50, f.LatencyP95 = int64(len(v)), &p50, &p95
	}
	p := report.Period{Start: start, End: end}
	hub := report.Hub{Figures: report.Figures{FailuresByKind: map[string]int64{}}}
	for name, f := range figs {
		setLat(f, lat[name])
		p.Partners = append(p.Partners, report.Partner{Name: name, Figures: *f})
		h := &hub.Figures
		h.Received += f.Received
		h.ReceivedBytes += f.ReceivedBytes
		h.Refused += f.Refused
		h.Sent += f.Sent
		h.SentBytes += f.SentBytes
		h.Delivered += f.Delivered
		h.Accepted += f.Accepted
		h.Failed += f.Failed
		h.Queued += f.Queued
		h.PendingMDN += f.PendingMDN
		h.OverdueMDN += f.OverdueMDN
		h.Duplicates += f.Duplicates
		h.Retries += f.Retries
		for k, n := range f.FailuresByKind {
			h.FailuresByKind[k] += n
		}
	}
	setLat(&hub.Figures, lat[""])
	sort.Slice(p.Partners, func(i, j int) bool { return p.Partners[i].Name < p.Partners[j].Name })
	prev := ""
	for _, tm := range s.terms {
		if in(tm.at) {
			hub.Terms++
			if prev != "" && prev != tm.holder {
				hub.Failovers++
			}
		}
		prev = tm.holder
	}
	for _, r := range s.rejections {
		if in(r) {
			hub.FencingRejections++
		}
	}
	for _, m := range s.msgs {
		if m.direction == "outbound" && m.created.Before(end) && (m.completed == nil || !m.completed.Before(end)) {
			hub.BacklogOutbound++
		}
	}
	for _, x := range s.inbox {
		if x.received.Before(end) && (x.processed == nil || !x.processed.Before(end)) {
			hub.BacklogMDNInbox++
		}
	}
	p.Hub = hub
	return p
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// TestFiguresEqualRecount: the report's figures for a day, the day before
// and the week before equal a message-by-message recount of what was
// stored.
func TestFiguresEqualRecount(t *testing.T) {
	loc := mustLoad(t, "Europe/Berlin")
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, loc)
	s := standardSeed(day)
	st := newSeededStore(t, s)
	b := &report.Builder{Source: st, Station: "EDIHUB", Lease: testLease,
		Now: func() time.Time { return day.AddDate(0, 0, 1).Add(15 * time.Minute) }}
	r, err := b.Build(context.Background(), report.DayOf(day, loc))
	if err != nil {
		t.Fatal(err)
	}
	if r.Empty() || r.Preliminary {
		t.Fatalf("Build: empty %v, preliminary %v; want a full, final day", r.Empty(), r.Preliminary)
	}
	for _, tt := range []struct {
		name string
		got  report.Period
		day  time.Time
	}{
		{"day", r.Period, day},
		{"day before", r.DayBefore, day.AddDate(0, 0, -1)},
		{"week before", r.WeekBefore, day.AddDate(0, 0, -7)},
	} {
		want := recount(s, tt.day, tt.day.AddDate(0, 0, 1))
		got := tt.got
		got.Day = ""
		// Build lists every partner of the three days; the recount only
		// those with traffic.
		var ps []report.Partner
		for _, p := range got.Partners {
			if p.Received+p.Sent+p.Duplicates > 0 {
				ps = append(ps, p)
			}
		}
		got.Partners = ps
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: figures differ from the recount (-recount +report):\n%s", tt.name, diff)
		}
	}
	// The seed's known facts, so a recount that shares a mistake with the
	// store still fails.
	if r.Hub.Terms != 3 || r.Hub.Failovers != 2 || r.Hub.FencingRejections != 2 || r.Hub.BacklogMDNInbox != 2 {
		t.Errorf("hub terms/failovers/rejections/inbox backlog = %d/%d/%d/%d, want 3/2/2/2",
			r.Hub.Terms, r.Hub.Failovers, r.Hub.FencingRejections, r.Hub.BacklogMDNInbox)
	}
	var hourly int64
	for _, h := range r.Hours {
		hourly += h.In + h.Out
	}
	if hourly != r.Hub.Received+r.Hub.Sent || len(r.Hours) != 24 {
		t.Errorf("hours: %d buckets holding %d messages, want 24 holding %d", len(r.Hours), hourly, r.Hub.Received+r.Hub.Sent)
	}
	t.Logf("hub: received %d, sent %d, delivered %d, failed %d, refused %d, duplicates %d",
		r.Hub.Received, r.Hub.Sent, r.Hub.Delivered, r.Hub.Failed, r.Hub.Refused, r.Hub.Duplicates)
}
