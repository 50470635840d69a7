package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// countingStore records every purge batch and signals when a run is over
// (the last kind's last batch).
type countingStore struct {
	outbox.PurgeStore
	batch int
	mu    sync.Mutex
	calls map[string][]int64
	done  chan struct{}
	once  sync.Once
}

func (c *countingStore) PurgeBatch(ctx context.Context, f hub.Fence, kind string, age time.Duration, limit int) (int64, error) {
	n, err := c.PurgeStore.PurgeBatch(ctx, f, kind, age, limit)
	c.mu.Lock()
	if err == nil {
		c.calls[kind] = append(c.calls[kind], n)
	}
	c.mu.Unlock()
	if err == nil && kind == postgres.PurgeKinds[len(postgres.PurgeKinds)-1] && n < int64(limit) {
		c.once.Do(func() { close(c.done) })
	}
	return n, err
}

// purgeDB is a store and a direct connection for seeding and checking.
type purgeDB struct {
	st   *postgres.Store
	conn *pgx.Conn
}

func openPurgeDB(t *testing.T) purgeDB {
	t.Helper()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return purgeDB{st: st, conn: conn}
}

func (db purgeDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := db.conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (db purgeDB) ids(t *testing.T, sql string) map[string]bool {
	t.Helper()
	rows, err := db.conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// seedMessage inserts a message named name (its Message-ID) with the
// given status, created and completed days ago (completed < 0: not set),
// with a payload, an MDN and an outbox row in outboxStatus finished
// then ("" for none).
func (db purgeDB) seedMessage(t *testing.T, name, direction, status string, createdDays, completedDays int, outboxStatus string) {
	t.Helper()
	db.exec(t, `
WITH m AS (
    INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, created_at, updated_at, completed_at)
    VALUES ($1, 'P', 'S', 'P', $2, $3, now() - make_interval(days => $4), now() - make_interval(days => $4),
            CASE WHEN $5 >= 0 THEN now() - make_interval(days => $5) END)
    RETURNING id),
p AS (INSERT INTO payloads (message_id, data, created_at) SELECT id, 'x', now() - make_interval(days => $4) FROM m),
d AS (INSERT INTO mdns (message_id, content_type, body, created_at) SELECT id, 'text/plain', 'mdn', now() - make_interval(days => $4) FROM m)
INSERT INTO outbox (kind, message_id, partner, url, status, created_at, finished_at)
SELECT 'message', id, 'P', 'http://p.example', $6, now() - make_interval(days => $4),
       CASE WHEN $6 <> 'pending' THEN now() - make_interval(days => greatest($5, 0)) END
  FROM m WHERE $6 <> ''`, direction, name, status, createdDays, completedDays, outboxStatus)
}

func purgeFence(t *testing.T, st *postgres.Store, token int64) (context.Context, hub.Fence) {
	t.Helper()
	f := hub.Fence{Lease: "purge-test", Token: token}
	if err := st.OpenTerm(context.Background(), f, fmt.Sprintf("holder-%d", token)); err != nil {
		t.Fatal(err)
	}
	return leader.WithFence(context.Background(), f), f
}

func newTestPurger(t *testing.T, store outbox.PurgeStore, reg prometheus.Registerer, batch int) *outbox.Purger {
	t.Helper()
	p, err := outbox.NewPurger(outbox.PurgerOptions{
		Store: store, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), Registerer: reg,
		Interval: time.Hour, Batch: batch, Pause: time.Millisecond, RetryBase: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runOnce runs p until its first run is over, then stops it.
func runOnce(t *testing.T, ctx context.Context, p *outbox.Purger, cs *countingStore) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	select {
	case <-cs.done:
	case err := <-errc:
		t.Fatalf("Run returned before the run was over: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		<-errc
		t.Fatal("purge run did not finish")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
}

// TestPurgerDeletesExactlyTheEligibleRows seeds, for every kind, rows past
// the retention and rows that must stay (recent ones, and anything of a
// message that is not final however old), runs one purge with a batch of
// 2 and checks what is left, the batches and the metric.
func TestPurgerDeletesExactlyTheEligibleRows(t *testing.T) {
	db := openPurgeDB(t)
	// Messages: name, direction, status, created, completed (days ago),
	// outbox row; in the order of their creation, as the hub writes them
	// (message ids follow creation: the purge of payloads, MDNs and
	// events relies on it, postgres purgeBound).
	db.seedMessage(t, "ancient-failed", "outbound", "failed", 402, 401, "failed")  // past audit retention: row and all go
	db.seedMessage(t, "ancient-error", "inbound", "error", 402, 402, "")           // same
	db.seedMessage(t, "ancient-awaiting", "outbound", "awaiting-mdn", 402, -1, "") // not final: stays
	db.seedMessage(t, "ancient-queued", "outbound", "queued", 402, -1, "pending")  // not final: stays
	db.seedMessage(t, "recent-ancient", "outbound", "delivered", 402, 300, "done") // completed within audit retention: row stays, the rest goes
	db.seedMessage(t, "old-delivered", "outbound", "delivered", 41, 40, "done")    // payload, MDN, outbox go; row stays (audit)
	db.seedMessage(t, "old-sent", "outbound", "sent", 41, 40, "done")              // same
	db.seedMessage(t, "old-failed", "outbound", "failed", 41, 40, "failed")        // same
	db.seedMessage(t, "old-processed", "inbound", "processed", 41, 41, "done")     // same (async MDN row done)
	db.seedMessage(t, "old-awaiting", "outbound", "awaiting-mdn", 41, -1, "done")  // not final: everything stays
	db.seedMessage(t, "old-retrying", "outbound", "retrying", 41, -1, "pending")   // not final: everything stays
	db.seedMessage(t, "old-resending", "outbound", "failed", 41, 40, "pending")    // resend in flight: everything stays
	db.seedMessage(t, "recent-delivered", "outbound", "delivered", 10, 10, "done") // too recent: everything stays
	// Webhook deliveries (no message).
	db.exec(t, `INSERT INTO outbox (kind, partner, url, status, finished_at, body) VALUES
        ('webhook', 'P', 'http://h', 'done', now() - interval '40 days', 'wh-old-done'),
        ('webhook', 'P', 'http://h', 'failed', now() - interval '40 days', 'wh-old-failed'),
        ('webhook', 'P', 'http://h', 'done', now() - interval '10 days', 'wh-recent'),
        ('webhook', 'P', 'http://h', 'pending', NULL, 'wh-pending')`)
	db.exec(t, `INSERT INTO mdn_inbox (content_type, body, original_message_id, received_at, processed_at) VALUES
        ('t', 'x', 'in-old-processed', now() - interval '41 days', now() - interval '40 days'),
        ('t', 'x', 'in-old-orphan', now() - interval '41 days', now() - interval '31 days'),
        ('t', 'x', 'in-recent', now() - interval '11 days', now() - interval '10 days'),
        ('t', 'x', 'in-old-unprocessed', now() - interval '41 days', NULL)`)
	db.exec(t, `INSERT INTO leader_heartbeats (lease, token, holder, beat_at) VALUES
        ('L', 1, 'hb-old-1', now() - interval '40 days'), ('L', 1, 'hb-old-2', now() - interval '35 days'),
        ('L', 1, 'hb-old-3', now() - interval '31 days'), ('L', 2, 'hb-recent', now())`)
	db.exec(t, `DELETE FROM events`) // the trigger's, made now
	db.exec(t, `INSERT INTO events (type, message, partner, direction, created_at, detail) VALUES
        ('received', 1, 'P', 'inbound', now() - interval '40 days', '{"n": "ev-old"}'),
        ('failed', 2, 'P', 'outbound', now() - interval '10 days', '{"n": "ev-recent"}')`)
	// The audit log is kept for the audit retention, failed logins for the
	// retention.
	db.exec(t, `INSERT INTO audit_log (actor, action, target, at) VALUES
        ('user:a', 'message.send', 'au-ancient-1', now() - interval '402 days'),
        ('user:a', 'message.send', 'au-ancient-2', now() - interval '401 days'),
        ('user:a', 'message.send', 'au-ancient-3', now() - interval '400 days 1 hour'),
        ('user:a', 'message.send', 'au-old', now() - interval '40 days'),
        ('user:a', 'message.send', 'au-recent', now())`)
	db.exec(t, `INSERT INTO login_failures (key, failures, first_at, last_at) VALUES
        ('lf-old', 2, now() - interval '41 days', now() - interval '40 days'),
        ('lf-recent', 2, now() - interval '1 day', now() - interval '1 day')`)
	// AS2 restart transfers have their own expiry (24h by default), far
	// below the retention: one 25 hours and one 10 days without a byte go.
	db.exec(t, `INSERT INTO restart_transfers (partner, etag, header, total, received, updated_at) VALUES
        ('P', 'rt-old', '{}', 10, 1, now() - interval '25 hours'),
        ('P', 'rt-older', '{}', 10, 1, now() - interval '10 days'),
        ('P', 'rt-recent', '{}', 10, 1, now() - interval '1 hour')`)
	db.exec(t, `INSERT INTO restart_chunks (transfer_id, off, data) SELECT id, 0, 'x' FROM restart_transfers`)

	ctx, _ := purgeFence(t, db.st, 1)
	reg := prometheus.NewRegistry()
	cs := &countingStore{PurgeStore: db.st, calls: map[string][]int64{}, done: make(chan struct{})}
	runOnce(t, ctx, newTestPurger(t, cs, reg, 2), cs)

	check := func(what, sql string, want ...string) {
		t.Helper()
		got := db.ids(t, sql)
		wantSet := map[string]bool{}
		for _, w := range want {
			wantSet[w] = true
			if !got[w] {
				t.Errorf("%s: %q was deleted, want it kept", what, w)
			}
		}
		for g := range got {
			if !wantSet[g] {
				t.Errorf("%s: %q is still there, want it deleted", what, g)
			}
		}
	}
	keptWhole := []string{"old-awaiting", "old-retrying", "old-resending", "recent-delivered", "ancient-awaiting"}
	check("messages", `SELECT message_id FROM messages`, append([]string{"old-delivered", "old-sent", "old-failed", "old-processed", "ancient-queued", "recent-ancient"}, keptWhole...)...)
	check("payloads", `SELECT m.message_id FROM payloads p JOIN messages m ON m.id = p.message_id`, append([]string{"ancient-queued"}, keptWhole...)...)
	check("mdns", `SELECT m.message_id FROM mdns d JOIN messages m ON m.id = d.message_id`, append([]string{"ancient-queued"}, keptWhole...)...)
	check("message outbox rows", `SELECT m.message_id FROM outbox o JOIN messages m ON m.id = o.message_id`,
		"old-awaiting", "old-retrying", "old-resending", "recent-delivered", "ancient-queued")
	check("webhook outbox rows", `SELECT convert_from(body, 'UTF8') FROM outbox WHERE kind = 'webhook'`, "wh-recent", "wh-pending")
	check("mdn_inbox", `SELECT original_message_id FROM mdn_inbox`, "in-recent", "in-old-unprocessed")
	check("heartbeats", `SELECT holder FROM leader_heartbeats`, "hb-recent")
	check("events", `SELECT detail->>'n' FROM events`, "ev-recent")
	check("audit_log", `SELECT target FROM audit_log`, "au-old", "au-recent")
	check("login_failures", `SELECT key FROM login_failures`, "lf-recent")
	check("restart_transfers", `SELECT etag FROM restart_transfers`, "rt-recent")
	check("restart_chunks", `SELECT r.etag FROM restart_chunks c JOIN restart_transfers r ON r.id = c.transfer_id`, "rt-recent")
	if n := db.ids(t, `SELECT transfer_id::text FROM restart_chunks`); len(n) != 1 {
		t.Errorf("restart_chunks rows = %d, want the recent transfer's 1", len(n))
	}

	// Deleted per kind, and batches of at most 2: k rows take k/2+1 calls
	// (the last one finds fewer than 2). Payloads, MDNs and outbox rows of
	// the messages past the audit retention went in their own passes,
	// before the message rows.
	want := map[string]int64{
		postgres.PurgeOutbox: 6 + 2, postgres.PurgePayloads: 7, postgres.PurgeMDNs: 7, postgres.PurgeMDNInbox: 2,
		postgres.PurgeHeartbeats: 3, postgres.PurgeEvents: 1, postgres.PurgeMessages: 2,
		postgres.PurgeAudit: 3, postgres.PurgeLogins: 1, postgres.PurgeRestarts: 2,
	}
	for kind, n := range want {
		calls := cs.calls[kind]
		var sum int64
		for _, c := range calls {
			if c > 2 {
				t.Errorf("%s: a batch deleted %d rows, want at most 2", kind, c)
			}
			sum += c
		}
		if sum != n || len(calls) != int(n/2+1) {
			t.Errorf("%s: %d rows in %d batches %v, want %d rows in %d batches", kind, sum, len(calls), calls, n, n/2+1)
		}
		if got := purged(t, reg, kind); got != float64(n) {
			t.Errorf("edihub_purge_deleted_total{kind=%q} = %v, want %d", kind, got, n)
		}
	}
}

// purged reads edihub_purge_deleted_total{kind} from reg.
func purged(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "edihub_purge_deleted_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no edihub_purge_deleted_total{kind=%q}", kind)
	return 0
}

// TestPurgerStaleFence: a purger whose term was overtaken deletes nothing
// and returns ErrStaleFence.
func TestPurgerStaleFence(t *testing.T) {
	db := openPurgeDB(t)
	db.seedMessage(t, "old-delivered", "outbound", "delivered", 41, 40, "done")
	ctx, _ := purgeFence(t, db.st, 1)
	purgeFence(t, db.st, 2) // a newer term opens
	p := newTestPurger(t, db.st, prometheus.NewRegistry(), 2)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, hub.ErrStaleFence) {
			t.Errorf("Run = %v, want ErrStaleFence", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return on a stale fence")
	}
	var n int
	if err := db.conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM payloads) + (SELECT count(*) FROM outbox)`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d payload and outbox rows left, %v; want 2 (nothing purged)", n, err)
	}
}

// TestPurgeWhileReceiversAndDispatchersCommit: a purge of many eligible
// rows in small batches runs while goroutines queue, claim, finish and
// receive messages. None of their writes fails, and everything they wrote
// is still there afterwards.
func TestPurgeWhileReceiversAndDispatchersCommit(t *testing.T) {
	db := openPurgeDB(t)
	const old = 3000
	db.exec(t, `
WITH m AS (
    INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, created_at, updated_at, completed_at)
    SELECT 'outbound', 'P', 'S', 'P', 'old-' || g, 'delivered', now() - interval '41 days', now() - interval '40 days', now() - interval '40 days'
      FROM generate_series(1, $1) g
    RETURNING id),
p AS (INSERT INTO payloads (message_id, data, created_at) SELECT id, 'x', now() - interval '41 days' FROM m)
INSERT INTO outbox (kind, message_id, partner, url, status, finished_at)
SELECT 'message', id, 'P', 'http://p', 'done', now() - interval '40 days' FROM m`, old)
	ctx, _ := purgeFence(t, db.st, 1)
	cs := &countingStore{PurgeStore: db.st, calls: map[string][]int64{}, done: make(chan struct{})}
	p := newTestPurger(t, cs, prometheus.NewRegistry(), 50)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var queued, received []int64
	errs := make(chan error, 100)
	opCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}
	for w := range 3 {
		wg.Go(func() { // a dispatcher and the API: queue, claim, finish
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := opCtx()
				e, err := db.st.EnqueueOutbound(c, postgres.NewOutbound{Partner: "P", AS2From: "S", AS2To: "P",
					MessageID: fmt.Sprintf("<new-%d-%d>", w, i), MDNMode: "none", URL: "http://p", MaxAttempts: 3, Payload: []byte("new")})
				if err == nil {
					var items []postgres.OutboxItem
					items, err = db.st.ClaimOutbox(c, fmt.Sprintf("d%d", w), time.Minute, 1)
					for _, it := range items {
						if err == nil {
							err = db.st.FinishOutbox(c, it, postgres.OutboxResult{State: postgres.OutboxDone, Message: &postgres.MessageUpdate{Status: "sent", Final: true}})
						}
					}
				}
				cancel()
				if err != nil {
					errs <- fmt.Errorf("dispatcher %d: %w", w, err)
					return
				}
				mu.Lock()
				queued = append(queued, e.ID)
				mu.Unlock()
			}
		})
		wg.Go(func() { // a receiver
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := opCtx()
				id, err := db.st.SaveInbound(c, &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S",
					MessageID: fmt.Sprintf("<in-%d-%d>", w, i), Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte("in")})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("receiver %d: %w", w, err)
					return
				}
				mu.Lock()
				received = append(received, id)
				mu.Unlock()
			}
		})
	}
	runOnce(t, ctx, p, cs)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(cs.calls[postgres.PurgePayloads]); got < old/50 {
		t.Errorf("payloads purged in %d batches, want at least %d", got, old/50)
	}
	var left int
	if err := db.conn.QueryRow(context.Background(), `SELECT count(*) FROM payloads p JOIN messages m ON m.id = p.message_id WHERE m.message_id LIKE 'old-%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d old payloads left, %v; want 0", left, err)
	}
	t.Logf("while purging: %d messages queued and sent, %d received", len(queued), len(received))
	if len(queued) == 0 || len(received) == 0 {
		t.Fatalf("the writers made no progress during the purge (%d queued, %d received)", len(queued), len(received))
	}
	var n int
	all := append(append([]int64(nil), queued...), received...)
	if err := db.conn.QueryRow(context.Background(), `SELECT count(*) FROM messages m JOIN payloads p ON p.message_id = m.id WHERE m.id = ANY($1)`, all).Scan(&n); err != nil || n != len(all) {
		t.Errorf("%d of the %d messages written during the purge still have their payload, %v", n, len(all), err)
	}
}

// TestPurgerProgressDeadline: the elector's default stuck deadline (10 min)
// is shorter than the purge interval (1 h); the purger must declare its own
// or every leader would fail /healthz an hour into its term.
func TestPurgerProgressDeadline(t *testing.T) {
	p, err := outbox.NewPurger(outbox.PurgerOptions{Store: &postgres.Store{}, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var w leader.Worker = p
	pd, ok := w.(leader.ProgressDeadline)
	if !ok {
		t.Fatal("*outbox.Purger does not implement leader.ProgressDeadline")
	}
	if got := pd.StuckAfter(); got <= 2*time.Hour {
		t.Errorf("StuckAfter() = %s with a 1h interval, want more than two intervals", got)
	}
}

// flakyStore fails kinds as scripted: failures[kind] times, or for ever
// when negative; otherwise it deletes nothing.
type flakyStore struct {
	mu       sync.Mutex
	failures map[string]int
	calls    map[string]int
}

func (s *flakyStore) PurgeBatch(_ context.Context, _ hub.Fence, kind string, _ time.Duration, _ int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[kind]++
	if f := s.failures[kind]; f < 0 || s.calls[kind] <= f {
		return 0, errors.New("connection reset by peer")
	}
	return 0, nil
}

// TestPurgerTransientErrors: a failing batch is retried with backoff inside
// the worker; one that keeps failing is left for the next run without
// stopping the other kinds or the worker.
func TestPurgerTransientErrors(t *testing.T) {
	fs := &flakyStore{failures: map[string]int{postgres.PurgePayloads: 2, postgres.PurgeMDNs: -1}, calls: map[string]int{}}
	cs := &countingStore{PurgeStore: fs, calls: map[string][]int64{}, done: make(chan struct{})}
	p := newTestPurger(t, cs, prometheus.NewRegistry(), 10)
	f := hub.Fence{Lease: "flaky", Token: 1}
	runOnce(t, leader.WithFence(context.Background(), f), p, cs)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	want := map[string]int{postgres.PurgeOutbox: 1, postgres.PurgePayloads: 3, postgres.PurgeMDNs: 5, postgres.PurgeMDNInbox: 1,
		postgres.PurgeHeartbeats: 1, postgres.PurgeEvents: 1, postgres.PurgeReplays: 1, postgres.PurgeLogins: 1, postgres.PurgeMessages: 1,
		postgres.PurgeAudit: 1}
	for kind, n := range want {
		if fs.calls[kind] != n {
			t.Errorf("%s: %d calls, want %d", kind, fs.calls[kind], n)
		}
	}
}
