package postgres_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDuplicateCounted: every resend of a processed Message-ID is one row
// in duplicates; a resend replacing a failed receipt is not a duplicate.
func TestDuplicateCounted(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	msg := func(id, status string) *postgres.InboundMessage {
		return &postgres.InboundMessage{Partner: "ACME", AS2From: "ACME", AS2To: "EDIHUB", MessageID: id, Status: status,
			MDNMode: "sync", Payload: []byte("x"),
			MDN: &postgres.StoredMDN{Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("mdn")}}
	}
	if _, err := st.SaveInbound(ctx, msg("<a@x>", postgres.InboundProcessed)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := st.SaveInbound(ctx, msg("<a@x>", postgres.InboundProcessed)); !errors.Is(err, postgres.ErrDuplicateInbound) {
			t.Fatalf("SaveInbound(resend) = %v, want ErrDuplicateInbound", err)
		}
	}
	if _, err := st.SaveInbound(ctx, msg("<b@x>", postgres.InboundError)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveInbound(ctx, msg("<b@x>", postgres.InboundProcessed)); err != nil {
		t.Fatalf("SaveInbound(resend of a failed receipt) = %v, want nil", err)
	}
	if n := st.CountRows(ctx, "duplicates"); n != 2 {
		t.Errorf("duplicates rows = %d, want 2", n)
	}
	now := time.Now()
	d, err := st.DayTraffic(ctx, now.Add(-time.Hour), now.Add(time.Hour), "edihub-leader")
	if err != nil {
		t.Fatal(err)
	}
	if d.Duplicates["ACME"] != 2 {
		t.Errorf("DayTraffic duplicates = %v, want ACME: 2", d.Duplicates)
	}
}

// TestFencingRejectionRecorded: refused fenced writes and term openings
// leave a row each, written outside the refused transaction.
func TestFencingRejectionRecorded(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease = "edihub-leader"
	if err := st.OpenTerm(ctx, hub.Fence{Lease: lease, Token: 5}, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.OpenTerm(ctx, hub.Fence{Lease: lease, Token: 4}, "b"); !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("OpenTerm(older) = %v", err)
	}
	if err := st.Heartbeat(ctx, hub.Fence{Lease: lease, Token: 3}, "c", time.Hour); !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("Heartbeat(stale) = %v", err)
	}
	if err := st.Heartbeat(ctx, hub.Fence{Lease: lease, Token: 5}, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	d, err := st.DayTraffic(ctx, now.Add(-time.Hour), now.Add(time.Hour), lease)
	if err != nil {
		t.Fatal(err)
	}
	if d.FencingRejections != 2 || d.Terms != 1 || d.Failovers != 0 {
		t.Errorf("DayTraffic rejections/terms/failovers = %d/%d/%d, want 2/1/0", d.FencingRejections, d.Terms, d.Failovers)
	}
}

// TestReportMailClaim walks the claim protocol.
func TestReportMailClaim(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease = "edihub-leader"
	f5 := hub.Fence{Lease: lease, Token: 5}
	f6 := hub.Fence{Lease: lease, Token: 6}
	if err := st.OpenTerm(ctx, f5, "a"); err != nil {
		t.Fatal(err)
	}
	const day = "2026-11-30"
	if err := st.ClaimReportMail(ctx, f5, day, "a", time.Hour); !errors.Is(err, postgres.ErrReportNotFound) {
		t.Fatalf("claim before save = %v, want ErrReportNotFound", err)
	}
	r, err := st.SaveReport(ctx, f5, postgres.NewReport{Day: day, Figures: []byte(`{"n":1}`), HTML: "h", CSV: "c"})
	if err != nil || r.Day != day || r.Fence != 5 {
		t.Fatalf("SaveReport = %+v, %v", r, err)
	}
	// A second save keeps the first figures.
	r, err = st.SaveReport(ctx, f5, postgres.NewReport{Day: day, Figures: []byte(`{"n":2}`)})
	if err != nil || string(r.Figures) != `{"n": 1}` {
		t.Fatalf("SaveReport again = %s, %v; want the first figures", r.Figures, err)
	}
	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"a claims", func() error { return st.ClaimReportMail(ctx, f5, day, "a", time.Hour) }, nil},
		{"a claims again (retry)", func() error { return st.ClaimReportMail(ctx, f5, day, "a", time.Hour) }, nil},
		{"operator under the same term", func() error {
			_, err := st.ClaimReportMailManual(ctx, lease, day, "cli", time.Hour)
			return err
		}, postgres.ErrReportClaimed},
		{"b opens a newer term", func() error { return st.OpenTerm(ctx, f6, "b") }, nil},
		{"a records under a stale term", func() error { return st.MarkReportMailed(ctx, f5, day, "a") }, hub.ErrStaleFence},
		{"b takes over the older claim", func() error { return st.ClaimReportMail(ctx, f6, day, "b", time.Hour) }, nil},
		{"b records", func() error { return st.MarkReportMailed(ctx, f6, day, "b") }, nil},
		{"b claims a mailed day", func() error { return st.ClaimReportMail(ctx, f6, day, "b", time.Hour) }, postgres.ErrReportMailed},
		{"operator claims a mailed day", func() error {
			_, err := st.ClaimReportMailManual(ctx, lease, day, "cli", time.Hour)
			return err
		}, postgres.ErrReportMailed},
	}
	for _, s := range steps {
		if err := s.do(); !errors.Is(err, s.want) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
	}
	got, err := st.Report(ctx, day)
	if err != nil || got.MailedAt == nil || got.MailClaimedBy != "b" || *got.MailClaimedFence != 6 {
		t.Fatalf("Report = %+v, %v; want mailed under b@6", got, err)
	}
	if _, err := st.Report(ctx, "2026-11-29"); !errors.Is(err, postgres.ErrReportNotFound) {
		t.Errorf("Report(unknown day) = %v, want ErrReportNotFound", err)
	}
}

// TestReportManualClaimTakeover: an operator's claim under the current
// term blocks the leader until it is older than the takeover age.
func TestReportManualClaimTakeover(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease, day = "edihub-leader", "2026-11-29"
	f := hub.Fence{Lease: lease, Token: 2}
	if err := st.OpenTerm(ctx, f, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveReportManual(ctx, lease, postgres.NewReport{Day: day, Figures: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	token, err := st.ClaimReportMailManual(ctx, lease, day, "cli", time.Hour)
	if err != nil || token != 2 {
		t.Fatalf("ClaimReportMailManual = %d, %v", token, err)
	}
	if err := st.ClaimReportMail(ctx, f, day, "a", time.Hour); !errors.Is(err, postgres.ErrReportClaimed) {
		t.Fatalf("leader claim over a fresh operator claim = %v, want ErrReportClaimed", err)
	}
	if err := st.ClaimReportMail(ctx, f, day, "a", time.Nanosecond); err != nil {
		t.Fatalf("leader claim over an old operator claim = %v, want nil", err)
	}
	if err := st.MarkReportMailedManual(ctx, day, token, "cli"); !errors.Is(err, postgres.ErrReportClaimed) {
		t.Fatalf("operator records after the takeover = %v, want ErrReportClaimed", err)
	}
}
