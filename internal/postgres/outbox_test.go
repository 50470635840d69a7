package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func enqueueN(t *testing.T, st *postgres.Store, n int) []postgres.Enqueued {
	t.Helper()
	var out []postgres.Enqueued
	for i := range n {
		e, err := st.EnqueueOutbound(context.Background(), postgres.NewOutbound{
			Partner: "P", AS2From: "S", AS2To: "P", MessageID: fmt.Sprintf("<%d@s>", i), ContentType: "text/plain",
			MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x"),
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestClaimOutboxConcurrent: concurrent claimers never get the same row.
func TestClaimOutboxConcurrent(t *testing.T) {
	st := pgtest.Store(t)
	enqueueN(t, st, 60)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			by := fmt.Sprintf("w%d", w)
			for {
				items, err := st.ClaimOutbox(context.Background(), by, time.Minute, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(items) == 0 {
					return
				}
				mu.Lock()
				for _, it := range items {
					if prev, dup := seen[it.ID]; dup {
						t.Errorf("outbox %d claimed by %s and %s", it.ID, prev, by)
					}
					seen[it.ID] = by
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 60 {
		t.Errorf("claimed %d rows, want 60", len(seen))
	}
}

// TestClaimSkipsLockedRows: a claim never waits behind a row that another
// transaction holds locked (another replica's claim in flight); it returns
// the other rows at once. The claiming session runs with a lock_timeout, so
// a claim that waits for the row lock fails with a lock timeout instead of
// passing late: the test asserts "never waits", not a duration.
func TestClaimSkipsLockedRows(t *testing.T) {
	tests := []struct {
		name      string
		exhausted bool // the locked row has used all its attempts and is due to be failed
	}{
		{name: "due row locked"},
		{name: "exhausted row locked", exhausted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a backstop against a hang only
			defer cancel()
			dbURL := pgtest.URL(t)
			st := open(t, withLockTimeout(t, dbURL, "1s"))

			var locked int64
			if tt.exhausted {
				x, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{
					Partner: "P", AS2From: "S", AS2To: "P", MessageID: "<x@s>", ContentType: "text/plain",
					MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 1, Payload: []byte("x"),
				})
				if err != nil {
					t.Fatal(err)
				}
				if c, err := st.ClaimOutbox(ctx, "crashed", time.Hour, 1); err != nil || len(c) != 1 || c[0].ID != x.OutboxID {
					t.Fatalf("claim of the row to exhaust = %+v, %v", c, err)
				}
				if err := st.ExpireClaims(ctx); err != nil {
					t.Fatal(err)
				}
				locked = x.OutboxID
			}
			rows := enqueueN(t, st, 3)
			if !tt.exhausted {
				locked = rows[0].OutboxID // the first in claim order
			}

			holder, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = holder.Close(context.Background()) })
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if _, err := tx.Exec(ctx, `SELECT id FROM outbox WHERE id = $1 FOR UPDATE`, locked); err != nil {
				t.Fatal(err)
			}

			items, err := st.ClaimOutbox(ctx, "b", time.Minute, 10)
			if err != nil {
				t.Fatalf("ClaimOutbox while outbox %d is locked by another transaction = %v; a claim must skip locked rows, not wait for them", locked, err)
			}
			var got []int64
			for _, it := range items {
				got = append(got, it.ID)
			}
			slices.Sort(got)
			want := []int64{rows[0].OutboxID, rows[1].OutboxID, rows[2].OutboxID}
			if !tt.exhausted {
				want = want[1:]
			}
			if !slices.Equal(got, want) {
				t.Errorf("ClaimOutbox while outbox %d is locked = rows %v, want %v", locked, got, want)
			}
		})
	}
}

// withLockTimeout returns dbURL with a lock_timeout for its sessions.
func withLockTimeout(t *testing.T, dbURL, d string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("lock_timeout", d)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestClaimExpiry: a claim holds its row for its lease (claimed_until is
// the lease from the claiming statement), an expired claim is taken over,
// the old holder's writes are refused with ErrClaimLost, and a final status
// is written once. The lease is ended with ExpireClaims, not by sleeping:
// a short lease that the test sleeps past can also run out on a loaded
// machine before the "still held" check.
func TestClaimExpiry(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0]
	const lease = time.Hour
	before := time.Now()
	a, err := st.ClaimOutbox(ctx, "a", lease, 10)
	after := time.Now()
	if err != nil || len(a) != 1 || a[0].Attempts != 1 || a[0].Built() {
		t.Fatalf("first claim = %+v, %v", a, err)
	}
	// The database and the test share the machine's clock: the claim's
	// now() lies between before and after (a second of slack for rounding).
	if until := a[0].ClaimedUntil; until.Before(before.Add(lease-time.Second)) || until.After(after.Add(lease+time.Second)) {
		t.Errorf("ClaimedUntil = %v, want the claim time + %v (claimed between %v and %v)", until, lease, before, after)
	}
	if again, err := st.ClaimOutbox(ctx, "b", time.Minute, 10); err != nil || len(again) != 0 {
		t.Fatalf("claim of a held row = %+v, %v; want nothing", again, err)
	}
	if err := st.ExpireClaims(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := st.ClaimOutbox(ctx, "b", time.Minute, 10)
	if err != nil || len(b) != 1 || b[0].Attempts != 2 {
		t.Fatalf("claim after expiry = %+v, %v", b, err)
	}
	build := postgres.OutboundBuild{Headers: http.Header{"Message-ID": {"<0@s>"}}, Body: []byte("built"), MIC: "m, sha-256", MICAlg: "sha-256"}
	if err := st.SaveOutboundBuild(ctx, a[0], build); !errors.Is(err, postgres.ErrClaimLost) {
		t.Errorf("SaveOutboundBuild by the expired holder = %v, want ErrClaimLost", err)
	}
	if err := st.SaveOutboundBuild(ctx, b[0], build); err != nil {
		t.Fatal(err)
	}
	done := postgres.OutboxResult{State: postgres.OutboxDone, Message: &postgres.MessageUpdate{Status: "delivered", Final: true}}
	if err := st.FinishOutbox(ctx, a[0], done); !errors.Is(err, postgres.ErrClaimLost) {
		t.Errorf("FinishOutbox by the expired holder = %v, want ErrClaimLost", err)
	}
	if err := st.FinishOutbox(ctx, b[0], done); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishOutbox(ctx, b[0], postgres.OutboxResult{State: postgres.OutboxFailed, Message: &postgres.MessageUpdate{Status: "failed", Final: true}}); !errors.Is(err, postgres.ErrClaimLost) {
		t.Errorf("second FinishOutbox = %v, want ErrClaimLost", err)
	}
	m, err := st.Message(ctx, e.ID)
	if err != nil || m.Status != "delivered" || m.Attempts != 2 || m.MIC != "m, sha-256" || m.CompletedAt == nil {
		t.Errorf("message = %+v, %v", m, err)
	}
	if _, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{Partner: "P", MessageID: "<0@s>", URL: "http://x", Payload: []byte("x"), MDNMode: "none"}); !errors.Is(err, postgres.ErrDuplicateMessageID) {
		t.Errorf("duplicate Message-ID = %v, want ErrDuplicateMessageID", err)
	}
}

// TestClaimGivesUpOnExhaustedRow: a row whose last allowed attempt was
// claimed and never finished (the dispatcher crashed or was killed) is not
// claimed again when the claim expires: the next claim fails it and its
// message, saying why, in the same statement.
func TestClaimGivesUpOnExhaustedRow(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	e := enqueueN(t, st, 1)[0] // max_attempts 3
	var last postgres.OutboxItem
	for n := 1; n <= 3; n++ {
		// A lease over before it is taken: the claim has expired unfinished.
		items, err := st.ClaimOutbox(ctx, fmt.Sprintf("crashed-%d", n), -time.Second, 10)
		if err != nil || len(items) != 1 || items[0].Attempts != n {
			t.Fatalf("claim %d = %+v, %v", n, items, err)
		}
		last = items[0]
	}
	items, err := st.ClaimOutbox(ctx, "next", time.Minute, 10)
	if err != nil || len(items) != 0 {
		t.Fatalf("claim after the last attempt = %+v, %v; want nothing", items, err)
	}
	m, err := st.Message(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != "failed" || m.CompletedAt == nil || m.Attempts != 3 ||
		m.Error != "gave up after 3 attempts; the last one did not finish (crash or shutdown)" {
		t.Errorf("message status %q, error %q, attempts %d, completed %v", m.Status, m.Error, m.Attempts, m.CompletedAt)
	}
	if due, claimed, err := st.OutboxStats(ctx); err != nil || due != 0 || claimed != 0 {
		t.Errorf("outbox stats due %d claimed %d, %v; want the row out of the queue", due, claimed, err)
	}
	done := postgres.OutboxResult{State: postgres.OutboxDone, Message: &postgres.MessageUpdate{Status: "sent", Final: true}}
	if err := st.FinishOutbox(ctx, last, done); !errors.Is(err, postgres.ErrClaimLost) {
		t.Errorf("FinishOutbox by the last, expired claim = %v, want ErrClaimLost", err)
	}
}

// TestClaimOutboxKinds: a claim of some kinds leaves the rows of the
// others alone, due or exhausted: not claimed, no attempt spent, not
// failed.
func TestClaimOutboxKinds(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	msg := enqueueN(t, st, 1)[0]
	if _, err := st.ExecSQL(ctx, `INSERT INTO outbox (kind, partner, url, body, max_attempts) VALUES
        ('webhook', 'P', 'http://h', 'due', 3), ('webhook', 'P', 'http://h', 'exhausted', 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE outbox SET attempts = 3, claimed_by = 'crashed' WHERE convert_from(body, 'UTF8') = 'exhausted'`); err != nil {
		t.Fatal(err)
	}
	items, err := st.ClaimOutboxKinds(ctx, "no-webhooks", time.Minute, 10, []string{postgres.OutboxKindMessage, postgres.OutboxKindMDN})
	if err != nil || len(items) != 1 || items[0].MessageID != msg.ID {
		t.Fatalf("ClaimOutboxKinds(message, mdn) = %+v, %v; want the message's row only", items, err)
	}
	webhooks := func() string {
		t.Helper()
		n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE kind = 'webhook' AND status = 'pending' AND
            ((convert_from(body, 'UTF8') = 'due' AND attempts = 0 AND claimed_by = '') OR
             (convert_from(body, 'UTF8') = 'exhausted' AND attempts = 3))`)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(n, 10)
	}
	if got := webhooks(); got != "2" {
		t.Fatalf("%s of 2 webhook rows untouched after a claim without webhooks", got)
	}
	items, err = st.ClaimOutbox(ctx, "all", time.Minute, 10)
	if err != nil || len(items) != 1 || items[0].Kind != postgres.OutboxKindWebhook || string(items[0].Body) != "due" {
		t.Fatalf("ClaimOutbox = %+v, %v; want the due webhook row", items, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE kind = 'webhook' AND status = 'failed'`); err != nil || n != 1 {
		t.Errorf("%d webhook rows failed, %v; want the exhausted one, by the claim of every kind", n, err)
	}
}
