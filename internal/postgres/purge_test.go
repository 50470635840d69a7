package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgfill"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// purgeSeed is one message of the purge tests: its status, created and
// completed days ago (completed < 0: not set), its outbox row's status
// ("" for none; finished when completed, else the day after creation) and
// how many duplicates (resends answered) it has. Every message has a
// payload and an MDN, made rows days ago (0: when the message was).
type purgeSeed struct {
	name, direction, status string
	created, completed      int
	outbox                  string
	duplicates              int
	rows                    int
}

// purgeSeeds: with a retention of 30 days, the "old-final" ones go (their
// rows of every kind), the others stay whole.
var purgeSeeds = []purgeSeed{
	{"old-final-delivered", "outbound", "delivered", 41, 40, "done", 0, 0},
	{"old-final-sent", "outbound", "sent", 41, 40, "done", 0, 0},
	{"old-final-failed", "outbound", "failed", 41, 40, "failed", 0, 0},
	{"old-final-processed", "inbound", "processed", 41, 41, "done", 2, 0}, // resent twice by the partner
	{"old-final-error", "inbound", "error", 41, 41, "", 1, 0},
	{"old-final-recent-rows", "outbound", "delivered", 41, 40, "done", 0, 10}, // payload and MDN within the retention
	{"old-queued", "outbound", "queued", 41, -1, "pending", 0, 0},
	{"old-sending", "outbound", "sending", 41, -1, "pending", 0, 0},
	{"old-retrying", "outbound", "retrying", 41, -1, "pending", 0, 0},
	{"old-awaiting", "outbound", "awaiting-mdn", 41, -1, "done", 0, 0},
	{"old-resending", "outbound", "failed", 41, 40, "pending", 0, 0}, // a resend in flight
	{"old-completed-recently", "outbound", "delivered", 41, 10, "done", 0, 0},
	{"recent-delivered", "outbound", "delivered", 10, 10, "done", 0, 0},
	{"recent-processed", "inbound", "processed", 10, 10, "", 1, 0},
}

// seedPurge writes purgeSeeds and rows of the kinds without a message:
// webhook deliveries, async MDNs, heartbeats and events, old ("-old") and
// recent or unfinished.
func seedPurge(t *testing.T, st *postgres.Store) {
	t.Helper()
	ctx := context.Background()
	for _, s := range purgeSeeds {
		_, err := st.ExecSQL(ctx, `
WITH m AS (
    INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, created_at, updated_at, completed_at)
    VALUES ($1, 'P', 'S', 'P', $2, $3, now() - make_interval(days => $4), now() - make_interval(days => $4),
            CASE WHEN $5 >= 0 THEN now() - make_interval(days => $5) END)
    RETURNING id),
p AS (INSERT INTO payloads (message_id, data, created_at) SELECT id, 'x', now() - make_interval(days => $8) FROM m),
d AS (INSERT INTO mdns (message_id, content_type, body, created_at) SELECT id, 'text/plain', 'mdn', now() - make_interval(days => $8) FROM m),
dup AS (INSERT INTO duplicates (message_id, partner, answered_at)
        SELECT id, 'P', now() - make_interval(days => $4) FROM m, generate_series(1, $7))
INSERT INTO outbox (kind, message_id, partner, url, status, created_at, finished_at)
SELECT 'message', id, 'P', 'http://p.example', $6, now() - make_interval(days => $4),
       CASE WHEN $6 <> 'pending' THEN now() - make_interval(days => CASE WHEN $5 >= 0 THEN $5 ELSE $4 - 1 END) END
  FROM m WHERE $6 <> ''`, s.direction, s.name, s.status, s.created, s.completed, s.outbox, s.duplicates, cmp.Or(s.rows, s.created))
		if err != nil {
			t.Fatalf("seed %s: %v", s.name, err)
		}
	}
	for _, q := range []string{
		`INSERT INTO outbox (kind, partner, url, status, finished_at, body) VALUES
            ('webhook', 'P', 'http://h', 'done', now() - interval '40 days', 'wh-old-done'),
            ('webhook', 'P', 'http://h', 'failed', now() - interval '40 days', 'wh-old-failed'),
            ('webhook', 'P', 'http://h', 'done', now() - interval '10 days', 'wh-recent'),
            ('webhook', 'P', 'http://h', 'pending', NULL, 'wh-pending')`,
		`INSERT INTO mdn_inbox (content_type, body, original_message_id, received_at, processed_at) VALUES
            ('t', 'x', 'in-old-processed', now() - interval '41 days', now() - interval '40 days'),
            ('t', 'x', 'in-old-orphan', now() - interval '41 days', now() - interval '31 days'),
            ('t', 'x', 'in-recent', now() - interval '11 days', now() - interval '10 days'),
            ('t', 'x', 'in-unprocessed', now() - interval '41 days', NULL)`,
		`INSERT INTO leader_heartbeats (lease, token, holder, beat_at) VALUES
            ('L', 1, 'hb-old-1', now() - interval '40 days'), ('L', 1, 'hb-old-2', now() - interval '31 days'),
            ('L', 2, 'hb-recent', now())`,
		`INSERT INTO replay_guard (partner, digest, message_id, seen_at) VALUES
            ('P', 'd1', '<rg-old-1@p>', now() - interval '40 days'), ('P', 'd2', '<rg-old-2@p>', now() - interval '31 days'),
            ('P', 'd3', '<rg-old-3@p>', now() - interval '35 days'), ('P', 'd4', '<rg-recent@p>', now() - interval '1 day')`,
		`INSERT INTO audit_log (actor, action, target, at) VALUES
            ('cli:t@h', 'partner.update', 'au-old-1', now() - interval '40 days'),
            ('cli:t@h', 'partner.update', 'au-old-2', now() - interval '31 days'),
            ('cli:t@h', 'partner.update', 'au-recent', now() - interval '1 day')`,
		// A record locked until later stays, however old its last failure.
		`INSERT INTO login_failures (key, failures, first_at, last_at, locked_until) VALUES
            ('lf-old-1', 3, now() - interval '41 days', now() - interval '40 days', NULL),
            ('lf-old-2', 9, now() - interval '41 days', now() - interval '40 days', now() - interval '39 days'),
            ('lf-locked', 9, now() - interval '41 days', now() - interval '40 days', now() + interval '1 hour'),
            ('lf-recent', 1, now() - interval '1 day', now() - interval '1 day', NULL)`,
		`DELETE FROM events`, // the trigger's, made now
		`INSERT INTO events (type, message, partner, direction, created_at, detail) VALUES
            ('received', 1, 'P', 'inbound', now() - interval '40 days', '{"n": "ev-old"}'),
            ('failed', 2, 'P', 'outbound', now() - interval '10 days', '{"n": "ev-recent"}')`,
	} {
		if _, err := st.ExecSQL(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// purgeSnapshot names what every table holds: messages and their rows by
// Message-ID, the rest by their seed names.
func purgeSnapshot(t *testing.T, url string) map[string][]string {
	t.Helper()
	c := pgtest.Conn(t, url)
	out := map[string][]string{}
	for table, q := range map[string]string{
		"messages":   `SELECT message_id FROM messages`,
		"payloads":   `SELECT m.message_id FROM payloads p JOIN messages m ON m.id = p.message_id`,
		"mdns":       `SELECT m.message_id FROM mdns d JOIN messages m ON m.id = d.message_id`,
		"duplicates": `SELECT m.message_id FROM duplicates d JOIN messages m ON m.id = d.message_id`,
		"outbox":     `SELECT coalesce(m.message_id, convert_from(o.body, 'UTF8')) FROM outbox o LEFT JOIN messages m ON m.id = o.message_id`,
		"mdn_inbox":  `SELECT original_message_id FROM mdn_inbox`,
		"heartbeats": `SELECT holder FROM leader_heartbeats`,
		"events":     `SELECT detail->>'n' FROM events`,
		"replays":    `SELECT message_id FROM replay_guard`,
		"audit":      `SELECT target FROM audit_log`,
		"logins":     `SELECT key FROM login_failures`,
	} {
		rows, err := c.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		out[table] = names
	}
	return out
}

// without returns snap with the rows of table that gone names removed.
func without(snap map[string][]string, table string, gone func(string) bool) map[string][]string {
	out := map[string][]string{}
	for k, v := range snap {
		out[k] = v
		if k == table {
			out[k] = slices.DeleteFunc(slices.Clone(v), gone)
		}
	}
	return out
}

func oldFinal(name string) bool { return strings.HasPrefix(name, "old-final-") }

// oldFinalRows: old final messages whose payload and MDN are old too.
func oldFinalRows(name string) bool {
	return oldFinal(name) && !strings.HasSuffix(name, "-recent-rows")
}

func oldNamed(name string) bool { return strings.Contains(name, "-old") }

func openPurgeTerm(t *testing.T, st *postgres.Store) hub.Fence {
	t.Helper()
	f := hub.Fence{Lease: "purge-test", Token: 1}
	if err := st.OpenTerm(context.Background(), f, "purger"); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPurgeBatch: each kind, run alone in batches of 2 with a retention of
// 30 days, deletes exactly its old rows of final messages (or its old
// finished rows) and nothing else: no row of a message that is not final
// (queued, sending, retrying, awaiting its MDN, resend in flight), none
// completed or written within the retention, nothing of another kind.
// Deleting a message row takes its payload, MDN, outbox rows and
// duplicates with it.
func TestPurgeBatch(t *testing.T) {
	// The snapshot after seeding, without running anything.
	all := func() map[string][]string {
		url := pgtest.URL(t)
		st := open(t, url)
		seedPurge(t, st)
		return purgeSnapshot(t, url)
	}()
	tests := []struct {
		kind string
		want map[string][]string
	}{
		{postgres.PurgeOutbox, without(all, "outbox", func(n string) bool { return oldFinal(n) || n == "wh-old-done" || n == "wh-old-failed" })},
		{postgres.PurgePayloads, without(all, "payloads", oldFinalRows)},
		{postgres.PurgeMDNs, without(all, "mdns", oldFinalRows)},
		{postgres.PurgeMDNInbox, without(all, "mdn_inbox", oldNamed)},
		{postgres.PurgeHeartbeats, without(all, "heartbeats", oldNamed)},
		{postgres.PurgeEvents, without(all, "events", oldNamed)},
		{postgres.PurgeReplays, without(all, "replays", oldNamed)},
		{postgres.PurgeLogins, without(all, "logins", oldNamed)},
		{postgres.PurgeAudit, without(all, "audit", oldNamed)},
		{postgres.PurgeMessages, func() map[string][]string {
			w := all
			for _, table := range []string{"messages", "payloads", "mdns", "duplicates", "outbox"} {
				w = without(w, table, oldFinal)
			}
			return w
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.URL(t)
			st := open(t, url)
			seedPurge(t, st)
			f := openPurgeTerm(t, st)
			var batches []int64
			for len(batches) < 20 {
				n, err := st.PurgeBatch(ctx, f, tt.kind, 30*24*time.Hour, 2)
				if err != nil {
					t.Fatalf("PurgeBatch(%s) after batches %v = %v", tt.kind, batches, err)
				}
				batches = append(batches, n)
				if n < 2 {
					break
				}
			}
			if diff := gocmp.Diff(tt.want, purgeSnapshot(t, url)); diff != "" {
				t.Errorf("after purging %s in batches %v (-want +got):\n%s", tt.kind, batches, diff)
			}
		})
	}
}

// TestPurgeMessagesWithDuplicates: a message the partner resent (rows in
// duplicates) is purged like any other, and the batch goes on past it:
// without the cascade the first such message stopped every later batch.
func TestPurgeMessagesWithDuplicates(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	seedPurge(t, st)
	f := openPurgeTerm(t, st)
	n, err := st.PurgeBatch(ctx, f, postgres.PurgeMessages, 30*24*time.Hour, 100)
	if err != nil || n != 6 {
		t.Fatalf("PurgeBatch(messages) = %d, %v; want the 6 old final messages, 2 of them resent", n, err)
	}
	if got := purgeSnapshot(t, url)["duplicates"]; !slices.Equal(got, []string{"recent-processed"}) {
		t.Errorf("duplicates left %v, want only those of recent-processed", got)
	}
}

// TestPurgeBatchArguments: an unknown kind, a non-positive age or limit
// and a stale term delete nothing.
func TestPurgeBatchArguments(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	seedPurge(t, st)
	f := openPurgeTerm(t, st)
	before := purgeSnapshot(t, url)
	for _, tt := range []struct {
		kind  string
		age   time.Duration
		limit int
	}{{"reports", time.Hour, 10}, {postgres.PurgeEvents, 0, 10}, {postgres.PurgeEvents, time.Hour, 0}} {
		if _, err := st.PurgeBatch(ctx, f, tt.kind, tt.age, tt.limit); err == nil {
			t.Errorf("PurgeBatch(%q, %s, %d) = nil error, want one", tt.kind, tt.age, tt.limit)
		}
	}
	if err := st.OpenTerm(ctx, hub.Fence{Lease: f.Lease, Token: 2}, "next"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PurgeBatch(ctx, f, postgres.PurgeEvents, time.Hour, 10); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("PurgeBatch under a stale term = %v, want ErrStaleFence", err)
	}
	if diff := gocmp.Diff(before, purgeSnapshot(t, url)); diff != "" {
		t.Errorf("rows changed (-before +after):\n%s", diff)
	}
}

// purgeByMessage are the kinds migration 00021 left without an index of
// their rows' creation times, and the index each walks instead.
var purgeByMessage = map[string]string{
	postgres.PurgePayloads: "payloads_pkey",
	postgres.PurgeMDNs:     "mdns_pkey",
	postgres.PurgeEvents:   "events_message_idx",
}

// TestPurgeQueriesUseIndexes: on a database of a million messages
// (pgfill), the purges of MDNs and events find their bound through the
// messages' creation times and walk their rows by message id: no
// sequential scan of a large table, in the plan made for the parameters
// nor in the generic plan. (pgfill stores no payloads, and an empty
// table is best read whole: the payloads' statement is the MDNs' on
// another table.) A failure prints the plan; -v logs the scans.
func TestPurgeQueriesUseIndexes(t *testing.T) {
	url, _ := pgfill.Shared(t)
	conn := pgtest.Conn(t, url)
	for kind, index := range purgeByMessage {
		if kind == postgres.PurgePayloads {
			continue
		}
		s := postgres.Statement{SQL: postgres.PurgeSQL(kind), Args: []any{time.Now().Add(-30 * 24 * time.Hour), 500}}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, conn, mode, s)
			scans := scansOf(t, plan)
			used := map[string]bool{}
			for _, sc := range scans {
				if sc.node == "Seq Scan" && slices.Contains(large, sc.relation) {
					t.Errorf("purge %s (%s): sequential scan of %s; plan:\n%s", kind, mode, sc.relation, plan)
				}
				used[sc.index] = true
			}
			for _, want := range []string{index, "messages_created_at_id_idx"} {
				if !used[want] {
					t.Errorf("purge %s (%s): %s not used; plan:\n%s", kind, mode, want, plan)
				}
			}
			t.Logf("purge %s, %s: %s", kind, strings.TrimPrefix(mode, "force_"), summary(scans))
		}
	}
}

// TestMigration00021OnExistingData: migration 00021 applies to a
// database that a release before it filled (purgeSeeds' messages with
// their payloads and MDNs, events), its Down and its Up again too,
// keeping every row; afterwards the purges of payloads, MDNs and events
// delete exactly the old rows written before, as TestPurgeBatch wants.
func TestMigration00021OnExistingData(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	st := open(t, url)
	if err := st.MigrateTo(ctx, 20); err != nil {
		t.Fatal(err)
	}
	seedPurge(t, st)
	all := purgeSnapshot(t, url)
	for _, step := range []struct {
		name    string
		run     func() error
		indexes int64
	}{
		{"up", func() error { _, err := st.Migrate(ctx); return err }, 0},
		{"down", func() error { return st.MigrateDownTo(ctx, 20) }, 3},
		{"up again", func() error { _, err := st.Migrate(ctx); return err }, 0},
	} {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		n, err := st.CountSQL(ctx, `SELECT count(*) FROM pg_indexes
 WHERE indexname IN ('events_created_at_idx', 'payloads_created_at_idx', 'mdns_created_at_idx')`)
		if err != nil || n != step.indexes {
			t.Errorf("%s: %d created_at indexes, %v; want %d", step.name, n, err, step.indexes)
		}
		if diff := gocmp.Diff(all, purgeSnapshot(t, url)); diff != "" {
			t.Fatalf("%s: rows changed (-before +after):\n%s", step.name, diff)
		}
	}
	f := openPurgeTerm(t, st)
	for kind := range purgeByMessage {
		for batches := 0; ; batches++ {
			n, err := st.PurgeBatch(ctx, f, kind, 30*24*time.Hour, 2)
			if err != nil || batches == 20 {
				t.Fatalf("PurgeBatch(%s) after %d batches = %d, %v", kind, batches, n, err)
			}
			if n < 2 {
				break
			}
		}
	}
	want := without(without(without(all, "payloads", oldFinalRows), "mdns", oldFinalRows), "events", oldNamed)
	if diff := gocmp.Diff(want, purgeSnapshot(t, url)); diff != "" {
		t.Errorf("after the purges of payloads, MDNs and events (-want +got):\n%s", diff)
	}
}
