package postgres_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// claimBuilt claims the one due outbox row as by and stores its build
// when it has none: the attempt is then under way (being posted).
func claimBuilt(t *testing.T, st *postgres.Store, by string) postgres.OutboxItem {
	t.Helper()
	it := claimOne(t, st, by)
	if !it.Built() {
		b := postgres.OutboundBuild{Headers: http.Header{"Message-ID": {"<0@s>"}, "Receipt-Delivery-Option": {"http://s.example/mdn"}},
			Body: []byte("built"), MIC: "m, sha-256", MICAlg: "sha-256"}
		if err := st.SaveOutboundBuild(context.Background(), it, b); err != nil {
			t.Fatal(err)
		}
	}
	return it
}

func attempts(t *testing.T, st *postgres.Store, id int64) []postgres.Attempt {
	t.Helper()
	tr, err := st.MessageTrace(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Attempts
}

var ignoreAt = cmpopts.IgnoreFields(postgres.Attempt{}, "At")

// awaiting is the outcome of a post the partner answered with 2xx, its
// MDN to come asynchronously.
var awaiting = postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
	Message: &postgres.MessageUpdate{Status: "awaiting-mdn", MDNDueIn: time.Hour}}

// TestAttemptRecordedAfterAsyncMDN: the partner's async MDN is applied
// between the post and the write of its outcome (the partner answered
// the post and sent its MDN at once). The message keeps the MDN's status,
// and the attempt is recorded all the same, in its trace and its count.
func TestAttemptRecordedAfterAsyncMDN(t *testing.T) {
	tests := []struct {
		name       string
		give       postgres.OutboxResult
		mdn        func(inbox, msg int64) postgres.MDNOutcome
		wantStatus string
		want       postgres.Attempt
	}{
		{name: "delivered", give: awaiting, mdn: deliver, wantStatus: "delivered",
			want: postgres.Attempt{Attempt: 1, Replica: "d", HTTPStatus: 200, Outcome: postgres.AttemptDone}},
		{name: "negative MDN", give: awaiting, mdn: fail, wantStatus: "failed",
			want: postgres.Attempt{Attempt: 1, Replica: "d", HTTPStatus: 200, Outcome: postgres.AttemptNegative}},
		{name: "post timed out", mdn: deliver, wantStatus: "delivered",
			give: postgres.OutboxResult{State: postgres.OutboxPending, RetryIn: time.Minute, Error: "post: timeout",
				Message: &postgres.MessageUpdate{Status: "retrying", Error: "post: timeout"}},
			want: postgres.Attempt{Attempt: 1, Replica: "d", Outcome: postgres.AttemptFailed,
				Error: "post: timeout; not retried: the partner's async MDN decided the message meanwhile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newInboxEnv(t)
			id := e.outbound("<race@s>", "async", "queued")
			it := claimBuilt(t, e.st, "d")
			if a := e.apply(tt.mdn(e.inbox([]byte("MDN")), id)); a[0].State != postgres.InboxProcessed {
				t.Fatalf("ApplyMDNs = %+v, want processed", a)
			}
			if err := e.st.FinishOutbox(e.ctx, it, tt.give); err != nil {
				t.Fatalf("FinishOutbox after the MDN = %v, want nil", err)
			}
			m := e.message(id)
			if m.Status != tt.wantStatus || m.Attempts != 1 {
				t.Errorf("message = status %q, attempts %d; want %s, 1", m.Status, m.Attempts, tt.wantStatus)
			}
			if diff := cmp.Diff([]postgres.Attempt{tt.want}, attempts(t, e.st, id), ignoreAt); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			// Nothing is sent again.
			if items, err := e.st.ClaimOutbox(e.ctx, "d", time.Minute, 10); err != nil || len(items) != 0 {
				t.Errorf("ClaimOutbox = %+v, %v; want nothing", items, err)
			}
		})
	}
}

// TestAttemptNumbersGoOnAfterResend: a resend's attempts are numbered on
// from the attempts before it, in the trace and the message's count.
func TestAttemptNumbersGoOnAfterResend(t *testing.T) {
	ctx := context.Background()
	e := newInboxEnv(t)
	id := e.outbound("<resent@s>", "sync", "queued")
	retry := postgres.OutboxResult{State: postgres.OutboxPending, HTTPStatus: 503, Error: "HTTP 503",
		Message: &postgres.MessageUpdate{Status: "retrying", Error: "HTTP 503"}}
	refused := postgres.OutboxResult{State: postgres.OutboxFailed, HTTPStatus: 403, Error: "HTTP 403",
		Message: &postgres.MessageUpdate{Status: "failed", Error: "HTTP 403", Final: true}}
	for _, r := range []postgres.OutboxResult{retry, refused} {
		if err := e.st.FinishOutbox(ctx, claimBuilt(t, e.st, "d"), r); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.ExecSQL(ctx, `UPDATE outbox SET next_attempt_at = now() WHERE message_id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.ResendMessage(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.st.FinishOutbox(ctx, claimBuilt(t, e.st, "d"), positive); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, a := range attempts(t, e.st, id) {
		got = append(got, a.Attempt)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, got); diff != "" {
		t.Errorf("attempt numbers after a resend (-want +got):\n%s", diff)
	}
	if m := e.message(id); m.Attempts != 3 {
		t.Errorf("message attempts = %d, want 3", m.Attempts)
	}
}

// TestCancelledAttempt: the attempt whose retry an operator cancelled
// says it was cancelled, not retrying.
func TestCancelledAttempt(t *testing.T) {
	ctx := context.Background()
	e := newInboxEnv(t)
	id := e.outbound("<cancelled@s>", "sync", "queued")
	if err := e.st.FinishOutbox(ctx, claimBuilt(t, e.st, "d"), postgres.OutboxResult{State: postgres.OutboxPending, RetryIn: time.Hour,
		HTTPStatus: 502, Error: "HTTP 502", Message: &postgres.MessageUpdate{Status: "retrying", Error: "HTTP 502"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CancelMessage(ctx, id, "sent by mistake"); err != nil {
		t.Fatal(err)
	}
	want := []postgres.Attempt{{Attempt: 1, Replica: "d", HTTPStatus: 502, Outcome: postgres.AttemptCancelled, Error: "HTTP 502; cancelled: sent by mistake"}}
	if diff := cmp.Diff(want, attempts(t, e.st, id), ignoreAt); diff != "" {
		t.Errorf("attempts after the cancel (-want +got):\n%s", diff)
	}
}

// TestNegativeMDNAttempt: the attempt whose message the partner's MDN
// refused is negative, whether the MDN came asynchronously (after the
// attempt was recorded as done) or synchronously.
func TestNegativeMDNAttempt(t *testing.T) {
	ctx := context.Background()
	e := newInboxEnv(t)
	async := e.outbound("<async-negative@s>", "async", "queued")
	if err := e.st.FinishOutbox(ctx, claimBuilt(t, e.st, "d"), awaiting); err != nil {
		t.Fatal(err)
	}
	e.apply(fail(e.inbox([]byte("MDN")), async))
	want := []postgres.Attempt{{Attempt: 1, Replica: "d", HTTPStatus: 200, Outcome: postgres.AttemptNegative, Error: "negative MDN"}}
	if diff := cmp.Diff(want, attempts(t, e.st, async), ignoreAt); diff != "" {
		t.Errorf("attempts after a negative async MDN (-want +got):\n%s", diff)
	}

	sync := e.outbound("<sync-negative@s>", "sync", "queued")
	if err := e.st.FinishOutbox(ctx, claimBuilt(t, e.st, "d"), negative); err != nil {
		t.Fatal(err)
	}
	want = []postgres.Attempt{{Attempt: 1, Replica: "d", Outcome: postgres.AttemptNegative, Error: negative.Error}}
	if diff := cmp.Diff(want, attempts(t, e.st, sync), ignoreAt); diff != "" {
		t.Errorf("attempts after a negative sync MDN (-want +got):\n%s", diff)
	}
}

// TestApplyMDNsAndFinishOutboxDoNotDeadlock drives the MDN poller's apply
// and the dispatcher's outcome write of one message into the order that
// deadlocked when the dispatcher locked the outbox row before the
// message: a third transaction holds the message locked while the
// dispatcher's write starts, then the apply; once it lets go, both go on
// at once. Each must finish without a deadlock (40P01).
func TestApplyMDNsAndFinishOutboxDoNotDeadlock(t *testing.T) {
	url := pgtest.URL(t)
	e := &inboxEnv{t: t, ctx: context.Background(), st: open(t, url), fence: hub.Fence{Lease: "edihub-leader", Token: 1}}
	ctx := e.ctx
	if err := e.st.OpenTerm(ctx, e.fence, "holder-1"); err != nil {
		t.Fatal(err)
	}
	id := e.outbound("<deadlock@s>", "async", "queued")
	it := claimBuilt(t, e.st, "d")
	inbox := e.inbox([]byte("MDN"))

	hold, err := pgtest.Conn(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	// FOR UPDATE: it blocks the key-share lock the attempt's insert takes
	// on the message as well as the updates.
	if _, err := hold.Exec(ctx, `SELECT FROM messages WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() { finished <- e.st.FinishOutbox(ctx, it, awaiting) }()
	waitForLockWaiters(t, e.st, 1)
	applied := make(chan error, 1)
	go func() {
		_, err := e.st.ApplyMDNs(ctx, e.fence, []postgres.MDNOutcome{deliver(inbox, id)})
		applied <- err
	}()
	waitForLockWaiters(t, e.st, 2)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"FinishOutbox": finished, "ApplyMDNs": applied} {
		if err := <-ch; err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "40P01" {
				t.Errorf("%s = %v, want no deadlock", name, err)
			} else {
				t.Errorf("%s = %v, want nil", name, err)
			}
		}
	}
	if m := e.message(id); m.Status != "delivered" || m.Attempts != 1 {
		t.Errorf("message = status %q, attempts %d; want delivered, 1", m.Status, m.Attempts)
	}
}

// waitForLockWaiters returns once n sessions wait for a lock: the
// transactions the test started are blocked where it wants them.
func waitForLockWaiters(t *testing.T, st *postgres.Store, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		got, err := st.LockWaiters(ctx)
		if err != nil {
			t.Fatalf("LockWaiters = %v, want %d waiting", err, n)
		}
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("LockWaiters = %d, want %d", got, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
