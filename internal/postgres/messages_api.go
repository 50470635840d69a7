package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/inflate"
)

const messageColumns = `id, direction, partner, as2_from, as2_to, message_id, status, subject, content_type, filename,
       payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, disposition, error,
       attempts, mdn_due_at, mdn_overdue, mdn_resends, mic_verified, created_at, updated_at, completed_at`

func scanMessage(r pgx.Row) (hub.MessageInfo, error) {
	var m hub.MessageInfo
	err := r.Scan(&m.ID, &m.Direction, &m.Partner, &m.AS2From, &m.AS2To, &m.MessageID, &m.Status, &m.Subject,
		&m.ContentType, &m.Filename, &m.Size, &m.Signed, &m.Encrypted, &m.Compressed, &m.MIC, &m.MICAlg,
		&m.MDNMode, &m.MDNSigned, &m.Disposition, &m.Error, &m.Attempts, &m.MDNDueAt, &m.MDNOverdue, &m.MDNResends, &m.MICVerified, &m.CreatedAt,
		&m.UpdatedAt, &m.CompletedAt)
	return m, err
}

// Message returns the message with id, or hub.ErrMessageNotFound.
func (s *Store) Message(ctx context.Context, id int64) (hub.MessageInfo, error) {
	m, err := scanMessage(s.pool.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = $1`, id))
	return m, messageErr(fmt.Sprintf("message %d", id), err)
}

// messageErr wraps the error of reading what of one message: no row is
// hub.ErrMessageNotFound.
func messageErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, hub.ErrMessageNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// MessageQuery filters and pages Messages. Zero fields do not filter.
type MessageQuery struct {
	Partner   string
	Direction string
	Status    string
	Since     time.Time // created_at >= Since
	Until     time.Time // created_at < Until
	// MessageID matches the AS2 Message-ID exactly, with or without its
	// angle brackets ("<a@b>" and "a@b" find either as stored).
	MessageID string
	// Filename matches the file names that start with it, byte for byte
	// (case-sensitive): "INVOIC_20260131" finds that day's invoices, a
	// whole name finds that file (and any longer name it begins).
	Filename string
	// Overdue keeps the outbound messages still awaiting an async MDN
	// past its due time (mdn_overdue, not final).
	Overdue bool
	// ICN keeps the messages carrying an interchange with this control
	// number (X12 ISA13, EDIFACT UNB05); digits match with or without
	// X12's leading zeros.
	ICN string
	// Before pages: only ids below it (keyset pagination, id descending).
	Before int64
	Limit  int
}

// Messages returns the messages matching q, newest (highest id) first.
// Each filter is a condition an index serves (migration 00011), so that a
// page costs about the same on a database of millions of messages
// (TestConsoleQueriesUseIndexes).
func (s *Store) Messages(ctx context.Context, q MessageQuery) ([]hub.MessageInfo, error) {
	sortRange := false
	if !q.Until.IsZero() {
		var err error
		if sortRange, err = s.rangeIsDeep(ctx, q); err != nil {
			return nil, fmt.Errorf("list messages: %w", err)
		}
	}
	sql, args := messagesSQL(q, sortRange)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hub.MessageInfo, error) { return scanMessage(r) })
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	return out, nil
}

// rangeIsDeep reports whether the messages created in q's range lie
// under more messages (those above the page's cursor) than the range
// holds, estimated from the ids of its ends (ids grow with time, about:
// created_at is the start of the storing transaction). Reading the list
// down the id index would then go through all those messages first (the
// planner, which assumes the range spread evenly, would still choose it);
// sorting the range's rows, read from the created_at index, costs less.
// Either way the rows are exact; the estimate only picks the plan.
func (s *Store) rangeIsDeep(ctx context.Context, q MessageQuery) (bool, error) {
	before := q.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	var top, hi, lo int64
	err := s.pool.QueryRow(ctx, rangeEndsSQL, before, q.Until, q.Since).Scan(&top, &hi, &lo)
	if err != nil {
		return false, fmt.Errorf("locate the date range: %w", err)
	}
	return top-hi > hi-lo, nil
}

// rangeEndsSQL: the newest id below the cursor ($1), and about the
// newest id created before $2 and the oldest created from $3 on, each an
// end of an index.
const rangeEndsSQL = `
SELECT coalesce((SELECT max(id) FROM messages WHERE id < $1), 0),
       coalesce((SELECT id FROM messages WHERE created_at < $2 ORDER BY created_at DESC LIMIT 1), 0),
       coalesce((SELECT id FROM messages WHERE created_at >= $3 ORDER BY created_at LIMIT 1), 0)`

// messagesSQL is the statement of Messages and its arguments. sortRange
// sorts the rows of the date range instead of reading them in id order
// (see rangeIsDeep).
func messagesSQL(q MessageQuery, sortRange bool) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "$?", fmt.Sprintf("$%d", len(args))))
	}
	if q.Partner != "" {
		add("partner = $?", q.Partner)
	}
	if q.Direction != "" {
		add("direction = $?", q.Direction)
	}
	if q.Status != "" {
		add("status = $?", q.Status)
	}
	if !q.Since.IsZero() {
		add("created_at >= $?", q.Since)
	}
	if !q.Until.IsZero() {
		add("created_at < $?", q.Until)
	}
	if q.MessageID != "" {
		add("message_id = ANY ($?::text[])", messageIDForms(q.MessageID))
	}
	if q.Filename != "" {
		// A range of the text_pattern_ops index, whatever the plan: a
		// LIKE pattern given as a parameter is not (a generic plan does
		// not know its prefix). The index holds only the messages that
		// have a file name (migration 00018): "filename <> ''", true of
		// every row in the range, lets the planner use it.
		where = append(where, "filename <> ''")
		add("filename ~>=~ $?", q.Filename)
		if end, ok := prefixEnd(q.Filename); ok {
			add("filename ~<~ $?", end)
		}
	}
	if q.Overdue {
		// The partial index messages_mdn_overdue_idx holds these rows.
		where = append(where, "mdn_overdue AND direction = 'outbound' AND status NOT IN ('delivered', 'failed', 'sent')")
	}
	if q.ICN != "" {
		// message_interchanges_control_idx finds the few messages.
		add("id IN (SELECT message_id FROM message_interchanges WHERE control_number = ANY ($?::text[]))", controlNumberForms(q.ICN))
	}
	if q.Before > 0 {
		add("id < $?", q.Before)
	}
	sql := `SELECT ` + messageColumns + ` FROM messages`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	order := "id"
	if sortRange {
		// An expression no index is ordered by: the planner reads the
		// rows by their conditions and keeps the top ones.
		order = "id + 0"
	}
	sql += fmt.Sprintf(` ORDER BY %s DESC LIMIT $%d`, order, len(args))
	if sortRange && rangeOnly(q) {
		// Only the range (and the cursor) filter: the ids are picked from
		// the index on (created_at) INCLUDE (id) alone, and only the
		// page's rows are read from the table.
		sql = `SELECT ` + messageColumns + ` FROM messages WHERE id IN (SELECT id FROM messages WHERE ` +
			strings.Join(where, " AND ") + fmt.Sprintf(` ORDER BY id + 0 DESC LIMIT $%d) ORDER BY id DESC`, len(args))
	}
	return sql, args
}

// rangeOnly reports whether q filters by its date range (and pages) only.
func rangeOnly(q MessageQuery) bool {
	q.Since, q.Until, q.Before, q.Limit = time.Time{}, time.Time{}, 0, 0
	return q == MessageQuery{}
}

// messageIDForms are the stored forms a searched Message-ID may have: as
// given, and with and without its angle brackets (partners drop or add
// them; the poller matches MDNs the same way).
func messageIDForms(id string) []string {
	t := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(id), "<"), ">")
	forms := []string{id}
	for _, v := range []string{t, "<" + t + ">"} {
		if v != "" && !slices.Contains(forms, v) {
			forms = append(forms, v)
		}
	}
	return forms
}

// prefixEnd returns the least string above every string that starts with
// p, in byte order (the order of text_pattern_ops, and of code points in
// UTF-8): p with its last character replaced by the next one, after
// dropping trailing U+10FFFF. ok is false when there is none: p is empty,
// all U+10FFFF, or not UTF-8 (which the database refuses anyway).
func prefixEnd(p string) (string, bool) {
	if !utf8.ValidString(p) {
		return "", false
	}
	r := []rune(p)
	for len(r) > 0 {
		last := r[len(r)-1]
		r = r[:len(r)-1]
		switch last {
		case utf8.MaxRune:
			continue
		case 0xD7FF: // the surrogates that follow are no characters
			return string(append(r, 0xE000)), true
		}
		return string(append(r, last+1)), true
	}
	return "", false
}

// MessagePayload returns the message with id and its payload bytes, or
// hub.ErrMessageNotFound when either is missing. It holds the payload whole:
// WritePayload streams one of any size.
func (s *Store) MessagePayload(ctx context.Context, id int64) (hub.MessageInfo, []byte, error) {
	var buf bytes.Buffer
	m, err := s.WritePayload(ctx, id, func(hub.MessageInfo) io.Writer { return &buf })
	if err != nil {
		return m, nil, err
	}
	return m, buf.Bytes(), nil
}

// WritePayload writes the payload of message id to the writer to(m)
// returns, m being the message with Size the payload's exact size, as it
// reads it: a chunked payload one piece at a time, in one snapshot, and
// one stored as its zlib stream (migration 00022) inflated as it is
// read. hub.ErrMessageNotFound when the message or its payload is missing
// (to is not called then). An error of the writer ends the read and is
// returned.
func (s *Store) WritePayload(ctx context.Context, id int64, to func(hub.MessageInfo) io.Writer) (hub.MessageInfo, error) {
	m, err := s.Message(ctx, id)
	if err != nil {
		return m, err
	}
	var (
		data     []byte
		chunked  bool
		encoding string
		skip     int64
	)
	err = s.pool.QueryRow(ctx, `SELECT data, chunked, encoding, inflated_skip FROM payloads WHERE message_id = $1`, id).Scan(&data, &chunked, &encoding, &skip)
	if err != nil {
		return m, messageErr(fmt.Sprintf("payload of message %d", id), err)
	}
	if !chunked {
		m.Size = int64(len(data))
		_, err = to(m).Write(data)
		return m, err
	}
	w := to(m) // m.Size is the payload's: checked when it was stored
	pieces := &pieceReader{s: s, ctx: ctx, id: id}
	var written int64
	switch encoding {
	case encodingIdentity:
		written, err = pieces.writeTo(w)
	case encodingZlib:
		written, err = writeInflated(pieces, skip, m.Size, w)
	default:
		err = fmt.Errorf("payload of message %d: unknown encoding %q", id, encoding)
	}
	if err != nil {
		return m, err
	}
	if written != m.Size {
		// Pieces deleted while they were read (a purge).
		return m, fmt.Errorf("payload of message %d: %d bytes of %d found", id, written, m.Size)
	}
	return m, nil
}

// The payloads.encoding values (migration 00022): the pieces are the
// payload, or the zlib stream it arrived in.
const (
	encodingIdentity = "identity"
	encodingZlib     = "zlib"
)

// pieceReader reads the payload_chunks of a message in seq order.
//
// One piece per round trip, read whole before it is used: the reader may
// feed a slow HTTP client, and a result left unread while it stalls would
// close the server's window to us for as long, which the server's
// dead-peer timeout (tcp_user_timeout) and our watch (deadpeer.go) take
// for a dead peer. Between round trips the connection is idle, where
// keepalives tell a live peer from a dead one.
type pieceReader struct {
	s   *Store
	ctx context.Context
	id  int64
	seq int32
	// buf holds the current piece, rest its unread part.
	buf, rest []byte
	done      bool
}

// next reads the next piece into buf; false after the last.
func (r *pieceReader) next() (bool, error) {
	r.seq++
	rows, err := r.s.pool.Query(r.ctx, `SELECT data FROM payload_chunks WHERE message_id = $1 AND seq = $2`, r.id, r.seq)
	if err != nil {
		return false, fmt.Errorf("payload of message %d: %w", r.id, err)
	}
	found := rows.Next()
	if found {
		// The raw value, copied once into buf, when it comes in binary.
		raw := rows.RawValues()[0]
		if rows.FieldDescriptions()[0].Format != pgtype.BinaryFormatCode {
			if err := rows.Scan(&raw); err != nil {
				rows.Close()
				return false, fmt.Errorf("payload of message %d: %w", r.id, err)
			}
		}
		r.buf = append(r.buf[:0], raw...)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("payload of message %d: %w", r.id, err)
	}
	return found, nil
}

// writeTo writes every piece to w; w's errors are returned as they are.
func (r *pieceReader) writeTo(w io.Writer) (int64, error) {
	var written int64
	for {
		found, err := r.next()
		if err != nil || !found {
			return written, err
		}
		if _, err := w.Write(r.buf); err != nil {
			return written, err
		}
		written += int64(len(r.buf))
	}
}

// Read reads the pieces as one stream.
func (r *pieceReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.done {
			return 0, io.EOF
		}
		found, err := r.next()
		if err != nil {
			return 0, err
		}
		r.done, r.rest = !found, r.buf
		if !found {
			r.rest = nil
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// writeInflated writes to w the payload a zlib stream stored as r's
// pieces holds: the size bytes after the first skip it inflates to,
// which must be all of it. The inflate is the receive's
// (internal/inflate), which checked the whole stream before the message
// was stored. w's errors are returned as they are.
func writeInflated(r io.Reader, skip, size int64, w io.Writer) (int64, error) {
	zr := inflate.NewReader(r)
	if _, err := io.CopyN(io.Discard, zr, skip); err != nil {
		return 0, fmt.Errorf("inflate the stored payload: %w", err)
	}
	buf := make([]byte, 256<<10)
	var written int64
	for {
		n, err := zr.Read(buf[:min(int64(len(buf)), size-written+1)])
		if written += int64(n); written > size {
			return written, fmt.Errorf("inflate the stored payload: more than its %d bytes", size)
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return written, werr
			}
		}
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, fmt.Errorf("inflate the stored payload: %w", err)
		}
	}
}

// MDNInfo is an MDN as stored for a message.
type MDNInfo struct {
	MessageID   int64
	ContentType string
	Headers     http.Header
	Body        []byte
	// Size is the length of the body, also when Body is not read (a
	// message's trace).
	Size        int64
	Disposition string
	MIC         string
	Signed      bool
	// MICVerified is the message's mic_verified: true when the MIC the
	// MDN returned matched, false for a delivery on an unsigned MDN
	// without MIC, nil otherwise.
	MICVerified *bool
	CreatedAt   time.Time
}

// MessageMDN returns the MDN stored for message id: hub.ErrMessageNotFound when
// there is no such message, hub.ErrNoMDN when it has no MDN.
func (s *Store) MessageMDN(ctx context.Context, id int64) (MDNInfo, error) {
	var m MDNInfo
	var hdr []byte
	err := s.pool.QueryRow(ctx, `
SELECT d.message_id, d.content_type, d.headers, d.body, octet_length(d.body), d.disposition, d.mic, d.signed, m.mic_verified, d.created_at
  FROM mdns d JOIN messages m ON m.id = d.message_id WHERE d.message_id = $1`, id).Scan(&m.MessageID, &m.ContentType, &hdr, &m.Body,
		&m.Size, &m.Disposition, &m.MIC, &m.Signed, &m.MICVerified, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, merr := s.Message(ctx, id); merr != nil {
			return m, fmt.Errorf("MDN of message %d: %w", id, merr)
		}
		return m, fmt.Errorf("MDN of message %d: %w", id, hub.ErrNoMDN)
	}
	if err != nil {
		return m, fmt.Errorf("MDN of message %d: %w", id, err)
	}
	m.Headers = http.Header{}
	if len(hdr) > 0 {
		if err := json.Unmarshal(hdr, &m.Headers); err != nil {
			return m, fmt.Errorf("MDN of message %d headers: %w", id, err)
		}
	}
	return m, nil
}
