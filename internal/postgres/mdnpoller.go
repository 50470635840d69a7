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

// MDNInboxChannel is the LISTEN/NOTIFY channel an insert into mdn_inbox
// signals (migration 00004).
const MDNInboxChannel = "edihub_mdn_inbox"

// States of an inbox MDN (mdn_inbox.state).
const (
	InboxPending   = "pending"   // not yet looked at by the poller
	InboxProcessed = "processed" // applied to an outbound message
	InboxOrphan    = "orphan"    // matched no message it could apply to; see its reason
)

// ErrNotResendable reports a resend of a message that is neither failed
// nor overdue, not outbound, or has nothing left to send (its outbox row
// was purged or is still pending).
var ErrNotResendable = errors.New("message cannot be resent")

// ErrRowRejected reports data the database refused (a data or integrity
// error), as opposed to a failed connection: retrying the same write fails
// the same way.
var ErrRowRejected = errors.New("row rejected by the database")

// rejected marks err as ErrRowRejected when the server refused the data.
func rejected(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")) {
		return fmt.Errorf("%w: %w", ErrRowRejected, err)
	}
	return err
}

// ListenMDNInbox calls wake once listening and after each notification on
// MDNInboxChannel (an async MDN was stored), until ctx ends (nil) or the
// connection fails (an error; the caller may call again). It holds one
// pool connection while it runs.
func (s *Store) ListenMDNInbox(ctx context.Context, wake func()) error {
	return s.listen(ctx, MDNInboxChannel, wake)
}

// PendingMDNRef names an unprocessed inbox MDN by id, with its sender and
// the size of its body, so that the poller can refuse an oversized one
// without reading it.
type PendingMDNRef struct {
	ID      int64
	AS2From string
	Size    int64
}

// PendingMDN is an unprocessed inbox MDN with its body.
type PendingMDN struct {
	ID         int64
	AS2From    string
	AS2To      string
	Header     http.Header
	Body       []byte
	ReceivedAt time.Time
}

// ErrNotPending reports an inbox MDN that is no longer pending: decided
// meanwhile (by another term) or purged.
var ErrNotPending = errors.New("inbox MDN is not pending")

// PendingInboxMDNs returns up to limit pending inbox MDNs with ids above
// afterID, in id order, by id and body size: never their bodies (a batch
// of bodies may be larger than memory; PendingInboxMDN reads one). It
// reads without locking: the fenced ApplyMDNs decides each row once.
func (s *Store) PendingInboxMDNs(ctx context.Context, afterID int64, limit int) ([]PendingMDNRef, error) {
	// octet_length reads the size from the value's header; the body
	// itself is not fetched.
	rows, err := s.pool.Query(ctx, `
SELECT id, as2_from, octet_length(body)
  FROM mdn_inbox
 WHERE processed_at IS NULL AND id > $1
 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read pending MDNs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingMDNRef, error) {
		var m PendingMDNRef
		err := r.Scan(&m.ID, &m.AS2From, &m.Size)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read pending MDNs: %w", err)
	}
	return out, nil
}

// PendingInboxMDN returns pending inbox MDN id with its header fields and
// body, or ErrNotPending when it is decided or gone.
func (s *Store) PendingInboxMDN(ctx context.Context, id int64) (PendingMDN, error) {
	var m PendingMDN
	var ct string
	var hdr []byte
	err := s.pool.QueryRow(ctx, `
SELECT id, as2_from, as2_to, content_type, headers, body, received_at
  FROM mdn_inbox
 WHERE id = $1 AND processed_at IS NULL`, id).Scan(&m.ID, &m.AS2From, &m.AS2To, &ct, &hdr, &m.Body, &m.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return PendingMDN{}, fmt.Errorf("read inbox MDN %d: %w", id, ErrNotPending)
	}
	if err != nil {
		return PendingMDN{}, fmt.Errorf("read inbox MDN %d: %w", id, err)
	}
	m.Header = http.Header{}
	if len(hdr) > 0 {
		// A header that does not decode leaves the Content-Type column,
		// enough to parse the MDN.
		_ = json.Unmarshal(hdr, &m.Header)
	}
	if m.Header.Get("Content-Type") == "" && ct != "" {
		m.Header.Set("Content-Type", ct)
	}
	return m, nil
}

// MessageKey names an outbound message by partner and AS2 Message-ID.
type MessageKey struct {
	Partner   string
	MessageID string
}

// AwaitedMessage is what judging an MDN needs of an outbound message.
type AwaitedMessage struct {
	ID        int64
	Partner   string
	MessageID string
	Status    string
	// MIC is the MIC computed when the message was built ("base64, alg");
	// MICs the same in every supported algorithm, from its outbox row
	// (which is kept while the message is not final; empty for a message
	// built before they were stored).
	MIC       string
	MICs      []string
	MDNMode   string
	MDNSigned bool
	Signed    bool
	Encrypted bool
	// RequestedSignedReceipt reports that the bytes sent asked for a
	// signed receipt (Disposition-Notification-Options).
	RequestedSignedReceipt bool
	// RequestedAsyncMDN reports that the bytes sent asked for an async
	// MDN (Receipt-Delivery-Option); MDNMode is "async" then. Only such a
	// message may be decided by an MDN posted to us.
	RequestedAsyncMDN bool
	// Built reports that the message was built (its bytes are in its
	// outbox row): sent, or being sent, at least once.
	Built bool
}

// Final reports whether the message's status is final.
func (m AwaitedMessage) Final() bool { return isFinal(m.Status) }

func isFinal(status string) bool {
	switch status {
	case "delivered", "failed", "sent":
		return true
	}
	return false
}

// OutboundMessages returns the outbound messages with the given keys that
// exist, by key.
func (s *Store) OutboundMessages(ctx context.Context, keys []MessageKey) (map[MessageKey]AwaitedMessage, error) {
	out := make(map[MessageKey]AwaitedMessage, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	partners := make([]string, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		partners[i], ids[i] = k.Partner, k.MessageID
	}
	rows, err := s.pool.Query(ctx, `
SELECT m.id, m.partner, m.message_id, m.status, m.mic, coalesce(o.mics, '{}'), m.mdn_mode, m.mdn_signed, m.signed, m.encrypted,
       CASE WHEN o.body IS NULL THEN m.mdn_signed ELSE o.headers ? 'Disposition-Notification-Options' END,
       CASE WHEN o.body IS NULL THEN m.mdn_mode = 'async' ELSE o.headers ? 'Receipt-Delivery-Option' END,
       o.body IS NOT NULL
  FROM messages m
  LEFT JOIN outbox o ON o.message_id = m.id AND o.kind = 'message'
 WHERE m.direction = 'outbound'
   AND (m.partner, m.message_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, partners, ids)
	if err != nil {
		return nil, fmt.Errorf("find outbound messages: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AwaitedMessage, error) {
		var m AwaitedMessage
		err := r.Scan(&m.ID, &m.Partner, &m.MessageID, &m.Status, &m.MIC, &m.MICs, &m.MDNMode, &m.MDNSigned, &m.Signed,
			&m.Encrypted, &m.RequestedSignedReceipt, &m.RequestedAsyncMDN, &m.Built)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("find outbound messages: %w", err)
	}
	for _, m := range ms {
		out[MessageKey{m.Partner, m.MessageID}] = m
	}
	return out, nil
}

// SentBytes returns the header fields and body of outbound message id as
// built and sent (the outbox row), or hub.ErrMessageNotFound when they are not
// stored (never built, or purged) or not held whole: a body built as a
// stream (stored in pieces) is never read into memory; its MIC was stored
// in every algorithm when it was built.
func (s *Store) SentBytes(ctx context.Context, id int64) (http.Header, []byte, error) {
	var hdr, body []byte
	err := s.pool.QueryRow(ctx, `SELECT headers, body FROM outbox WHERE message_id = $1 AND kind = 'message' AND body IS NOT NULL AND NOT body_chunked`, id).Scan(&hdr, &body)
	if err != nil {
		return nil, nil, messageErr(fmt.Sprintf("sent bytes of message %d", id), err)
	}
	h := http.Header{}
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, nil, fmt.Errorf("sent bytes of message %d: headers: %w", id, err)
	}
	return h, body, nil
}

// MDNOutcome is the poller's decision on one inbox MDN.
type MDNOutcome struct {
	InboxID int64
	// Partner is the configured partner the MDN came from, "" if none.
	Partner string
	// Message, when set, is the message the MDN applies to; nil makes the
	// MDN an orphan with Reason.
	Message *MDNApply
	// Reason says why the MDN is an orphan, or notes how it was judged.
	Reason string
}

// MDNApply moves an outbound message to its final status.
type MDNApply struct {
	MessageID   int64 // messages.id
	Status      string
	Disposition string
	Error       string
	// MICVerified is recorded in messages.mic_verified: whether a
	// delivery's MIC was checked; nil for a failure.
	MICVerified *bool
	// MIC and Signed describe the MDN: its Received-content-MIC and
	// whether it was signed. The MDN itself (content type, header fields,
	// body) is copied from the inbox row into mdns, for non-repudiation,
	// by the database: the poller does not hold bodies while it applies.
	MIC    string
	Signed bool
}

// AppliedMDN is what ApplyMDNs did with one outcome.
type AppliedMDN struct {
	InboxID int64
	Partner string
	// State is InboxProcessed or InboxOrphan; "" when the row had been
	// decided already (by an earlier term) and nothing changed.
	State  string
	Status string // the message's new status when processed
	Reason string
	// Latency is from the message's last send to now (database clock),
	// when processed.
	Latency time.Duration
	// Message (messages.id) and MessageID (its AS2 Message-ID) name the
	// message the MDN decided, when processed.
	Message   int64
	MessageID string
}

// ApplyMDNs records the poller's outcomes in one fenced transaction: each
// pending inbox row is marked processed (its message moved to its final
// status, the MDN copied from the inbox row to mdns) or orphan, with f's
// token. An inbox row already decided is left alone (applying the same
// outcome again changes nothing), and a message already final is never
// changed: its MDN becomes an orphan, so of two MDNs for one message the
// first applied decides it. The outcomes are sent as one pipelined batch,
// one statement each. It returns hub.ErrStaleFence, applying nothing, when f
// is no longer the current term; an error wrapping ErrRowRejected when the
// database refused an outcome's data (nothing applied either).
func (s *Store) ApplyMDNs(ctx context.Context, f hub.Fence, outs []MDNOutcome) ([]AppliedMDN, error) {
	var applied []AppliedMDN
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		applied = make([]AppliedMDN, len(outs))
		b := &pgx.Batch{}
		for _, o := range outs {
			b.Queue(applyMDNSQL, applyArgs(f, o)...)
		}
		br := tx.SendBatch(ctx, b)
		for i, o := range outs {
			a := AppliedMDN{InboxID: o.InboxID, Partner: o.Partner, Reason: clean(o.Reason)}
			var state, reason, messageID *string
			var latency *float64
			var msg *int64
			if err := br.QueryRow().Scan(&state, &reason, &latency, &msg, &messageID); err != nil {
				br.Close()
				return fmt.Errorf("inbox MDN %d: %w", o.InboxID, rejected(err))
			}
			if state != nil {
				a.State, a.Reason = *state, *reason
				if a.State == InboxProcessed && o.Message != nil {
					a.Status = o.Message.Status
					a.Latency = time.Duration(*latency * float64(time.Second))
					a.Message, a.MessageID = *msg, *messageID
				}
			}
			applied[i] = a
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("apply MDNs: %w", err)
	}
	return applied, nil
}

// applyMDNSQL decides one inbox row in one statement: only if the row is
// still pending; the message ($2, NULL for an orphan) only if it is an
// outbound message not final yet, else the row becomes an orphan saying
// so. The MDN kept in mdns is the inbox row's, copied here. It returns the
// row's new state and reason (NULL when it was decided already) and, when
// processed, the seconds since the message's last send and the message's
// id and Message-ID.
const applyMDNSQL = `
WITH pending AS (
    SELECT id, content_type, headers, body FROM mdn_inbox WHERE id = $1 AND processed_at IS NULL FOR UPDATE
), msg AS (
    UPDATE messages m
       SET status = $3, disposition = $4, error = $5, mic_verified = $6, mdn_overdue = false,
           updated_at = now(), completed_at = now()
     WHERE m.id = $2 AND EXISTS (SELECT 1 FROM pending)
       AND m.direction = 'outbound' AND m.status NOT IN ('delivered', 'failed', 'sent')
 RETURNING m.id, m.message_id, extract(epoch FROM now() - coalesce(
           (SELECT o.finished_at FROM outbox o WHERE o.message_id = m.id AND o.kind = 'message'), m.created_at))::float8 AS latency
), stored AS (
    INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
    SELECT msg.id, p.content_type, p.headers, p.body, $4::text, $7::text, $8::boolean FROM msg, pending p
    ON CONFLICT (message_id) DO UPDATE
       SET content_type = EXCLUDED.content_type, headers = EXCLUDED.headers, body = EXCLUDED.body,
           disposition = EXCLUDED.disposition, mic = EXCLUDED.mic, signed = EXCLUDED.signed, created_at = now()
), settled AS (
    -- A retry (or resend) still queued is not sent again: the partner
    -- has the message, its MDN decided it. An attempt under way keeps
    -- its claim (claimed_by, attempts): its outcome is still recorded
    -- (FinishOutbox).
    UPDATE outbox o
       SET status = 'done', finished_at = now(), claimed_until = NULL, decided_by_mdn = true,
           last_error = 'decided by the partner''s async MDN'
     WHERE o.message_id = (SELECT id FROM msg) AND o.kind = 'message' AND o.status = 'pending'
), refused AS (
    -- A negative MDN refuses what the attempt that sent the message
    -- delivered: its trace says so.
    UPDATE message_attempts a SET outcome = 'negative', error = $5
     WHERE $3::text = 'failed'
       AND a.id = (SELECT max(id) FROM message_attempts WHERE message_id = (SELECT id FROM msg) AND outcome = 'done')
), decided AS (
    UPDATE mdn_inbox i
       SET processed_at = now(), fence = $9, partner = $10, message_ref = (SELECT id FROM msg),
           state = CASE WHEN EXISTS (SELECT 1 FROM msg) THEN 'processed' ELSE 'orphan' END,
           result = CASE WHEN EXISTS (SELECT 1 FROM msg) THEN $3 ELSE 'orphan' END,
           reason = CASE WHEN $2::bigint IS NOT NULL AND NOT EXISTS (SELECT 1 FROM msg)
                         THEN format('message %s is no longer awaiting an async MDN (%s)', $2::bigint,
                                     coalesce((SELECT status FROM messages WHERE id = $2), 'gone'))
                         ELSE $11 END
     WHERE i.id IN (SELECT id FROM pending)
 RETURNING i.state, i.reason
)
SELECT (SELECT state FROM decided), (SELECT reason FROM decided), (SELECT latency FROM msg),
       (SELECT id FROM msg), (SELECT message_id FROM msg)`

// applyArgs are applyMDNSQL's arguments for o. The MDN replaces one kept
// from an earlier send (a resend after a negative MDN): the MDN that
// decided the message is the one kept.
func applyArgs(f hub.Fence, o MDNOutcome) []any {
	var msgID *int64
	var status, disp, errText, mic string
	var verified *bool
	var signed bool
	if m := o.Message; m != nil {
		msgID, status, disp, errText, verified = &m.MessageID, m.Status, clean(m.Disposition), clean(m.Error), m.MICVerified
		mic, signed = clean(m.MIC), m.Signed
	}
	return []any{o.InboxID, msgID, status, disp, errText, verified, mic, signed, f.Token, clean(o.Partner), clean(o.Reason)}
}

// clean makes partner-supplied text storable in a text column: valid
// UTF-8, no NUL bytes.
func clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// DueMDN is an outbound message whose async MDN is overdue.
type DueMDN struct {
	ID        int64
	Partner   string
	MessageID string
	// Resends is how many times it was resent for an overdue MDN.
	Resends int
}

// OverdueMDNs returns up to limit messages awaiting an MDN past their
// mdn_due_at (database clock) and not yet flagged overdue, oldest due first.
func (s *Store) OverdueMDNs(ctx context.Context, limit int) ([]DueMDN, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, partner, message_id, mdn_resends FROM messages
 WHERE mdn_due_at IS NOT NULL AND NOT mdn_overdue AND mdn_due_at <= now()
   AND direction = 'outbound' AND status = 'awaiting-mdn'
 ORDER BY mdn_due_at, id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read overdue MDNs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueMDN, error) {
		var d DueMDN
		err := r.Scan(&d.ID, &d.Partner, &d.MessageID, &d.Resends)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read overdue MDNs: %w", err)
	}
	return out, nil
}

// What the poller does with an overdue message.
const (
	OverdueFlag   = "flag"    // mark it overdue; an MDN arriving later still applies
	OverdueResend = "resend"  // queue the same bytes again
	OverdueGiveUp = "give-up" // fail it: "no MDN"
)

// OverdueAction is the poller's decision on one overdue message.
type OverdueAction struct {
	Message DueMDN
	Action  string
}

// ApplyOverdue records the actions in one fenced transaction. An action
// applies only if the message is still awaiting its MDN past its due time
// with the resend count the poller saw; otherwise it is skipped. It returns
// the actions applied, or hub.ErrStaleFence (applying nothing) when f is no
// longer the current term.
func (s *Store) ApplyOverdue(ctx context.Context, f hub.Fence, acts []OverdueAction) ([]OverdueAction, error) {
	var done []OverdueAction
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		done = done[:0]
		for _, a := range acts {
			var ok bool
			var err error
			const still = ` AND direction = 'outbound' AND status = 'awaiting-mdn' AND NOT mdn_overdue
   AND mdn_due_at <= now() AND mdn_resends = $2`
			switch a.Action {
			case OverdueFlag:
				ok, err = execOne(ctx, tx, `UPDATE messages SET mdn_overdue = true, updated_at = now() WHERE id = $1`+still, a.Message.ID, a.Message.Resends)
			case OverdueGiveUp:
				ok, err = execOne(ctx, tx, `
UPDATE messages SET mdn_overdue = true, status = 'failed', error = 'no MDN', updated_at = now(), completed_at = now()
 WHERE id = $1`+still, a.Message.ID, a.Message.Resends)
			case OverdueResend:
				ok, err = execOne(ctx, tx, `SELECT id FROM messages WHERE id = $1`+still+` FOR UPDATE`, a.Message.ID, a.Message.Resends)
				if err == nil && ok {
					err = requeue(ctx, tx, a.Message.ID, true)
					if errors.Is(err, ErrNotResendable) {
						// Nothing stored to send again: give up now.
						ok, err = execOne(ctx, tx, `
UPDATE messages SET mdn_overdue = true, status = 'failed', error = 'no MDN (the sent message is no longer stored, so it could not be resent)',
       updated_at = now(), completed_at = now() WHERE id = $1`, a.Message.ID)
						a.Action = OverdueGiveUp
					}
				}
			default:
				return fmt.Errorf("invalid overdue action %q", a.Action)
			}
			if err != nil {
				return fmt.Errorf("message %d: %w", a.Message.ID, err)
			}
			if ok {
				done = append(done, a)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply overdue MDNs: %w", err)
	}
	return done, nil
}

// execOne runs a statement and reports whether it touched a row.
func execOne(ctx context.Context, tx pgx.Tx, sql string, args ...any) (bool, error) {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// requeue queues outbound message id for sending again with the same
// Message-ID and the bytes frozen in its outbox row (or, for a message
// built as a stream, built again from its payload with the inputs frozen
// there): the row goes back to pending with fresh attempts (the update
// wakes every replica's dispatchers), the message to queued with no due
// time. Its attempts go on from the last one (attempts_before). overdue
// counts the resend in mdn_resends. It returns
// ErrNotResendable when the outbox row is gone or still pending, or its
// message is to be built again and its payload is gone (purged). The
// caller checked the message's state.
func requeue(ctx context.Context, tx pgx.Tx, id int64, overdue bool) error {
	ok, err := execOne(ctx, tx, `
UPDATE outbox o SET status = 'pending', attempts_before = attempts_before + attempts, attempts = 0,
                  next_attempt_at = now(), claimed_by = '', claimed_until = NULL, finished_at = NULL, last_error = '',
                  decided_by_mdn = false
 WHERE o.message_id = $1 AND o.kind = 'message' AND o.status <> 'pending'
   AND (o.build_inputs IS NULL OR EXISTS (SELECT 1 FROM payloads p WHERE p.message_id = o.message_id))`, id)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotResendable
	}
	_, err = tx.Exec(ctx, `
UPDATE messages SET status = 'queued', error = '', disposition = '', mdn_overdue = false, mdn_due_at = NULL,
       completed_at = NULL, mic_verified = NULL, updated_at = now(),
       mdn_resends = mdn_resends + CASE WHEN $2::boolean THEN 1 ELSE 0 END
 WHERE id = $1`, id, overdue)
	return err
}

// ResendMessage queues outbound message id again, same Message-ID and same
// stored bytes, for every replica's dispatchers. Only a failed message or
// one whose async MDN is overdue may be resent: ErrNotResendable (with the
// reason) otherwise, also when its sent bytes are no longer stored;
// hub.ErrMessageNotFound for an unknown id. It returns the message as queued.
func (s *Store) ResendMessage(ctx context.Context, id int64) (hub.MessageInfo, error) {
	var m hub.MessageInfo
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var dir, status string
		var overdue bool
		err := tx.QueryRow(ctx, `SELECT direction, status, mdn_overdue FROM messages WHERE id = $1 FOR UPDATE`, id).Scan(&dir, &status, &overdue)
		if errors.Is(err, pgx.ErrNoRows) {
			return hub.ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		switch {
		case dir != "outbound":
			return fmt.Errorf("%w: it is an inbound message", ErrNotResendable)
		case status != "failed" && !overdue:
			return fmt.Errorf("%w: its status is %s; only failed messages and messages whose MDN is overdue are resent", ErrNotResendable, status)
		}
		if err := requeue(ctx, tx, id, false); err != nil {
			if errors.Is(err, ErrNotResendable) {
				return fmt.Errorf("%w: the message as sent is no longer stored (purged) or is queued already", ErrNotResendable)
			}
			return err
		}
		// The message as queued again, read before the commit: a
		// dispatcher woken by it may send it at once.
		m, err = scanMessage(tx.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = $1`, id))
		return err
	})
	if err != nil {
		return hub.MessageInfo{}, fmt.Errorf("resend message %d: %w", id, err)
	}
	return m, nil
}

// InboxMDNInfo is an inbox MDN as the API lists it.
type InboxMDNInfo struct {
	ID                int64
	ReceivedAt        time.Time
	AS2From           string
	AS2To             string
	ContentType       string
	OriginalMessageID string
	State             string
	Result            string
	Reason            string
	Partner           string
	MessageRef        *int64
	ProcessedAt       *time.Time
	Fence             *int64
	Size              int
}

// InboxQuery filters and pages InboxMDNs.
type InboxQuery struct {
	State  string // "" for all
	Before int64  // only ids below it (id descending)
	Limit  int
}

// InboxMDNs returns the inbox MDNs matching q, newest first.
func (s *Store) InboxMDNs(ctx context.Context, q InboxQuery) ([]InboxMDNInfo, error) {
	sql, args := inboxMDNsSQL(q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list inbox MDNs: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanInboxMDN)
	if err != nil {
		return nil, fmt.Errorf("list inbox MDNs: %w", err)
	}
	return out, nil
}

// inboxMDNsSQL is the statement of InboxMDNs and its arguments. The state
// is a condition only when it filters, so that every plan, generic ones
// too, reads mdn_inbox_state_id_idx for it.
func inboxMDNsSQL(q InboxQuery) (string, []any) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	before := q.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	if q.State == "" {
		return `SELECT ` + inboxColumns + ` FROM mdn_inbox WHERE id < $1 ORDER BY id DESC LIMIT $2`, []any{before, limit}
	}
	return `SELECT ` + inboxColumns + ` FROM mdn_inbox WHERE state = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, []any{q.State, before, limit}
}

// inboxColumns are the columns scanInboxMDN reads, never the body.
const inboxColumns = `id, received_at, as2_from, as2_to, content_type, original_message_id, state, result, reason, partner,
       message_ref, processed_at, fence, octet_length(body)`

func scanInboxMDN(r pgx.CollectableRow) (InboxMDNInfo, error) {
	var m InboxMDNInfo
	err := r.Scan(&m.ID, &m.ReceivedAt, &m.AS2From, &m.AS2To, &m.ContentType, &m.OriginalMessageID, &m.State,
		&m.Result, &m.Reason, &m.Partner, &m.MessageRef, &m.ProcessedAt, &m.Fence, &m.Size)
	return m, err
}

// MDNGauges are the poller's gauges as the database sees them.
type MDNGauges struct {
	Orphans int64
	// Overdue counts non-final outbound messages flagged overdue, by
	// partner.
	Overdue map[string]int64
}

// MDNGauges counts orphan inbox MDNs and overdue messages.
func (s *Store) MDNGauges(ctx context.Context) (MDNGauges, error) {
	g := MDNGauges{Overdue: map[string]int64{}}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM mdn_inbox WHERE state = 'orphan'`).Scan(&g.Orphans); err != nil {
		return g, fmt.Errorf("count orphan MDNs: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
SELECT partner, count(*) FROM messages
 WHERE mdn_overdue AND direction = 'outbound' AND status NOT IN ('delivered', 'failed', 'sent')
 GROUP BY partner`)
	if err != nil {
		return g, fmt.Errorf("count overdue MDNs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return g, fmt.Errorf("count overdue MDNs: %w", err)
		}
		g.Overdue[p] = n
	}
	if err := rows.Err(); err != nil {
		return g, fmt.Errorf("count overdue MDNs: %w", err)
	}
	return g, nil
}
