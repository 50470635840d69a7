package postgres

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// payloadSize is the size of m's payload.
func (m NewOutbound) payloadSize() int64 {
	if m.PayloadOpen != nil {
		return m.PayloadSize
	}
	return int64(len(m.Payload))
}

// copyPayload stores the payload of message id read from r, size bytes,
// in payload_chunks rows by COPY, in tx.
func copyPayload(ctx context.Context, tx pgx.Tx, id int64, r io.Reader, size int64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO payloads (message_id, data, chunked) VALUES ($1, '', true)`, id); err != nil {
		return fmt.Errorf("insert payload: %w", err)
	}
	src := &chunkSource{id: id, r: r, buf: make([]byte, payloadChunk)}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"payload_chunks"}, []string{"message_id", "seq", "data"}, src)
	if err != nil {
		return fmt.Errorf("copy payload: %w", err)
	}
	if src.bytes != size {
		return fmt.Errorf("copy payload: %d bytes in %d pieces, want %d", src.bytes, n, size)
	}
	return nil
}

// copyOutboxBody stores the built body of outbox row id read from r,
// size bytes, in outbox_body_chunks rows by COPY, in tx.
func copyOutboxBody(ctx context.Context, tx pgx.Tx, id int64, r io.Reader, size int64) error {
	src := &chunkSource{id: id, r: r, buf: make([]byte, payloadChunk)}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox_body_chunks"}, []string{"outbox_id", "seq", "data"}, src)
	if err != nil {
		return fmt.Errorf("copy built body: %w", err)
	}
	if src.bytes != size {
		return fmt.Errorf("copy built body: %d bytes in %d pieces, want %d", src.bytes, n, size)
	}
	return nil
}

// WriteOutboxBody writes the body of the claimed item it, built as a
// stream and stored in pieces, to w one piece at a time, in one snapshot,
// and checks that it has it.BodySize bytes. It holds no transaction: the
// caller copies the body to a local file before it posts it, so that no
// database read waits on a partner. ErrClaimLost when the row holds no
// such body any more.
func (s *Store) WriteOutboxBody(ctx context.Context, it OutboxItem, w io.Writer) error {
	rows, err := s.pool.Query(ctx, `SELECT data FROM outbox_body_chunks WHERE outbox_id = $1 ORDER BY seq`, it.ID)
	if err != nil {
		return fmt.Errorf("built body of outbox %d: %w", it.ID, err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		piece := rows.RawValues()[0]
		if rows.FieldDescriptions()[0].Format != pgtype.BinaryFormatCode {
			if err := rows.Scan(&piece); err != nil {
				return fmt.Errorf("built body of outbox %d: %w", it.ID, err)
			}
		}
		if _, err := w.Write(piece); err != nil {
			return err
		}
		n += int64(len(piece))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("built body of outbox %d: %w", it.ID, err)
	}
	if n != it.BodySize {
		return fmt.Errorf("built body of outbox %d: %d bytes stored, want %d: %w", it.ID, n, it.BodySize, ErrClaimLost)
	}
	return nil
}
