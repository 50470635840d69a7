package postgres

import (
	"context"
	"errors"
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

// BodyFreezer stores the body of a claimed outbox item in pieces as it is
// built, in a transaction of its own, so that the copy into PostgreSQL
// runs beside the build instead of after it (the server writes while the
// build computes). Write the body to it, then Commit with the build, or
// Abort. It is not safe for concurrent use; its goroutine ends with
// Commit or Abort.
type BodyFreezer struct {
	it   OutboxItem
	tx   pgx.Tx
	pw   *io.PipeWriter
	n    int64
	done chan struct{}
	// copied and copyErr are the COPY's outcome, set before done closes.
	copied  int64
	copyErr error
	ended   bool
}

// FreezeOutboundBody begins the transaction that freezes the body of the
// claimed item it, and the COPY into outbox_body_chunks that its writes
// feed.
func (s *Store) FreezeOutboundBody(ctx context.Context, it OutboxItem) (*BodyFreezer, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("freeze body of outbox %d: %w", it.ID, err)
	}
	pr, pw := io.Pipe()
	f := &BodyFreezer{it: it, tx: tx, pw: pw, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		src := &chunkSource{id: it.ID, r: pr, buf: make([]byte, payloadChunk)}
		_, f.copyErr = tx.CopyFrom(ctx, pgx.Identifier{"outbox_body_chunks"}, []string{"outbox_id", "seq", "data"}, src)
		f.copied = src.bytes
		// A COPY that stopped early must not leave the build blocked
		// on the pipe.
		pr.CloseWithError(fmt.Errorf("freeze body of outbox %d: copy ended: %v", it.ID, f.copyErr))
	}()
	return f, nil
}

// Write adds p to the body; it fails when the COPY failed.
func (f *BodyFreezer) Write(p []byte) (int, error) {
	n, err := f.pw.Write(p)
	f.n += int64(n)
	return n, err
}

// Commit ends the body, records the build b (its BodyOpen and Body are
// not used: the body is what was written) in the outbox row and on the
// message as SaveOutboundBuild does, and commits. ErrClaimLost when the
// claim is no longer held; nothing is stored then.
func (f *BodyFreezer) Commit(ctx context.Context, b OutboundBuild) error {
	f.ended = true
	f.pw.Close()
	<-f.done
	err := f.copyErr
	if err == nil && f.copied != f.n {
		err = fmt.Errorf("%d bytes copied of %d", f.copied, f.n)
	}
	if err == nil {
		b.Body, b.BodyOpen, b.BodySize = nil, nil, f.n
		err = saveBuild(ctx, f.tx, f.it, b, true)
	}
	if err == nil {
		err = f.tx.Commit(ctx)
	}
	if err != nil {
		_ = f.tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("save build of outbox %d: %w", f.it.ID, err)
	}
	return nil
}

// Abort drops what was written and ends the transaction. It is a no-op
// after Commit.
func (f *BodyFreezer) Abort() {
	if f.ended {
		return
	}
	f.ended = true
	f.pw.CloseWithError(errors.New("build aborted"))
	<-f.done
	_ = f.tx.Rollback(context.Background())
}
