package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const reportType = `multipart/report; report-type=disposition-notification; boundary="b"`

// inboxEnv is a store with an open term and helpers for outbound messages
// and inbox MDNs.
type inboxEnv struct {
	t     *testing.T
	ctx   context.Context
	st    *postgres.Store
	fence hub.Fence
}

func newInboxEnv(t *testing.T) *inboxEnv {
	e := &inboxEnv{t: t, ctx: context.Background(), st: pgtest.Store(t), fence: hub.Fence{Lease: "edihub-leader", Token: 1}}
	if err := e.st.OpenTerm(e.ctx, e.fence, "holder-1"); err != nil {
		t.Fatal(err)
	}
	return e
}

// outbound enqueues an outbound message to partner P asking for mode's
// MDN and sets its status.
func (e *inboxEnv) outbound(messageID, mode, status string) int64 {
	e.t.Helper()
	m, err := e.st.EnqueueOutbound(e.ctx, postgres.NewOutbound{
		Partner: "P", AS2From: "S", AS2To: "P", MessageID: messageID, ContentType: "text/plain",
		MDNMode: mode, URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.ExecSQL(e.ctx, `UPDATE messages SET status = $2 WHERE id = $1`, m.ID, status); err != nil {
		e.t.Fatal(err)
	}
	return m.ID
}

// inbox stores an async MDN from P with body and returns its id.
func (e *inboxEnv) inbox(body []byte) int64 {
	e.t.Helper()
	id, err := e.st.SaveInboxMDN(e.ctx, &postgres.InboxMDN{
		AS2From: "P", AS2To: "S", Header: http.Header{"Content-Type": {reportType}, "As2-From": {"P"}}, Body: body,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *inboxEnv) apply(outs ...postgres.MDNOutcome) []postgres.AppliedMDN {
	e.t.Helper()
	applied, err := e.st.ApplyMDNs(e.ctx, e.fence, outs)
	if err != nil {
		e.t.Fatalf("ApplyMDNs: %v", err)
	}
	return applied
}

func (e *inboxEnv) row(id int64) postgres.InboxMDNInfo {
	e.t.Helper()
	rows, err := e.st.InboxMDNs(e.ctx, postgres.InboxQuery{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	e.t.Fatalf("inbox MDN %d not found", id)
	return postgres.InboxMDNInfo{}
}

func (e *inboxEnv) message(id int64) hub.MessageInfo {
	e.t.Helper()
	m, err := e.st.Message(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func deliver(inbox, msg int64) postgres.MDNOutcome {
	yes := true
	return postgres.MDNOutcome{InboxID: inbox, Partner: "P", Message: &postgres.MDNApply{
		MessageID: msg, Status: "delivered", Disposition: "automatic-action/MDN-sent-automatically; processed", MICVerified: &yes,
	}}
}

func fail(inbox, msg int64) postgres.MDNOutcome {
	return postgres.MDNOutcome{InboxID: inbox, Partner: "P", Reason: "negative MDN", Message: &postgres.MDNApply{
		MessageID: msg, Status: "failed", Disposition: "automatic-action/MDN-sent-automatically; processed/Error: decryption-failed", Error: "negative MDN",
	}}
}

func refOf(m *int64) string {
	if m == nil {
		return "nil"
	}
	return fmt.Sprint(*m)
}

// TestApplyMDNsTwice: applying an outcome whose inbox row is decided
// already (the poller's one-by-one retry after a commit whose reply was
// lost) changes nothing: the row stays processed for its message, the
// message delivered, its MDN kept.
func TestApplyMDNsTwice(t *testing.T) {
	e := newInboxEnv(t)
	msg := e.outbound("<twice@s>", "async", "awaiting-mdn")
	in := e.inbox([]byte("the MDN"))
	if a := e.apply(deliver(in, msg)); a[0].State != postgres.InboxProcessed || a[0].Message != msg || a[0].MessageID != "<twice@s>" {
		t.Fatalf("first ApplyMDNs = %+v, want processed for message %d <twice@s>", a[0], msg)
	}
	before := e.row(in)
	again := e.apply(deliver(in, msg))
	if again[0].State != "" {
		t.Errorf("second ApplyMDNs of a decided row = state %q (reason %q), want \"\" (nothing changed)", again[0].State, again[0].Reason)
	}
	after := e.row(in)
	if after.State != postgres.InboxProcessed || after.MessageRef == nil || *after.MessageRef != msg || after.Reason != before.Reason ||
		!after.ProcessedAt.Equal(*before.ProcessedAt) {
		t.Errorf("inbox row after applying it twice = {state %q, message %s, reason %q}, want processed for message %d as before", after.State, refOf(after.MessageRef), after.Reason, msg)
	}
	if m := e.message(msg); m.Status != "delivered" {
		t.Errorf("message after applying its MDN twice: %q, want delivered", m.Status)
	}
	if g, err := e.st.MDNGauges(e.ctx); err != nil || g.Orphans != 0 {
		t.Errorf("orphans = %d (%v), want 0", g.Orphans, err)
	}
	if stored, err := e.st.MessageMDN(e.ctx, msg); err != nil || !bytes.Equal(stored.Body, []byte("the MDN")) {
		t.Errorf("stored MDN = %q, %v; want the inbox row's body", stored.Body, err)
	}
}

// TestApplyMDNsTwoForOneMessage: a partner that retries its async MDN post
// leaves two MDNs for one message in one poll; the first decides the
// message, the second (here negative) becomes an orphan and changes
// nothing.
func TestApplyMDNsTwoForOneMessage(t *testing.T) {
	e := newInboxEnv(t)
	msg := e.outbound("<two@s>", "async", "awaiting-mdn")
	first, second := e.inbox([]byte("positive")), e.inbox([]byte("negative"))
	a := e.apply(deliver(first, msg), fail(second, msg))
	if a[0].State != postgres.InboxProcessed || a[1].State != postgres.InboxOrphan || !strings.Contains(a[1].Reason, "no longer awaiting") {
		t.Errorf("ApplyMDNs = %+v, want the first processed, the second an orphan: no longer awaiting", a)
	}
	if m := e.message(msg); m.Status != "delivered" || m.Error != "" {
		t.Errorf("message = {status %q, error %q}, want delivered by the first MDN", m.Status, m.Error)
	}
	if r := e.row(second); r.State != postgres.InboxOrphan || r.MessageRef != nil || !strings.Contains(r.Reason, "delivered") {
		t.Errorf("second MDN = {state %q, message %s, reason %q}, want an orphan naming the status delivered", r.State, refOf(r.MessageRef), r.Reason)
	}
	if stored, err := e.st.MessageMDN(e.ctx, msg); err != nil || string(stored.Body) != "positive" {
		t.Errorf("stored MDN = %q, %v; want the first", stored.Body, err)
	}
}

// TestApplyMDNsNeverFinal: an async MDN decides an outbound message that
// is not final (sent and awaiting its MDN, or being sent or retried: the
// partner may answer before the dispatcher recorded the attempt), never
// one that is final.
func TestApplyMDNsNeverFinal(t *testing.T) {
	e := newInboxEnv(t)
	tests := []struct {
		status    string
		wantState string
	}{
		{"awaiting-mdn", postgres.InboxProcessed},
		{"sending", postgres.InboxProcessed},
		{"retrying", postgres.InboxProcessed},
		{"queued", postgres.InboxProcessed},
		{"delivered", postgres.InboxOrphan},
		{"failed", postgres.InboxOrphan},
		{"sent", postgres.InboxOrphan},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			msg := e.outbound("<"+tt.status+"@s>", "async", tt.status)
			in := e.inbox([]byte("mdn"))
			a := e.apply(deliver(in, msg))
			wantStatus := tt.status
			if tt.wantState == postgres.InboxProcessed {
				wantStatus = "delivered"
			}
			if m := e.message(msg); a[0].State != tt.wantState || m.Status != wantStatus {
				t.Errorf("MDN for a message %s: inbox %q (reason %q), message %q; want %q, %q", tt.status, a[0].State, a[0].Reason, m.Status, tt.wantState, wantStatus)
			}
			if tt.wantState == postgres.InboxOrphan && a[0].Reason != fmt.Sprintf("message %d is no longer awaiting an async MDN (%s)", msg, tt.status) {
				t.Errorf("reason %q, want it to name the message and its status", a[0].Reason)
			}
			// The message's outbox row is still pending (as a retry or
			// a resend would be): a decided message is not sent again.
			pending, err := e.st.CountSQL(e.ctx, `SELECT count(*) FROM outbox WHERE message_id = $1 AND kind = 'message' AND status = 'pending'`, msg)
			if err != nil {
				t.Fatal(err)
			}
			wantPending := int64(1) // an orphan changes nothing
			if tt.wantState == postgres.InboxProcessed {
				wantPending = 0 // decided: it must not be sent again
			}
			if pending != wantPending {
				t.Errorf("%d pending outbox rows for the message after the MDN, want %d", pending, wantPending)
			}
		})
	}
}

// TestPendingInboxMDNs: the batch lists ids, senders and sizes without the
// bodies; a body is read one row at a time, and only while the row is
// pending.
func TestPendingInboxMDNs(t *testing.T) {
	e := newInboxEnv(t)
	small := e.inbox([]byte("small"))
	large := e.inbox(bytes.Repeat([]byte("x"), 3<<20))
	refs, err := e.st.PendingInboxMDNs(e.ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []postgres.PendingMDNRef{{ID: small, AS2From: "P", Size: 5}, {ID: large, AS2From: "P", Size: 3 << 20}}
	if fmt.Sprint(refs) != fmt.Sprint(want) {
		t.Errorf("PendingInboxMDNs = %v, want %v", refs, want)
	}
	m, err := e.st.PendingInboxMDN(e.ctx, small)
	if err != nil || string(m.Body) != "small" || m.AS2From != "P" || m.Header.Get("Content-Type") != reportType {
		t.Errorf("PendingInboxMDN(%d) = {from %q, body %q, Content-Type %q}, %v; want P, small, the report type", small, m.AS2From, m.Body, m.Header.Get("Content-Type"), err)
	}
	e.apply(postgres.MDNOutcome{InboxID: small, Partner: "P", Reason: "test"})
	if _, err := e.st.PendingInboxMDN(e.ctx, small); !errors.Is(err, postgres.ErrNotPending) {
		t.Errorf("PendingInboxMDN of a decided row = %v, want ErrNotPending", err)
	}
	if refs, err := e.st.PendingInboxMDNs(e.ctx, 0, 10); err != nil || len(refs) != 1 || refs[0].ID != large {
		t.Errorf("PendingInboxMDNs after deciding one = %v, %v; want the large one only", refs, err)
	}
}

// TestPendingInboxMDNsReadsNoBodies: listing a batch of large inbox rows
// allocates next to nothing: the bodies stay in the database (a batch of
// them once ran the leader out of memory).
func TestPendingInboxMDNsReadsNoBodies(t *testing.T) {
	e := newInboxEnv(t)
	const n, size = 8, 4 << 20
	for range n {
		e.inbox(bytes.Repeat([]byte("j"), size))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	refs, err := e.st.PendingInboxMDNs(e.ctx, 0, 100)
	runtime.ReadMemStats(&after)
	if err != nil || len(refs) != n {
		t.Fatalf("PendingInboxMDNs = %d rows, %v; want %d", len(refs), err, n)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > size {
		t.Errorf("listing %d pending MDNs of %d bytes allocated %d bytes, want under %d (no bodies)", n, size, got, size)
	}
}
