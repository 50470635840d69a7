// Package pgfill fills a migrated edihub database with a hub's history:
// by default 1,000,000 messages of 20 partners over 400 days (the audit
// retention), both directions, mostly delivered or processed with some
// failed and, in the last day, some queued, retrying or awaiting an MDN;
// with their send attempts, and the events, MDNs, async MDNs (applied,
// orphan and pending) and outbox rows of the last 30 days (the purger's
// default retention deleted the older ones). It is how the ops console's
// queries are shown to use indexes at scale (internal/postgres
// TestConsoleQueriesUseIndexes) and timed (BenchmarkConsoleQueries, make
// bench). Payloads are not written: the console reads one at a time, by
// its message's id.
//
// The fill is INSERT … SELECT generate_series, one statement per table,
// with the tables' secondary indexes dropped during the inserts and built
// afterwards (sorting once is much faster than a million random index
// insertions), then VACUUM ANALYZE, as autovacuum leaves a real hub. Rows
// are a function of their number: two fills of the same size are equal
// but for the times, which count back from the fill's start.
package pgfill

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

// DefaultMessages is the size of a fill when Options.Messages is 0.
const DefaultMessages = 1_000_000

// Partners is how many partners the messages are spread over, unevenly:
// "PARTNER 01" has the most, "PARTNER 20" the fewest.
const Partners = 20

// Days is how far back the messages go.
const Days = 400

// DefaultRetention is how far back the rows the purger deletes go when
// Options.Retention is 0: EDIHUB_RETENTION's default.
const DefaultRetention = 30 * 24 * time.Hour

// Options configure Fill.
type Options struct {
	// Messages is how many messages to write; 0 means DefaultMessages.
	Messages int
	// Retention is how far back the events, MDNs, async MDNs and
	// finished outbox rows go (the purger deleted the older ones); 0
	// means DefaultRetention, Days·24h keeps them all.
	Retention time.Duration
}

// Step is one timed statement of a fill.
type Step struct {
	Name     string
	Rows     int64
	Duration time.Duration
}

// Data describes a filled database: what was written, how long it took,
// and rows of each kind for queries to ask about.
type Data struct {
	// Start is the fill's clock: message times count back from it.
	Start    time.Time
	Messages int
	Steps    []Step
	Duration time.Duration
	Partners []string
	// Traced is an outbound message that failed after eight attempts on
	// a negative MDN, with its events, its MDN and an orphan async MDN
	// that names it: every part of a trace.
	Traced int64
	// Inbound is an inbound message, InboundMessageID its Message-ID,
	// brackets included.
	Inbound          int64
	InboundMessageID string
	// DayFilenamePrefix matches the files of one type of one day (a few
	// hundred messages); TypeFilenamePrefix those of one type (a sixth).
	DayFilenamePrefix  string
	TypeFilenamePrefix string
	// Orphan is an orphan async MDN.
	Orphan int64
	// LastID is the highest message id.
	LastID int64
}

// Fill writes o.Messages messages and what goes with them into the empty,
// migrated database at url, then vacuums and analyzes it, on two
// connections: the messages first, then the tables that refer to them,
// the indexes and the vacuum two at a time.
func Fill(ctx context.Context, url string, o Options) (*Data, error) {
	if o.Messages <= 0 {
		o.Messages = DefaultMessages
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	var conns [2]*pgx.Conn
	for i := range conns {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("pgfill: %w", err)
		}
		defer c.Close(context.Background())
		// Plans run once are not worth compiling; index builds sort in
		// memory, one process each (the two connections keep two cores
		// busy).
		if _, err := c.Exec(ctx, `SET jit = off; SET maintenance_work_mem = '256MB'; SET max_parallel_maintenance_workers = 0`); err != nil {
			return nil, fmt.Errorf("pgfill: %w", err)
		}
		conns[i] = c
	}
	d := &Data{Messages: o.Messages}
	begin := time.Now()
	if err := conns[0].QueryRow(ctx, `SELECT now()`).Scan(&d.Start); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	for i := range Partners {
		d.Partners = append(d.Partners, fmt.Sprintf("PARTNER %02d", i+1))
	}
	indexes := map[string][]string{}
	var foreignKeys []string
	err := pgx.BeginFunc(ctx, conns[0], func(tx pgx.Tx) error {
		// Emptied in this transaction, messages is written without WAL
		// on a server with wal_level=minimal.
		if _, err := tx.Exec(ctx, `TRUNCATE messages, payloads, payload_chunks, mdns, outbox, outbox_body_chunks, mdn_inbox, duplicates, events, message_attempts, message_interchanges, message_groups, interchange_duplicates, pickup_claims`); err != nil {
			return err
		}
		for _, t := range tables {
			idx, fks, err := dropIndexes(ctx, tx, t)
			if err != nil {
				return fmt.Errorf("drop the indexes of %s: %w", t, err)
			}
			indexes[t], foreignKeys = idx, append(foreignKeys, fks...)
		}
		// The event and NOTIFY triggers: the events are written as the
		// trigger writes them, and nobody listens.
		for _, t := range triggered {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+t+` DISABLE TRIGGER USER`); err != nil {
				return err
			}
		}
		return d.run(ctx, tx, "messages", messagesSQL, int64(o.Messages), d.Start)
	})
	if err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	// The rows that refer to the messages, and the indexes of messages
	// meanwhile (reading a table does not wait for an index build).
	work := steps(d.Start, d.Start.Add(-o.Retention))
	for _, sql := range indexes["messages"] {
		work = append(work, step{name: sql, sql: sql})
	}
	if err := d.parallel(ctx, conns[:], work); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	// The other indexes; the foreign keys, each checked in one join; the
	// vacuum that sets the visibility map, as autovacuum does, and the
	// statistics.
	work = work[:0]
	for _, t := range triggered {
		work = append(work, step{sql: `ALTER TABLE ` + t + ` ENABLE TRIGGER USER`})
	}
	for _, t := range tables[1:] {
		for _, sql := range indexes[t] {
			work = append(work, step{name: sql, sql: sql})
		}
	}
	for _, sql := range foreignKeys {
		work = append(work, step{name: sql, sql: sql})
	}
	for _, t := range tables {
		work = append(work, step{name: "vacuum analyze " + t, sql: `VACUUM (ANALYZE) ` + t})
	}
	if err := d.parallel(ctx, conns[:], work); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	if err := d.samples(ctx, conns[0]); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	d.Duration = time.Since(begin)
	return d, nil
}

// step is one statement of a fill.
type step struct {
	name, sql string
	args      []any
}

// run executes one statement on q and records it as a Step named name
// (unnamed statements are not recorded).
func (d *Data) run(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, name, sql string, args ...any) error {
	t := time.Now()
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", cmp.Or(name, sql), err)
	}
	if name != "" {
		d.Steps = append(d.Steps, Step{Name: name, Rows: tag.RowsAffected(), Duration: time.Since(t)})
	}
	return nil
}

// parallel runs the steps on conns, each connection taking the next
// step when it is done with one, and returns when all ran or one failed.
func (d *Data) parallel(ctx context.Context, conns []*pgx.Conn, steps []step) error {
	next := make(chan step, len(steps))
	for _, s := range steps {
		next <- s
	}
	close(next)
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range conns {
		g.Go(func() error {
			for s := range next {
				var one Data
				if err := one.run(ctx, c, s.name, s.sql, s.args...); err != nil {
					return err
				}
				mu.Lock()
				d.Steps = append(d.Steps, one.Steps...)
				mu.Unlock()
			}
			return nil
		})
	}
	return g.Wait()
}

// triggered are the tables whose triggers a fill turns off.
var triggered = []string{"messages", "mdn_inbox", "outbox"}

// tables are the tables a fill writes.
var tables = []string{"messages", "message_attempts", "events", "mdns", "mdn_inbox", "outbox"}

// dropIndexes drops the indexes, unique and foreign key constraints of
// table but its primary key (which foreign keys need) and returns the
// statements that make them again, foreign keys last. A foreign key
// checked once over the table is much faster than row by row.
func dropIndexes(ctx context.Context, tx pgx.Tx, table string) (indexes, foreignKeys []string, err error) {
	rows, err := tx.Query(ctx, `
SELECT ic.relname, pg_get_indexdef(i.indexrelid), coalesce(c.conname, ''), coalesce(pg_get_constraintdef(c.oid), '')
  FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype IN ('u', 'x')
 WHERE i.indrelid = $1::regclass AND NOT i.indisprimary
 UNION ALL
SELECT '', '', conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'f'
 ORDER BY 1, 3`, table)
	if err != nil {
		return nil, nil, err
	}
	type index struct{ name, def, constraint, constraintDef string }
	idx, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		err := r.Scan(&x.name, &x.def, &x.constraint, &x.constraintDef)
		return x, err
	})
	if err != nil {
		return nil, nil, err
	}
	for _, x := range idx {
		if x.constraint == "" {
			if _, err := tx.Exec(ctx, `DROP INDEX `+pgx.Identifier{x.name}.Sanitize()); err != nil {
				return nil, nil, err
			}
			indexes = append(indexes, x.def)
			continue
		}
		c := pgx.Identifier{x.constraint}.Sanitize()
		if _, err := tx.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT `+c); err != nil {
			return nil, nil, err
		}
		again := `ALTER TABLE ` + table + ` ADD CONSTRAINT ` + c + ` ` + x.constraintDef
		if x.name == "" {
			foreignKeys = append(foreignKeys, again)
		} else {
			indexes = append(indexes, again)
		}
	}
	return indexes, foreignKeys, nil
}

// Load describes the database at url, which Fill filled earlier (a run of
// make bench, a database kept for trying queries): its Data, without the
// steps.
func Load(ctx context.Context, url string) (*Data, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	defer conn.Close(context.Background())
	d := &Data{}
	for i := range Partners {
		d.Partners = append(d.Partners, fmt.Sprintf("PARTNER %02d", i+1))
	}
	// The fill's clock is about two seconds past the newest message.
	if err := conn.QueryRow(ctx, `SELECT count(*), max(created_at) FROM messages`).Scan(&d.Messages, &d.Start); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	if err := d.samples(ctx, conn); err != nil {
		return nil, fmt.Errorf("pgfill: %w", err)
	}
	return d, nil
}

// samples finds the rows Data names.
func (d *Data) samples(ctx context.Context, conn *pgx.Conn) error {
	for _, s := range []struct {
		dst any
		sql string
	}{
		{&d.Traced, `SELECT max(m.id) FROM messages m JOIN mdn_inbox i ON i.original_message_id = m.message_id AND i.state = 'orphan'
		  WHERE m.direction = 'outbound' AND m.status = 'failed' AND m.disposition <> ''`},
		{&d.Inbound, `SELECT min(id) FROM messages WHERE direction = 'inbound' AND id > (SELECT max(id) / 2 FROM messages)`},
		{&d.InboundMessageID, `SELECT message_id FROM messages WHERE id = (SELECT min(id) FROM messages WHERE direction = 'inbound' AND id > (SELECT max(id) / 2 FROM messages))`},
		{&d.DayFilenamePrefix, `SELECT substr(filename, 1, 15) FROM messages
		  WHERE filename LIKE 'INVOIC\_%' AND id <= (SELECT max(id) / 2 FROM messages) ORDER BY id DESC LIMIT 1`},
		{&d.Orphan, `SELECT max(id) FROM mdn_inbox WHERE state = 'orphan'`},
		{&d.LastID, `SELECT max(id) FROM messages`},
	} {
		if err := conn.QueryRow(ctx, s.sql).Scan(s.dst); err != nil {
			return fmt.Errorf("sample: %s: %w", s.sql, err)
		}
	}
	d.TypeFilenamePrefix = "ORDERS_"
	return nil
}

// steps write the rows that refer to the messages, given the fill's clock
// and the time before which the purger deleted what it deletes.
func steps(start, purged time.Time) []step {
	// Longest first: two connections take them in turn.
	return []step{
		{"send attempts", attemptsSQL, nil},
		{"events", eventsSQL, []any{purged}},
		{"MDNs", mdnsSQL, []any{purged}},
		{"async MDNs", inboxSQL, []any{start, purged}},
		{"outbox", outboxSQL, []any{start, purged}},
		{"overdue events", overdueEventsSQL, []any{purged}},
	}
}

// messagesSQL writes message i (1..$1) created at (400 days)·(1 − i/$1)
// before $2, so ids grow with time as they do. Each draw is a hash of i.
// Inbound: 98 % processed, 2 % error. Outbound older than a day: 1.5 %
// failed, 0.05 % flagged overdue, 4 % sent without MDN, the rest
// delivered; in the last day also queued, sending, retrying and awaiting
// an MDN. 10 % have no file name; the others are
// TYPE_YYYYMMDD_<i>.edi, six types.
const messagesSQL = `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, filename,
                      payload_size, signed, encrypted, mic, mic_alg, mdn_mode, mdn_signed, disposition, error,
                      attempts, mdn_due_at, mdn_overdue, mic_verified, created_at, updated_at, completed_at)
SELECT d.direction, d.partner,
       CASE WHEN d.inbound THEN d.partner ELSE 'EDIHUB' END,
       CASE WHEN d.inbound THEN 'EDIHUB' ELSE d.partner END,
       '<' || lpad(to_hex(hashint8extended(d.i, 7)), 16, '0') || lpad(to_hex(d.i), 8, '0')
           || CASE WHEN d.inbound THEN '@' || lower(replace(d.partner, ' ', '-')) || '.example>' ELSE '@EDIHUB>' END,
       d.status, 'application/EDI-X12',
       CASE WHEN d.r4 < 1000 THEN '' ELSE (ARRAY['ORDERS', 'INVOIC', 'DESADV', '850', '810', '856'])[1 + d.r4 % 6]
            || '_' || to_char(d.created_at, 'YYYYMMDD') || '_' || d.i || '.edi' END,
       1000 + d.r4 * 5, true, true,
       CASE WHEN d.status <> 'queued' THEN 'bWljbWljbWljbWljbWljbWljbWljbWljbWljbWljbWk=, sha-256' ELSE '' END, 'sha-256',
       d.mdn_mode, d.mdn_mode <> 'none',
       CASE WHEN d.status IN ('delivered', 'processed') THEN 'automatic-action/MDN-sent-automatically; processed'
            WHEN d.status = 'failed' AND d.r4 % 2 = 0 THEN 'automatic-action/MDN-sent-automatically; processed/error: decryption-failed'
            WHEN d.status = 'error' THEN 'automatic-action/MDN-sent-automatically; processed/error: authentication-failed'
            ELSE '' END,
       CASE WHEN d.status = 'failed' AND d.r4 % 2 = 0 THEN 'partner: decryption-failed'
            WHEN d.status = 'failed' THEN 'gave up after 8 attempts: dial tcp: connection refused'
            WHEN d.status = 'retrying' THEN 'HTTP 503 Service Unavailable'
            WHEN d.status = 'error' THEN 'signature verification failed'
            ELSE '' END,
       d.attempts,
       CASE WHEN d.status = 'awaiting-mdn' THEN d.created_at + interval '1 hour' END,
       d.status = 'awaiting-mdn' AND NOT d.recent,
       CASE WHEN d.status = 'delivered' THEN true END,
       d.created_at, d.created_at + interval '2 seconds',
       CASE WHEN d.status IN ('delivered', 'sent', 'failed', 'processed', 'error') THEN d.created_at + interval '2 seconds' END
  FROM (
    SELECT s.*, st.status,
           CASE WHEN s.inbound THEN 'inbound' ELSE 'outbound' END AS direction,
           CASE WHEN s.inbound THEN 'sync' WHEN st.status = 'sent' THEN 'none'
                WHEN st.status = 'awaiting-mdn' OR s.r5 < 3000 THEN 'async' ELSE 'sync' END AS mdn_mode,
           CASE WHEN s.inbound OR st.status = 'queued' THEN 0 WHEN st.status = 'failed' THEN 8
                WHEN st.status = 'retrying' THEN 1 + s.r5 % 4 WHEN s.r5 < 300 THEN 2 ELSE 1 END AS attempts
      FROM (
        SELECT g.i, (hashint8extended(g.i, 2) & 1) = 0 AS inbound,
               $2::timestamptz - (400 * (1 - g.i::float8 / $1)) * interval '1 day' AS created_at,
               g.i > $1 - $1 / 400 AS recent,
               (hashint8extended(g.i, 3) & 2147483647) % 10000 AS r3,
               (hashint8extended(g.i, 4) & 2147483647) % 10000 AS r4,
               (hashint8extended(g.i, 5) & 2147483647) % 10000 AS r5,
               'PARTNER ' || lpad((1 + floor(20 * power(((hashint8extended(g.i, 1) & 2147483647) % 10000)::float8 / 10000, 1.6)))::int::text, 2, '0') AS partner
          FROM generate_series(1, $1::bigint) AS g(i)
      ) s,
      LATERAL (SELECT CASE
          WHEN s.inbound THEN CASE WHEN s.r3 < 9800 THEN 'processed' ELSE 'error' END
          WHEN s.recent THEN CASE WHEN s.r3 < 300 THEN 'retrying' WHEN s.r3 < 400 THEN 'queued' WHEN s.r3 < 450 THEN 'sending'
                                  WHEN s.r3 < 1500 THEN 'awaiting-mdn' WHEN s.r3 < 1700 THEN 'failed' WHEN s.r3 < 2100 THEN 'sent' ELSE 'delivered' END
          ELSE CASE WHEN s.r3 < 150 THEN 'failed' WHEN s.r3 < 155 THEN 'awaiting-mdn' WHEN s.r3 < 555 THEN 'sent' ELSE 'delivered' END
        END AS status) st
  ) d`

// attemptsSQL writes one row per attempt of each outbound message: the
// last one done (or failed), the ones before retrying.
const attemptsSQL = `
INSERT INTO message_attempts (message_id, attempt, replica, at, http_status, outcome, error)
SELECT m.id, a, 'edihub-' || (m.id % 3) || '-' || to_hex(m.id % 7 + 4096), m.created_at + (a - 1) * interval '30 seconds',
       CASE WHEN a = m.attempts AND (m.status IN ('delivered', 'sent', 'awaiting-mdn') OR m.error LIKE 'partner:%') THEN 200
            WHEN a % 2 = 0 THEN 503 END,
       CASE WHEN a < m.attempts OR m.status = 'retrying' THEN 'retrying' WHEN m.status = 'failed' THEN 'failed' ELSE 'done' END,
       CASE WHEN a = m.attempts AND m.status IN ('delivered', 'sent', 'awaiting-mdn') THEN ''
            WHEN a = m.attempts AND m.error LIKE 'partner:%' THEN m.error
            WHEN a % 2 = 0 THEN 'HTTP 503 Service Unavailable' ELSE 'dial tcp: connection refused' END
  FROM messages m, generate_series(1, m.attempts) a
 WHERE m.direction = 'outbound' AND m.attempts > 0`

// eventsSQL writes the events the trigger of migration 00005 writes since
// $1 (the purger deleted the older ones), their detail without filename
// and disposition unless failed (building JSON objects is most of the
// statement's time).
const eventsSQL = `
INSERT INTO events (type, message, partner, direction, created_at, detail)
SELECT CASE WHEN m.direction = 'inbound' THEN 'received' ELSE m.status END, m.id, m.partner, m.direction, m.completed_at,
       jsonb_build_object('message_id', m.message_id, 'status', m.status)
           || CASE WHEN m.error <> '' THEN jsonb_build_object('error', m.error, 'disposition', nullif(m.disposition, '')) ELSE '{}' END
  FROM messages m
 WHERE m.status IN ('processed', 'delivered', 'sent', 'failed') AND m.completed_at >= $1`

const overdueEventsSQL = `
INSERT INTO events (type, message, partner, direction, created_at, detail)
SELECT 'overdue', m.id, m.partner, m.direction, m.mdn_due_at,
       jsonb_build_object('message_id', m.message_id, 'status', m.status, 'mdn_due_at', m.mdn_due_at)
  FROM messages m
 WHERE m.mdn_overdue AND m.mdn_due_at >= $1`

// mdnsSQL keeps an MDN for every message that has a disposition and was
// completed since $1 (the purger deleted the older ones): the one answered
// (inbound) or returned (outbound).
const mdnsSQL = `
INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed, created_at)
SELECT m.id, 'multipart/report; report-type=disposition-notification; boundary="b"', '{}',
       convert_to('--b' || chr(13) || chr(10) || 'Original-Message-ID: ' || m.message_id || chr(13) || chr(10) || m.disposition, 'UTF8'),
       m.disposition, m.mic, true, m.completed_at
  FROM messages m
 WHERE m.disposition <> '' AND m.mdn_mode <> 'none' AND m.completed_at >= $1`

// inboxSQL writes the async MDNs: one applied to each final outbound
// message that asked for one, an orphan (a late second MDN) for every
// failed outbound message and one other in a hundred, and pending ones
// for a fiftieth of the messages awaiting theirs; the decided ones since
// $2 (the purger deleted the others), the pending ones received just
// before $1.
const inboxSQL = `
INSERT INTO mdn_inbox (received_at, as2_from, as2_to, content_type, headers, body, original_message_id,
                       processed_at, result, fence, state, reason, partner, message_ref)
SELECT * FROM (
SELECT m.completed_at - interval '1 second', m.partner, 'EDIHUB', 'multipart/report', '{}'::jsonb,
       convert_to('async MDN for ' || m.message_id, 'UTF8'), m.message_id,
       m.completed_at, m.status, 1::bigint, 'processed', '', m.partner, m.id
  FROM messages m
 WHERE m.direction = 'outbound' AND m.mdn_mode = 'async' AND m.status IN ('delivered', 'failed') AND m.disposition <> ''
   AND m.completed_at >= $2
 UNION ALL
SELECT m.created_at + interval '5 minutes', m.partner, 'EDIHUB', 'multipart/report', '{}'::jsonb,
       convert_to('late MDN for ' || m.message_id, 'UTF8'), m.message_id,
       m.created_at + interval '5 minutes', 'orphan', 1::bigint, 'orphan',
       format('message %s is already final (%s)', m.id, m.status), m.partner, NULL::bigint
  FROM messages m
 WHERE m.direction = 'outbound' AND (m.status = 'failed' OR (m.status = 'delivered' AND m.id % 100 = 7))
   AND m.created_at >= $2
 UNION ALL
SELECT $1::timestamptz - interval '1 second', m.partner, 'EDIHUB', 'multipart/report', '{}'::jsonb,
       convert_to('pending MDN for ' || m.message_id, 'UTF8'), m.message_id, NULL, '', NULL, 'pending', '', '', NULL
  FROM messages m
 WHERE m.status = 'awaiting-mdn' AND NOT m.mdn_overdue AND m.id % 50 = 0
) x
 ORDER BY 1`

// outboxSQL writes the outbox rows of the outbound messages not final
// (pending, or done awaiting an MDN) and of those finished since $2 (the
// purger deleted the others).
const outboxSQL = `
INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, attempts, max_attempts, next_attempt_at,
                    created_at, finished_at, last_error, last_status, mic, mic_alg, built_at, last_attempt_at)
SELECT 'message', m.id, m.partner, 'https://as2.' || lower(replace(m.partner, ' ', '-')) || '.example/as2',
       CASE WHEN m.status = 'queued' THEN '{}' ELSE '{"Message-Id": ["x"]}' END::jsonb,
       CASE WHEN m.status = 'queued' THEN NULL ELSE convert_to('signed and encrypted bytes', 'UTF8') END,
       CASE WHEN m.status IN ('queued', 'sending', 'retrying') THEN 'pending' WHEN m.status = 'failed' THEN 'failed' ELSE 'done' END,
       m.attempts, 8,
       CASE WHEN m.status = 'retrying' THEN $1::timestamptz + interval '5 minutes' ELSE m.created_at END,
       m.created_at,
       CASE WHEN m.status NOT IN ('queued', 'sending', 'retrying') THEN m.completed_at END,
       m.error, CASE WHEN m.status = 'retrying' THEN 503 END,
       m.mic, m.mic_alg,
       CASE WHEN m.status <> 'queued' THEN m.created_at END,
       CASE WHEN m.attempts > 0 THEN m.created_at END
  FROM messages m
 WHERE m.direction = 'outbound' AND (m.completed_at IS NULL OR m.completed_at >= $2)`
