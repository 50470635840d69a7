package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// claimOne claims the one due outbox row as by.
func claimOne(t *testing.T, st *postgres.Store, by string) postgres.OutboxItem {
	t.Helper()
	items, err := st.ClaimOutbox(context.Background(), by, time.Minute, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("ClaimOutbox = %+v, %v; want one row", items, err)
	}
	return items[0]
}

// TestFinishOutboxRecordsAttempts: every finished attempt of a message is
// a row of its trace, with the replica that made it, the HTTP status and
// the error; a finish whose claim was lost, and webhook deliveries, are
// not.
func TestFinishOutboxRecordsAttempts(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0]

	first := claimOne(t, st, "replica-a")
	if err := st.FinishOutbox(ctx, first, postgres.OutboxResult{State: postgres.OutboxPending, HTTPStatus: 503, Error: "HTTP 503",
		Message: &postgres.MessageUpdate{Status: "retrying", Error: "HTTP 503"}}); err != nil {
		t.Fatal(err)
	}
	// The same attempt finished again (its claim is gone): refused, and
	// no second row.
	if err := st.FinishOutbox(ctx, first, postgres.OutboxResult{State: postgres.OutboxDone}); !errors.Is(err, postgres.ErrClaimLost) {
		t.Fatalf("FinishOutbox of a finished attempt = %v, want ErrClaimLost", err)
	}
	if err := st.ExpireClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE outbox SET next_attempt_at = now() WHERE message_id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	second := claimOne(t, st, "replica-b")
	if err := st.FinishOutbox(ctx, second, postgres.OutboxResult{State: postgres.OutboxFailed, Error: "dial tcp: connection refused",
		Message: &postgres.MessageUpdate{Status: "failed", Error: "dial tcp: connection refused", Final: true}}); err != nil {
		t.Fatal(err)
	}
	tr, err := st.MessageTrace(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []postgres.Attempt{
		{Attempt: 1, Replica: "replica-a", HTTPStatus: 503, Outcome: postgres.AttemptRetrying, Error: "HTTP 503"},
		{Attempt: 2, Replica: "replica-b", Outcome: postgres.AttemptFailed, Error: "dial tcp: connection refused"},
	}
	if diff := cmp.Diff(want, tr.Attempts, cmpopts.IgnoreFields(postgres.Attempt{}, "At")); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	for _, a := range tr.Attempts {
		if time.Since(a.At) > time.Minute {
			t.Errorf("attempt %d at %v, want now", a.Attempt, a.At)
		}
	}

	// A webhook delivery is no message's attempt.
	if _, err := st.ExecSQL(ctx, `INSERT INTO outbox (kind, partner, url, body, built_at) VALUES ('webhook', '', 'http://hook.example', 'x', now())`); err != nil {
		t.Fatal(err)
	}
	hook := claimOne(t, st, "replica-a")
	if err := st.FinishOutbox(ctx, hook, postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 204}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM message_attempts`); err != nil || n != 2 {
		t.Errorf("attempt rows = %d, %v; want the message's 2", n, err)
	}
}

// TestMessageTrace: the trace of an outbound message holds its attempts,
// events, MDN (without its bytes) and the async MDNs received for it: the
// one applied and the orphans that name its Message-ID in any form, from
// its partner or from none known; not those for another partner's
// message with the same Message-ID.
func TestMessageTrace(t *testing.T) {
	e := newInboxEnv(t)
	msg := e.outbound("<trace-1@s>", "async", "queued")
	if _, err := e.st.ExecSQL(e.ctx, `UPDATE outbox SET headers = '{"Receipt-Delivery-Option": ["x"]}', body = 'sent' WHERE message_id = $1`, msg); err != nil {
		t.Fatal(err)
	}
	it := claimOne(t, e.st, "replica-a")
	if err := e.st.FinishOutbox(e.ctx, it, postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
		Message: &postgres.MessageUpdate{Status: "awaiting-mdn", MDNDueIn: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	applied := e.inbox([]byte("the MDN"))
	late := e.inbox([]byte("a second MDN"))
	bare := e.inbox([]byte("an MDN naming it without brackets"))
	unknown := e.inbox([]byte("an MDN from nobody known"))
	other := e.inbox([]byte("an MDN of another partner"))
	e.apply(deliver(applied, msg))
	e.apply(postgres.MDNOutcome{InboxID: late, Partner: "P", Reason: "message is already final"},
		postgres.MDNOutcome{InboxID: bare, Partner: "P", Reason: "bad signature"},
		postgres.MDNOutcome{InboxID: unknown, Reason: "unknown sender"},
		postgres.MDNOutcome{InboxID: other, Partner: "Q", Reason: "no outbound message"})
	for id, omid := range map[int64]string{late: "<trace-1@s>", bare: "trace-1@s", unknown: "<trace-1@s>", other: "<trace-1@s>"} {
		if _, err := e.st.ExecSQL(e.ctx, `UPDATE mdn_inbox SET original_message_id = $2 WHERE id = $1`, id, omid); err != nil {
			t.Fatal(err)
		}
	}

	tr, err := e.st.MessageTrace(e.ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Message.ID != msg || tr.Message.Status != "delivered" {
		t.Errorf("message = %d %s, want %d delivered", tr.Message.ID, tr.Message.Status, msg)
	}
	if len(tr.Attempts) != 1 || tr.Attempts[0].Outcome != postgres.AttemptDone || tr.Attempts[0].HTTPStatus != 200 {
		t.Errorf("attempts = %+v, want the one done with HTTP 200", tr.Attempts)
	}
	if len(tr.Events) != 1 || tr.Events[0].Type != postgres.EventDelivered || tr.Events[0].Message != msg {
		t.Errorf("events = %+v, want delivered", tr.Events)
	}
	if m := tr.MDN; m == nil || m.Disposition != "automatic-action/MDN-sent-automatically; processed" || m.MICVerified == nil || !*m.MICVerified ||
		m.Body != nil || m.Size != int64(len("the MDN")) || m.ContentType != reportType {
		t.Errorf("MDN = %+v, want the applied one, MIC verified, %d bytes not read", m, len("the MDN"))
	}
	var got []string
	for _, m := range tr.InboxMDNs {
		got = append(got, fmt.Sprintf("%d %s %q", m.ID, m.State, m.Reason))
	}
	want := []string{
		fmt.Sprintf("%d processed %q", applied, ""),
		fmt.Sprintf("%d orphan %q", late, "message is already final"),
		fmt.Sprintf("%d orphan %q", bare, "bad signature"),
		fmt.Sprintf("%d orphan %q", unknown, "unknown sender"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("async MDNs (-want +got):\n%s", diff)
	}

	if _, err := e.st.MessageTrace(e.ctx, msg+1000); !errors.Is(err, hub.ErrMessageNotFound) {
		t.Errorf("MessageTrace(unknown) = %v, want ErrMessageNotFound", err)
	}
}

// TestMessageTraceInbound: an inbound message's trace has its received
// event and the MDN answered, no attempts and no async MDNs.
func TestMessageTraceInbound(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if err := st.InsertInboundHeld(ctx, "P", "<in-1@p>", nil); err != nil {
		t.Fatal(err)
	}
	ms, err := st.Messages(ctx, postgres.MessageQuery{MessageID: "<in-1@p>"})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Messages = %v, %v", ms, err)
	}
	if _, err := st.ExecSQL(ctx, `INSERT INTO mdns (message_id, content_type, body, disposition) VALUES ($1, 'text/plain', 'answered', 'processed')`, ms[0].ID); err != nil {
		t.Fatal(err)
	}
	tr, err := st.MessageTrace(ctx, ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Attempts) != 0 || len(tr.InboxMDNs) != 0 || len(tr.Events) != 1 || tr.Events[0].Type != postgres.EventReceived ||
		tr.MDN == nil || tr.MDN.Disposition != "processed" || tr.MDN.Size != 8 {
		t.Errorf("trace = %+v, want the received event and the MDN answered", tr)
	}
}

// TestMessagesSearch: the Message-ID filter finds a message with or
// without its brackets, the file name filter by prefix, byte for byte
// (LIKE's % and _ are plain characters), and the overdue filter the
// outbound messages whose MDN is overdue and not final.
func TestMessagesSearch(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	enq := func(mid, filename string) int64 {
		t.Helper()
		e, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{Partner: "P", AS2From: "S", AS2To: "P", MessageID: mid,
			Filename: filename, MDNMode: "async", URL: "http://p.example/as2", MaxAttempts: 1, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	a := enq("<a-1@s>", "ORDERS_20260131_1.edi")
	b := enq("b-2@s", "ORDERS_20260131_2.edi")
	c := enq("<c-3@s>", "ORDERS_20260201_1.edi")
	pct := enq("<d-4@s>", "100%_x.edi")
	under := enq("<e-5@s>", "1000_x.edi")
	uni := enq("<f-6@s>", "Bestellung_Ä.edi")
	uni2 := enq("<g-7@s>", "Bestellung_Äb.edi")
	next := enq("<h-8@s>", "Bestellung_Å.edi") // Å follows Ä
	if _, err := st.ExecSQL(ctx, `UPDATE messages SET status = 'awaiting-mdn', mdn_overdue = true WHERE id IN ($1, $2)`, a, c); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE messages SET status = 'delivered', mdn_overdue = true WHERE id = $1`, b); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give postgres.MessageQuery
		want []int64
	}{
		{"Message-ID as stored", postgres.MessageQuery{MessageID: "<a-1@s>"}, []int64{a}},
		{"Message-ID without brackets", postgres.MessageQuery{MessageID: "a-1@s"}, []int64{a}},
		{"Message-ID with brackets stored without", postgres.MessageQuery{MessageID: "<b-2@s>"}, []int64{b}},
		{"Message-ID with spaces", postgres.MessageQuery{MessageID: " <b-2@s> "}, []int64{b}},
		{"Message-ID unknown", postgres.MessageQuery{MessageID: "<a-1@t>"}, nil},
		{"Message-ID of another partner", postgres.MessageQuery{MessageID: "<a-1@s>", Partner: "Q"}, nil},
		{"file name prefix", postgres.MessageQuery{Filename: "ORDERS_20260131"}, []int64{b, a}},
		{"file name whole", postgres.MessageQuery{Filename: "ORDERS_20260201_1.edi"}, []int64{c}},
		{"file name is case-sensitive", postgres.MessageQuery{Filename: "orders_"}, nil},
		{"file name with %", postgres.MessageQuery{Filename: "100%"}, []int64{pct}},
		{"file name with _", postgres.MessageQuery{Filename: "100_"}, nil},
		{"file name 1000_", postgres.MessageQuery{Filename: "1000_"}, []int64{under}},
		{"file name ending in a non-ASCII letter", postgres.MessageQuery{Filename: "Bestellung_Ä"}, []int64{uni2, uni}},
		{"file name before a non-ASCII letter", postgres.MessageQuery{Filename: "Bestellung_"}, []int64{next, uni2, uni}},
		{"file name prefix and cursor", postgres.MessageQuery{Filename: "ORDERS_", Before: c}, []int64{b, a}},
		{"overdue", postgres.MessageQuery{Overdue: true}, []int64{c, a}},
		{"overdue and file name", postgres.MessageQuery{Overdue: true, Filename: "ORDERS_20260131"}, []int64{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := st.Messages(ctx, tt.give)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, m := range ms {
				got = append(got, m.ID)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Messages(%+v) (-want +got):\n%s", tt.give, diff)
			}
		})
	}
}

// TestMessagesDateRange: a date range lists the same messages, newest
// first, whether its rows are read in id order (a recent range) or sorted
// (a range under many newer messages), page by page.
func TestMessagesDateRange(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	// 300 messages, one an hour back from now, oldest first (ids grow
	// with time), and one stored late: its id is above newer ones.
	if _, err := st.ExecSQL(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, created_at)
SELECT 'inbound', 'P', 'P', 'S', '<' || g || '@p>', 'processed', now() - (300 - g) * interval '1 hour'
  FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, created_at)
VALUES ('inbound', 'P', 'P', 'S', '<late@p>', 'processed', now() - interval '250 hours 30 minutes')`); err != nil {
		t.Fatal(err)
	}
	all, err := st.Messages(ctx, postgres.MessageQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, r := range []struct{ name, since, until string }{
		{"deep", "-260h", "-240h"},
		{"recent", "-20h", "-1h"},
		{"until only, deep", "", "-280h"},
		{"since only", "-30h", ""},
	} {
		t.Run(r.name, func(t *testing.T) {
			var q postgres.MessageQuery
			if r.since != "" {
				d, _ := time.ParseDuration(r.since)
				q.Since = now.Add(d)
			}
			if r.until != "" {
				d, _ := time.ParseDuration(r.until)
				q.Until = now.Add(d)
			}
			var want []int64
			for _, m := range all {
				if (q.Since.IsZero() || !m.CreatedAt.Before(q.Since)) && (q.Until.IsZero() || m.CreatedAt.Before(q.Until)) {
					want = append(want, m.ID)
				}
			}
			var got []int64
			q.Limit = 7
			for {
				page, err := st.Messages(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range page {
					got = append(got, m.ID)
				}
				if len(page) < q.Limit {
					break
				}
				q.Before = page[len(page)-1].ID
			}
			if len(want) == 0 {
				t.Fatal("the range holds no message: the case tests nothing")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pages of %s..%s (-want +got):\n%s", r.since, r.until, diff)
			}
		})
	}
}

// TestPrefixEnd: the bound above every string with a prefix, in byte
// order.
func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		give, want string
		ok         bool
	}{
		{"abc", "abd", true},
		{"a", "b", true},
		{"ORDERS_", "ORDERS`", true},
		{"Ä", "Å", true},
		{"x\U0010FFFF", "y", true},
		{"x\U0010FFFF\U0010FFFF", "y", true},
		{"\U0010FFFF", "", false},
		{"a\uD7FF", "a\uE000", true},
		{"", "", false},
		{"a\xff", "", false},
	}
	for _, tt := range tests {
		got, ok := postgres.PrefixEnd(tt.give)
		if got != tt.want || ok != tt.ok {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q, %v", tt.give, got, ok, tt.want, tt.ok)
		}
		if ok && !(tt.give < got) {
			t.Errorf("prefixEnd(%q) = %q is not above it", tt.give, got)
		}
	}
}

// TestCancelMessage: which messages can be cancelled (the API's 200, 404
// and 409) and what a cancel does: the message fails with the reason,
// emits its failed event, its outbox row is finished and no dispatcher
// claims it; a resend queues it again.
func TestCancelMessage(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	tests := []struct {
		name string
		// set changes the queued message ($1) before the cancel.
		set     string
		claim   bool // a dispatcher holds a live claim on it
		wantErr error
		reason  string // in the error of a refused cancel
	}{
		{name: "queued"},
		{name: "retrying", set: `UPDATE messages SET status = 'retrying', attempts = 1 WHERE id = $1;
			UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', last_error = 'HTTP 503' WHERE message_id = $1`},
		{name: "sending, its claim expired", set: `UPDATE messages SET status = 'sending' WHERE id = $1;
			UPDATE outbox SET claimed_by = 'gone', claimed_until = now() - interval '1 second', attempts = 1 WHERE message_id = $1`},
		{name: "being sent", claim: true, wantErr: postgres.ErrNotCancellable, reason: "being sent right now (replica d); try again in a few seconds"},
		{name: "awaiting its MDN", set: `UPDATE messages SET status = 'awaiting-mdn' WHERE id = $1; UPDATE outbox SET status = 'done' WHERE message_id = $1`,
			wantErr: postgres.ErrNotCancellable, reason: "the partner accepted it"},
		{name: "delivered", set: `UPDATE messages SET status = 'delivered' WHERE id = $1; UPDATE outbox SET status = 'done' WHERE message_id = $1`,
			wantErr: postgres.ErrNotCancellable, reason: "its status is delivered, which is final"},
		{name: "failed", set: `UPDATE messages SET status = 'failed' WHERE id = $1; UPDATE outbox SET status = 'failed' WHERE message_id = $1`,
			wantErr: postgres.ErrNotCancellable, reason: "its status is failed, which is final"},
		{name: "inbound", set: `UPDATE messages SET direction = 'inbound', status = 'processed' WHERE id = $1; UPDATE outbox SET status = 'done' WHERE message_id = $1`,
			wantErr: postgres.ErrNotCancellable, reason: "inbound"},
		{name: "nothing queued", set: `DELETE FROM outbox WHERE message_id = $1`,
			wantErr: postgres.ErrNotCancellable, reason: "nothing is queued to send it"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{Partner: "P", AS2From: "S", AS2To: "P",
				MessageID: fmt.Sprintf("<cancel-%d@s>", i), MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range strings.Split(tt.set, ";") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				if _, err := st.ExecSQL(ctx, stmt, e.ID); err != nil {
					t.Fatal(err)
				}
			}
			if tt.claim {
				claimOne(t, st, "d")
			}
			m, err := st.CancelMessage(ctx, e.ID, "order withdrawn")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("CancelMessage = %v, want %v saying %q", err, tt.wantErr, tt.reason)
				}
				if tt.claim {
					if _, err := st.ExecSQL(ctx, `UPDATE outbox SET status = 'done' WHERE message_id = $1`, e.ID); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("CancelMessage = %v", err)
			}
			if m.Status != "failed" || m.Error != "cancelled: order withdrawn" || m.CompletedAt == nil {
				t.Errorf("cancelled message = %s %q completed %v, want failed, the reason, completed", m.Status, m.Error, m.CompletedAt)
			}
			if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE message_id = $1 AND status = 'failed'
			   AND finished_at IS NOT NULL AND claimed_until IS NULL AND last_error = 'cancelled: order withdrawn'`, e.ID); err != nil || n != 1 {
				t.Errorf("finished outbox rows = %d, %v; want 1", n, err)
			}
			tr, err := st.MessageTrace(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Events) != 1 || tr.Events[0].Type != postgres.EventFailed || !strings.Contains(string(tr.Events[0].Detail), "cancelled: order withdrawn") {
				t.Errorf("events = %+v, want one failed event with the reason", tr.Events)
			}
			if _, err := st.ExecSQL(ctx, `UPDATE outbox SET next_attempt_at = now() - interval '1 hour' WHERE message_id = $1`, e.ID); err != nil {
				t.Fatal(err)
			}
			if items, err := st.ClaimOutbox(ctx, "d", time.Minute, 100); err != nil || len(items) != 0 {
				t.Errorf("ClaimOutbox after the cancel = %+v, %v; want nothing", items, err)
			}
			// Resent, it goes out again.
			if again, err := st.ResendMessage(ctx, e.ID); err != nil || again.Status != "queued" {
				t.Errorf("ResendMessage after the cancel = %s, %v; want queued", again.Status, err)
			}
			claimOne(t, st, "d")
			if _, err := st.ExecSQL(ctx, `UPDATE outbox SET status = 'done' WHERE message_id = $1`, e.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := st.CancelMessage(ctx, 999999, ""); !errors.Is(err, hub.ErrMessageNotFound) {
		t.Errorf("CancelMessage(unknown) = %v, want ErrMessageNotFound", err)
	}
}

// TestCancelWithoutReason: the error is "cancelled" alone.
func TestCancelWithoutReason(t *testing.T) {
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0]
	m, err := st.CancelMessage(context.Background(), e.ID, "  ")
	if err != nil || m.Error != "cancelled" {
		t.Errorf("CancelMessage = %q, %v; want the error cancelled", m.Error, err)
	}
}

// TestCancelDoesNotWaitForADispatcher: a cancel while a dispatcher's
// transaction holds the outbox row (finishing an attempt) is refused at
// once instead of waiting for it.
func TestCancelDoesNotWaitForADispatcher(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	e := enqueueN(t, st, 1)[0]
	conn := pgtest.Conn(t, url)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox WHERE message_id = $1 FOR UPDATE`, e.ID); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err = st.CancelMessage(cctx, e.ID, "")
	if !errors.Is(err, postgres.ErrNotCancellable) || !strings.Contains(err.Error(), "try again in a few seconds") {
		t.Fatalf("CancelMessage while the row is locked = %v, want ErrNotCancellable, try again", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("CancelMessage took %v: it waited for the lock", d)
	}
	if m, err := st.Message(ctx, e.ID); err != nil || m.Status != "queued" {
		t.Errorf("message after the refused cancel = %s, %v; want queued", m.Status, err)
	}
}

// TestCancelRacesClaim: a cancel and a dispatcher's claim of the same
// message, released at once, many times: exactly one wins. Either the
// claim got the row and the cancel was refused (the message goes out),
// or the cancel failed the message and no claim got it; never both,
// never neither.
func TestCancelRacesClaim(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const rounds = 40
	var cancelled, claimed atomic.Int64
	for i := range rounds {
		e, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{Partner: "P", AS2From: "S", AS2To: "P",
			MessageID: fmt.Sprintf("<race-%d@s>", i), MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		var items []postgres.OutboxItem
		var claimErr, cancelErr error
		testenv.Together(2, func(j int) {
			if j == 0 {
				items, claimErr = st.ClaimOutbox(ctx, "d", time.Minute, 10)
			} else {
				_, cancelErr = st.CancelMessage(ctx, e.ID, "race")
			}
		})
		if claimErr != nil {
			t.Fatal(claimErr)
		}
		m, err := st.Message(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case cancelErr == nil && len(items) == 0:
			cancelled.Add(1)
			if m.Status != "failed" {
				t.Errorf("round %d: cancelled, message %s; want failed", i, m.Status)
			}
		case errors.Is(cancelErr, postgres.ErrNotCancellable) && len(items) == 1 && items[0].MessageID == e.ID:
			claimed.Add(1)
			if m.Status != "queued" {
				t.Errorf("round %d: claimed, message %s; want queued (the dispatcher's to move)", i, m.Status)
			}
			// The dispatcher records its attempt: the claim holds.
			if err := st.FinishOutbox(ctx, items[0], postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
				Message: &postgres.MessageUpdate{Status: "delivered", Final: true}}); err != nil {
				t.Errorf("round %d: FinishOutbox after the refused cancel = %v", i, err)
			}
		default:
			t.Fatalf("round %d: claim %d rows, cancel %v; want exactly one of them to win", i, len(items), cancelErr)
		}
	}
	t.Logf("%d cancels won, %d claims won", cancelled.Load(), claimed.Load())
}

// TestReapplyInboxMDN: an orphan goes back to pending, decided by no
// term, its reason cleared; the poller's listener is woken and the poller
// reads it among the pending ones. Only orphans are re-applied.
func TestReapplyInboxMDN(t *testing.T) {
	e := newInboxEnv(t)
	msg := e.outbound("<re-1@s>", "async", "awaiting-mdn")
	orphan := e.inbox([]byte("signed with the old certificate"))
	processed := e.inbox([]byte("the MDN"))
	pending := e.inbox([]byte("not judged yet"))
	e.apply(postgres.MDNOutcome{InboxID: orphan, Partner: "P", Reason: "bad signature"}, deliver(processed, msg))

	lctx, stop := context.WithCancel(e.ctx)
	defer stop()
	wakes := make(chan struct{}, 16)
	listening := make(chan error, 1)
	go func() {
		listening <- e.st.ListenMDNInbox(lctx, func() { wakes <- struct{}{} })
	}()
	select {
	case <-wakes: // LISTEN took effect
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not start")
	}

	got, err := e.st.ReapplyInboxMDN(e.ctx, orphan)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != orphan || got.State != postgres.InboxPending || got.Reason != "" || got.ProcessedAt != nil || got.Fence != nil || got.Partner != "" {
		t.Errorf("re-applied = %+v, want pending, undecided", got)
	}
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Error("the re-apply did not wake the poller's listener")
	}
	refs, err := e.st.PendingInboxMDNs(e.ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range refs {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]int64{orphan, pending}, ids); diff != "" {
		t.Errorf("pending MDNs (-want +got):\n%s", diff)
	}
	// The poller decides it again, as for a new one.
	e.apply(deliver(orphan, msg))
	if r := e.row(orphan); r.State != postgres.InboxOrphan || !strings.Contains(r.Reason, "no longer awaiting") {
		t.Errorf("re-applied MDN for a decided message = %s %q, want an orphan again", r.State, r.Reason)
	}

	for _, tt := range []struct {
		id   int64
		want error
		says string
	}{
		{processed, postgres.ErrNotOrphan, "it is processed"},
		{pending, postgres.ErrNotOrphan, "it is pending"},
		{999999, postgres.ErrInboxMDNNotFound, ""},
	} {
		if _, err := e.st.ReapplyInboxMDN(e.ctx, tt.id); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ReapplyInboxMDN(%d) = %v, want %v saying %q", tt.id, err, tt.want, tt.says)
		}
	}
	if r := e.row(processed); r.State != postgres.InboxProcessed || r.MessageRef == nil {
		t.Errorf("processed MDN after a refused re-apply = %+v", r)
	}
	stop()
	if err := <-listening; err != nil {
		t.Errorf("ListenMDNInbox = %v", err)
	}
}

// TestPartnersHealthAndHubFigures: each partner's last success (either
// direction), retrying and overdue counts, in the order asked; the hub's
// counts of work in flight.
func TestPartnersHealthAndHubFigures(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.ExecSQL(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, mdn_overdue, completed_at)
VALUES ('outbound', 'A', 'S', 'A', '<1@s>', 'delivered', false, now() - interval '2 hours'),
       ('inbound',  'A', 'A', 'S', '<2@a>', 'processed', false, now() - interval '1 hour'),
       ('outbound', 'A', 'S', 'A', '<3@s>', 'failed', false, now()),
       ('outbound', 'A', 'S', 'A', '<4@s>', 'retrying', false, NULL),
       ('outbound', 'A', 'S', 'A', '<5@s>', 'awaiting-mdn', true, NULL),
       ('outbound', 'B', 'S', 'B', '<6@s>', 'retrying', false, NULL),
       ('outbound', 'B', 'S', 'B', '<7@s>', 'delivered', true, now())`); err != nil {
		t.Fatal(err)
	}
	hs, err := st.PartnersHealth(ctx, []string{"B", "A", "C"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.Messages(ctx, postgres.MessageQuery{MessageID: "<2@a>"})
	if err != nil || len(ids) != 1 {
		t.Fatal(ids, err)
	}
	b7, err := st.Messages(ctx, postgres.MessageQuery{MessageID: "<7@s>"})
	if err != nil || len(b7) != 1 {
		t.Fatal(b7, err)
	}
	want := []postgres.PartnerHealth{
		{Partner: "B", LastSuccess: b7[0].ID, Retrying: 1},
		{Partner: "A", LastSuccess: ids[0].ID, Retrying: 1, Overdue: 1},
		{Partner: "C"},
	}
	if diff := cmp.Diff(want, hs, cmpopts.IgnoreFields(postgres.PartnerHealth{}, "LastSuccessAt")); diff != "" {
		t.Errorf("PartnersHealth (-want +got):\n%s", diff)
	}
	if hs[1].LastSuccessAt == nil || hs[2].LastSuccessAt != nil {
		t.Errorf("last success times %v, %v; want A's, none for C", hs[1].LastSuccessAt, hs[2].LastSuccessAt)
	}

	enqueueN(t, st, 2)
	if _, err := st.ClaimOutbox(ctx, "d", time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveInboxMDN(ctx, &postgres.InboxMDN{AS2From: "A", Header: http.Header{}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `INSERT INTO mdn_inbox (content_type, body, state, processed_at, reason) VALUES ('x', 'y', 'orphan', now(), 'r')`); err != nil {
		t.Fatal(err)
	}
	f, err := st.HubFigures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(postgres.HubFigures{OutboxDue: 1, OutboxClaimed: 1, InboxPending: 1, InboxOrphans: 1, Retrying: 2, Overdue: 1}, f); diff != "" {
		t.Errorf("HubFigures (-want +got):\n%s", diff)
	}
}
