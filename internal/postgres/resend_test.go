package postgres_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/postgres/pgtest"
)

// sendAttempt claims the one due outbox row, stores its build when it has
// none, and finishes the attempt with r.
func sendAttempt(t *testing.T, st *postgres.Store, r postgres.OutboxResult) postgres.OutboxItem {
	t.Helper()
	ctx := context.Background()
	items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("ClaimOutbox = %+v, %v; want one row", items, err)
	}
	it := items[0]
	if !it.Built() {
		b := postgres.OutboundBuild{Headers: http.Header{"Message-ID": {"<0@s>"}}, Body: []byte("built"), MIC: "m, sha-256", MICAlg: "sha-256"}
		if err := st.SaveOutboundBuild(ctx, it, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.FinishOutbox(ctx, it, r); err != nil {
		t.Fatalf("FinishOutbox = %v", err)
	}
	return it
}

func syncMDN(disposition string) *postgres.NewMDN {
	return &postgres.NewMDN{ContentType: "multipart/report; report-type=disposition-notification",
		Headers: http.Header{"X-Mdn": {disposition}}, Body: []byte("MDN " + disposition), Disposition: disposition, MIC: "m, sha-256"}
}

var (
	negative = postgres.OutboxResult{State: postgres.OutboxFailed, Error: "partner: decryption-failed",
		Message: &postgres.MessageUpdate{Status: "failed", Disposition: "automatic-action/MDN-sent-automatically; processed/error: decryption-failed", Final: true},
		MDN:     syncMDN("automatic-action/MDN-sent-automatically; processed/error: decryption-failed")}
	positive = postgres.OutboxResult{State: postgres.OutboxDone,
		Message: &postgres.MessageUpdate{Status: "delivered", Disposition: "automatic-action/MDN-sent-automatically; processed", Final: true},
		MDN:     syncMDN("automatic-action/MDN-sent-automatically; processed")}
)

// TestResendReplacesSyncMDN: a message failed on a negative sync MDN, is
// resent and delivered with a positive one; the MDN kept (GET
// /api/v1/messages/{id}/mdn) is the positive one that decided it.
func TestResendReplacesSyncMDN(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0]
	sendAttempt(t, st, negative)
	if m, err := st.MessageMDN(ctx, e.ID); err != nil || m.Disposition != negative.MDN.Disposition {
		t.Fatalf("MDN after the failed send = %q, %v; want the negative one", m.Disposition, err)
	}
	if _, err := st.ResendMessage(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	sendAttempt(t, st, positive)
	m, err := st.MessageMDN(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Disposition != positive.MDN.Disposition || string(m.Body) != string(positive.MDN.Body) || m.Headers.Get("X-Mdn") != positive.MDN.Disposition {
		t.Errorf("MDN after the delivered resend = disposition %q, body %q, headers %v; want the positive MDN", m.Disposition, m.Body, m.Headers)
	}
	msg, err := st.Message(ctx, e.ID)
	if err != nil || msg.Status != "delivered" || msg.Disposition != positive.Message.Disposition {
		t.Errorf("message = status %q, disposition %q, %v; want delivered", msg.Status, msg.Disposition, err)
	}
}

// TestLateSyncMDNKeepsDecidingMDN: an attempt finishing after the message
// was decided otherwise (final already) does not replace its MDN.
func TestLateSyncMDNKeepsDecidingMDN(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0]
	sendAttempt(t, st, positive)
	if _, err := st.ExecSQL(ctx, `UPDATE outbox SET status = 'pending', next_attempt_at = now() WHERE message_id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	sendAttempt(t, st, negative)
	m, err := st.MessageMDN(ctx, e.ID)
	if err != nil || m.Disposition != positive.MDN.Disposition {
		t.Errorf("MDN after a late negative attempt = %q, %v; want the positive one that decided the message", m.Disposition, err)
	}
	if msg, err := st.Message(ctx, e.ID); err != nil || msg.Status != "delivered" {
		t.Errorf("message status %q, %v; want delivered", msg.Status, err)
	}
}
