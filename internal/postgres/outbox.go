package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Outbox item kinds.
const (
	OutboxKindMessage = "message" // an outbound AS2 message
	OutboxKindMDN     = "mdn"     // an asynchronous MDN we owe a partner
	OutboxKindWebhook = "webhook" // an event posted to the webhook
)

// OutboxChannel is the LISTEN/NOTIFY channel an insert into the outbox
// signals (migration 00003).
const OutboxChannel = "edihub_outbox"

// ErrDuplicateMessageID reports an outbound message whose Message-ID is
// already used for the same partner.
var ErrDuplicateMessageID = errors.New("message ID already used for this partner")

// ErrIdempotencyKeyReused reports an Idempotency-Key already used for the
// same partner with another document. Nothing was written.
var ErrIdempotencyKeyReused = errors.New("idempotency key already used for another document")

// ErrClaimLost reports a write for an outbox claim that is no longer held:
// it expired and another dispatcher claimed the row, or the row was
// finished. The caller's result is dropped.
var ErrClaimLost = errors.New("outbox claim lost")

// NewOutbound is an outbound message to queue.
type NewOutbound struct {
	Partner     string
	AS2From     string
	AS2To       string
	MessageID   string // the AS2 Message-ID, brackets included
	Subject     string
	ContentType string
	Filename    string
	MDNMode     string // sync | async | none
	MDNSigned   bool
	MDNURL      string // async MDN URL requested, if any
	URL         string // where the message is posted
	MaxAttempts int
	// RetryWindow, when positive, keeps retrying a retryable failure past
	// MaxAttempts until this long after the enqueue (database clock); a
	// message fails only when both are used up.
	RetryWindow time.Duration
	// IdempotencyKey, when set, makes the enqueue idempotent per partner:
	// a second enqueue with the same key returns the first message.
	// IdempotencyHash fingerprints the document; a key reused with another
	// fingerprint returns ErrIdempotencyKeyReused.
	IdempotencyKey  string
	IdempotencyHash []byte
	Payload         []byte
	// PayloadOpen, when set instead of Payload, opens the payload (of
	// PayloadSize bytes) for reading from its start. It is stored in
	// pieces (payload_chunks) as it is read, in constant memory, in the
	// enqueue's transaction; a replayed IdempotencyKey reads nothing.
	PayloadOpen func() io.Reader
	PayloadSize int64
	// EDI, when set, is the payload's envelope, stored with the message
	// (Direction outbound).
	EDI *EDIRecord
}

// Enqueued describes a message EnqueueOutbound stored, or found.
type Enqueued struct {
	ID        int64 // messages.id
	OutboxID  int64 // 0 when Replayed
	MessageID string
	Status    string
	CreatedAt time.Time
	// Replayed reports that the idempotency key was already used for the
	// same document: the message is the one queued then, nothing new was
	// written.
	Replayed bool
	// Repeated are the message's interchanges whose control number was
	// sent to the partner before within NewOutbound.EDI's
	// DuplicateWindow, each with the message that sent it last.
	Repeated []Duplicate
}

// StatusQueued is the status of an outbound message waiting for its first
// attempt.
const StatusQueued = "queued"

// EnqueueOutbound stores an outbound message, its payload and its outbox
// row in one transaction; the insert notifies OutboxChannel. A Message-ID
// already used for the partner returns ErrDuplicateMessageID.
//
// With an IdempotencyKey the message insert is arbitrated by the unique
// index on (partner, idempotency_key): of concurrent enqueues with one key,
// one inserts and the others wait for it to commit, then find its message
// (Replayed) or, for another document, ErrIdempotencyKeyReused.
func (s *Store) EnqueueOutbound(ctx context.Context, m NewOutbound) (Enqueued, error) {
	var e Enqueued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return enqueueTx(ctx, tx, m, &e) })
	if err != nil {
		if errors.Is(err, ErrIdempotencyKeyReused) {
			return Enqueued{}, fmt.Errorf("enqueue for %s with idempotency key %q: %w", m.Partner, m.IdempotencyKey, err)
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return Enqueued{}, fmt.Errorf("enqueue %s: %w", m.MessageID, ErrDuplicateMessageID)
		}
		return Enqueued{}, fmt.Errorf("enqueue %s: %w", m.MessageID, err)
	}
	return e, nil
}

// OutboxItem is one claimed outbox row.
type OutboxItem struct {
	ID        int64
	Kind      string
	MessageID int64 // messages.id; 0 when none
	Partner   string
	URL       string
	Headers   http.Header // empty until built (kind message)
	Body      []byte      // nil until built (kind message); empty when BodyChunked
	// BodyChunked reports a body built as a stream, of BodySize bytes,
	// not held in the row: with BuildInputs, it is built again from the
	// payload with them for every attempt after the first and must have
	// the SHA-256 BodySHA256; without (a row frozen before migration
	// 00020), it is stored in pieces (outbox_body_chunks) that
	// WriteOutboxBody reads.
	BodyChunked bool
	BodySize    int64
	BuildInputs []byte // the dispatcher's record of the first build's inputs (a secret: it holds a content key)
	BodySHA256  []byte
	MIC         string
	MICAlg      string
	MICs        []string // the MIC in every supported algorithm (OutboundBuild.MICs)
	Attempts    int      // including the attempt this claim is for
	MaxAttempts int
	// AttemptsBefore counts the attempts of the message's earlier sends
	// (before its latest resend): the attempt this claim is for is the
	// message's attempt AttemptsBefore+Attempts.
	AttemptsBefore int
	ClaimedBy      string
	// ClaimedUntil ends the claim: after it, the row may be claimed again.
	ClaimedUntil time.Time
	// RetryWindowLeft is how much of the row's retry window was left at
	// the claim (database clock); zero when it has none or it is over.
	// A retryable failure is retried while Attempts < MaxAttempts or the
	// next attempt falls inside the window.
	RetryWindowLeft time.Duration
}

// Built reports whether the item's body has been frozen.
func (it *OutboxItem) Built() bool { return it.Body != nil || it.BodyChunked }

// ClaimOutbox claims up to limit due pending rows for by, until lease from
// now (database clock), in one short committed statement: the rows are
// selected FOR UPDATE SKIP LOCKED, so concurrent dispatchers never claim
// the same row, and each claim counts one attempt. A claim that is never
// finished comes back when it expires.
//
// A row is tried again while it has attempts left (attempts <
// max_attempts) or its retry window is open (retry_until > now()). A due
// row that has neither is not claimed: the same statement fails it and its
// message, with an error saying why: its last claim expired without an
// outcome (a crash, an OOM kill or a shutdown during the build or the
// send; otherwise an item that kills its dispatcher would be claimed
// forever), or its last retry was scheduled past the end of the window.
// Such a row's message is locked before the row (as every writer of both
// does) and skipped while another transaction holds it.
func (s *Store) ClaimOutbox(ctx context.Context, by string, lease time.Duration, limit int) ([]OutboxItem, error) {
	return s.ClaimOutboxKinds(ctx, by, lease, limit, nil)
}

// ClaimOutboxKinds is ClaimOutbox for rows of the given kinds only (nil:
// every kind). Rows of other kinds are left alone, exhausted ones too: a
// dispatcher that cannot send a kind (webhook deliveries without the
// webhook secret) neither claims them nor spends their attempts.
func (s *Store) ClaimOutboxKinds(ctx context.Context, by string, lease time.Duration, limit int, kinds []string) ([]OutboxItem, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
WITH exhausted_messages AS (
    SELECT m.id FROM messages m
     WHERE m.id IN (SELECT message_id FROM outbox
                     WHERE status = 'pending' AND next_attempt_at <= now() AND attempts >= max_attempts
                       AND (retry_until IS NULL OR retry_until <= now()) AND kind = 'message'
                       AND ($4::text[] IS NULL OR kind = ANY ($4::text[]))
                     ORDER BY next_attempt_at, id
                     LIMIT 100)
       FOR NO KEY UPDATE SKIP LOCKED
), exhausted AS (
    SELECT id FROM outbox
     WHERE status = 'pending' AND next_attempt_at <= now() AND attempts >= max_attempts
       AND (retry_until IS NULL OR retry_until <= now())
       AND ($4::text[] IS NULL OR kind = ANY ($4::text[]))
       AND (kind <> 'message' OR message_id IN (SELECT id FROM exhausted_messages))
     ORDER BY next_attempt_at, id
     LIMIT 100
     FOR UPDATE SKIP LOCKED
), gave_up AS (
    UPDATE outbox o
       SET status = 'failed', finished_at = now(), claimed_until = NULL,
           last_error = CASE
               WHEN o.claimed_by <> '' THEN
                   format('gave up after %s attempts; the last one did not finish (crash or shutdown)', o.attempts)
                   || CASE WHEN o.last_error <> '' THEN '; the one before failed: ' || o.last_error ELSE '' END
               ELSE format('gave up after %s attempts and the retry window: %s', o.attempts, o.last_error)
           END
      FROM exhausted
     WHERE o.id = exhausted.id
 RETURNING o.kind, o.message_id, o.attempts_before + o.attempts AS attempts, o.last_error
), failed_messages AS (
    UPDATE messages m
       SET status = 'failed', error = g.last_error, attempts = g.attempts, updated_at = now(), completed_at = now()
      FROM gave_up g
     WHERE g.kind = 'message' AND m.id = g.message_id AND m.status NOT IN ('delivered', 'failed', 'sent')
), due AS (
    SELECT id FROM outbox
     WHERE status = 'pending' AND next_attempt_at <= now()
       AND (attempts < max_attempts OR retry_until > now())
       AND ($4::text[] IS NULL OR kind = ANY ($4::text[]))
     ORDER BY next_attempt_at, id
     LIMIT $3
     FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
   SET claimed_by = $1,
       claimed_until = now() + $2 * interval '1 microsecond',
       next_attempt_at = now() + $2 * interval '1 microsecond',
       attempts = o.attempts + 1,
       last_attempt_at = now()
  FROM due
 WHERE o.id = due.id
RETURNING o.id, o.kind, coalesce(o.message_id, 0), o.partner, o.url, o.headers, o.body, o.mic, o.mic_alg, o.mics,
          o.body_chunked, coalesce(o.body_size, 0), o.build_inputs, o.body_sha256, o.attempts, o.max_attempts, o.attempts_before, o.claimed_by, o.claimed_until,
          coalesce(extract(epoch FROM greatest(o.retry_until - now(), interval '0')), 0)::float8`,
		by, lease.Microseconds(), limit, kinds)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxItem, error) {
		var it OutboxItem
		var hdr []byte
		var windowLeft float64
		if err := r.Scan(&it.ID, &it.Kind, &it.MessageID, &it.Partner, &it.URL, &hdr, &it.Body, &it.MIC, &it.MICAlg, &it.MICs,
			&it.BodyChunked, &it.BodySize, &it.BuildInputs, &it.BodySHA256, &it.Attempts, &it.MaxAttempts, &it.AttemptsBefore, &it.ClaimedBy, &it.ClaimedUntil, &windowLeft); err != nil {
			return it, err
		}
		it.RetryWindowLeft = time.Duration(windowLeft * float64(time.Second))
		it.Headers = http.Header{}
		if len(hdr) > 0 {
			if err := json.Unmarshal(hdr, &it.Headers); err != nil {
				return it, fmt.Errorf("outbox %d headers: %w", it.ID, err)
			}
		}
		return it, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	return items, nil
}

// OutboundSource is what building an outbound message needs.
type OutboundSource struct {
	MessageID   string // AS2 Message-ID
	AS2From     string
	AS2To       string
	Subject     string
	ContentType string
	Filename    string
	MDNMode     string
	MDNSigned   bool
	MDNURL      string
	// Payload is nil when the payload is stored in pieces (Chunked):
	// WritePayload streams it. PayloadSize is its size either way.
	Payload     []byte
	Chunked     bool
	PayloadSize int64
}

// OutboundSource returns the message and payload of messages.id id; a
// payload stored in pieces is not read (Chunked).
func (s *Store) OutboundSource(ctx context.Context, id int64) (OutboundSource, error) {
	var o OutboundSource
	err := s.pool.QueryRow(ctx, `
SELECT m.message_id, m.as2_from, m.as2_to, m.subject, m.content_type, m.filename, m.mdn_mode, m.mdn_signed, m.mdn_url,
       CASE WHEN p.chunked THEN NULL ELSE p.data END, p.chunked,
       CASE WHEN p.chunked THEN m.payload_size ELSE octet_length(p.data) END
  FROM messages m JOIN payloads p ON p.message_id = m.id
 WHERE m.id = $1`, id).Scan(&o.MessageID, &o.AS2From, &o.AS2To, &o.Subject, &o.ContentType, &o.Filename,
		&o.MDNMode, &o.MDNSigned, &o.MDNURL, &o.Payload, &o.Chunked, &o.PayloadSize)
	return o, messageErr(fmt.Sprintf("outbound message %d", id), err)
}

// OutboundBuild is a built AS2 message, frozen for every attempt.
type OutboundBuild struct {
	Headers  http.Header
	Body     []byte
	BodySize int64
	// Inputs, when set instead of Body, stores a body built as a stream
	// by its inputs (OutboxItem.BuildInputs) with its size BodySize and
	// SHA-256: no byte of it is stored.
	Inputs     []byte
	BodySHA256 []byte
	MIC        string // Received-content-MIC form, "base64, sha-256"
	MICAlg     string
	// MICs is the MIC in every supported algorithm, in the same form: a
	// partner may answer in another one than asked for.
	MICs       []string
	Signed     bool
	Encrypted  bool
	Compressed bool
}

// SaveOutboundBuild freezes the built message in the claimed outbox row and
// records its MIC and security on the message, in one transaction. It
// returns ErrClaimLost when the claim is no longer held.
func (s *Store) SaveOutboundBuild(ctx context.Context, it OutboxItem, b OutboundBuild) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return saveBuild(ctx, tx, it, b, b.Inputs != nil)
	})
	if err != nil {
		return fmt.Errorf("save build of outbox %d: %w", it.ID, err)
	}
	return nil
}

// saveBuild records the build b of the claimed item it in tx: the outbox
// row's headers, MIC and body (empty with its size when chunked: the
// build's inputs instead) and the message's MIC and security.
func saveBuild(ctx context.Context, tx pgx.Tx, it OutboxItem, b OutboundBuild, chunked bool) error {
	hdr, err := json.Marshal(b.Headers)
	if err != nil {
		return err
	}
	if err := lockMessage(ctx, tx, it); err != nil {
		return err
	}
	mics := b.MICs
	if mics == nil {
		mics = []string{} // the column is NOT NULL
	}
	body, size := b.Body, int64(len(b.Body))
	if chunked {
		body, size = []byte{}, b.BodySize
	}
	tag, err := tx.Exec(ctx, `
UPDATE outbox SET headers = $4, body = $5, mic = $6, mic_alg = $7, mics = $8, built_at = now(),
                  body_chunked = $9, body_size = $10, build_inputs = $11, body_sha256 = $12
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending' AND body IS NULL`,
		it.ID, it.ClaimedBy, it.Attempts, hdr, body, b.MIC, b.MICAlg, mics, chunked, size, b.Inputs, b.BodySHA256)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrClaimLost
	}
	if it.MessageID == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, `
UPDATE messages SET mic = $2, mic_alg = $3, signed = $4, encrypted = $5, compressed = $6, status = 'sending', updated_at = now()
 WHERE id = $1 AND status = 'queued'`, it.MessageID, b.MIC, b.MICAlg, b.Signed, b.Encrypted, b.Compressed)
	return err
}

// Outbox row states.
const (
	OutboxPending = "pending"
	OutboxDone    = "done"
	OutboxFailed  = "failed"
)

// OutboxResult is the end of one attempt.
type OutboxResult struct {
	// State is OutboxDone, OutboxFailed or OutboxPending (retry after
	// RetryIn, database clock).
	State   string
	RetryIn time.Duration
	// HTTPStatus is the partner's status code, 0 when none came back.
	HTTPStatus int
	// Error is the reason of a failed attempt, for operators.
	Error string
	// Message, when set, updates the outbound message.
	Message *MessageUpdate
	// MDN, when set, is the MDN the partner returned. It is stored for
	// the message, replacing one stored earlier when this result decides
	// the message (Message moves it from a status not final): a resend's
	// receipt replaces the earlier send's.
	MDN *NewMDN
}

// MessageUpdate changes an outbound message's status.
type MessageUpdate struct {
	Status      string
	Disposition string
	Error       string
	// Final marks delivered/failed/sent: completed_at is set and a final
	// status is never overwritten.
	Final bool
	// MDNDueIn sets mdn_due_at from now (database clock) when positive.
	MDNDueIn time.Duration
	// MICVerified, when set, records whether a delivery's MIC was checked
	// (messages.mic_verified).
	MICVerified *bool
}

// NewMDN is an MDN to keep for non-repudiation.
type NewMDN struct {
	ContentType string
	Headers     http.Header
	Body        []byte
	Disposition string
	MIC         string
	Signed      bool
}

// lockMessage locks the outbound message of the claimed item it (none
// for other kinds) in tx. Every transaction that writes both a message
// and its outbox row locks the message first: the MDN poller's apply,
// a resend and a cancel do so by their statements' order, the
// dispatcher's writes by this lock. Had the dispatcher locked the outbox
// row first, an async MDN applied while it recorded an attempt would
// wait for the outbox row the dispatcher held while the dispatcher waited
// for the message the MDN held: a deadlock.
func lockMessage(ctx context.Context, tx pgx.Tx, it OutboxItem) error {
	if it.MessageID == 0 || it.Kind != OutboxKindMessage {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT FROM messages WHERE id = $1 FOR NO KEY UPDATE`, it.MessageID); err != nil {
		return fmt.Errorf("lock message %d: %w", it.MessageID, err)
	}
	return nil
}

// FinishOutbox records the end of the claimed attempt it: the outbox row's
// state, the message's status, the attempt (message_attempts, for the
// trace) and the MDN, in one short transaction. A message already in a
// final status keeps it (the status moves to final exactly once).
//
// An async MDN may decide the message while the attempt is under way (the
// partner answered the post and sent its MDN before the attempt's outcome
// was written): its apply finished the outbox row already. The attempt is
// recorded all the same, with the outcome it had (a negative MDN makes a
// taken message's outcome negative; a failure that would have been
// retried is failed, as nothing retries it), and the row is left as the
// MDN finished it. It returns ErrClaimLost when the claim is no longer
// held otherwise: it expired and the row was claimed again or finished
// meanwhile; the attempt is not recorded then.
func (s *Store) FinishOutbox(ctx context.Context, it OutboxItem, r OutboxResult) error {
	var status *int
	if r.HTTPStatus != 0 {
		status = &r.HTTPStatus
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockMessage(ctx, tx, it); err != nil {
			return err
		}
		var tag pgconn.CommandTag
		var err error
		switch r.State {
		case OutboxPending:
			tag, err = tx.Exec(ctx, `
UPDATE outbox SET next_attempt_at = now() + $4 * interval '1 microsecond', claimed_by = '', claimed_until = NULL,
                  last_error = $5, last_status = $6
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending'`,
				it.ID, it.ClaimedBy, it.Attempts, r.RetryIn.Microseconds(), r.Error, status)
		case OutboxDone, OutboxFailed:
			tag, err = tx.Exec(ctx, `
UPDATE outbox SET status = $4, finished_at = now(), claimed_until = NULL, last_error = $5, last_status = $6
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending'`,
				it.ID, it.ClaimedBy, it.Attempts, r.State, r.Error, status)
		default:
			return fmt.Errorf("invalid outbox state %q", r.State)
		}
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if it.MessageID == 0 || it.Kind != OutboxKindMessage {
				return nil
			}
			return finishMessage(ctx, tx, it, r, status)
		}
		if it.MessageID == 0 || it.Kind != OutboxKindMessage {
			return ErrClaimLost
		}
		return finishDecided(ctx, tx, it, r, status)
	})
	if err != nil {
		return fmt.Errorf("finish outbox %d: %w", it.ID, err)
	}
	return nil
}

// attemptNumber is the message's number of the attempt it is for.
func attemptNumber(it OutboxItem) int { return it.AttemptsBefore + it.Attempts }

// finishMessage records a finished send attempt of an outbound message in
// FinishOutbox's transaction: the attempt for its trace, the message's
// new status, and the MDN the attempt got.
func finishMessage(ctx context.Context, tx pgx.Tx, it OutboxItem, r OutboxResult, status *int) error {
	outcome := attemptOutcome(r.State)
	if r.State == OutboxFailed && r.MDN != nil && r.Message != nil && r.Message.Status == "failed" {
		// The partner took the message and its MDN refused it.
		outcome = AttemptNegative
	}
	n := attemptNumber(it)
	if err := insertAttempt(ctx, tx, it, n, status, outcome, r.Error); err != nil {
		return err
	}
	// decided: this attempt moved the message (not final before). Its
	// MDN then replaces one kept from an earlier send (a resend after
	// a negative MDN): the receipt kept is the one that decided the
	// message, as for async MDNs.
	decided := false
	moved := false
	if u := r.Message; u != nil {
		tag, err := tx.Exec(ctx, `
UPDATE messages
   SET status = $2, disposition = $3, error = $4, attempts = $5, updated_at = now(),
       completed_at = CASE WHEN $6::boolean THEN now() ELSE completed_at END,
       mdn_due_at = CASE WHEN $7::bigint > 0 THEN now() + $7::bigint * interval '1 microsecond' ELSE mdn_due_at END,
       mic_verified = coalesce($8::boolean, mic_verified)
 WHERE id = $1 AND status NOT IN ('delivered', 'failed', 'sent')`,
			it.MessageID, u.Status, u.Disposition, u.Error, n, u.Final, u.MDNDueIn.Microseconds(), u.MICVerified)
		if err != nil {
			return err
		}
		moved = tag.RowsAffected() == 1
		decided = u.Final && moved
	}
	if !moved {
		if err := setAttempts(ctx, tx, it.MessageID, n); err != nil {
			return err
		}
	}
	if r.MDN != nil {
		hdr, err := json.Marshal(r.MDN.Headers)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (message_id) DO UPDATE
   SET content_type = EXCLUDED.content_type, headers = EXCLUDED.headers, body = EXCLUDED.body,
       disposition = EXCLUDED.disposition, mic = EXCLUDED.mic, signed = EXCLUDED.signed, created_at = now()
 WHERE $8::boolean`,
			it.MessageID, r.MDN.ContentType, hdr, r.MDN.Body, r.MDN.Disposition, r.MDN.MIC, r.MDN.Signed, decided); err != nil {
			return err
		}
	}
	return nil
}

// finishDecided records the attempt of the claimed item it whose outbox
// row an async MDN finished while the attempt was under way (the apply
// keeps the claim's replica and attempt count on the row), in
// FinishOutbox's transaction, with the message locked. It returns
// ErrClaimLost when the row was not finished so (or the attempt is
// recorded already).
func finishDecided(ctx context.Context, tx pgx.Tx, it OutboxItem, r OutboxResult, status *int) error {
	var msgStatus string
	err := tx.QueryRow(ctx, `
SELECT m.status FROM outbox o JOIN messages m ON m.id = o.message_id
 WHERE o.id = $1 AND o.claimed_by = $2 AND o.attempts = $3 AND o.status = 'done' AND o.decided_by_mdn
   AND NOT EXISTS (SELECT 1 FROM message_attempts a WHERE a.message_id = o.message_id AND a.attempt = $4 AND a.replica = $2)`,
		it.ID, it.ClaimedBy, it.Attempts, attemptNumber(it)).Scan(&msgStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrClaimLost
	}
	if err != nil {
		return err
	}
	outcome, text := AttemptDone, r.Error
	switch {
	case r.State != OutboxDone:
		outcome = AttemptFailed
		if r.State == OutboxPending {
			text += "; not retried: the partner's async MDN decided the message meanwhile"
		}
	case msgStatus == "failed":
		outcome = AttemptNegative
	}
	n := attemptNumber(it)
	if err := insertAttempt(ctx, tx, it, n, status, outcome, text); err != nil {
		return err
	}
	return setAttempts(ctx, tx, it.MessageID, n)
}

// insertAttempt records attempt n of the claimed item it's message.
func insertAttempt(ctx context.Context, tx pgx.Tx, it OutboxItem, n int, status *int, outcome, text string) error {
	_, err := tx.Exec(ctx, `
INSERT INTO message_attempts (message_id, attempt, replica, http_status, outcome, error) VALUES ($1, $2, $3, $4, $5, $6)`,
		it.MessageID, n, it.ClaimedBy, status, outcome, text)
	return err
}

// setAttempts records n as message id's number of attempts.
func setAttempts(ctx context.Context, tx pgx.Tx, id int64, n int) error {
	_, err := tx.Exec(ctx, `UPDATE messages SET attempts = $2, updated_at = now() WHERE id = $1`, id, n)
	return err
}

// OutboxStats counts pending rows that are due (next attempt in the past,
// not claimed) and claimed (in flight on some replica).
func (s *Store) OutboxStats(ctx context.Context) (due, claimed int64, err error) {
	err = s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE next_attempt_at <= now()),
       count(*) FILTER (WHERE claimed_until > now())
  FROM outbox WHERE status = 'pending'`).Scan(&due, &claimed)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox stats: %w", err)
	}
	return due, claimed, nil
}

// ListenOutbox calls wake after each notification on OutboxChannel until
// ctx ends (nil) or the connection fails (an error; the caller may call
// again). It holds one pool connection while it runs.
func (s *Store) ListenOutbox(ctx context.Context, wake func()) error {
	return s.listen(ctx, OutboxChannel, wake)
}

// listen calls wake once LISTEN channel took effect and after each
// notification on it, until ctx ends (nil) or the connection fails.
func (s *Store) listen(ctx context.Context, channel string, wake func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen %s: %w", channel, err)
	}
	defer func() {
		// The connection may be mid-wait after cancellation; do not hand it
		// back to the pool in an unknown state.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen %s: %w", channel, err)
	}
	wake() // anything queued before LISTEN took effect
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listen %s: %w", channel, err)
		}
		wake()
	}
}

// enqueueTx is EnqueueOutbound's work in tx; with m.EDI it stores the
// message's interchanges too.
func enqueueTx(ctx context.Context, tx pgx.Tx, m NewOutbound, e *Enqueued) error {
	if m.MaxAttempts <= 0 {
		m.MaxAttempts = 1
	}
	var key *string
	if m.IdempotencyKey != "" {
		key = &m.IdempotencyKey
	}
	err := tx.QueryRow(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, subject, content_type,
                      filename, payload_size, mdn_mode, mdn_signed, mdn_url, idempotency_key, idempotency_hash)
VALUES ('outbound', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (partner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, message_id, status, created_at`,
		m.Partner, m.AS2From, m.AS2To, m.MessageID, StatusQueued, m.Subject, m.ContentType,
		m.Filename, m.payloadSize(), m.MDNMode, m.MDNSigned, m.MDNURL, key, m.IdempotencyHash).
		Scan(&e.ID, &e.MessageID, &e.Status, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) && key != nil {
		// The key's message committed before this statement ended: a
		// new statement sees it (READ COMMITTED). FOR SHARE makes this
		// transaction a writer, so that its commit waits for the
		// synchronous standby like any other: the message may have been
		// committed on the primary alone (its client gave up while the
		// commit waited for the standby, and the wait was cancelled), and
		// the WAL reaches the standby in order, so once this commit is
		// there, that message is too. Answering the replay before would
		// accept a document a failover can still lose.
		var hash []byte
		err = tx.QueryRow(ctx, `
SELECT id, message_id, status, created_at, idempotency_hash FROM messages
 WHERE partner = $1 AND idempotency_key = $2 FOR SHARE`, m.Partner, m.IdempotencyKey).
			Scan(&e.ID, &e.MessageID, &e.Status, &e.CreatedAt, &hash)
		if err != nil {
			return err
		}
		if !bytes.Equal(hash, m.IdempotencyHash) {
			return fmt.Errorf("%w (message %d)", ErrIdempotencyKeyReused, e.ID)
		}
		e.Replayed = true
		return nil
	}
	if err != nil {
		return err
	}
	if m.PayloadOpen != nil {
		if err := copyPayload(ctx, tx, e.ID, m.PayloadOpen(), m.PayloadSize); err != nil {
			return err
		}
	} else if _, err := tx.Exec(ctx, `INSERT INTO payloads (message_id, data) VALUES ($1, $2)`, e.ID, m.Payload); err != nil {
		return err
	}
	err = tx.QueryRow(ctx, `
INSERT INTO outbox (kind, message_id, partner, url, max_attempts, retry_until)
VALUES ('message', $1, $2, $3, $4, CASE WHEN $5::bigint > 0 THEN now() + $5::bigint * interval '1 microsecond' END)
RETURNING id`, e.ID, m.Partner, m.URL, m.MaxAttempts, m.RetryWindow.Microseconds()).Scan(&e.OutboxID)
	if err != nil || m.EDI == nil {
		return err
	}
	e.Repeated, err = insertInterchanges(ctx, tx, e.ID, *m.EDI)
	return err
}
