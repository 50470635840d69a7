package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

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

// BodyFreezer stores the body of a claimed outbox item in pieces as it is
// built, in a transaction of its own, so that the copy into PostgreSQL
// runs beside the build instead of after it (the server writes while the
// build computes). The body is read back from the file the build writes
// it to (the spool file, through the page cache): the build writes each
// piece to the file first, then tells the freezer (Write), and a COPY on
// a goroutine of its own sends the file's bytes as 1 MiB rows as soon as
// they are there. The freezer holds no copy of the body, and the build
// never waits for PostgreSQL; Commit does, for the copy's tail. Commit
// with the build, or Abort; keep the file open until then. It is not
// safe for concurrent use; its goroutine ends with Commit or Abort.
//
// Write holds the build back while the COPY is more than freezeAhead
// bytes behind it. The COPY is the slower (PostgreSQL's write of each
// byte into the table, its TOAST index and the WAL costs more CPU than
// the build's crypto): left to run ahead, the build took a core the
// COPY's server process wanted, and the COPY's tail ran alone after it
// with the other core idle; held back, the build yields that core while
// it waits, and the body is frozen sooner.
type BodyFreezer struct {
	it   OutboxItem
	tx   pgx.Tx
	src  io.ReaderAt
	n    int64         // bytes in the file (Write)
	more chan struct{} // a signal to the COPY: n grew, or the body ended
	// sent is how much of the body the COPY has sent; progress, a
	// signal to a Write held back that it grew.
	sent     atomic.Int64
	progress chan struct{}
	mu       sync.Mutex
	size     int64 // n as the COPY sees it
	end      bool  // the body is complete (Commit)
	// abort tells the COPY to fail; done closes when it ended.
	abort chan struct{}
	done  chan struct{}
	// copied and copyErr are the COPY's outcome, set before done closes.
	copied  int64
	copyErr error
	ended   bool
}

// FreezeOutboundBody begins the transaction that freezes the body of the
// claimed item it, and the COPY into outbox_body_chunks of what Write
// says src holds.
func (s *Store) FreezeOutboundBody(ctx context.Context, it OutboxItem, src io.ReaderAt) (*BodyFreezer, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("freeze body of outbox %d: %w", it.ID, err)
	}
	f := &BodyFreezer{it: it, tx: tx, src: src, more: make(chan struct{}, 1), progress: make(chan struct{}, 1),
		abort: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		cs := &copyStream{ctx: ctx, f: f, head: binaryCopyHeader()}
		_, f.copyErr = tx.Conn().PgConn().CopyFrom(ctx, cs, `COPY outbox_body_chunks (outbox_id, seq, data) FROM STDIN (FORMAT binary)`)
		f.copied = cs.off
		if f.copyErr == nil && !cs.eof {
			f.copyErr = errors.New("copy ended before the body")
		}
	}()
	return f, nil
}

// freezeAhead is how far the build may run ahead of the COPY: a few
// rows, so that the COPY never waits for the build.
const freezeAhead = 8 * payloadChunk

// Write records that the next len(p) bytes of the body are in the
// file; p, the same bytes, is not read. It waits while the COPY is more
// than freezeAhead bytes behind, and fails once the COPY failed.
func (f *BodyFreezer) Write(p []byte) (int, error) {
	for {
		select {
		case <-f.done:
			return 0, fmt.Errorf("freeze body of outbox %d: copy ended: %v", f.it.ID, f.copyErr)
		default:
		}
		if f.n-f.sent.Load() <= freezeAhead {
			break
		}
		select {
		case <-f.progress:
		case <-f.done:
		}
	}
	f.n += int64(len(p))
	f.mu.Lock()
	f.size = f.n
	f.mu.Unlock()
	f.signal()
	return len(p), nil
}

// signal wakes the COPY up if it waits for more.
func (f *BodyFreezer) signal() {
	select {
	case f.more <- struct{}{}:
	default:
	}
}

// Commit ends the body, waits for the COPY to send it, records the build
// b (its BodyOpen and Body are not used: the body is what was written)
// in the outbox row and on the message as SaveOutboundBuild does, and
// commits. ErrClaimLost when the claim is no longer held; nothing is
// stored then.
func (f *BodyFreezer) Commit(ctx context.Context, b OutboundBuild) error {
	f.ended = true
	f.mu.Lock()
	f.end = true
	f.mu.Unlock()
	f.signal()
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

// Abort drops what was written and ends the transaction; the file is
// not read once it returns. It is a no-op after Commit.
func (f *BodyFreezer) Abort() {
	if f.ended {
		return
	}
	f.ended = true
	close(f.abort)
	<-f.done
	_ = f.tx.Rollback(context.Background())
}

// copyStream is the binary COPY data (PostgreSQL's "binary" format) of
// the outbox_body_chunks rows of f's item: the body in rows of
// payloadChunk bytes (the last shorter), seq from 1, each read from the
// file once it is all there (its length comes first). pgconn's CopyFrom
// reads it.
type copyStream struct {
	ctx    context.Context
	f      *BodyFreezer
	head   []byte // the file header, a row's field header or the trailer, still to read
	off    int64  // the next byte of the body to send
	rowEnd int64  // the end of the row being sent
	seq    int32
	eof    bool // the trailer is due or read
}

// binaryCopyHeader is the header of a binary COPY: signature, flags,
// extension length.
func binaryCopyHeader() []byte {
	return append([]byte("PGCOPY\n\xff\r\n\x00"), 0, 0, 0, 0, 0, 0, 0, 0)
}

func (c *copyStream) Read(p []byte) (int, error) {
	for {
		if len(c.head) > 0 {
			n := copy(p, c.head)
			c.head = c.head[n:]
			return n, nil
		}
		if c.off < c.rowEnd {
			n, err := c.f.src.ReadAt(p[:min(int64(len(p)), c.rowEnd-c.off)], c.off)
			c.off += int64(n)
			if n > 0 {
				c.f.sent.Store(c.off)
				select {
				case c.f.progress <- struct{}{}:
				default:
				}
				return n, nil
			}
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read the body back: %w", err)
		}
		if c.eof {
			return 0, io.EOF
		}
		// The next row, once it is whole in the file or the body ended.
		c.f.mu.Lock()
		size, end := c.f.size, c.f.end
		c.f.mu.Unlock()
		switch {
		case size-c.off >= payloadChunk || (end && size > c.off):
			c.seq++
			c.rowEnd = c.off + min(payloadChunk, size-c.off)
			// 3 fields: outbox_id int8, seq int4, data bytea.
			h := binary.BigEndian.AppendUint16(make([]byte, 0, 26), 3)
			h = binary.BigEndian.AppendUint32(h, 8)
			h = binary.BigEndian.AppendUint64(h, uint64(c.f.it.ID))
			h = binary.BigEndian.AppendUint32(h, 4)
			h = binary.BigEndian.AppendUint32(h, uint32(c.seq))
			h = binary.BigEndian.AppendUint32(h, uint32(c.rowEnd-c.off))
			c.head = h
			continue
		case end:
			c.eof, c.head = true, []byte{0xff, 0xff} // field count -1
			continue
		}
		select {
		case <-c.f.more:
		case <-c.f.abort:
			return 0, errors.New("build aborted")
		case <-c.ctx.Done():
			return 0, c.ctx.Err()
		}
	}
}
