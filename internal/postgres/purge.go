package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/hub"
)

// What PurgeBatch deletes, in the order a purge run goes through them.
const (
	PurgeOutbox     = "outbox"     // finished outbox rows (done, failed) of final messages, webhook deliveries
	PurgePayloads   = "payloads"   // payloads of final messages
	PurgeMDNs       = "mdns"       // MDNs kept for final messages
	PurgeMDNInbox   = "mdn_inbox"  // processed async MDNs and orphans
	PurgeHeartbeats = "heartbeats" // leader heartbeats
	PurgeEvents     = "events"     // event feed entries
	PurgeReplays    = "replays"    // the replay check's claims of signed content
	PurgeLogins     = "logins"     // failed-login records (login throttling) no longer locked
	PurgeRestarts   = "restarts"   // AS2 restart transfers left incomplete, with their bytes (their own expiry)
	PurgeMessages   = "messages"   // final message rows (the audit trail), with what is left of them
	PurgeAudit      = "audit"      // audit log entries (who did what)
)

// PurgeKinds lists the kinds in purge order.
var PurgeKinds = []string{PurgeOutbox, PurgePayloads, PurgeMDNs, PurgeMDNInbox, PurgeHeartbeats, PurgeEvents, PurgeReplays, PurgeLogins, PurgeRestarts, PurgeMessages, PurgeAudit}

// AuditKind reports whether a purge kind is kept for the audit retention
// rather than the retention: message rows and the audit log.
func AuditKind(kind string) bool { return kind == PurgeMessages || kind == PurgeAudit }

// finalMessage is the condition a message row m must meet before anything
// of it is purged: a final status, finished before the cutoff ($1), and no
// outbox row still pending for it (a resend in flight).
const finalMessage = `
m.status IN ('delivered', 'failed', 'sent', 'processed', 'error')
AND coalesce(m.completed_at, m.updated_at) < $1
AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.message_id = m.id AND o.status = 'pending')`

// purgeBound is the id of the first message created at or after the
// cutoff ($1), or the largest bigint when none was. Message ids follow
// the messages' creation, and a message's payload, MDN and events are
// never older than it: the rows older than the cutoff belong to
// messages below the bound. The purges of payloads, MDNs and events walk
// an index by message id up to it (their primary keys, events_message_idx)
// instead of indexes of their own creation times, which each receipt
// would have to update (migration 00021 dropped them). A message created
// before the cutoff whose transaction took its id after the bound's
// (begun earlier, inserted later: a long streamed receipt) has its rows
// purged by a later run, once the cutoff has passed its insert; the
// retention is a minimum age, never shortened.
const purgeBound = `coalesce((SELECT b.id FROM messages b WHERE b.created_at >= $1 ORDER BY b.created_at LIMIT 1), 9223372036854775807)`

// purgeSQL deletes at most $2 rows of a kind older than $1, oldest first.
// SKIP LOCKED: a row a receiver or dispatcher holds is left for the next
// batch instead of waited for.
var purgeSQL = map[string]string{
	// The message check must run per row, along the index order, so that
	// a batch costs its own rows: the extra outer reference in the EXISTS
	// keeps the planner from turning it into a hashed subplan over every
	// message, and ANY(ARRAY(...)) deletes by primary key instead of
	// hash-joining the whole table.
	PurgeOutbox: `
DELETE FROM outbox WHERE id = ANY(ARRAY(
    SELECT x.id FROM outbox x
     WHERE x.status <> 'pending' AND x.finished_at < $1
       AND (x.message_id IS NULL OR EXISTS (
            SELECT 1 FROM messages m WHERE m.id = x.message_id AND x.message_id IS NOT NULL AND ` + finalMessage + `))
     ORDER BY x.finished_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	PurgePayloads: `
DELETE FROM payloads WHERE message_id = ANY(ARRAY(
    SELECT p.message_id FROM payloads p JOIN messages m ON m.id = p.message_id
     WHERE p.message_id < ` + purgeBound + ` AND p.created_at < $1 AND ` + finalMessage + `
     ORDER BY p.message_id LIMIT $2 FOR UPDATE OF p SKIP LOCKED))`,
	PurgeMDNs: `
DELETE FROM mdns WHERE message_id = ANY(ARRAY(
    SELECT d.message_id FROM mdns d JOIN messages m ON m.id = d.message_id
     WHERE d.message_id < ` + purgeBound + ` AND d.created_at < $1 AND ` + finalMessage + `
     ORDER BY d.message_id LIMIT $2 FOR UPDATE OF d SKIP LOCKED))`,
	PurgeMDNInbox: `
DELETE FROM mdn_inbox WHERE id = ANY(ARRAY(
    SELECT id FROM mdn_inbox WHERE processed_at IS NOT NULL AND processed_at < $1
     ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	PurgeHeartbeats: `
DELETE FROM leader_heartbeats WHERE id = ANY(ARRAY(
    SELECT id FROM leader_heartbeats WHERE beat_at < $1
     ORDER BY beat_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	PurgeEvents: `
DELETE FROM events WHERE id = ANY(ARRAY(
    SELECT id FROM events WHERE message < ` + purgeBound + ` AND created_at < $1
     ORDER BY message, id LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	// A claim outlives its partner's replay window only when the partner
	// sends nothing (each claim clears a few expired ones); the lookup in
	// messages still finds a replay older than the retention.
	PurgeReplays: `
DELETE FROM replay_guard WHERE (partner, digest) IN (
    SELECT partner, digest FROM replay_guard WHERE seen_at < $1
     ORDER BY seen_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	// A record still locked is kept whatever its age (a lock lasts an
	// hour at most; the retention is days).
	PurgeLogins: `
DELETE FROM login_failures WHERE key = ANY(ARRAY(
    SELECT key FROM login_failures WHERE last_at < $1 AND (locked_until IS NULL OR locked_until < $1)
     ORDER BY last_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	// An incomplete transfer past its expiry since its last byte; deleting
	// it deletes its restart_chunks. A completed one is deleted by the
	// receiver that processed it.
	PurgeRestarts: `
DELETE FROM restart_transfers WHERE id = ANY(ARRAY(
    SELECT id FROM restart_transfers WHERE updated_at < $1
     ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	PurgeAudit: `
DELETE FROM audit_log WHERE id = ANY(ARRAY(
    SELECT id FROM audit_log WHERE at < $1
     ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	PurgeMessages: `
DELETE FROM messages WHERE id = ANY(ARRAY(
    SELECT m.id FROM messages m
     WHERE m.created_at < $1 AND ` + finalMessage + `
     ORDER BY m.created_at LIMIT $2 FOR UPDATE OF m SKIP LOCKED))`,
}

// PurgeBatch deletes at most limit rows of kind that are older than
// olderThan (database clock) and finished, in one short fenced transaction,
// and returns how many it deleted; fewer than limit means the kind is done.
// Nothing of a message that is not final (queued, sending, retrying,
// awaiting-mdn) is ever deleted. Deleting a message row deletes what is
// left of it (payload, MDN, outbox rows) with it. It returns hub.ErrStaleFence
// when f is no longer the current term.
func (s *Store) PurgeBatch(ctx context.Context, f hub.Fence, kind string, olderThan time.Duration, limit int) (int64, error) {
	q, ok := purgeSQL[kind]
	if !ok {
		return 0, fmt.Errorf("purge: unknown kind %q", kind)
	}
	if olderThan <= 0 || limit <= 0 {
		return 0, fmt.Errorf("purge %s: age %s and limit %d must be positive", kind, olderThan, limit)
	}
	var n int64
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		var cutoff time.Time
		if err := tx.QueryRow(ctx, `SELECT now() - $1 * interval '1 microsecond'`, olderThan.Microseconds()).Scan(&cutoff); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, q, cutoff, limit)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", kind, err)
	}
	return n, nil
}
