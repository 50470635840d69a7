package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edihub/edihub/internal/hub"
)

// Outcomes of a send attempt (message_attempts.outcome).
const (
	AttemptRetrying = "retrying" // failed; another attempt is scheduled
	AttemptDone     = "done"     // the partner took the message
	AttemptFailed   = "failed"   // failed for good
	// AttemptCancelled is a failed attempt whose retry an operator
	// cancelled (CancelMessage).
	AttemptCancelled = "cancelled"
	// AttemptNegative is an attempt the partner took whose MDN refused
	// the message (an error or failure disposition), synchronous or
	// asynchronous.
	AttemptNegative = "negative"
)

// attemptOutcome is the outcome an attempt that leaves its outbox row in
// state has.
func attemptOutcome(state string) string {
	switch state {
	case OutboxPending:
		return AttemptRetrying
	case OutboxDone:
		return AttemptDone
	}
	return AttemptFailed
}

// Attempt is one finished send attempt of an outbound message.
type Attempt struct {
	// Attempt numbers the message's attempts from 1; the attempts of a
	// resend go on from the last one before it.
	Attempt int
	// Replica is the identity of the dispatcher that made it.
	Replica string
	At      time.Time
	// HTTPStatus is the partner's answer, 0 when none came (a refused
	// connection, a timeout).
	HTTPStatus int
	Outcome    string
	Error      string
}

// Trace is everything stored about one message, but its payload and MDN
// bytes: what the ops console's trace page shows.
type Trace struct {
	Message hub.MessageInfo
	// Attempts are the send attempts of an outbound message, oldest
	// first. An attempt cut short by a crash has none (its message's
	// error says so when it gave up).
	Attempts []Attempt
	// Events are the message's events, oldest first.
	Events []Event
	// MDN is the MDN kept for the message, nil when none; its Body is
	// not read (Size says how long it is).
	MDN *MDNInfo
	// InboxMDNs are the async MDNs received for an outbound message,
	// oldest first: the one applied to it and the orphans that name its
	// Message-ID (a late or repeated MDN, one that failed verification).
	InboxMDNs []InboxMDNInfo
	// Deliveries are a received message's deliveries to the connectors'
	// destinations, oldest first: where its document was written, or why
	// not yet.
	Deliveries []DeliveryInfo
}

// MessageTrace returns the trace of message id, read in one snapshot, or
// hub.ErrMessageNotFound.
func (s *Store) MessageTrace(ctx context.Context, id int64) (Trace, error) {
	var t Trace
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		t = Trace{}
		t.Message, err = scanMessage(tx.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return hub.ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(traceAttemptsSQL, id)
		b.Queue(traceEventsSQL, id)
		b.Queue(traceMDNSQL, id)
		if t.Message.Direction == "outbound" {
			b.Queue(traceInboxSQL, id, messageIDForms(t.Message.MessageID), t.Message.Partner)
		}
		b.Queue(traceDeliveriesSQL, id)
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		rows, _ := br.Query()
		if t.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
			var a Attempt
			var status *int
			err := r.Scan(&a.Attempt, &a.Replica, &a.At, &status, &a.Outcome, &a.Error)
			if status != nil {
				a.HTTPStatus = *status
			}
			return a, err
		}); err != nil {
			return fmt.Errorf("attempts: %w", err)
		}
		rows, _ = br.Query()
		if t.Events, err = scanEvents(rows); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		var m MDNInfo
		var hdr []byte
		err = br.QueryRow().Scan(&m.MessageID, &m.ContentType, &hdr, &m.Size, &m.Disposition, &m.MIC, &m.Signed, &m.CreatedAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("MDN: %w", err)
		default:
			m.MICVerified, m.Headers = t.Message.MICVerified, http.Header{}
			if len(hdr) > 0 {
				if err := json.Unmarshal(hdr, &m.Headers); err != nil {
					return fmt.Errorf("MDN headers: %w", err)
				}
			}
			t.MDN = &m
		}
		if t.Message.Direction == "outbound" {
			rows, _ = br.Query()
			if t.InboxMDNs, err = pgx.CollectRows(rows, scanInboxMDN); err != nil {
				return fmt.Errorf("async MDNs: %w", err)
			}
		}
		rows, _ = br.Query()
		if t.Deliveries, err = pgx.CollectRows(rows, scanDeliveryInfo); err != nil {
			return fmt.Errorf("deliveries: %w", err)
		}
		return br.Close()
	})
	if err != nil {
		return Trace{}, fmt.Errorf("trace of message %d: %w", id, err)
	}
	return t, nil
}

// The statements of a trace; $1 is the message's id.
const (
	traceAttemptsSQL = `
SELECT attempt, replica, at, http_status, outcome, error FROM message_attempts WHERE message_id = $1 ORDER BY id`

	traceEventsSQL = `
SELECT e.id, e.txid::text, e.type, e.message, e.partner, e.direction, e.created_at, e.detail
  FROM events e WHERE e.message = $1 ORDER BY e.id`

	traceMDNSQL = `
SELECT message_id, content_type, headers, octet_length(body), disposition, mic, signed, created_at FROM mdns WHERE message_id = $1`

	// traceInboxSQL: the MDNs applied to the message, and the orphans
	// that name its Message-ID ($2, in each form) and come from its
	// partner ($3) or from no partner known.
	traceInboxSQL = `
SELECT ` + inboxColumns + ` FROM mdn_inbox WHERE message_ref = $1
UNION ALL
SELECT ` + inboxColumns + ` FROM mdn_inbox
 WHERE original_message_id = ANY ($2::text[]) AND message_ref IS NULL AND partner IN ($3, '')
ORDER BY 1`
)

// ErrNotCancellable reports a cancel of a message that is not waiting to
// be sent: inbound, final, accepted by the partner already, or being sent
// right now. The error says which.
var ErrNotCancellable = errors.New("message cannot be cancelled")

// CancelMessage fails outbound message id before it is sent again: a
// message queued or retrying whose outbox row is pending and not claimed
// by a dispatcher right now. In one transaction its outbox row is
// finished (failed) and the message fails with the error "cancelled:
// reason" (or "cancelled"), which emits its failed event; a resend queues
// it again. It returns the message as cancelled, hub.ErrMessageNotFound, or
// ErrNotCancellable with the reason: final already, awaiting its MDN (the
// partner has it), or being sent right now (try again in a few seconds:
// the attempt ends, and a retry is then cancelled). It never waits for a
// dispatcher: the outbox row is locked with NOWAIT.
func (s *Store) CancelMessage(ctx context.Context, id int64, reason string) (hub.MessageInfo, error) {
	text := "cancelled"
	if r := strings.TrimSpace(clean(reason)); r != "" {
		text += ": " + r
	}
	var m hub.MessageInfo
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The message first, then its outbox row, as ResendMessage and
		// the MDN poller lock them; the dispatcher's order is the
		// reverse, which NOWAIT makes harmless.
		var dir, status string
		err := tx.QueryRow(ctx, `SELECT direction, status FROM messages WHERE id = $1 FOR UPDATE`, id).Scan(&dir, &status)
		if errors.Is(err, pgx.ErrNoRows) {
			return hub.ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		switch {
		case dir != "outbound":
			return fmt.Errorf("%w: it is an inbound message", ErrNotCancellable)
		case isFinal(status):
			return fmt.Errorf("%w: its status is %s, which is final", ErrNotCancellable, status)
		case status == "awaiting-mdn":
			return fmt.Errorf("%w: the partner accepted it and its MDN is awaited; the MDN decides it", ErrNotCancellable)
		}
		var outboxID int64
		var claimedBy string
		var claimed bool
		err = tx.QueryRow(ctx, `
SELECT id, claimed_by, coalesce(claimed_until > now(), false) FROM outbox
 WHERE message_id = $1 AND kind = 'message' AND status = 'pending'
   FOR UPDATE NOWAIT`, id).Scan(&outboxID, &claimedBy, &claimed)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "55P03": // lock_not_available
			return fmt.Errorf("%w: a dispatcher is working on it right now; try again in a few seconds", ErrNotCancellable)
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: its status is %s but nothing is queued to send it", ErrNotCancellable, status)
		case err != nil:
			return err
		case claimed:
			return fmt.Errorf("%w: it is being sent right now (replica %s); try again in a few seconds", ErrNotCancellable, claimedBy)
		}
		if _, err := tx.Exec(ctx, `
UPDATE outbox SET status = 'failed', finished_at = now(), claimed_by = '', claimed_until = NULL, last_error = $2
 WHERE id = $1`, outboxID, text); err != nil {
			return err
		}
		// The attempt that scheduled the retry cancelled here says so.
		if _, err := tx.Exec(ctx, `
UPDATE message_attempts SET outcome = 'cancelled', error = CASE WHEN error = '' THEN $2 ELSE error || '; ' || $2 END
 WHERE id = (SELECT max(id) FROM message_attempts WHERE message_id = $1) AND outcome = 'retrying'`, id, text); err != nil {
			return err
		}
		// The events trigger writes the failed event.
		m, err = scanMessage(tx.QueryRow(ctx, `
UPDATE messages SET status = 'failed', error = $2, updated_at = now(), completed_at = now()
 WHERE id = $1
RETURNING `+messageColumns, id, text))
		return err
	})
	if err != nil {
		return hub.MessageInfo{}, fmt.Errorf("cancel message %d: %w", id, err)
	}
	return m, nil
}

// ErrInboxMDNNotFound reports an inbox MDN id with no row.
var ErrInboxMDNNotFound = errors.New("inbox MDN not found")

// ErrNotOrphan reports a re-apply of an inbox MDN that is not an orphan.
var ErrNotOrphan = errors.New("inbox MDN is not an orphan")

// ReapplyInboxMDN puts orphan inbox MDN id back to pending, its reason,
// partner, message and decision (processed_at, fence) cleared, and wakes
// the leader's MDN poller (a notification on MDNInboxChannel, sent at
// commit), which judges it again: after a partner's certificate was
// fixed, say. It returns the row as pending, ErrInboxMDNNotFound, or
// ErrNotOrphan naming its state. An MDN applied to a message is never
// applied again.
func (s *Store) ReapplyInboxMDN(ctx context.Context, id int64) (InboxMDNInfo, error) {
	rows, err := s.pool.Query(ctx, `
WITH again AS (
    UPDATE mdn_inbox
       SET state = 'pending', reason = '', result = '', partner = '', message_ref = NULL, processed_at = NULL, fence = NULL
     WHERE id = $1 AND state = 'orphan'
 RETURNING *
)
SELECT `+inboxColumns+` FROM again, LATERAL (SELECT pg_notify($2, again.id::text)) wake`, id, MDNInboxChannel)
	if err != nil {
		return InboxMDNInfo{}, fmt.Errorf("re-apply inbox MDN %d: %w", id, err)
	}
	m, err := pgx.CollectExactlyOneRow(rows, scanInboxMDN)
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		err = s.pool.QueryRow(ctx, `SELECT state FROM mdn_inbox WHERE id = $1`, id).Scan(&state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return InboxMDNInfo{}, fmt.Errorf("re-apply inbox MDN %d: %w", id, ErrInboxMDNNotFound)
		case err == nil:
			return InboxMDNInfo{}, fmt.Errorf("%w: it is %s", ErrNotOrphan, state)
		}
	}
	if err != nil {
		return InboxMDNInfo{}, fmt.Errorf("re-apply inbox MDN %d: %w", id, err)
	}
	return m, nil
}

// PartnerHealth is how a partner's traffic goes, as the console's
// partner list shows it.
type PartnerHealth struct {
	Partner string
	// LastSuccess is the newest message that went through, either way:
	// delivered or sent to the partner, processed from it; 0 when none.
	LastSuccess   int64
	LastSuccessAt *time.Time
	// Retrying counts the messages to the partner whose last attempt
	// failed and that are retried.
	Retrying int64
	// Overdue counts the messages to the partner whose async MDN is
	// overdue and that are not final.
	Overdue int64
}

// PartnersHealth returns the health of each of partners, in that order.
// Each figure is read from an index (a few pages per partner), however
// long ago the last success was.
func (s *Store) PartnersHealth(ctx context.Context, partners []string) ([]PartnerHealth, error) {
	rows, err := s.pool.Query(ctx, partnersHealthSQL, partners)
	if err != nil {
		return nil, fmt.Errorf("partner health: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartnerHealth, error) {
		var h PartnerHealth
		var last *int64
		err := r.Scan(&h.Partner, &last, &h.LastSuccessAt, &h.Retrying, &h.Overdue)
		if last != nil {
			h.LastSuccess = *last
		}
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("partner health: %w", err)
	}
	return out, nil
}

// partnersHealthSQL: the last success is the highest id of the three
// successful statuses, each the last entry of its range of
// messages_partner_status_id_idx (a max() over "status IN (…)" would
// read every success of the partner).
const partnersHealthSQL = `
SELECT p.partner, last.id, last.completed_at,
       (SELECT count(*) FROM messages WHERE partner = p.partner AND status = 'retrying'),
       (SELECT count(*) FROM messages
         WHERE partner = p.partner AND mdn_overdue AND direction = 'outbound' AND status NOT IN ('delivered', 'failed', 'sent'))
  FROM unnest($1::text[]) WITH ORDINALITY AS p(partner, n)
  LEFT JOIN LATERAL (
      SELECT id, completed_at FROM messages
       WHERE id = greatest((SELECT max(id) FROM messages WHERE partner = p.partner AND status = 'delivered'),
                           (SELECT max(id) FROM messages WHERE partner = p.partner AND status = 'sent'),
                           (SELECT max(id) FROM messages WHERE partner = p.partner AND status = 'processed'))
  ) last ON true
 ORDER BY p.n`

// HubFigures are the console's hub page counts of work in flight.
type HubFigures struct {
	// OutboxDue counts pending outbox rows due now (not claimed);
	// OutboxClaimed those a dispatcher is sending.
	OutboxDue, OutboxClaimed int64
	// InboxPending counts async MDNs the leader's poller has not
	// judged yet; InboxOrphans those it could apply to no message.
	InboxPending, InboxOrphans int64
	// Retrying counts outbound messages being retried; Overdue those
	// whose async MDN is overdue.
	Retrying, Overdue int64
}

// HubFigures counts the work in flight, each figure from an index.
func (s *Store) HubFigures(ctx context.Context) (HubFigures, error) {
	var f HubFigures
	err := s.pool.QueryRow(ctx, hubFiguresSQL).Scan(&f.OutboxDue, &f.OutboxClaimed, &f.InboxPending, &f.InboxOrphans, &f.Retrying, &f.Overdue)
	if err != nil {
		return HubFigures{}, fmt.Errorf("hub figures: %w", err)
	}
	return f, nil
}

const hubFiguresSQL = `
SELECT o.due, o.claimed,
       (SELECT count(*) FROM mdn_inbox WHERE processed_at IS NULL),
       (SELECT count(*) FROM mdn_inbox WHERE state = 'orphan'),
       (SELECT count(*) FROM messages WHERE status = 'retrying'),
       (SELECT count(*) FROM messages WHERE mdn_overdue AND direction = 'outbound' AND status NOT IN ('delivered', 'failed', 'sent'))
  FROM (SELECT count(*) FILTER (WHERE next_attempt_at <= now()) AS due,
               count(*) FILTER (WHERE claimed_until > now()) AS claimed
          FROM outbox WHERE status = 'pending') o`
