package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
)

// AckMatch is an outbound interchange an inbound acknowledgement settled.
type AckMatch struct {
	Interchange   int64 // message_interchanges.id
	Message       int64 // the outbound messages.id
	ControlNumber string
	// Status is the interchange's acknowledgement status after the
	// acknowledgement: accepted, accepted-with-errors, rejected, or
	// pending while some of its groups are not acknowledged yet.
	Status string
	Codes  []string
}

// ErrAckUnmatched reports a verdict that names no interchange or group we
// sent to the partner; the others of the same call still apply.
var ErrAckUnmatched = errors.New("acknowledgement matches nothing sent")

// ApplyAcks records what the acknowledgements carried by inbound message
// ackMessage (from partner) say about the interchanges sent to partner: an
// X12 997/999 verdict settles the latest outbound functional group with
// its control number, a CONTRL the latest outbound interchange with its;
// either only in an interchange that went from the acknowledging
// interchange's receiver ID to its sender ID.
// Only an interchange of a message the partner could have received is
// settled: one it took (an MDN or a 2xx came back: awaiting-mdn,
// delivered, sent, or an attempt done), never one refused or never
// posted; of those with the control number, the latest sent.
// Each settled interchange gets an "ack" event (the event feed and the
// webhook carry it). It returns the matches (a TA1 that does not reject
// settles nothing and is none) and, for verdicts that match nothing, their
// control numbers.
func (s *Store) ApplyAcks(ctx context.Context, partner string, ackMessage int64, reports []*edi.AckReport) ([]AckMatch, []string, error) {
	var matches []AckMatch
	var unmatched []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		matches, unmatched, err = applyAcks(ctx, tx, partner, ackMessage, reports)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return matches, unmatched, nil
}

// applyAcks is ApplyAcks in tx.
func applyAcks(ctx context.Context, tx pgx.Tx, partner string, ackMessage int64, reports []*edi.AckReport) ([]AckMatch, []string, error) {
	var matches []AckMatch
	var unmatched []string
	for _, r := range reports {
		for _, v := range r.Verdicts() {
			m, err := applyVerdict(ctx, tx, partner, ackMessage, v)
			if errors.Is(err, ErrAckUnmatched) {
				unmatched = append(unmatched, clean(v.GroupControl+v.InterchangeControl))
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("apply acknowledgements from %s: %w", partner, err)
			}
			// A TA1 that does not reject settles nothing: no event, no
			// match (its note code is kept with the interchange).
			if v.Kind == "TA1" && v.Status != edi.AckRejected {
				continue
			}
			if err := ackEvent(ctx, tx, m); err != nil {
				return nil, nil, fmt.Errorf("apply acknowledgements from %s: %w", partner, err)
			}
			matches = append(matches, m)
		}
	}
	return matches, unmatched, nil
}

func applyVerdict(ctx context.Context, tx pgx.Tx, partner string, ackMessage int64, v edi.AckVerdict) (AckMatch, error) {
	codes := make([]string, 0, len(v.Codes))
	for _, c := range v.Codes {
		codes = append(codes, clean(c))
	}
	var m AckMatch
	if v.Kind == "TA1" {
		return applyTA1(ctx, tx, partner, ackMessage, v, codes)
	}
	if v.GroupControl != "" {
		err := tx.QueryRow(ctx, `
UPDATE message_groups SET ack_status = $3, ack_codes = $4
 WHERE control_number = $2 AND interchange_id = (
       SELECT max(g.interchange_id) FROM message_groups g JOIN message_interchanges i ON i.id = g.interchange_id
        WHERE g.partner = $1 AND g.control_number = $2 AND i.sender_id = $5 AND i.receiver_id = $6`+takenByPartner+`)
RETURNING interchange_id`, partner, clean(v.GroupControl), string(v.Status), codes, clean(v.Receiver.ID), clean(v.Sender.ID)).Scan(&m.Interchange)
		if errors.Is(err, pgx.ErrNoRows) {
			return m, ErrAckUnmatched
		}
		if err != nil {
			return m, fmt.Errorf("settle group %s: %w", v.GroupControl, err)
		}
		err = tx.QueryRow(ctx, `
WITH s AS (
  SELECT CASE WHEN bool_or(ack_status = 'rejected') THEN 'rejected'
              WHEN bool_and(ack_status = 'accepted') THEN 'accepted'
              WHEN bool_and(ack_status <> '') THEN 'accepted-with-errors'
              ELSE 'pending' END AS st,
         ARRAY(SELECT unnest(ack_codes) FROM message_groups WHERE interchange_id = $1) AS codes
    FROM message_groups WHERE interchange_id = $1),
-- An interchange a TA1 rejected stays so.
ta1 AS (
  SELECT ack_status = 'rejected' AND EXISTS (SELECT 1 FROM unnest(ack_codes) c WHERE c LIKE 'TA1:%') AS rejected
    FROM message_interchanges WHERE id = $1)
UPDATE message_interchanges i SET ack_status = CASE WHEN ta1.rejected THEN i.ack_status ELSE s.st END,
       ack_codes = CASE WHEN ta1.rejected THEN i.ack_codes ELSE s.codes END, acked_at = now(), ack_message = $2
  FROM s, ta1 WHERE i.id = $1
RETURNING i.message_id, i.control_number, i.ack_status, i.ack_codes`, m.Interchange, ackMessage).
			Scan(&m.Message, &m.ControlNumber, &m.Status, &m.Codes)
		if err != nil {
			return m, fmt.Errorf("settle interchange %d: %w", m.Interchange, err)
		}
		return m, nil
	}
	err := tx.QueryRow(ctx, `
UPDATE message_interchanges SET ack_status = $3, ack_codes = $4, acked_at = now(), ack_message = $5
 WHERE id = (SELECT max(id) FROM message_interchanges i
              WHERE partner = $1 AND direction = 'outbound' AND control_number = $2 AND sender_id = $6 AND receiver_id = $7`+takenByPartner+`)
RETURNING id, message_id, control_number, ack_status, ack_codes`,
		partner, clean(v.InterchangeControl), string(v.Status), codes, ackMessage, clean(v.Receiver.ID), clean(v.Sender.ID)).
		Scan(&m.Interchange, &m.Message, &m.ControlNumber, &m.Status, &m.Codes)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrAckUnmatched
	}
	if err != nil {
		return m, fmt.Errorf("settle interchange %s: %w", v.InterchangeControl, err)
	}
	return m, nil
}

// sentInterchange selects the latest interchange sent to partner ($1)
// with control number $2, from $3 to $4.
const sentInterchange = `(SELECT max(id) FROM message_interchanges i
              WHERE partner = $1 AND direction = 'outbound' AND control_number = $2 AND sender_id = $3 AND receiver_id = $4` + takenByPartner + `)`

// takenByPartner keeps the interchanges i of messages the partner could
// have received: it took them (a 2xx or an MDN came back), whatever the
// MDN said later. A message refused (a 4xx), never posted, or not posted
// yet awaits no acknowledgement: its control number may well be repeated
// by one the partner took.
const takenByPartner = `
   AND EXISTS (SELECT 1 FROM messages m WHERE m.id = i.message_id
                AND (m.status IN ('awaiting-mdn', 'delivered', 'sent')
                     OR EXISTS (SELECT 1 FROM message_attempts a WHERE a.message_id = m.id AND a.outcome IN ('done', 'negative'))))`

// applyTA1 applies an X12 interchange acknowledgement: a rejecting one
// (TA104 R) settles the interchange rejected with its note code, and a
// 997/999 that comes with or after it no longer changes that; an
// accepting one (A, E) only adds its note code, if any, and leaves the
// interchange to its 997/999.
func applyTA1(ctx context.Context, tx pgx.Tx, partner string, ackMessage int64, v edi.AckVerdict, codes []string) (AckMatch, error) {
	var m AckMatch
	args := []any{partner, clean(v.InterchangeControl), clean(v.Receiver.ID), clean(v.Sender.ID), codes, ackMessage}
	sql := `
UPDATE message_interchanges SET ack_codes = ack_codes || $5::text[]
 WHERE id = ` + sentInterchange + `
RETURNING id, message_id, control_number, ack_status, ack_codes`
	if v.Status == edi.AckRejected {
		sql = `
UPDATE message_interchanges SET ack_status = 'rejected', ack_codes = $5, acked_at = now(), ack_message = $6
 WHERE id = ` + sentInterchange + `
RETURNING id, message_id, control_number, ack_status, ack_codes`
	} else {
		args = args[:5]
	}
	err := tx.QueryRow(ctx, sql, args...).Scan(&m.Interchange, &m.Message, &m.ControlNumber, &m.Status, &m.Codes)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrAckUnmatched
	}
	if err != nil {
		return m, fmt.Errorf("apply TA1 for interchange %s: %w", v.InterchangeControl, err)
	}
	return m, nil
}

func ackEvent(ctx context.Context, tx pgx.Tx, m AckMatch) error {
	_, err := tx.Exec(ctx, `
INSERT INTO events (type, message, partner, direction, detail)
SELECT 'ack', id, partner, direction, jsonb_build_object(
       'message_id', message_id, 'status', status, 'control_number', $2::text, 'ack', $3::text, 'ack_codes', $4::text[])
  FROM messages WHERE id = $1`, m.Message, m.ControlNumber, m.Status, nonNil(m.Codes))
	if err != nil {
		return fmt.Errorf("ack event: %w", err)
	}
	return nil
}

// notFailed keeps the interchanges of messages that did not fail: what
// never reached the partner awaits no acknowledgement.
const notFailed = `
   AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = i.message_id AND m.status = 'failed')`

// DueAck is an outbound interchange whose acknowledgement is overdue.
type DueAck struct {
	Interchange   int64
	Message       int64
	Partner       string
	ControlNumber string
}

// OverdueAcks returns up to limit outbound interchanges still awaiting
// their acknowledgement past ack_due_at (database clock) and not yet
// flagged, oldest due first. It reads without locking: the fenced
// FlagOverdueAcks decides each one once.
func (s *Store) OverdueAcks(ctx context.Context, limit int) ([]DueAck, error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.id, i.message_id, i.partner, i.control_number FROM message_interchanges i
 WHERE i.ack_status = 'pending' AND NOT i.ack_overdue AND i.ack_due_at <= now()`+notFailed+`
 ORDER BY i.ack_due_at, i.id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read overdue acknowledgements: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDueAck)
	if err != nil {
		return nil, fmt.Errorf("read overdue acknowledgements: %w", err)
	}
	return out, nil
}

func scanDueAck(r pgx.CollectableRow) (DueAck, error) {
	var d DueAck
	err := r.Scan(&d.Interchange, &d.Message, &d.Partner, &d.ControlNumber)
	return d, err
}

// FlagOverdueAcks flags the interchanges ids overdue in one fenced
// transaction, each only if it is still pending past its due time and not
// flagged (so each is flagged once, whichever leader and however often
// asked), with an "ack-overdue" event. It returns the ones flagged, or
// hub.ErrStaleFence (flagging nothing) when f is no longer the current term.
func (s *Store) FlagOverdueAcks(ctx context.Context, f hub.Fence, ids []int64) ([]DueAck, error) {
	var out []DueAck
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
UPDATE message_interchanges i SET ack_overdue = true, ack_fence = $2
 WHERE i.id = ANY ($1) AND i.ack_status = 'pending' AND NOT i.ack_overdue AND i.ack_due_at <= now()`+notFailed+`
RETURNING i.id, i.message_id, i.partner, i.control_number`, ids, f.Token)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, scanDueAck); err != nil {
			return err
		}
		for _, d := range out {
			if _, err := tx.Exec(ctx, `
INSERT INTO events (type, message, partner, direction, detail)
SELECT 'ack-overdue', m.id, m.partner, m.direction, jsonb_build_object(
       'message_id', m.message_id, 'status', m.status, 'control_number', i.control_number, 'ack_due_at', i.ack_due_at)
  FROM messages m JOIN message_interchanges i ON i.message_id = m.id WHERE i.id = $1`, d.Interchange); err != nil {
				return fmt.Errorf("ack-overdue event: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("flag overdue acknowledgements: %w", err)
	}
	return out, nil
}

// OverdueAckCounts returns, per partner, the outbound interchanges flagged
// overdue that are still unacknowledged (edihub_ack_overdue{partner}).
func (s *Store) OverdueAckCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `
SELECT partner, count(*) FROM message_interchanges
 WHERE ack_overdue AND ack_status = 'pending' GROUP BY partner`)
	if err != nil {
		return nil, fmt.Errorf("count overdue acknowledgements: %w", err)
	}
	out := map[string]int{}
	var p string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&p, &n}, func() error { out[p] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("count overdue acknowledgements: %w", err)
	}
	return out, nil
}
