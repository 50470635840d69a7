// Package report builds, renders, stores and mails edihub's end-of-day
// report: the figures of one local calendar day per partner and for the
// hub, compared with the day before and the same weekday a week before,
// rendered as HTML with inline charts, plain text, CSV and JSON, and sent
// exactly once per day by the leader's report worker.
package report

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// FormatVersion is the version of the figures' JSON form; a stored report
// of another version is computed again instead of being read.
const FormatVersion = 1

// Day is a local calendar day in a time zone.
type Day struct {
	Year  int
	Month time.Month
	Date  int
	Loc   *time.Location
}

// ParseDay parses YYYY-MM-DD as a day in loc.
func ParseDay(s string, loc *time.Location) (Day, error) {
	t, err := time.ParseInLocation(time.DateOnly, s, loc)
	if err != nil {
		return Day{}, fmt.Errorf("day %q: want YYYY-MM-DD", s)
	}
	return DayOf(t, loc), nil
}

// DayOf returns the day t falls on in loc.
func DayOf(t time.Time, loc *time.Location) Day {
	y, m, d := t.In(loc).Date()
	return Day{Year: y, Month: m, Date: d, Loc: loc}
}

// Start is the day's first instant: local midnight (or, in a zone whose
// clocks skip midnight, the first local time of the day).
func (d Day) Start() time.Time {
	return time.Date(d.Year, d.Month, d.Date, 0, 0, 0, 0, d.Loc)
}

// End is the next day's Start: the day is [Start, End), 23, 24 or 25 hours
// long. It is never Start plus 24 hours.
func (d Day) End() time.Time { return d.AddDays(1).Start() }

// AddDays returns the day n calendar days later (earlier for n < 0).
func (d Day) AddDays(n int) Day {
	t := time.Date(d.Year, d.Month, d.Date+n, 12, 0, 0, 0, time.UTC)
	return Day{Year: t.Year(), Month: t.Month(), Date: t.Day(), Loc: d.Loc}
}

// Before reports whether d is an earlier calendar day than e.
func (d Day) Before(e Day) bool { return d.String() < e.String() }

// String formats the day as YYYY-MM-DD.
func (d Day) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Date) }

// Figures are one partner's (or the hub's) counts for a day. Messages are
// counted on the day they were received or submitted, with the outcome
// they have when the report is built.
type Figures struct {
	// Received: inbound documents; ReceivedBytes their payload bytes;
	// Refused those answered with an error disposition.
	Received      int64 `json:"received"`
	ReceivedBytes int64 `json:"received_bytes"`
	Refused       int64 `json:"refused"`
	// Sent: outbound documents submitted; SentBytes their payload bytes.
	Sent      int64 `json:"sent"`
	SentBytes int64 `json:"sent_bytes"`
	// Delivered: outbound with a positive MDN; Accepted: taken by the
	// partner without an MDN requested; Failed: outbound that failed.
	Delivered int64 `json:"delivered"`
	Accepted  int64 `json:"accepted_without_mdn"`
	Failed    int64 `json:"failed"`
	// FailuresByKind splits Refused and Failed by the disposition's
	// description (decryption-failed, authentication-failed, ...), or
	// not-delivered (no MDN: the partner could not be reached or refused
	// the HTTP request) and mdn-mismatch (an MDN that did not match).
	FailuresByKind map[string]int64 `json:"failures_by_kind"`
	// Queued: outbound not yet accepted by the partner (queued, sending,
	// retrying); PendingMDN: sent, awaiting an asynchronous MDN;
	// OverdueMDN: flagged overdue by the MDN poller and still unsettled.
	Queued     int64 `json:"queued"`
	PendingMDN int64 `json:"pending_mdn"`
	OverdueMDN int64 `json:"overdue_mdn"`
	// Duplicates: resends of an already received Message-ID answered
	// with the first answer, on the day the resend came.
	Duplicates int64 `json:"duplicates"`
	// LatencyP50/P95: seconds from submission to the MDN that settled an
	// outbound message; nil without such messages. LatencyCount is how
	// many there were.
	LatencyP50   *float64 `json:"mdn_latency_p50_seconds"`
	LatencyP95   *float64 `json:"mdn_latency_p95_seconds"`
	LatencyCount int64    `json:"mdn_latency_count"`
	// Retries: send attempts beyond the first.
	Retries int64 `json:"send_retries"`
	// InterchangesSent: EDI interchanges sent (acknowledgements not
	// counted); AcksAccepted, AcksWithErrors, AcksRejected: those the
	// partner's 997/999/CONTRL settled so; AcksOverdue: flagged overdue
	// and still unacknowledged. DuplicateInterchanges: interchanges
	// received again (flagged or refused), on the day they came.
	InterchangesSent      int64 `json:"interchanges_sent"`
	AcksAccepted          int64 `json:"acks_accepted"`
	AcksWithErrors        int64 `json:"acks_accepted_with_errors"`
	AcksRejected          int64 `json:"acks_rejected"`
	AcksOverdue           int64 `json:"acks_overdue"`
	DuplicateInterchanges int64 `json:"duplicate_interchanges"`
}

// Hub is the whole hub's figures: the partners' sums and what only the
// hub has.
type Hub struct {
	Figures
	// Terms: leadership terms opened; Failovers: those that changed the
	// leader process.
	Terms     int64 `json:"leader_terms"`
	Failovers int64 `json:"failovers"`
	// FencingRejections: leader-gated writes refused for a stale token.
	FencingRejections int64 `json:"fencing_rejections"`
	// BacklogOutbound: outbound messages unfinished at the end of the day
	// (any day's); BacklogMDNInbox: async MDNs not yet processed then.
	BacklogOutbound int64 `json:"backlog_outbound"`
	BacklogMDNInbox int64 `json:"backlog_mdn_inbox"`
}

// Partner is one partner's figures.
type Partner struct {
	Name string `json:"partner"`
	// Station is the AS2 ID of the station the partner trades with, when
	// the hub has several; empty otherwise.
	Station string `json:"station,omitempty"`
	Figures
}

// Hour is one hour of the day's volume.
type Hour struct {
	Start time.Time `json:"start"`
	// Label is the local time the hour starts at, with the zone's
	// abbreviation when the day has a daylight-saving change ("02:00
	// CEST", then "02:00 CET").
	Label string `json:"label"`
	In    int64  `json:"in"`
	Out   int64  `json:"out"`
}

// Period is the figures of one day.
type Period struct {
	Day      string    `json:"day"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Hub      Hub       `json:"hub"`
	Partners []Partner `json:"partners"`
}

// Partner returns the named partner's figures (zero when absent).
func (p *Period) Partner(name string) Figures {
	for _, q := range p.Partners {
		if q.Name == name {
			return q.Figures
		}
	}
	return Figures{}
}

// Report is a day's report.
type Report struct {
	Version  int    `json:"version"`
	Station  string `json:"station"`
	TimeZone string `json:"time_zone"`
	// GeneratedAt is when the figures were read; outcomes (delivered,
	// pending, ...) are as of then.
	GeneratedAt time.Time `json:"generated_at"`
	// Preliminary marks a report of a day that had not ended yet.
	Preliminary bool `json:"preliminary"`
	Period
	Hours []Hour `json:"hours"`
	// DayBefore and WeekBefore are the same figures for the day before
	// and for the same weekday a week before.
	DayBefore  Period `json:"day_before"`
	WeekBefore Period `json:"week_before"`
}

// Empty reports whether the day had no traffic at all.
func (r *Report) Empty() bool {
	return r.Hub.Received == 0 && r.Hub.Sent == 0 && r.Hub.Duplicates == 0
}

// Source reads the raw figures of a window. *postgres.Store implements it.
type Source interface {
	DayTraffic(ctx context.Context, start, end time.Time, lease string) (*postgres.DayTraffic, error)
}

// Builder builds reports.
type Builder struct {
	Source Source
	// Station is the hub's AS2 name, shown in the report.
	Station string
	// Lease is the leadership lease whose terms the hub figures count.
	Lease string
	// Partners configured get a row even on a day without their traffic.
	Partners []string
	// PartnerNames, when set, is asked for the configured partners at
	// each build instead of Partners (partners change while a replica
	// runs).
	PartnerNames func() []string
	// Stations, when it returns more than one station, makes a report of
	// every station: the title names them all and each partner row its
	// station (stationOf gives a partner's station).
	Stations func() (stations []string, stationOf func(partner string) string)
	// Now is the clock; reports of days not over yet are preliminary.
	Now func() time.Time
}

// Build computes the report of day: three reads of the source (the day,
// the day before, a week before).
func (b *Builder) Build(ctx context.Context, day Day) (*Report, error) {
	if b.Source == nil || b.Now == nil {
		return nil, errors.New("report: Builder needs Source and Now")
	}
	now := b.Now()
	r := &Report{
		Version:     FormatVersion,
		Station:     b.Station,
		TimeZone:    day.Loc.String(),
		GeneratedAt: now.UTC().Truncate(time.Second),
		Preliminary: now.Before(day.End()),
	}
	cur, err := b.period(ctx, day)
	if err != nil {
		return nil, err
	}
	r.Period = cur.Period
	r.Hours = hours(day, cur.raw)
	if r.DayBefore, err = b.periodOnly(ctx, day.AddDays(-1)); err != nil {
		return nil, err
	}
	if r.WeekBefore, err = b.periodOnly(ctx, day.AddDays(-7)); err != nil {
		return nil, err
	}
	// The day's rows: configured partners and any with traffic in one of
	// the three days, so a partner that fell silent shows.
	names := map[string]bool{}
	configured := b.Partners
	if b.PartnerNames != nil {
		configured = b.PartnerNames()
	}
	for _, n := range configured {
		names[n] = true
	}
	for _, p := range []*Period{&r.Period, &r.DayBefore, &r.WeekBefore} {
		for _, q := range p.Partners {
			names[q.Name] = true
		}
	}
	for _, p := range []*Period{&r.Period, &r.DayBefore, &r.WeekBefore} {
		p.Partners = fill(p.Partners, names)
	}
	if b.Stations != nil {
		if sts, of := b.Stations(); len(sts) > 1 {
			r.Station = strings.Join(sts, ", ")
			for _, p := range []*Period{&r.Period, &r.DayBefore, &r.WeekBefore} {
				for i := range p.Partners {
					p.Partners[i].Station = of(p.Partners[i].Name)
				}
			}
		}
	}
	return r, nil
}

type period struct {
	Period
	raw *postgres.DayTraffic
}

func (b *Builder) periodOnly(ctx context.Context, day Day) (Period, error) {
	p, err := b.period(ctx, day)
	return p.Period, err
}

func (b *Builder) period(ctx context.Context, day Day) (period, error) {
	raw, err := b.Source.DayTraffic(ctx, day.Start(), day.End(), b.Lease)
	if err != nil {
		return period{}, fmt.Errorf("report %s: %w", day, err)
	}
	return period{Period: Compute(day, raw), raw: raw}, nil
}

// Outbound message statuses, as the dispatcher and the MDN poller write
// them.
const (
	statusDelivered   = "delivered"
	statusSent        = "sent"
	statusFailed      = "failed"
	statusAwaitingMDN = "awaiting-mdn"
	inboundError      = postgres.InboundError
)

// Compute turns the raw figures of day into its period's figures.
func Compute(day Day, raw *postgres.DayTraffic) Period {
	p := Period{Day: day.String(), Start: raw.Start, End: raw.End}
	byName := map[string]*Figures{}
	get := func(name string) *Figures {
		f, ok := byName[name]
		if !ok {
			f = &Figures{FailuresByKind: map[string]int64{}}
			byName[name] = f
		}
		return f
	}
	for _, g := range raw.Groups {
		f := get(g.Partner)
		if g.Direction == "inbound" {
			f.Received += g.Count
			f.ReceivedBytes += g.Bytes
			if g.Status == inboundError {
				f.Refused += g.Count
				f.FailuresByKind[failureKind(g)] += g.Count
			}
			continue
		}
		f.Sent += g.Count
		f.SentBytes += g.Bytes
		f.Retries += g.Retries
		switch {
		case g.Status == statusDelivered:
			f.Delivered += g.Count
		case g.Status == statusSent:
			f.Accepted += g.Count
		case g.Status == statusFailed:
			f.Failed += g.Count
			f.FailuresByKind[failureKind(g)] += g.Count
		case g.Overdue:
			f.OverdueMDN += g.Count
		case g.Status == statusAwaitingMDN:
			f.PendingMDN += g.Count
		default:
			f.Queued += g.Count
		}
	}
	for name, n := range raw.Duplicates {
		get(name).Duplicates += n
	}
	for _, e := range raw.EDI {
		f := get(e.Partner)
		f.InterchangesSent, f.AcksAccepted, f.AcksWithErrors, f.AcksRejected = e.Sent, e.Accepted, e.WithErrors, e.Rejected
		f.AcksOverdue, f.DuplicateInterchanges = e.Overdue, e.Duplicates
	}
	for _, l := range raw.Latency {
		if l.Partner == "" {
			continue
		}
		f := get(l.Partner)
		f.LatencyCount, f.LatencyP50, f.LatencyP95 = l.Count, seconds(l.P50), seconds(l.P95)
	}
	hub := Figures{FailuresByKind: map[string]int64{}}
	for name, f := range byName {
		p.Partners = append(p.Partners, Partner{Name: name, Figures: *f})
		add(&hub, f)
	}
	sort.Slice(p.Partners, func(i, j int) bool { return p.Partners[i].Name < p.Partners[j].Name })
	for _, l := range raw.Latency {
		if l.Partner == "" {
			hub.LatencyCount, hub.LatencyP50, hub.LatencyP95 = l.Count, seconds(l.P50), seconds(l.P95)
		}
	}
	p.Hub = Hub{
		Figures:           hub,
		Terms:             raw.Terms,
		Failovers:         raw.Failovers,
		FencingRejections: raw.FencingRejections,
		BacklogOutbound:   raw.BacklogOutbound,
		BacklogMDNInbox:   raw.BacklogMDNInbox,
	}
	return p
}

// seconds rounds a latency to milliseconds, so the JSON form is stable.
func seconds(v float64) *float64 {
	v = float64(int64(v*1000+0.5)) / 1000
	return &v
}

func add(sum, f *Figures) {
	sum.Received += f.Received
	sum.ReceivedBytes += f.ReceivedBytes
	sum.Refused += f.Refused
	sum.Sent += f.Sent
	sum.SentBytes += f.SentBytes
	sum.Delivered += f.Delivered
	sum.Accepted += f.Accepted
	sum.Failed += f.Failed
	for k, n := range f.FailuresByKind {
		sum.FailuresByKind[k] += n
	}
	sum.Queued += f.Queued
	sum.PendingMDN += f.PendingMDN
	sum.OverdueMDN += f.OverdueMDN
	sum.Duplicates += f.Duplicates
	sum.Retries += f.Retries
	sum.InterchangesSent += f.InterchangesSent
	sum.AcksAccepted += f.AcksAccepted
	sum.AcksWithErrors += f.AcksWithErrors
	sum.AcksRejected += f.AcksRejected
	sum.AcksOverdue += f.AcksOverdue
	sum.DuplicateInterchanges += f.DuplicateInterchanges
}

func fill(ps []Partner, names map[string]bool) []Partner {
	have := map[string]bool{}
	for _, p := range ps {
		have[p.Name] = true
	}
	for n := range names {
		if !have[n] {
			ps = append(ps, Partner{Name: n, Figures: Figures{FailuresByKind: map[string]int64{}}})
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// Failure kinds that are not a disposition's description.
const (
	KindNotDelivered = "not-delivered"
	KindMDNMismatch  = "mdn-mismatch"
	KindError        = "error"
)

// failureKind names why the messages of g failed: the disposition's
// description, lower-cased.
func failureKind(g postgres.MessageGroup) string {
	if g.Disposition == "" {
		if g.Direction == "inbound" {
			return KindError
		}
		return KindNotDelivered
	}
	d, err := mdn.ParseDisposition(g.Disposition)
	if err != nil {
		return KindError
	}
	if desc := strings.ToLower(d.Description()); desc != "" {
		return desc
	}
	if g.Direction == "inbound" {
		return KindError
	}
	return KindMDNMismatch
}

// hours buckets the day's volume by hour since its start: 23, 24 or 25
// buckets.
func hours(day Day, raw *postgres.DayTraffic) []Hour {
	n := int(raw.End.Sub(raw.Start) / time.Hour)
	if raw.End.Sub(raw.Start)%time.Hour != 0 {
		n++
	}
	start := raw.Start
	// Label with the zone when the offset changes during the day.
	_, off0 := start.Zone()
	_, off1 := raw.End.Add(-time.Nanosecond).Zone()
	withZone := off0 != off1
	hs := make([]Hour, n)
	for i := range hs {
		t := start.Add(time.Duration(i) * time.Hour).In(day.Loc)
		label := t.Format("15:04")
		if withZone {
			label = t.Format("15:04 MST")
		}
		hs[i] = Hour{Start: t.UTC(), Label: label}
	}
	for _, h := range raw.Hourly {
		if h.Hour < 0 || h.Hour >= n {
			continue
		}
		if h.Direction == "inbound" {
			hs[h.Hour].In += h.Count
		} else {
			hs[h.Hour].Out += h.Count
		}
	}
	return hs
}
