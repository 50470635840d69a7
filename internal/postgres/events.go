package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event types, written in the transaction that changes the message,
// whichever code path does it: received by the statement that stores the
// receipt (SaveInbound; the insert trigger of migration 00005 for any
// other insert, migration 00018), the others by the messages trigger on
// updates (migration 00005).
const (
	EventReceived  = "received"  // an inbound message was stored as processed
	EventSent      = "sent"      // an outbound message was accepted; no MDN was requested
	EventDelivered = "delivered" // an outbound message was acknowledged by a positive MDN
	EventFailed    = "failed"    // an outbound message failed for good
	EventOverdue   = "overdue"   // an outbound message's async MDN did not come in time
	// EventAck: a functional acknowledgement (997, 999, CONTRL) settled an
	// interchange of an outbound message; EventAckOverdue: none came by
	// its due time. Written by ApplyAcks and FlagOverdueAcks.
	EventAck        = "ack"
	EventAckOverdue = "ack-overdue"
	// EventInterchangeRepeated: an outbound message carries an
	// interchange whose control number was sent to the partner before
	// (same sender and receiver) within its duplicate window. Written
	// when the message is queued.
	EventInterchangeRepeated = "interchange-repeated"
)

// Event is one entry of the event feed.
type Event struct {
	// ID is the event's stable identity: the same event always has the
	// same ID, for de-duplication by consumers.
	ID int64
	// Cursor is the feed position just after this event.
	Cursor    EventCursor
	Type      string
	Message   int64 // messages.id
	Partner   string
	Direction string
	CreatedAt time.Time
	// Detail is a small JSON object: the AS2 message_id, status,
	// disposition, error, filename or mdn_due_at as they apply.
	Detail json.RawMessage
}

// EventCursor is a position in the event feed. The feed is ordered by the
// writing transaction's id, then the event id: identity values are taken at
// insert but committed in any order, so an event id alone is no safe
// position (a smaller id may still commit after a larger one was read).
// Reads stop below the oldest transaction still running, so every event
// that becomes visible later sorts after every event already read. The
// zero EventCursor is the start of the feed.
type EventCursor struct {
	TxID uint64
	ID   int64
}

// String formats the cursor for the API: "<txid>-<id>".
func (c EventCursor) String() string {
	return strconv.FormatUint(c.TxID, 10) + "-" + strconv.FormatInt(c.ID, 10)
}

// ErrInvalidCursor reports a cursor string that ParseEventCursor cannot
// read.
var ErrInvalidCursor = errors.New("invalid event cursor")

// ParseEventCursor reads a cursor formatted by EventCursor.String; "" and
// "0" are the start of the feed.
func ParseEventCursor(s string) (EventCursor, error) {
	if s == "" || s == "0" {
		return EventCursor{}, nil
	}
	t, i, ok := strings.Cut(s, "-")
	if !ok {
		return EventCursor{}, fmt.Errorf("%w %q", ErrInvalidCursor, s)
	}
	tx, err1 := strconv.ParseUint(t, 10, 64)
	id, err2 := strconv.ParseInt(i, 10, 64)
	if err1 != nil || err2 != nil || id < 0 {
		return EventCursor{}, fmt.Errorf("%w %q", ErrInvalidCursor, s)
	}
	return EventCursor{TxID: tx, ID: id}, nil
}

// eventsAfter selects the feed after ($1 txid, $2 id), at most $3 events,
// up to the oldest running transaction of the statement's snapshot.
// ORDER BY names the table's columns: a bare "txid" would sort by the
// output column txid::text, and "999" sorts after "1000".
const eventsAfter = `
SELECT e.id, e.txid::text AS txid_text, e.type, e.message, e.partner, e.direction, e.created_at, e.detail
  FROM events e
 WHERE (e.txid, e.id) > ($1::text::xid8, $2::bigint)
   AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY e.txid, e.id
 LIMIT $3`

func scanEvents(rows pgx.Rows) ([]Event, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var tx string
		if err := r.Scan(&e.ID, &tx, &e.Type, &e.Message, &e.Partner, &e.Direction, &e.CreatedAt, &e.Detail); err != nil {
			return e, err
		}
		n, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return e, fmt.Errorf("event %d txid %q: %w", e.ID, tx, err)
		}
		e.Cursor = EventCursor{TxID: n, ID: e.ID}
		return e, nil
	})
}

// Events returns up to limit events after the cursor, in feed order. An
// event of a transaction still running, or behind one still running, is
// not returned yet: paging with the Cursor of the last event returned
// never skips an event.
func (s *Store) Events(ctx context.Context, after EventCursor, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, eventsAfter, strconv.FormatUint(after.TxID, 10), after.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return evs, nil
}

// WebhookDelivery is the request one event becomes.
type WebhookDelivery struct {
	Header http.Header
	Body   []byte
}

// WebhookForward configures ForwardEvents.
type WebhookForward struct {
	// Cursor names the consumer's position in event_cursors.
	Cursor string
	URL    string
	// Limit bounds the events moved in one call.
	Limit       int
	MaxAttempts int
	// RetryWindow, when positive, keeps retrying past MaxAttempts (see
	// NewOutbound.RetryWindow).
	RetryWindow time.Duration
	// Build makes the request of one event; it must not block.
	Build func(Event) (WebhookDelivery, error)
}

// ForwardEvents moves the events after the consumer's cursor into the
// outbox as webhook deliveries, and advances the cursor, in one
// transaction: every event is queued exactly once, whichever replica
// forwards it. The first call for a cursor starts it at the end of the
// feed. A call while another replica holds the cursor does nothing. It
// returns how many events it queued.
func (s *Store) ForwardEvents(ctx context.Context, w WebhookForward) (int, error) {
	if w.Limit <= 0 {
		w.Limit = 100
	}
	if w.MaxAttempts <= 0 {
		w.MaxAttempts = 1
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		evs, ok, err := readCursor(ctx, tx, w.Cursor, w.Limit)
		if err != nil || !ok || len(evs) == 0 {
			return err
		}
		partners := make([]string, len(evs))
		headers := make([]string, len(evs))
		bodies := make([][]byte, len(evs))
		for i, e := range evs {
			d, err := w.Build(e)
			if err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
			h, err := json.Marshal(d.Header)
			if err != nil {
				return err
			}
			partners[i], headers[i], bodies[i] = e.Partner, string(h), d.Body
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO outbox (kind, partner, url, headers, body, built_at, max_attempts, retry_until)
SELECT 'webhook', p, $4, h::jsonb, b, now(), $5,
       CASE WHEN $6::bigint > 0 THEN now() + $6::bigint * interval '1 microsecond' END
  FROM unnest($1::text[], $2::text[], $3::bytea[]) AS u(p, h, b)`,
			partners, headers, bodies, w.URL, w.MaxAttempts, w.RetryWindow.Microseconds()); err != nil {
			return err
		}
		if err := advanceCursor(ctx, tx, w.Cursor, evs[len(evs)-1].Cursor); err != nil {
			return err
		}
		n = len(evs)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("forward events to the webhook: %w", err)
	}
	return n, nil
}

// readCursor takes the consumer cursor name in tx, starting it at the end
// of the feed on its first use, and returns up to limit events after it.
// ok is false when another transaction holds the cursor (another replica
// is forwarding): the row is locked FOR UPDATE SKIP LOCKED, so one
// consumer moves it at a time and none waits.
func readCursor(ctx context.Context, tx pgx.Tx, name string, limit int) (evs []Event, ok bool, err error) {
	if _, err := tx.Exec(ctx, `
INSERT INTO event_cursors (name, txid, id)
SELECT $1, coalesce(max(txid), '0'::xid8), coalesce(max(id), 0)
  FROM (SELECT txid, id FROM events WHERE txid < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY txid DESC, id DESC LIMIT 1) last
ON CONFLICT (name) DO NOTHING`, name); err != nil {
		return nil, false, err
	}
	var cur EventCursor
	var tx8 string
	err = tx.QueryRow(ctx, `SELECT txid::text, id FROM event_cursors WHERE name = $1 FOR UPDATE SKIP LOCKED`, name).Scan(&tx8, &cur.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	rows, err := tx.Query(ctx, eventsAfter, tx8, cur.ID, limit)
	if err != nil {
		return nil, false, err
	}
	evs, err = scanEvents(rows)
	if err != nil {
		return nil, false, err
	}
	return evs, true, nil
}

// advanceCursor moves the consumer cursor name, taken by readCursor in tx,
// to c.
func advanceCursor(ctx context.Context, tx pgx.Tx, name string, c EventCursor) error {
	_, err := tx.Exec(ctx, `UPDATE event_cursors SET txid = $2::text::xid8, id = $3 WHERE name = $1`,
		name, strconv.FormatUint(c.TxID, 10), c.ID)
	return err
}
