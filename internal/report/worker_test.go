package report_test

import (
	"bytes"
	"context"
	"errors"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// vclock is virtual time: Sleep returns at once, having moved the clock.
type vclock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *vclock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// hookSender wraps the real mailer so a test can kill the leader around
// the sending.
type hookSender struct {
	inner report.Sender
	// before runs before the mail leaves; returning true drops the mail
	// (the process died first).
	before func() bool
	// after runs once the server took the mail.
	after func()
}

func (h *hookSender) Compose(r *report.Report, id string, date time.Time) (*report.Mail, error) {
	return h.inner.Compose(r, id, date)
}

func (h *hookSender) Send(ctx context.Context, m *report.Mail) error {
	if h.before != nil && h.before() {
		return context.Canceled
	}
	if err := h.inner.Send(ctx, m); err != nil {
		return err
	}
	if h.after != nil {
		h.after()
	}
	return nil
}

// env is a seeded database, a term history and an SMTP server.
type env struct {
	t     *testing.T
	url   string
	st    *postgres.Store
	smtp  *smtpServer
	loc   *time.Location
	clock *vclock
	logs  *observer.ObservedLogs
	// store, when set, is what the workers use instead of st.
	store report.Store
}

const (
	password = "s3cret-smtp-password"
)

// newEnv seeds the standard traffic around 2026-11-20 (Berlin) and a first
// term opened at firstTerm; the virtual clock reads 2026-11-21 00:20.
func newEnv(t *testing.T, firstTerm time.Time, smtp *smtpServer) *env {
	t.Helper()
	loc := mustLoad(t, "Europe/Berlin")
	e := &env{t: t, url: pgtest.URL(t), smtp: smtp, loc: loc,
		clock: &vclock{now: time.Date(2026, 11, 21, 0, 20, 0, 0, loc)}}
	standardSeed(time.Date(2026, 11, 20, 0, 0, 0, 0, loc)).store(t, e.url)
	c := pgtest.Conn(t, e.url)
	// The seed's terms are history of another lease; the worker's lease
	// starts at firstTerm.
	if _, err := c.Exec(context.Background(), `UPDATE leader_terms SET lease = 'other'`); err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(context.Background(), e.url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e.st = st
	e.openTerm(1, "a")
	if _, err := c.Exec(context.Background(), `UPDATE leader_terms SET opened_at = $1 WHERE lease = $2 AND token = 1`, firstTerm, testLease); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) openTerm(token int64, holder string) hub.Fence {
	e.t.Helper()
	f := hub.Fence{Lease: testLease, Token: token}
	if err := e.st.OpenTerm(context.Background(), f, holder); err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (e *env) mailer() *report.Mailer {
	e.t.Helper()
	cfg, err := report.ParseSMTPURL(e.smtp.url("smtp"))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Password = password
	m, err := report.NewMailer(report.MailerOptions{SMTP: cfg, From: "edihub@hub.example", To: []string{"managers@hub.example"},
		TLSConfig: e.smtp.clientTLS(), Timeout: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) worker(holder string, sender report.Sender, catchUp int, reg prometheus.Registerer, sleepHook func(time.Duration)) *report.Worker {
	e.t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	if e.logs == nil {
		e.logs = logs
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var store report.Store = e.st
	if e.store != nil {
		store = e.store
	}
	w, err := report.NewWorker(report.WorkerOptions{
		Store: store,
		Builder: &report.Builder{Source: e.st, Station: "EDIHUB", Lease: testLease, Partners: []string{"ACME CORP", "GLOBEX", "INITECH"},
			Now: e.clock.Now},
		Sender: sender, Holder: holder, Location: e.loc, CatchUpDays: catchUp,
		RetryMin: time.Minute, RetryMax: 10 * time.Minute,
		Now: e.clock.Now,
		Sleep: func(ctx context.Context, d time.Duration) bool {
			e.clock.advance(d)
			if sleepHook != nil {
				sleepHook(d)
			}
			return ctx.Err() == nil
		},
		Logger: zap.New(core), Registerer: reg,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// run runs w under fence f until stop is called (by a hook) or the
// worker returns; it fails the test after a real-time bound.
func run(t *testing.T, w *report.Worker, f hub.Fence, body func(stop func())) error {
	t.Helper()
	ctx, cancel := context.WithCancel(leader.WithFence(context.Background(), f))
	defer cancel()
	if body != nil {
		body(cancel) // before the worker starts: its hooks read what body sets
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		cancel()
		<-done
		t.Fatal("the worker did not stop")
		return nil
	}
}

// stopWhen returns a sleep hook that stops the worker once cond holds (or
// after too many sleeps).
func stopWhen(stop *func(), cond func() bool) func(time.Duration) {
	n := 0
	return func(time.Duration) {
		n++
		if cond() || n > 50 {
			(*stop)()
		}
	}
}

func messageIDs(t *testing.T, s *smtpServer) []string {
	t.Helper()
	var ids []string
	for _, m := range s.messages() {
		msg, err := mail.ReadMessage(bytes.NewReader(m.data))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msg.Header.Get("Message-Id"))
	}
	return ids
}

func (e *env) checkLogs() {
	e.t.Helper()
	for _, l := range e.logs.All() {
		s := l.Message
		for k, v := range l.ContextMap() {
			s += " " + k + "=" + strings.TrimSpace(strings.ReplaceAll(fmtAny(v), "\n", " "))
		}
		for _, secret := range []string{password, "documents received", "day,partner", "iVBOR"} {
			if strings.Contains(s, secret) {
				e.t.Errorf("a log line holds %q: %s", secret, s)
			}
		}
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case error:
		return x.Error()
	}
	return ""
}

const wantID = "<report-2026-11-20.EDIHUB@edihub>"

// firstTermNov20 makes 2026-11-20 the only day due.
func firstTermNov20(loc *time.Location) time.Time { return time.Date(2026, 11, 20, 10, 0, 0, 0, loc) }

func TestWorkerMailsOnce(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	reg := prometheus.NewRegistry()
	var stop func()
	w := e.worker("a", e.mailer(), 7, reg, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 || ids[0] != wantID {
		t.Fatalf("mails %v, want one %s", ids, wantID)
	}
	checkReportMail(t, srv.messages()[0].data, "2026-11-20")
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if err != nil || row.MailedAt == nil || row.MailClaimedBy != "a" {
		t.Fatalf("report row %+v, %v; want mailed by a", row, err)
	}
	if v := testutil.ToFloat64(w.LastSuccess()); v == 0 {
		t.Error("edihub_report_last_success_timestamp_seconds not set")
	}
	// The next leader sends nothing again.
	f2 := e.openTerm(2, "b")
	w2 := e.worker("b", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w2, f2, func(s func()) { stop = s }); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.messages()); n != 1 {
		t.Errorf("after a second leader: %d mails, want 1", n)
	}
	e.checkLogs()
}

// TestWorkerKilledAfterClaimBeforeSend: the leader dies after claiming and
// before the mail leaves; the next leader sends it, once.
func TestWorkerKilledAfterClaimBeforeSend(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	var stop func()
	a := e.worker("a", &hookSender{inner: e.mailer(), before: func() bool { stop(); return true }}, 7, nil, nil)
	if err := run(t, a, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(a) = %v", err)
	}
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if err != nil || row.MailClaimedBy != "a" || row.MailedAt != nil || len(srv.messages()) != 0 {
		t.Fatalf("after a died: row %+v, %v, %d mails; want claimed by a, not mailed, no mail", row, err, len(srv.messages()))
	}
	f2 := e.openTerm(2, "b")
	b := e.worker("b", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, b, f2, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(b) = %v", err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 || ids[0] != wantID {
		t.Fatalf("mails %v, want one %s", ids, wantID)
	}
	e.checkReportRows(1, "b")
}

// TestWorkerKilledAfterSendBeforeRecord: the mail left, the leader died
// before recording it; the next leader sends it again with the same
// Message-ID, and only once.
func TestWorkerKilledAfterSendBeforeRecord(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	var stop func()
	a := e.worker("a", &hookSender{inner: e.mailer(), after: func() { stop() }}, 7, nil, nil)
	if err := run(t, a, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(a) = %v", err)
	}
	if n := len(srv.messages()); n != 1 {
		t.Fatalf("a sent %d mails, want 1", n)
	}
	f2 := e.openTerm(2, "b")
	b := e.worker("b", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, b, f2, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(b) = %v", err)
	}
	// And a third leader sends nothing.
	f3 := e.openTerm(3, "c")
	c := e.worker("c", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, c, f3, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(c) = %v", err)
	}
	ids := messageIDs(t, srv)
	if len(ids) != 2 || ids[0] != wantID || ids[1] != wantID {
		t.Fatalf("mails %v; want the same %s twice (one repeat at most)", ids, wantID)
	}
	e.checkReportRows(1, "b")
}

// failingMark is the store with MarkReportMailed failing the next fails
// times (before it reaches the database), as when the connection to
// PostgreSQL drops after the mail left.
type failingMark struct {
	*postgres.Store
	mu    sync.Mutex
	fails int
	calls int
}

func (s *failingMark) MarkReportMailed(ctx context.Context, f hub.Fence, day, holder string) error {
	s.mu.Lock()
	s.calls++
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if fail {
		return errors.New("record report mail: connection reset by peer")
	}
	return s.Store.MarkReportMailed(ctx, f, day, holder)
}

func (e *env) mailed() bool {
	e.t.Helper()
	row, err := e.st.Report(context.Background(), "2026-11-20")
	return err == nil && row.MailedAt != nil
}

// TestWorkerRecordFailsAfterSend: the server took the mail and recording
// it failed; the retry records it without mailing the managers again.
func TestWorkerRecordFailsAfterSend(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	fm := &failingMark{Store: e.st, fails: 1}
	e.store = fm
	reg := prometheus.NewRegistry()
	var stop func()
	w := e.worker("a", e.mailer(), 7, reg, stopWhen(&stop, e.mailed))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 || ids[0] != wantID {
		t.Fatalf("mails %v, want one %s (the recording failed once, the mail left once)", ids, wantID)
	}
	if fm.calls != 2 {
		t.Errorf("MarkReportMailed called %d times, want 2 (a failure and its retry)", fm.calls)
	}
	if got := testutil.ToFloat64(w.Failures().WithLabelValues(report.CauseStore)); got != 1 {
		t.Errorf("failures{cause=store} = %v, want 1", got)
	}
	e.checkReportRows(1, "a")
	e.checkLogs()
}

// TestWorkerRecordFailsThenNewTerm: the recording failed and the term
// ended before its retry; the same process, leader again, records the
// mail under its new term without sending it again.
func TestWorkerRecordFailsThenNewTerm(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	e.store = &failingMark{Store: e.st, fails: 1}
	var stop func()
	w := e.worker("a", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(term 1) = %v", err)
	}
	if n := len(srv.messages()); n != 1 || e.mailed() {
		t.Fatalf("after term 1: %d mails, recorded %v; want 1 mail, not recorded", n, e.mailed())
	}
	f2 := e.openTerm(2, "a")
	if err := run(t, w, f2, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run(term 2) = %v", err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 {
		t.Fatalf("mails %v, want one", ids)
	}
	e.checkReportRows(1, "a")
}

// TestWorkerQuitFailsAfterData: the server accepted the mail's data and
// the connection dropped before QUIT was answered; the mail counts as
// sent and is recorded, once.
func TestWorkerQuitFailsAfterData(t *testing.T) {
	srv := newSMTPServer(t, false)
	srv.dropAfterData = 1
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	reg := prometheus.NewRegistry()
	var stop func()
	w := e.worker("a", e.mailer(), 7, reg, stopWhen(&stop, e.mailed))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 || ids[0] != wantID {
		t.Fatalf("mails %v, want one %s", ids, wantID)
	}
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if err != nil || row.MailedAt == nil || row.MailError != "" {
		t.Fatalf("report row: mailed at %v, mail error %q, %v; want recorded as mailed, no mail error", row.MailedAt, row.MailError, err)
	}
	for _, c := range []string{report.CauseConnect, report.CauseRefused, report.CauseTLS} {
		if got := testutil.ToFloat64(w.Failures().WithLabelValues(c)); got != 0 {
			t.Errorf("failures{cause=%s} = %v, want 0", c, got)
		}
	}
	e.checkLogs()
}

func (e *env) checkReportRows(n int64, mailedBy string) {
	e.t.Helper()
	var rows int64
	if err := pgtest.Conn(e.t, e.url).QueryRow(context.Background(), `SELECT count(*) FROM reports`).Scan(&rows); err != nil {
		e.t.Fatal(err)
	}
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if rows != n || err != nil || row.MailedAt == nil || row.MailClaimedBy != mailedBy {
		e.t.Errorf("%d report rows, 2026-11-20: %+v, %v; want %d rows, mailed by %s", rows, row, err, n, mailedBy)
	}
}

// TestWorkersRaceWithDifferentFences: the deposed leader (older fence)
// and the new one run at once; one mail leaves, the old one stops.
func TestWorkersRaceWithDifferentFences(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	f2 := e.openTerm(2, "b")
	var stopA, stopB func()
	a := e.worker("a", e.mailer(), 7, nil, stopWhen(&stopA, func() bool { return true }))
	b := e.worker("b", e.mailer(), 7, nil, stopWhen(&stopB, func() bool { return true }))
	var errA, errB error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errA = run(t, a, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stopA = s })
	}()
	go func() { defer wg.Done(); errB = run(t, b, f2, func(s func()) { stopB = s }) }()
	wg.Wait()
	if !errors.Is(errA, hub.ErrStaleFence) || errB != nil {
		t.Errorf("Run(old fence) = %v, want ErrStaleFence; Run(new fence) = %v, want nil", errA, errB)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 {
		t.Fatalf("mails %v, want one", ids)
	}
	e.checkReportRows(1, "b")
}

// TestWorkerCatchesUpInOrder: three days missed are mailed oldest first.
func TestWorkerCatchesUpInOrder(t *testing.T) {
	srv := newSMTPServer(t, false)
	loc := mustLoad(t, "Europe/Berlin")
	e := newEnv(t, time.Date(2026, 11, 18, 5, 0, 0, 0, loc), srv)
	var stop func()
	w := e.worker("a", e.mailer(), 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatal(err)
	}
	want := []string{"<report-2026-11-18.EDIHUB@edihub>", "<report-2026-11-19.EDIHUB@edihub>", "<report-2026-11-20.EDIHUB@edihub>"}
	if ids := messageIDs(t, srv); strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("mails %v, want %v in that order", ids, want)
	}
	// With a catch-up of two days, the oldest is left out.
	srv2 := newSMTPServer(t, false)
	e2 := newEnv(t, time.Date(2026, 11, 18, 5, 0, 0, 0, loc), srv2)
	w2 := e2.worker("a", e2.mailer(), 2, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w2, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatal(err)
	}
	if ids := messageIDs(t, srv2); strings.Join(ids, " ") != strings.Join(want[1:], " ") {
		t.Fatalf("catch-up 2: mails %v, want %v", ids, want[1:])
	}
}

// TestWorkerSMTPDownThenUp: while the server is down the worker retries
// with growing waits and counts the failures; once up, the mail leaves.
func TestWorkerSMTPDownThenUp(t *testing.T) {
	srv := newDownSMTPServer(t)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	reg := prometheus.NewRegistry()
	var stop func()
	var waits []time.Duration
	hook := func(d time.Duration) {
		waits = append(waits, d)
		switch {
		case len(waits) == 3:
			srv.up()
		case len(waits) > 3 && len(srv.messages()) > 0, len(waits) > 20:
			stop()
		}
	}
	w := e.worker("a", e.mailer(), 7, reg, hook)
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatal(err)
	}
	if ids := messageIDs(t, srv); len(ids) != 1 || ids[0] != wantID {
		t.Fatalf("mails %v, want one %s", ids, wantID)
	}
	if got := testutil.ToFloat64(w.Failures().WithLabelValues(report.CauseConnect)); got != 3 {
		t.Errorf("failures{cause=connect} = %v, want 3", got)
	}
	if len(waits) < 4 || !(waits[0] < waits[1] && waits[1] < waits[2]) {
		t.Errorf("waits %v; want a growing backoff over the three failures", waits)
	}
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if err != nil || row.MailedAt == nil || row.MailError != "" {
		t.Errorf("row %+v, %v; want mailed, error cleared", row, err)
	}
	e.checkLogs()
}

// TestWorkerWithoutSMTP stores the due reports and mails nothing.
func TestWorkerWithoutSMTP(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	var stop func()
	w := e.worker("a", nil, 7, nil, stopWhen(&stop, func() bool { return true }))
	if err := run(t, w, hub.Fence{Lease: testLease, Token: 1}, func(s func()) { stop = s }); err != nil {
		t.Fatal(err)
	}
	row, err := e.st.Report(context.Background(), "2026-11-20")
	if err != nil || row.MailedAt != nil || row.MailClaimedFence != nil {
		t.Fatalf("row %+v, %v; want stored, unclaimed", row, err)
	}
	r, err := report.FromJSON(row.Figures)
	if err != nil || r.Hub.Received == 0 {
		t.Fatalf("stored figures: %v, %v", r, err)
	}
}

func TestDueDays(t *testing.T) {
	loc := mustLoad(t, "Europe/Berlin")
	w, err := report.NewWorker(report.WorkerOptions{Store: &postgres.Store{}, Builder: &report.Builder{}, Holder: "a", Location: loc,
		At: report.TimeOfDay{Hour: 0, Minute: 15}, CatchUpDays: 3, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	long := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		now, since time.Time
		want       string
	}{
		{time.Date(2026, 11, 21, 0, 14, 0, 0, loc), long, "2026-11-17 2026-11-18 2026-11-19"},
		{time.Date(2026, 11, 21, 0, 15, 0, 0, loc), long, "2026-11-18 2026-11-19 2026-11-20"},
		{time.Date(2026, 11, 21, 0, 15, 0, 0, loc), time.Date(2026, 11, 19, 23, 0, 0, 0, loc), "2026-11-19 2026-11-20"},
		{time.Date(2026, 10, 26, 9, 0, 0, 0, loc), long, "2026-10-23 2026-10-24 2026-10-25"},
	}
	for _, tt := range tests {
		var got []string
		for _, d := range w.DueDays(tt.now, tt.since) {
			got = append(got, d.String())
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("DueDays(%s, since %s) = %v, want %s", tt.now, tt.since, got, tt.want)
		}
	}
}

// TestWorkerProgressDeadline: a healthy report worker marks success at most
// hourly, so it must declare a deadline longer than that, or the elector's
// default (10 min) would report every leader stuck and fail its /healthz.
func TestWorkerProgressDeadline(t *testing.T) {
	w, err := report.NewWorker(report.WorkerOptions{Store: &postgres.Store{}, Builder: &report.Builder{}, Holder: "a", Location: time.UTC,
		At: report.TimeOfDay{Hour: 0, Minute: 15}, CatchUpDays: 3, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var lw leader.Worker = w
	pd, ok := lw.(leader.ProgressDeadline)
	if !ok {
		t.Fatal("*report.Worker does not implement leader.ProgressDeadline")
	}
	if got := pd.StuckAfter(); got <= time.Hour {
		t.Errorf("StuckAfter() = %s, want more than the hourly cycle", got)
	}
}
