package report

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// Store is what the report worker needs of the database. *postgres.Store
// implements it.
type Store interface {
	Source
	Report(ctx context.Context, day string) (postgres.StoredReport, error)
	SaveReport(ctx context.Context, f hub.Fence, r postgres.NewReport) (postgres.StoredReport, error)
	ClaimReportMail(ctx context.Context, f hub.Fence, day, holder string, takeover time.Duration) error
	MarkReportMailed(ctx context.Context, f hub.Fence, day, holder string) error
	ReportMailFailed(ctx context.Context, f hub.Fence, day, holder, reason string) error
	FirstTermOpened(ctx context.Context, lease string) (time.Time, error)
}

// Sender composes and sends report mails. *Mailer implements it. Send
// returns nil once the server accepted the mail, even if the session then
// failed: the worker then records the mail and never sends it again.
type Sender interface {
	Compose(r *Report, messageID string, date time.Time) (*Mail, error)
	Send(ctx context.Context, m *Mail) error
}

// TimeOfDay is a local wall-clock time.
type TimeOfDay struct{ Hour, Minute int }

// ParseTimeOfDay parses HH:MM.
func ParseTimeOfDay(s string) (TimeOfDay, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return TimeOfDay{}, fmt.Errorf("time of day %q: want HH:MM (24-hour clock)", s)
	}
	return TimeOfDay{t.Hour(), t.Minute()}, nil
}

func (t TimeOfDay) String() string { return fmt.Sprintf("%02d:%02d", t.Hour, t.Minute) }

// WorkerOptions configure NewWorker.
type WorkerOptions struct {
	Store   Store
	Builder *Builder
	// Sender mails the reports; nil stores them without mailing (no SMTP
	// configured): a later leader with a Sender mails those of them still
	// in the catch-up window.
	Sender Sender
	// Holder is this process's leader identity, recorded with the claim.
	Holder string
	// Location is the report's time zone; At the local time the previous
	// day's report leaves (default 00:15).
	Location *time.Location
	At       TimeOfDay
	// CatchUpDays is how many past days are reported when missed (no
	// leader, SMTP down); default 7.
	CatchUpDays int
	// Takeover is how old an operator's claim (edihub report -send)
	// under the current term must be before the worker sends anyway;
	// default 15 min.
	Takeover time.Duration
	// RetryMin and RetryMax bound the backoff between failed attempts;
	// defaults 30 s and 15 min.
	RetryMin, RetryMax time.Duration
	// Now and Sleep are the clock: Sleep waits d or until ctx ends and
	// reports whether it waited the whole d.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) bool
	// Logger and Registerer receive the worker's logs and metrics.
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Worker is the leader-gated end-of-day report job: at the configured
// local time it builds the previous day's report, stores it through the
// fenced path, claims its mail through the fenced path and mails it; days
// missed are caught up, oldest first. Every day is mailed once: once the
// server accepted a mail, a failed recording is retried without sending
// again. Only a leader that dies between the claim and recording the mail
// makes the next one send it again, with the same Message-ID.
type Worker struct {
	o           WorkerOptions
	log         *zap.Logger
	lastSuccess prometheus.Gauge
	failures    *prometheus.CounterVec

	// mu guards sent: the days whose mail this process sent and has not
	// recorded yet (the server accepted it, the recording failed). A retry
	// of such a day records it without sending again, also in a later term
	// of this process; only a process that dies forgets, and the next
	// leader sends once more with the same Message-ID.
	mu   sync.Mutex
	sent map[string]bool
}

// NewWorker validates o and registers edihub_report_last_success_timestamp_seconds
// and edihub_report_failures_total{cause}.
func NewWorker(o WorkerOptions) (*Worker, error) {
	if o.Store == nil || o.Builder == nil || o.Location == nil || o.Logger == nil || o.Registerer == nil || o.Holder == "" {
		return nil, errors.New("report worker: Store, Builder, Location, Holder, Logger and Registerer are required")
	}
	if o.At == (TimeOfDay{}) {
		o.At = TimeOfDay{0, 15}
	}
	if o.CatchUpDays <= 0 {
		o.CatchUpDays = 7
	}
	if o.Takeover <= 0 {
		o.Takeover = 15 * time.Minute
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 30 * time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(15*time.Minute, o.RetryMin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = leader.Sleep
	}
	w := &Worker{
		o:    o,
		log:  o.Logger.Named("report"),
		sent: map[string]bool{},
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edihub_report_last_success_timestamp_seconds",
			Help: "Unix time the report worker last had every due day's report stored and (when SMTP is configured) mailed.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_report_failures_total",
			Help: "Failed attempts of the report worker, by cause (connect, tls, auth, refused, config, render, store); each is retried.",
		}, []string{"cause"}),
	}
	for _, c := range []string{CauseConnect, CauseTLS, CauseAuth, CauseRefused, CauseConfig, CauseRender, CauseStore} {
		w.failures.WithLabelValues(c)
	}
	for _, c := range []prometheus.Collector{w.lastSuccess, w.failures} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("report worker metrics: %w", err)
		}
	}
	return w, nil
}

// errClaimed: another sender holds a day's claim; wait and look again.
var errClaimed = errors.New("another sender holds the claim")

// StuckAfter implements leader.ProgressDeadline: a healthy worker finishes
// a cycle at least hourly (untilNext), so three hours without one is stuck;
// the elector's default deadline is shorter than that cycle.
func (w *Worker) StuckAfter() time.Duration { return 3 * time.Hour }

// Run reports until ctx ends (nil). It returns an error only when its term
// is stale (wrapping hub.ErrStaleFence) or ctx carries no fence.
// Failures of SMTP or the database are logged, counted and retried with
// backoff; they never end Run.
func (w *Worker) Run(ctx context.Context) error {
	if w.o.Sender == nil {
		w.log.Info("report mail not configured (no SMTP URL): reports are stored, not mailed")
	}
	return leader.Loop{
		Name: "report", RecoveredMsg: "reports done again",
		Step: func(ctx context.Context, f hub.Fence) error {
			if err := w.cycle(ctx, f); err != nil {
				return err
			}
			w.lastSuccess.SetToCurrentTime()
			return nil
		},
		Next:   w.untilNext,
		Retry:  w.retryIn,
		Failed: w.failed,
		Sleep:  w.o.Sleep,
		Logger: w.log,
	}.Run(ctx)
}

// retryIn is the wait after the n-th failed cycle in a row: RetryMin
// while another sender holds a claim, else RetryMin doubling up to
// RetryMax.
func (w *Worker) retryIn(n int, err error) time.Duration {
	if errors.Is(err, errClaimed) {
		return w.o.RetryMin
	}
	return min(w.o.RetryMin<<min(n-1, 16), w.o.RetryMax)
}

// failed logs and counts a failed cycle.
func (w *Worker) failed(_ int, err error, wait time.Duration) {
	if errors.Is(err, errClaimed) {
		w.log.Info("a report mail is being sent by another sender; looking again later", zap.Error(err))
		return
	}
	cause := Cause(err)
	w.failures.WithLabelValues(cause).Inc()
	w.log.Warn("report not done; retrying", zap.String("cause", cause), zap.Duration("retry_in", wait), zap.Error(err))
}

// untilNext is the time until the next report is due, at most an hour
// (a changed clock or a missed wakeup costs no more).
func (w *Worker) untilNext() time.Duration {
	now := w.o.Now()
	today := DayOf(now, w.o.Location)
	next := w.dueAt(today)
	if !now.Before(next) {
		next = w.dueAt(today.AddDays(1))
	}
	return max(min(next.Sub(now), time.Hour), time.Second)
}

// dueAt is when the report of the day before d is due: At on d.
func (w *Worker) dueAt(d Day) time.Time {
	return time.Date(d.Year, d.Month, d.Date, w.o.At.Hour, w.o.At.Minute, 0, 0, w.o.Location)
}

// DueDays returns the days whose report is due at now, oldest first: the
// last CatchUpDays days up to the day before today (before At, up to the
// day before that), none of them ending before since.
func (w *Worker) DueDays(now, since time.Time) []Day {
	today := DayOf(now, w.o.Location)
	latest := today.AddDays(-1)
	if now.Before(w.dueAt(today)) {
		latest = today.AddDays(-2)
	}
	var days []Day
	for i := w.o.CatchUpDays - 1; i >= 0; i-- {
		d := latest.AddDays(-i)
		if d.End().After(since) {
			days = append(days, d)
		}
	}
	return days
}

// cycle stores and mails every due day, oldest first, stopping at the
// first failure (so days leave in order).
func (w *Worker) cycle(ctx context.Context, f hub.Fence) error {
	since, err := w.o.Store.FirstTermOpened(ctx, f.Lease)
	if err != nil {
		return err
	}
	for _, day := range w.DueDays(w.o.Now(), since) {
		if err := w.day(ctx, f, day); err != nil {
			return err
		}
	}
	return nil
}

// day stores day's report unless stored, and mails it unless mailed.
func (w *Worker) day(ctx context.Context, f hub.Fence, day Day) error {
	log := w.log.With(zap.String("day", day.String()))
	row, err := w.o.Store.Report(ctx, day.String())
	switch {
	case errors.Is(err, postgres.ErrReportNotFound):
		if row, err = w.save(ctx, f, day); err != nil {
			return err
		}
		log.Info("report stored")
	case err != nil:
		return err
	}
	if row.MailedAt != nil {
		w.setSent(day, false)
		return nil
	}
	if w.o.Sender == nil {
		return nil
	}
	r, err := FromJSON(row.Figures)
	if err != nil {
		return &SendError{Cause: CauseRender, Err: err}
	}
	switch err := w.o.Store.ClaimReportMail(ctx, f, day.String(), w.o.Holder, w.o.Takeover); {
	case errors.Is(err, postgres.ErrReportMailed):
		w.setSent(day, false)
		return nil
	case errors.Is(err, postgres.ErrReportClaimed):
		return fmt.Errorf("report %s: %w", day, errClaimed)
	case err != nil:
		return err
	}
	id := MessageID(r.Station, r.Day)
	if w.isSent(day) {
		// The mail left in an earlier attempt of this process; only its
		// recording failed. Sending again would mail the managers twice.
		log.Info("report mailed earlier, not recorded yet: recording it without sending again", zap.String("message_id", id))
	} else {
		if row.MailClaimedFence != nil && (*row.MailClaimedFence != f.Token || row.MailClaimedBy != w.o.Holder) {
			log.Warn("taking over a report mail claimed earlier and not recorded as sent: it may have left already; this sending carries the same Message-ID",
				zap.Int64("claimed_fence", *row.MailClaimedFence), zap.String("claimed_by", row.MailClaimedBy))
		}
		m, err := w.o.Sender.Compose(r, id, w.o.Now())
		if err != nil {
			return &SendError{Cause: CauseRender, Err: err}
		}
		if err := w.o.Sender.Send(ctx, m); err != nil {
			if ctx.Err() == nil {
				if rerr := w.o.Store.ReportMailFailed(ctx, f, day.String(), w.o.Holder, err.Error()); rerr != nil {
					log.Warn("record the mail failure", zap.Error(rerr))
				}
			}
			return err
		}
		w.setSent(day, true)
	}
	if err := w.o.Store.MarkReportMailed(ctx, f, day.String(), w.o.Holder); err != nil {
		if errors.Is(err, postgres.ErrReportClaimed) {
			w.setSent(day, false)
			log.Warn("report mailed, but another sender took the claim over meanwhile; it records its own mail", zap.String("message_id", id))
			return nil
		}
		return fmt.Errorf("report %s mailed (%s), recording it: %w", day, id, err)
	}
	w.setSent(day, false)
	log.Info("report mailed", zap.String("message_id", id), zap.Int("recipients", len(w.recipients())))
	return nil
}

// isSent reports whether day's mail left in an earlier attempt of this
// process and is not recorded yet.
func (w *Worker) isSent(day Day) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent[day.String()]
}

// setSent remembers (or forgets) that day's mail left and awaits its
// recording.
func (w *Worker) setSent(day Day, sent bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sent {
		w.sent[day.String()] = true
	} else {
		delete(w.sent, day.String())
	}
}

func (w *Worker) recipients() []string {
	if m, ok := w.o.Sender.(*Mailer); ok {
		return m.to
	}
	return nil
}

// save builds, renders and stores day's report; the stored row (possibly
// another sender's, stored meanwhile) is returned.
func (w *Worker) save(ctx context.Context, f hub.Fence, day Day) (postgres.StoredReport, error) {
	nr, err := Render(ctx, w.o.Builder, day)
	if err != nil {
		return postgres.StoredReport{}, err
	}
	return w.o.Store.SaveReport(ctx, f, nr)
}

// Render builds day's report and its stored form: the figures as JSON,
// the mail's HTML (charts by Content-ID) and the CSV.
func Render(ctx context.Context, b *Builder, day Day) (postgres.NewReport, error) {
	r, err := b.Build(ctx, day)
	if err != nil {
		return postgres.NewReport{}, err
	}
	j, err := JSON(r)
	if err != nil {
		return postgres.NewReport{}, &SendError{Cause: CauseRender, Err: err}
	}
	img := Images{}
	if !r.Empty() {
		img = Images{Volume: "cid:" + VolumeCID, Partners: "cid:" + PartnersCID}
	}
	h, err := HTML(r, img)
	if err != nil {
		return postgres.NewReport{}, &SendError{Cause: CauseRender, Err: err}
	}
	c, err := CSV(r)
	if err != nil {
		return postgres.NewReport{}, &SendError{Cause: CauseRender, Err: err}
	}
	return postgres.NewReport{Day: day.String(), Figures: j, HTML: string(h), CSV: string(c)}, nil
}

// LastSuccess is edihub_report_last_success_timestamp_seconds (for tests).
func (w *Worker) LastSuccess() prometheus.Gauge { return w.lastSuccess }

// Failures is edihub_report_failures_total (for tests).
func (w *Worker) Failures() *prometheus.CounterVec { return w.failures }
