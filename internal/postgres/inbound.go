package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrDuplicateInbound reports an inbound message whose Message-ID was
// already received from the same partner (RFC 4130 §5.5). Nothing was
// written. Match it with errors.Is.
var ErrDuplicateInbound = errors.New("message ID already received from this partner")

// ErrInboundNotFound reports an inbound message (or its MDN) that is not stored.
var ErrInboundNotFound = errors.New("inbound message not found")

// Inbound message statuses.
const (
	InboundProcessed = "processed"
	InboundError     = "error"
)

// InboundMessage is a received AS2 message, the MDN answered for it and,
// for an asynchronous MDN, the outbox row that delivers it.
type InboundMessage struct {
	Partner, AS2From, AS2To string
	// MessageID is the Message-ID exactly as received.
	MessageID string
	// Status is InboundProcessed or InboundError.
	Status string
	// Disposition is the MDN disposition answered.
	Disposition string
	// Error is the internal reason of a failure, for operators; never
	// sent to the partner.
	Error                         string
	MIC, MICAlg                   string
	Signed, Encrypted, Compressed bool
	ContentType, Filename         string
	PayloadSize                   int64
	// Payload is stored when not nil (processed messages only).
	Payload []byte
	// PayloadOpen, when set instead of Payload, opens the payload (of
	// PayloadSize bytes) for reading from its start; it may be called
	// more than once. The payload is stored in pieces (payload_chunks)
	// as it is read, in constant memory, in the message's transaction.
	PayloadOpen func() io.Reader
	// Staged is the payload already being stored as it was received
	// (StageInboundPayload): SaveInbound finishes its transaction. With
	// PayloadOpen set too, it falls back to PayloadOpen when it cannot
	// (a failed stage, or one used by an earlier attempt); without, the
	// stage is the payload's only copy and such a message is not stored
	// (ErrStageFailed). A message stored without its payload (refused)
	// has neither.
	Staged *StagedPayload
	// StagedZlib says Staged holds the payload in the compressed form it
	// arrived in (migration 00022): a zlib stream that inflates to
	// ZlibSkip bytes (the payload entity's header) and then the payload,
	// PayloadSize bytes. It applies to Staged only: a payload stored from
	// PayloadOpen is stored as it is.
	StagedZlib bool
	ZlibSkip   int64
	// MDNMode is "sync", "async" or "none"; MDNURL the async return URL.
	MDNMode   string
	MDNSigned bool
	MDNURL    string
	// MDN is the MDN answered, stored for resends and non-repudiation; nil
	// when none was requested.
	MDN *StoredMDN
	// Outbox queues MDN for delivery to MDNURL (async MDNs), retried as
	// MDNRetry says.
	Outbox   bool
	MDNRetry Retry
	// EDI, when set, is the payload's envelope and what it asks of us,
	// written in the receipt's transaction; SaveInbound fills in what it
	// wrote.
	EDI *InboundEDI
}

// Retry bounds the retries of one outbox row: a retryable failure is
// retried while fewer than MaxAttempts attempts were made (0 means
// DefaultMaxAttempts) or until Window after the row was queued (database
// clock; 0 means MaxAttempts alone).
type Retry struct {
	MaxAttempts int
	Window      time.Duration
}

// DefaultMaxAttempts is the attempts of a Retry that sets none.
const DefaultMaxAttempts = 8

// args are r's max_attempts and window (microseconds) as bind values.
func (r Retry) args() (int, int64) {
	if r.MaxAttempts <= 0 {
		return DefaultMaxAttempts, r.Window.Microseconds()
	}
	return r.MaxAttempts, r.Window.Microseconds()
}

// StoredMDN is an MDN kept in the mdns table: the HTTP header fields and
// the body exactly as sent.
type StoredMDN struct {
	Header      http.Header
	Body        []byte
	Disposition string
	MIC         string
	Signed      bool
}

// InboundRecord is what a resend of a Message-ID finds.
type InboundRecord struct {
	ID          int64
	Status      string
	Disposition string
	MIC         string
	MDNMode     string
	// MDNURL is where the first async MDN went, or "".
	MDNURL string
	// MDN is nil when no MDN was answered the first time.
	MDN *StoredMDN
}

// largePayload is the size from which SaveInbound streams the payload to
// the server in pieces (a large object turned into bytea server-side)
// instead of one bind parameter, which pgx would copy whole into its
// write buffer (and grow it by doubling).
const largePayload = 8 << 20

// loChunk is the piece size of a streamed payload.
const loChunk = 1 << 20

// SaveInbound stores m: the message row, the payload, the MDN, the
// outbox row and m.EDI, atomically. It returns the message row's id, or
// ErrDuplicateInbound when the partner's Message-ID is already stored (a
// concurrent identical insert waits for the other transaction and then
// reports the duplicate, or succeeds if that one rolled back). Each
// duplicate is recorded in the duplicates table for the end-of-day report.
//
// Up to largePayload the whole write is one statement (one round trip),
// and a short transaction when m.EDI is set; above it, one transaction
// that streams the payload.
func (s *Store) SaveInbound(ctx context.Context, m *InboundMessage) (int64, error) {
	var hdr []byte
	if m.MDN != nil {
		var err error
		if hdr, err = headerJSON(m.MDN.Header); err != nil {
			return 0, fmt.Errorf("save inbound message: encode MDN header: %w", err)
		}
	}
	id, err := s.saveInbound(ctx, m, hdr)
	if errors.Is(err, ErrDuplicateInbound) {
		// Only a message we processed is a duplicate. A stored failure
		// (say authentication-failed before the operator loaded the
		// partner's new certificate) must not refuse the partner's resend
		// forever: the resend replaces it. Should the process die between
		// the delete and the insert, the partner's next resend is simply
		// new; it had no successful MDN either way.
		replaced, derr := s.deleteFailedInbound(ctx, m)
		if derr != nil {
			return 0, fmt.Errorf("save inbound message: replace a failed receipt: %w", derr)
		}
		if replaced {
			id, err = s.saveInbound(ctx, m, hdr)
		}
	}
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, ErrDuplicateInbound):
		// Counted for the end-of-day report, on the day it came. A
		// failure to count must not change the partner's answer.
		if cerr := s.countDuplicate(ctx, m); cerr != nil {
			return 0, fmt.Errorf("%w (not counted: %v)", ErrDuplicateInbound, cerr)
		}
		return 0, ErrDuplicateInbound
	}
	return 0, fmt.Errorf("save inbound message: %w", err)
}

func (s *Store) saveInbound(ctx context.Context, m *InboundMessage, hdr []byte) (int64, error) {
	var (
		id  int64
		err error
	)
	switch {
	case m.Staged != nil && m.Staged.take():
		id, err = s.saveInboundStaged(ctx, m, hdr)
		if errors.Is(err, ErrStageFailed) && m.PayloadOpen != nil && ctx.Err() == nil {
			// The stage failed (it was rolled back): store the payload
			// as if there had been none.
			id, err = s.saveInboundChunked(ctx, m, hdr)
		}
	case m.Staged != nil && m.PayloadOpen == nil:
		err = errStageUsed
	case m.PayloadOpen != nil:
		id, err = s.saveInboundChunked(ctx, m, hdr)
	case len(m.Payload) <= largePayload:
		id, err = s.saveInboundOneStatement(ctx, m, hdr)
	default:
		id, err = s.saveInboundStreamed(ctx, m, hdr)
	}
	if isUniqueViolation(err) {
		err = ErrDuplicateInbound
	}
	return id, err
}

// countDuplicate records one duplicate answered for m's stored receipt.
func (s *Store) countDuplicate(ctx context.Context, m *InboundMessage) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO duplicates (message_id, partner)
SELECT id, partner FROM messages WHERE partner = $1 AND direction = 'inbound' AND message_id = $2`, m.Partner, m.MessageID)
	return err
}

// deleteFailedInbound deletes the stored receipt of m's Message-ID when it
// failed (its MDN and any queued async MDN go with it). It reports whether
// there was one.
func (s *Store) deleteFailedInbound(ctx context.Context, m *InboundMessage) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM messages WHERE partner = $1 AND direction = 'inbound' AND message_id = $2 AND status = 'error'`, m.Partner, m.MessageID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// insertMessageCTE inserts an inbound message as m (nothing on a
// duplicate Message-ID) and, when it is processed, its received event as
// e: the event is written by the statement that stores the message, not
// by the trigger of migration 00005 (a PL/pgSQL function called for each
// row, which cost PostgreSQL far more than the insert it makes:
// docs/performance.md). Its detail is the trigger's, expression for
// expression. A statement that includes it begins with
// receivedEventMarker. $1..$18 are messageArgs.
const insertMessageCTE = `m AS (
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, filename,
                      payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, mdn_url,
                      disposition, error, attempts, completed_at)
VALUES ('inbound', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 1, now())
ON CONFLICT (partner, direction, message_id) DO NOTHING
RETURNING id),
e AS (INSERT INTO events (type, message, partner, direction, detail)
      SELECT 'received', id, $1, 'inbound', jsonb_strip_nulls(jsonb_build_object(
                 'message_id', $4::text,
                 'status', $5::text,
                 'disposition', nullif($17::text, ''),
                 'error', nullif(left($18::text, 300), ''),
                 'filename', nullif($7::text, '')))
        FROM m WHERE $5::text = 'processed')`

// receivedEventMarker begins every statement that inserts an inbound
// message together with its received event (insertMessageCTE). The
// insert trigger of migration 00018 skips the statements whose text
// (current_query()) holds it and writes the event for any other insert
// of a processed inbound message: an edihub of a release before 00018
// still running during a rolling update, or SQL written by hand. Change
// it only with a migration that changes the trigger. At the beginning,
// not the end: the trigger's WHEN looks for it (strpos) once for each
// row inserted, and a search that finds it at once instead of after
// the statement's few kB cost the group commit's statement a tenth of
// PostgreSQL's CPU per receipt (docs/performance.md).
const receivedEventMarker = `/* edihub: this statement writes the received event */
`

// insertMessage inserts an inbound message and its received event and
// returns the message's id: no row on a duplicate Message-ID.
const insertMessage = receivedEventMarker + `WITH ` + insertMessageCTE + `
SELECT id FROM m`

func messageArgs(m *InboundMessage) []any {
	return []any{m.Partner, m.AS2From, m.AS2To, m.MessageID, m.Status, m.ContentType, m.Filename,
		m.PayloadSize, m.Signed, m.Encrypted, m.Compressed, m.MIC, m.MICAlg, m.MDNMode, m.MDNSigned, m.MDNURL,
		m.Disposition, m.Error}
}

// saveInboundOneStatement writes everything in one statement, which
// PostgreSQL runs atomically, through the group commit of receipts
// (receipts.go); with m.EDI, that statement and the EDI writes in one
// transaction of their own.
func (s *Store) saveInboundOneStatement(ctx context.Context, m *InboundMessage, hdr []byte) (int64, error) {
	if m.EDI == nil {
		return s.saveReceipt(ctx, m, hdr)
	}
	sql, args := oneStatement(m, hdr)
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, sql, args...).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDuplicateInbound
		}
		if err != nil {
			return err
		}
		return saveEDI(ctx, tx, id, m.EDI)
	})
	return id, err
}

// oneStatement is the statement that writes m (no row back for a
// duplicate, else its id) and its arguments.
func oneStatement(m *InboundMessage, hdr []byte) (string, []any) {
	args := messageArgs(m)
	var shape saveShape
	if m.Payload != nil {
		shape |= shapePayload
		args = append(args, m.Payload)
	}
	if m.MDN != nil {
		shape |= shapeMDN
		args = append(args, m.MDN.Header.Get("Content-Type"), string(hdr), m.MDN.Body, m.MDN.Disposition, m.MDN.MIC, m.MDN.Signed)
		if m.Outbox {
			shape |= shapeOutbox
			attempts, window := m.MDNRetry.args()
			args = append(args, attempts, window)
		}
	}
	return saveInboundSQL[shape], args
}

// saveShape says what a one-statement save writes besides the message and
// its event.
type saveShape uint8

const (
	shapePayload saveShape = 1 << iota // the payload ($19)
	shapeMDN                           // the MDN (the next six parameters)
	shapeOutbox                        // the async MDN's outbox row (two more)
)

// saveInboundSQL is the one statement of each shape: only the tables it
// writes are in it (each data-modifying WITH, even one that writes no
// row, costs the server the opening of its table and indexes).
var saveInboundSQL = func() (sqls [shapeOutbox << 1]string) {
	for shape := range saveShape(len(sqls)) {
		sqls[shape] = saveInboundStatement(shape)
	}
	return sqls
}()

// saveInboundStatement writes an inbound message, its event, its payload,
// its MDN and the outbox row of an async MDN in one statement, as shape
// says; the parameters after messageArgs come in that order.
func saveInboundStatement(shape saveShape) string {
	var b strings.Builder
	b.WriteString(receivedEventMarker + "WITH " + insertMessageCTE)
	n := 18
	next := func() string { n++; return "$" + strconv.Itoa(n) }
	if shape&shapePayload != 0 {
		fmt.Fprintf(&b, `,
p AS (INSERT INTO payloads (message_id, data) SELECT id, %s::bytea FROM m)`, next())
	}
	if shape&shapeMDN != 0 {
		ct, hdr, body, disp, mic, signed := next(), next(), next(), next(), next(), next()
		fmt.Fprintf(&b, `,
d AS (INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
      SELECT id, %s::text, %s::jsonb, %s::bytea, %s::text, %s::text, %s::boolean FROM m)`, ct, hdr, body, disp, mic, signed)
		if shape&shapeOutbox != 0 {
			attempts, window := next(), next()
			fmt.Fprintf(&b, `,
o AS (INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
      SELECT 'mdn', id, $1, $16, %[3]s::jsonb, %[4]s::bytea, 'pending', now(), %[1]s::integer,
             CASE WHEN %[2]s::bigint > 0 THEN now() + %[2]s::bigint * interval '1 microsecond' END FROM m)`, attempts, window, hdr, body)
		}
	}
	b.WriteString(`
SELECT id FROM m`)
	return b.String()
}

// saveInboundStreamed writes a large payload in pieces into a large object
// and copies it into payloads server-side, in one transaction with the rest.
func (s *Store) saveInboundStreamed(ctx context.Context, m *InboundMessage, hdr []byte) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, insertMessage, messageArgs(m)...).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDuplicateInbound
		}
		if err != nil {
			return fmt.Errorf("insert message: %w", err)
		}
		los := tx.LargeObjects()
		oid, err := los.Create(ctx, 0)
		if err != nil {
			return fmt.Errorf("create large object: %w", err)
		}
		lo, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
		if err != nil {
			return fmt.Errorf("open large object: %w", err)
		}
		for p := m.Payload; len(p) > 0; {
			n := min(len(p), loChunk)
			if _, err := lo.Write(p[:n]); err != nil {
				return fmt.Errorf("write payload: %w", err)
			}
			p = p[n:]
		}
		if err := lo.Close(); err != nil {
			return fmt.Errorf("close large object: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payloads (message_id, data) VALUES ($1, lo_get($2))`, id, oid); err != nil {
			return fmt.Errorf("insert payload: %w", err)
		}
		if err := los.Unlink(ctx, oid); err != nil {
			return fmt.Errorf("unlink large object: %w", err)
		}
		if err := saveMDN(ctx, tx, id, m, hdr); err != nil {
			return err
		}
		return saveEDI(ctx, tx, id, m.EDI)
	})
	return id, err
}

// saveMDN stores m's MDN and queues an async one, in tx.
func saveMDN(ctx context.Context, tx pgx.Tx, id int64, m *InboundMessage, hdr []byte) error {
	if m.MDN == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		id, m.MDN.Header.Get("Content-Type"), string(hdr), m.MDN.Body, m.MDN.Disposition, m.MDN.MIC, m.MDN.Signed); err != nil {
		return fmt.Errorf("insert MDN: %w", err)
	}
	if m.Outbox {
		return queueMDN(ctx, tx, id, m.Partner, m.MDNURL, string(hdr), m.MDN.Body, m.MDNRetry)
	}
	return nil
}

// payloadChunk is the size of one payload_chunks row.
const payloadChunk = 1 << 20

// saveInboundChunked stores a payload read from m.PayloadOpen in
// payload_chunks rows, by COPY, in one transaction with the rest: the
// memory it takes is a chunk or two, whatever the payload's size.
func (s *Store) saveInboundChunked(ctx context.Context, m *InboundMessage, hdr []byte) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, insertMessage, messageArgs(m)...).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDuplicateInbound
		}
		if err != nil {
			return fmt.Errorf("insert message: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payloads (message_id, data, chunked) VALUES ($1, '', true)`, id); err != nil {
			return fmt.Errorf("insert payload: %w", err)
		}
		src := &chunkSource{id: id, r: m.PayloadOpen(), buf: make([]byte, payloadChunk)}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{"payload_chunks"}, []string{"message_id", "seq", "data"}, src)
		if err != nil {
			return fmt.Errorf("copy payload: %w", err)
		}
		if src.bytes != m.PayloadSize {
			return fmt.Errorf("copy payload: %d bytes in %d pieces, want %d", src.bytes, n, m.PayloadSize)
		}
		if err := saveMDN(ctx, tx, id, m, hdr); err != nil {
			return err
		}
		return saveEDI(ctx, tx, id, m.EDI)
	})
	return id, err
}

// chunkSource is a pgx.CopyFromSource of a payload's pieces.
type chunkSource struct {
	id    int64
	r     io.Reader
	buf   []byte
	seq   int32
	n     int
	bytes int64
	err   error
}

func (c *chunkSource) Next() bool {
	n, err := io.ReadFull(c.r, c.buf)
	if err == io.EOF || (err == io.ErrUnexpectedEOF && n > 0) {
		err = nil
	}
	if err != nil {
		c.err = err
		return false
	}
	if n == 0 {
		return false
	}
	c.n, c.bytes = n, c.bytes+int64(n)
	c.seq++
	return true
}

func (c *chunkSource) Values() ([]any, error) {
	return []any{c.id, c.seq, c.buf[:c.n]}, nil
}

func (c *chunkSource) Err() error { return c.err }

func queueMDN(ctx context.Context, tx pgx.Tx, messageRowID int64, partner, url, header string, body []byte, r Retry) error {
	attempts, window := r.args()
	if _, err := tx.Exec(ctx, `
INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
VALUES ('mdn', $1, $2, $3, $4, $5, 'pending', now(), $6, CASE WHEN $7::bigint > 0 THEN now() + $7::bigint * interval '1 microsecond' END)`,
		messageRowID, partner, url, header, body, attempts, window); err != nil {
		return fmt.Errorf("queue MDN: %w", err)
	}
	return nil
}

// RequeueInboundMDN queues the stored MDN of inbound message id for
// delivery to url again (a partner that resent a message asking for an
// asynchronous MDN evidently lacks it), retried as r says. It returns
// ErrInboundNotFound when the message has no stored MDN.
func (s *Store) RequeueInboundMDN(ctx context.Context, id int64, url string, r Retry) error {
	attempts, window := r.args()
	tag, err := s.pool.Exec(ctx, `
INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
SELECT 'mdn', m.id, m.partner, $2, d.headers, d.body, 'pending', now(), $3,
       CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 microsecond' END
  FROM messages m JOIN mdns d ON d.message_id = m.id
 WHERE m.id = $1`, id, url, attempts, window)
	if err != nil {
		return fmt.Errorf("requeue MDN: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("requeue MDN: %w", ErrInboundNotFound)
	}
	return nil
}

// InboundByMessageID returns the inbound message partner received with
// messageID (compared byte-exact) and the MDN answered for it, or
// ErrInboundNotFound.
func (s *Store) InboundByMessageID(ctx context.Context, partner, messageID string) (*InboundRecord, error) {
	var (
		r      InboundRecord
		hdr    []byte
		body   []byte
		mdnDis *string
		mdnMIC *string
		signed *bool
	)
	err := s.pool.QueryRow(ctx, `
SELECT m.id, m.status, m.disposition, m.mic, m.mdn_mode, m.mdn_url, d.headers, d.body, d.disposition, d.mic, d.signed
  FROM messages m LEFT JOIN mdns d ON d.message_id = m.id
 WHERE m.partner = $1 AND m.direction = 'inbound' AND m.message_id = $2`, partner, messageID).
		Scan(&r.ID, &r.Status, &r.Disposition, &r.MIC, &r.MDNMode, &r.MDNURL, &hdr, &body, &mdnDis, &mdnMIC, &signed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("inbound message: %w", ErrInboundNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("inbound message: %w", err)
	}
	if body != nil {
		mdn := &StoredMDN{Body: body, Disposition: *mdnDis, MIC: *mdnMIC, Signed: *signed}
		if err := json.Unmarshal(hdr, &mdn.Header); err != nil {
			return nil, fmt.Errorf("inbound message: decode MDN header: %w", err)
		}
		r.MDN = mdn
	}
	return &r, nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
