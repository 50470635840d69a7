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
)

// ErrMessageNotFound reports a message id with no row.
var ErrMessageNotFound = errors.New("message not found")

// ErrNoMDN reports a message with no stored MDN.
var ErrNoMDN = errors.New("no MDN stored for the message")

// MessageInfo is a message row as the API shows it, inbound or outbound.
type MessageInfo struct {
	ID          int64
	Direction   string
	Partner     string
	AS2From     string
	AS2To       string
	MessageID   string
	Status      string
	Subject     string
	ContentType string
	Filename    string
	Size        int64
	Signed      bool
	Encrypted   bool
	Compressed  bool
	MIC         string
	MICAlg      string
	MDNMode     string
	MDNSigned   bool
	Disposition string
	Error       string
	Attempts    int
	MDNDueAt    *time.Time
	// MDNOverdue is set when the async MDN did not come by MDNDueAt.
	MDNOverdue bool
	// MDNResends counts resends for an overdue MDN.
	MDNResends int
	// MICVerified is false for a message delivered on an unsigned MDN
	// without MIC, true when the returned MIC matched, nil otherwise.
	MICVerified *bool
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt *time.Time
}

const messageColumns = `id, direction, partner, as2_from, as2_to, message_id, status, subject, content_type, filename,
       payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, disposition, error,
       attempts, mdn_due_at, mdn_overdue, mdn_resends, mic_verified, created_at, updated_at, completed_at`

func scanMessage(r pgx.Row) (MessageInfo, error) {
	var m MessageInfo
	err := r.Scan(&m.ID, &m.Direction, &m.Partner, &m.AS2From, &m.AS2To, &m.MessageID, &m.Status, &m.Subject,
		&m.ContentType, &m.Filename, &m.Size, &m.Signed, &m.Encrypted, &m.Compressed, &m.MIC, &m.MICAlg,
		&m.MDNMode, &m.MDNSigned, &m.Disposition, &m.Error, &m.Attempts, &m.MDNDueAt, &m.MDNOverdue, &m.MDNResends, &m.MICVerified, &m.CreatedAt,
		&m.UpdatedAt, &m.CompletedAt)
	return m, err
}

// Message returns the message with id, or ErrMessageNotFound.
func (s *Store) Message(ctx context.Context, id int64) (MessageInfo, error) {
	m, err := scanMessage(s.pool.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = $1`, id))
	return m, messageErr(fmt.Sprintf("message %d", id), err)
}

// messageErr wraps the error of reading what of one message: no row is
// ErrMessageNotFound.
func messageErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, ErrMessageNotFound)
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
	// Before pages: only ids below it (keyset pagination, id descending).
	Before int64
	Limit  int
}

// Messages returns the messages matching q, newest (highest id) first.
func (s *Store) Messages(ctx context.Context, q MessageQuery) ([]MessageInfo, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Partner != "" {
		add("partner = $%d", q.Partner)
	}
	if q.Direction != "" {
		add("direction = $%d", q.Direction)
	}
	if q.Status != "" {
		add("status = $%d", q.Status)
	}
	if !q.Since.IsZero() {
		add("created_at >= $%d", q.Since)
	}
	if !q.Until.IsZero() {
		add("created_at < $%d", q.Until)
	}
	if q.Before > 0 {
		add("id < $%d", q.Before)
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
	sql += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MessageInfo, error) { return scanMessage(r) })
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	return out, nil
}

// MessagePayload returns the message with id and its payload bytes, or
// ErrMessageNotFound when either is missing.
func (s *Store) MessagePayload(ctx context.Context, id int64) (MessageInfo, []byte, error) {
	m, err := s.Message(ctx, id)
	if err != nil {
		return m, nil, err
	}
	var data []byte
	err = s.pool.QueryRow(ctx, `SELECT data FROM payloads WHERE message_id = $1`, id).Scan(&data)
	if err != nil {
		return m, nil, messageErr(fmt.Sprintf("payload of message %d", id), err)
	}
	return m, data, nil
}

// MDNInfo is an MDN as stored for a message.
type MDNInfo struct {
	MessageID   int64
	ContentType string
	Headers     http.Header
	Body        []byte
	Disposition string
	MIC         string
	Signed      bool
	CreatedAt   time.Time
}

// MessageMDN returns the MDN stored for message id: ErrMessageNotFound when
// there is no such message, ErrNoMDN when it has no MDN.
func (s *Store) MessageMDN(ctx context.Context, id int64) (MDNInfo, error) {
	var m MDNInfo
	var hdr []byte
	err := s.pool.QueryRow(ctx, `
SELECT message_id, content_type, headers, body, disposition, mic, signed, created_at
  FROM mdns WHERE message_id = $1`, id).Scan(&m.MessageID, &m.ContentType, &hdr, &m.Body,
		&m.Disposition, &m.MIC, &m.Signed, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, merr := s.Message(ctx, id); merr != nil {
			return m, fmt.Errorf("MDN of message %d: %w", id, merr)
		}
		return m, fmt.Errorf("MDN of message %d: %w", id, ErrNoMDN)
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
