package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
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

// TestResendMessage: which messages can be resent (the API's 202, 404 and
// 409), and what a resend resets. Every message first failed on a
// negative MDN; the case then sets its state.
func TestResendMessage(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	tests := []struct {
		name string
		// set changes the failed message ($1) before the resend.
		set     string
		wantErr error
		// reason is in the error of a refused resend (the API's 409 body).
		reason string
	}{
		{name: "failed"},
		{name: "awaiting an overdue MDN", set: `UPDATE messages SET status = 'awaiting-mdn', mdn_overdue = true, completed_at = NULL WHERE id = $1`},
		{name: "awaiting an MDN not overdue", set: `UPDATE messages SET status = 'awaiting-mdn', completed_at = NULL WHERE id = $1`,
			wantErr: postgres.ErrNotResendable, reason: "its status is awaiting-mdn"},
		{name: "delivered", set: `UPDATE messages SET status = 'delivered' WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "its status is delivered"},
		{name: "sent", set: `UPDATE messages SET status = 'sent' WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "its status is sent"},
		{name: "queued", set: `UPDATE messages SET status = 'queued', completed_at = NULL WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "its status is queued"},
		{name: "retrying", set: `UPDATE messages SET status = 'retrying', completed_at = NULL WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "its status is retrying"},
		{name: "inbound", set: `UPDATE messages SET direction = 'inbound' WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "inbound"},
		{name: "inbound overdue", set: `UPDATE messages SET direction = 'inbound', mdn_overdue = true WHERE id = $1`, wantErr: postgres.ErrNotResendable, reason: "inbound"},
		{name: "failed, sent bytes purged", set: `DELETE FROM outbox WHERE message_id = $1`, wantErr: postgres.ErrNotResendable, reason: "no longer stored"},
		{name: "failed, built as a stream, payload kept", set: `UPDATE outbox SET body = '', body_chunked = true, build_inputs = '{}', body_sha256 = '\x00' WHERE message_id = $1`},
		{name: "failed, built as a stream, payload purged", set: `WITH o AS (UPDATE outbox SET body = '', body_chunked = true, build_inputs = '{}', body_sha256 = '\x00' WHERE message_id = $1)
DELETE FROM payloads WHERE message_id = $1`, wantErr: postgres.ErrNotResendable, reason: "no longer stored"},
		{name: "failed, queued already", set: `UPDATE outbox SET status = 'pending', next_attempt_at = now() + interval '1 hour' WHERE message_id = $1`, wantErr: postgres.ErrNotResendable, reason: "queued already"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{
				Partner: "P", AS2From: "S", AS2To: "P", MessageID: fmt.Sprintf("<resend-%d@s>", i), ContentType: "text/plain",
				MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x"),
			})
			if err != nil {
				t.Fatal(err)
			}
			sendAttempt(t, st, negative)
			if tt.set != "" {
				if _, err := st.ExecSQL(ctx, tt.set, e.ID); err != nil {
					t.Fatal(err)
				}
			}
			before, err := st.Message(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := st.ResendMessage(ctx, e.ID)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("ResendMessage = %v, want %v saying %q", err, tt.wantErr, tt.reason)
				}
				after, err := st.Message(ctx, e.ID)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("a refused resend changed the message (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResendMessage = %v, want nil", err)
			}
			// The attempts made are kept: the resend's are numbered on.
			if got.Status != "queued" || got.Attempts != before.Attempts || got.Error != "" || got.Disposition != "" || got.MDNOverdue || got.CompletedAt != nil || got.MDNResends != before.MDNResends {
				t.Errorf("resent message = status %q, attempts %d, error %q, disposition %q, overdue %v, completed %v, resends %d; want queued afresh, attempts %d, resends %d",
					got.Status, got.Attempts, got.Error, got.Disposition, got.MDNOverdue, got.CompletedAt, got.MDNResends, before.Attempts, before.MDNResends)
			}
			items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
			if err != nil || len(items) != 1 || items[0].MessageID != e.ID || items[0].Attempts != 1 || !items[0].Built() {
				t.Fatalf("claim after the resend = %+v, %v; want the message's row, attempt 1, with the bytes as sent", items, err)
			}
			if err := st.FinishOutbox(ctx, items[0], positive); err != nil {
				t.Fatal(err)
			}
			if _, err := st.ResendMessage(ctx, e.ID); !errors.Is(err, postgres.ErrNotResendable) {
				t.Errorf("ResendMessage of the delivered resend = %v, want ErrNotResendable", err)
			}
		})
	}
	if _, err := st.ResendMessage(ctx, 1<<40); !errors.Is(err, hub.ErrMessageNotFound) {
		t.Errorf("ResendMessage(unknown id) = %v, want ErrMessageNotFound", err)
	}
}
