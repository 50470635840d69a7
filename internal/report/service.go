package report

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/edihub/edihub/internal/postgres"
)

// ErrInvalidDay reports a day that is not YYYY-MM-DD, today or yesterday.
var ErrInvalidDay = errors.New("invalid day: want YYYY-MM-DD, today or yesterday")

// ErrUnknownFormat reports a format other than html, text, csv, json, png.
var ErrUnknownFormat = errors.New("unknown format: want html, text, csv, json or png")

// Formats are the renderings Format knows.
var Formats = []string{"html", "text", "csv", "json", "png"}

// Format renders r: "html" (charts as data: URIs, for a browser), "text",
// "csv", "json" or "png" (the hourly chart).
func Format(r *Report, format string) ([]byte, error) {
	switch format {
	case "html":
		img := Images{}
		if !r.Empty() {
			vol, err := VolumeChart(r)
			if err != nil {
				return nil, err
			}
			img.Volume = "data:image/png;base64," + base64.StdEncoding.EncodeToString(vol)
			parts, err := PartnerChart(r)
			if err != nil {
				return nil, err
			}
			if parts != nil {
				img.Partners = "data:image/png;base64," + base64.StdEncoding.EncodeToString(parts)
			}
		}
		return HTML(r, img)
	case "text":
		return Text(r), nil
	case "csv":
		return CSV(r)
	case "json":
		return JSON(r)
	case "png":
		return VolumeChart(r)
	}
	return nil, fmt.Errorf("%q: %w", format, ErrUnknownFormat)
}

// ReportReader reads stored reports. *postgres.Store implements it.
type ReportReader interface {
	Report(ctx context.Context, day string) (postgres.StoredReport, error)
}

// Load returns day's stored report when there is one (the figures the
// managers were mailed), else builds it now (a day not over is
// preliminary).
func Load(ctx context.Context, store ReportReader, b *Builder, day Day) (*Report, error) {
	row, err := store.Report(ctx, day.String())
	switch {
	case err == nil:
		if r, err := FromJSON(row.Figures); err == nil {
			return r, nil
		}
		// Stored by another version: build again.
	case !errors.Is(err, postgres.ErrReportNotFound):
		return nil, err
	}
	return b.Build(ctx, day)
}

// Service renders reports on demand (GET /api/v1/reports/{day}).
type Service struct {
	Store    ReportReader
	Builder  *Builder
	Location *time.Location
	Now      func() time.Time
}

// Render returns the report of day (YYYY-MM-DD, today or yesterday in the
// report time zone) in format; ErrInvalidDay and ErrUnknownFormat for bad
// input.
func (s *Service) Render(ctx context.Context, day, format string) ([]byte, error) {
	d, err := s.ParseDay(day)
	if err != nil {
		return nil, err
	}
	if !validFormat(format) {
		return nil, fmt.Errorf("%q: %w", format, ErrUnknownFormat)
	}
	r, err := Load(ctx, s.Store, s.Builder, d)
	if err != nil {
		return nil, err
	}
	return Format(r, format)
}

func validFormat(f string) bool {
	for _, g := range Formats {
		if f == g {
			return true
		}
	}
	return false
}

// ParseDay reads YYYY-MM-DD, today or yesterday in the service's zone.
func (s *Service) ParseDay(v string) (Day, error) {
	now := s.Now()
	switch v {
	case "today":
		return DayOf(now, s.Location), nil
	case "yesterday":
		return DayOf(now, s.Location).AddDays(-1), nil
	}
	d, err := ParseDay(v, s.Location)
	if err != nil {
		return d, fmt.Errorf("%q: %w", v, ErrInvalidDay)
	}
	return d, nil
}

// ManualStore is what edihub report -send needs. *postgres.Store
// implements it.
type ManualStore interface {
	ReportReader
	SaveReportManual(ctx context.Context, lease string, r postgres.NewReport) (postgres.StoredReport, error)
	ClaimReportMailManual(ctx context.Context, lease, day, by string, takeover time.Duration) (int64, error)
	MarkReportMailedManual(ctx context.Context, day string, token int64, by string) error
}

// ManualOptions configure SendManual.
type ManualOptions struct {
	Store   ManualStore
	Builder *Builder
	Sender  Sender
	// Lease whose current token the claim is made under.
	Lease string
	// By names the sender in the claim.
	By string
	// Force sends whatever the claim says, under a new Message-ID, and
	// records nothing.
	Force bool
	// Takeover is the age after which another sender's claim under the
	// current term is taken over; default 15 min.
	Takeover time.Duration
	Now      func() time.Time
	// Rand makes the unique part of a preliminary or forced mail's
	// Message-ID (two sent within one second differ); default
	// crypto/rand.
	Rand io.Reader
}

// Sent describes a mail SendManual sent.
type Sent struct {
	MessageID string
	// Note says how the mail differs from the day's report mail.
	Note string
}

// ErrAlreadyMailed reports a day whose report was mailed; -force sends
// it again.
var ErrAlreadyMailed = errors.New("the day's report was already mailed (edihub report -send -force mails it again)")

// ErrClaimedElsewhere reports a day whose report mail another sender is
// sending right now.
var ErrClaimedElsewhere = errors.New("the day's report mail is being sent by another sender (the leader, or another edihub report -send); try again later")

// SendManual mails day's report for an operator. A finished day goes
// through the leader's exactly-once claim: stored (unless stored), claimed
// under the lease's current token, sent with the day's Message-ID and
// recorded, so the leader will not mail it again. A day not over is
// preliminary: built now, mailed with its own Message-ID, stored nowhere.
// Force mails a finished day again under a new Message-ID.
func SendManual(ctx context.Context, o ManualOptions, day Day) (Sent, error) {
	if o.Takeover <= 0 {
		o.Takeover = 15 * time.Minute
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	now := o.Now()
	if now.Before(day.End()) {
		r, err := o.Builder.Build(ctx, day)
		if err != nil {
			return Sent{}, err
		}
		id, err := variantID(r.Station, r.Day, "preliminary", now, o.Rand)
		if err != nil {
			return Sent{}, err
		}
		return send(ctx, o, r, id, now, " (preliminary: the day is not over; its report is still mailed once it is)")
	}
	if o.Force {
		r, err := Load(ctx, o.Store, o.Builder, day)
		if err != nil {
			return Sent{}, err
		}
		id, err := variantID(r.Station, r.Day, "resent", now, o.Rand)
		if err != nil {
			return Sent{}, err
		}
		return send(ctx, o, r, id, now, " (forced: a new Message-ID; the claim was not touched)")
	}
	row, err := o.Store.Report(ctx, day.String())
	if errors.Is(err, postgres.ErrReportNotFound) {
		nr, rerr := Render(ctx, o.Builder, day)
		if rerr != nil {
			return Sent{}, rerr
		}
		row, err = o.Store.SaveReportManual(ctx, o.Lease, nr)
	}
	if err != nil {
		return Sent{}, err
	}
	r, err := FromJSON(row.Figures)
	if err != nil {
		return Sent{}, err
	}
	token, err := o.Store.ClaimReportMailManual(ctx, o.Lease, day.String(), o.By, o.Takeover)
	switch {
	case errors.Is(err, postgres.ErrReportMailed):
		return Sent{}, fmt.Errorf("report %s: %w", day, ErrAlreadyMailed)
	case errors.Is(err, postgres.ErrReportClaimed):
		return Sent{}, fmt.Errorf("report %s: %w", day, ErrClaimedElsewhere)
	case err != nil:
		return Sent{}, err
	}
	res, err := send(ctx, o, r, MessageID(r.Station, r.Day), now, "")
	if err != nil {
		return res, err
	}
	if err := o.Store.MarkReportMailedManual(ctx, day.String(), token, o.By); err != nil {
		if errors.Is(err, postgres.ErrReportClaimed) {
			res.Note = " (another sender took the claim over meanwhile and records its own mail)"
			return res, nil
		}
		return res, fmt.Errorf("report %s mailed, but not recorded (the leader may mail it again, same Message-ID): %w", day, err)
	}
	return res, nil
}

func send(ctx context.Context, o ManualOptions, r *Report, id string, now time.Time, note string) (Sent, error) {
	m, err := o.Sender.Compose(r, id, now)
	if err != nil {
		return Sent{}, err
	}
	if err := o.Sender.Send(ctx, m); err != nil {
		return Sent{}, err
	}
	return Sent{MessageID: id, Note: note}, nil
}

// variantID is a Message-ID of day's report that is not the day's own,
// unique to this mail: the time it was made (for a reader) and 64 random
// bits (two within one second, or from two hosts, differ).
func variantID(station, day, variant string, now time.Time, random io.Reader) (string, error) {
	var b [8]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return "", fmt.Errorf("report Message-ID: %w", err)
	}
	return "report-" + day + "." + variant + "-" + strconv.FormatInt(now.Unix(), 10) + "-" + hex.EncodeToString(b[:]) +
		"." + escapeAtom(station) + "@edihub", nil
}
