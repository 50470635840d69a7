package pgfill_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgfill"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// schema lists the indexes, constraints and trigger states of the
// tables, which a fill drops and turns off while it writes.
func schema(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid::regclass::text = ANY ($1)
UNION ALL
SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid::regclass::text = ANY ($1)
UNION ALL
SELECT tgrelid::regclass || ' ' || tgname || ' ' || tgenabled::text FROM pg_trigger WHERE tgrelid::regclass::text = ANY ($1) AND NOT tgisinternal
ORDER BY 1`, []string{"messages", "message_attempts", "events", "mdns", "mdn_inbox", "outbox"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFill: a small fill leaves the schema as it found it (every index,
// constraint and trigger back), writes the proportions documented, finds
// its samples, and every console query runs on it.
func TestFill(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	before := schema(t, conn)
	d, err := pgfill.Fill(ctx, url, pgfill.Options{Messages: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Steps {
		t.Logf("%-40.40s %8d rows %v", s.Name, s.Rows, s.Duration)
	}
	if diff := cmp.Diff(before, schema(t, conn)); diff != "" {
		t.Errorf("schema after the fill (-before +after):\n%s", diff)
	}
	count := func(sql string) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	for _, c := range []struct {
		sql      string
		min, max int64
	}{
		{`SELECT count(*) FROM messages`, 40_000, 40_000},
		{`SELECT count(DISTINCT partner) FROM messages`, pgfill.Partners, pgfill.Partners},
		{`SELECT count(*) FROM messages WHERE direction = 'inbound'`, 18_000, 22_000},
		{`SELECT count(*) FROM messages WHERE status IN ('delivered', 'processed', 'sent')`, 36_000, 40_000},
		{`SELECT count(*) FROM messages WHERE status = 'failed'`, 100, 1_000},
		{`SELECT count(*) FROM messages WHERE status IN ('queued', 'retrying', 'sending')`, 1, 100},
		{`SELECT count(*) FROM messages WHERE created_at < now() - interval '399 days'`, 1, 200},
		// Events, MDNs and async MDNs of the last 30 days: the purger
		// deleted the older ones.
		{`SELECT count(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.message = m.id)
		   AND m.status IN ('processed', 'delivered', 'sent', 'failed') AND m.completed_at >= now() - interval '30 days'`, 0, 0},
		{`SELECT count(*) FROM events WHERE created_at < now() - interval '30 days 1 minute'`, 0, 0},
		{`SELECT count(*) FROM mdns`, 2_500, 3_100},
		{`SELECT count(*) FROM mdn_inbox WHERE processed_at < now() - interval '30 days 1 minute'`, 0, 0},
		{`SELECT count(*) FROM message_attempts`, 20_000, 30_000},
		{`SELECT count(*) FROM mdn_inbox WHERE state = 'orphan'`, 10, 100},
		{`SELECT count(*) FROM outbox WHERE status = 'pending'`, 1, 100},
		// ids grow with time, as they do.
		{`SELECT count(*) FROM (SELECT created_at < lag(created_at) OVER (ORDER BY id) AS back FROM messages) x WHERE back`, 0, 0},
	} {
		if n := count(c.sql); n < c.min || n > c.max {
			t.Errorf("%s = %d, want %d to %d", c.sql, n, c.min, c.max)
		}
	}
	if d.Traced == 0 || d.Inbound == 0 || d.InboundMessageID == "" || d.DayFilenamePrefix == "" || d.Orphan == 0 || d.LastID == 0 {
		t.Errorf("samples = %+v, want each found", d)
	}
	loaded, err := pgfill.Load(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Traced != d.Traced || loaded.Messages != d.Messages || loaded.InboundMessageID != d.InboundMessageID {
		t.Errorf("Load = %+v, want the samples of the fill %+v", loaded, d)
	}
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range d.Queries() {
		if err := q.Run(ctx, st); err != nil {
			t.Errorf("%s: %v", q.Name, err)
		}
	}
	tr, err := st.MessageTrace(ctx, d.Traced)
	if err != nil || len(tr.Attempts) != 8 || tr.MDN == nil || len(tr.Events) == 0 || len(tr.InboxMDNs) == 0 {
		t.Errorf("trace of the traced message = %d attempts, MDN %v, %d events, %d async MDNs, %v; want every part",
			len(tr.Attempts), tr.MDN != nil, len(tr.Events), len(tr.InboxMDNs), err)
	}
}
