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

// WriteOutboxBody writes the body of the claimed item it, built as a
// stream and stored in pieces (a row frozen before migration 00020: the
// rows built since record the inputs of their build instead, see
// OutboundBuild.Inputs), to w one piece at a time, in one snapshot,
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

// RecordRebuild records that the body of the claimed item it, built
// again from its payload and BuildInputs, came out other than the first
// build (size bytes, SHA-256 sum; a compressor whose output changed with
// an upgrade between attempts): the row's body size and SHA-256 become
// the rebuilt body's, so that the next rebuild is checked against it,
// and mics (the rebuilt body's MICs, each once) are added to those an MDN is
// checked against (mdn.Judge accepts any of them), the first build's
// kept: an MDN for an earlier attempt still matches. ErrClaimLost when
// the claim is no longer held.
func (s *Store) RecordRebuild(ctx context.Context, it OutboxItem, size int64, sum []byte, mics []string) error {
	tag, err := s.pool.Exec(ctx, `
UPDATE outbox SET body_size = $4, body_sha256 = $5,
                  mics = mics || ARRAY(SELECT m FROM unnest($6::text[]) AS m WHERE m <> ALL (mics))
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending' AND build_inputs IS NOT NULL`,
		it.ID, it.ClaimedBy, it.Attempts, size, sum, mics)
	if err != nil {
		return fmt.Errorf("record rebuild of outbox %d: %w", it.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record rebuild of outbox %d: %w", it.ID, ErrClaimLost)
	}
	return nil
}

// RecordStreamedBuild completes the record of a message built as a
// stream while it was posted: SaveOutboundBuild recorded its headers,
// announced size and inputs before the post (b.BodySHA256 and its MICs
// empty: unknown until the body ended); this records, once the body is
// built, its size, SHA-256, MIC, MICs and inputs (now with its
// signature) in the claimed outbox row and the MIC on the message, in
// one transaction. A retry of a message whose post ended before this
// record records its rebuild the same way. ErrClaimLost when the claim
// is no longer held.
func (s *Store) RecordStreamedBuild(ctx context.Context, it OutboxItem, b OutboundBuild) error {
	mics := b.MICs
	if mics == nil {
		mics = []string{} // the column is NOT NULL
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockMessage(ctx, tx, it); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
UPDATE outbox SET mic = $4, mic_alg = $5, mics = $6, body_size = $7, body_sha256 = $8, build_inputs = $9
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending' AND build_inputs IS NOT NULL`,
			it.ID, it.ClaimedBy, it.Attempts, b.MIC, b.MICAlg, mics, b.BodySize, b.BodySHA256, b.Inputs)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrClaimLost
		}
		if it.MessageID == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE messages SET mic = $2, mic_alg = $3, updated_at = now() WHERE id = $1`, it.MessageID, b.MIC, b.MICAlg)
		return err
	})
	if err != nil {
		return fmt.Errorf("record streamed build of outbox %d: %w", it.ID, err)
	}
	return nil
}
