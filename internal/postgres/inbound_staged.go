package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// StagedPayload stores the payload of an inbound message while it is
// still being unwrapped, so that storing it overlaps the decryption,
// decompression and signature check instead of following them: its
// bytes go, as they are written, to payload_chunks rows (an INSERT
// per 1 MiB piece) in a transaction of their own, attached to a placeholder
// message row. SaveInbound, given it in InboundMessage.Staged, finishes
// that transaction: it inserts the message row as it always does (the
// duplicate check and the received event are the same), moves the pieces
// to it, drops the placeholder and commits with the MDN, the outbox row
// and the EDI records. Until then nothing of it is visible; on any other
// path Abort rolls it back, and a process that dies leaves nothing
// either (the server rolls back a connection that drops).
//
// Write never fails: a stage that failed (the database, a cancelled
// request) is not used. SaveInbound then stores the payload from
// InboundMessage.PayloadOpen when it is set, else (the stage was the
// payload's only copy) it fails with ErrStageFailed and stores nothing. Write holds at most stagedBuffers pieces in memory, and waits
// when the inserts fall behind.
type StagedPayload struct {
	s      *Store
	tx     pgx.Tx
	tempID int64

	// Write's side: the piece being filled, the count written.
	cur     []byte
	written int64
	// full carries pieces to the inserts, free brings them back.
	full, free chan []byte
	// stop, closed by Abort, ends the inserts; copied is closed when
	// their goroutine has returned, copyErr (then) its error.
	stop     chan struct{}
	stopOnce sync.Once
	copied   chan struct{}
	copyErr  error
	failed   bool // Write saw the inserts end early

	mu   sync.Mutex
	used bool // given to SaveInbound, or aborted

	// copyWait is the inserts' time waiting for pieces, writeWait
	// Write's waiting for a free piece (the inserts behind).
	copyWait, writeWait, copyTook time.Duration
	// finishTook is SaveInbound's wait for the inserts' end, saveTook its
	// statements and commit after it.
	finishTook, saveTook time.Duration
}

// stagedBuffers is how many pieces a StagedPayload holds: one filling,
// the others queued or being copied.
const stagedBuffers = 3

// ErrNoStage means StageInboundPayload found every connection stages
// may hold in use: the payload is stored after its unwrap, as before.
var ErrNoStage = errors.New("stage payload: the connections for stages are in use")

// ErrStageFailed is a stage whose pieces are not all stored: SaveInbound
// stores the payload from PayloadOpen instead, or fails with it when
// there is none (nothing is stored).
var ErrStageFailed = errors.New("staged payload incomplete")

// errStageUsed is a message whose stage, its payload's only copy, was
// used already (a SaveInbound that failed).
var errStageUsed = fmt.Errorf("%w: its stage was used by an earlier attempt", ErrStageFailed)

// errStageAborted ends the inserts of an aborted stage.
var errStageAborted = errors.New("staged payload aborted")

// StageInboundPayload begins storing the payload of an inbound message
// from partner that is still being received; see StagedPayload. The
// caller must end it: through SaveInbound, or Abort (safe after
// SaveInbound too; a deferred Abort is the way to clean up on every
// path).
func (s *Store) StageInboundPayload(ctx context.Context, partner string) (_ *StagedPayload, err error) {
	// A stage holds its connection until the message is answered, and
	// the receiver runs other statements meanwhile (the replay check,
	// the EDI lookups, the failure path's): stages may take half the
	// pool at most, so that those always find a connection.
	if s.stages.Add(1) > s.pool.Config().MaxConns/2 {
		s.stages.Add(-1)
		return nil, ErrNoStage
	}
	defer func() {
		if err != nil {
			s.stages.Add(-1)
		}
	}()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("stage payload: %w", err)
	}
	p := &StagedPayload{s: s, tx: tx, full: make(chan []byte, stagedBuffers), free: make(chan []byte, stagedBuffers),
		stop: make(chan struct{}), copied: make(chan struct{})}
	// The placeholder's Message-ID is one no partner sends (not in angle
	// brackets, random); its status starts no event; it never commits.
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	err = tx.QueryRow(ctx, `
WITH m AS (INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status)
           VALUES ('inbound', $1, '', '', $2, 'error') RETURNING id),
p AS (INSERT INTO payloads (message_id, data, chunked) SELECT id, '', true FROM m)
SELECT id FROM m`, partner, "edihub-staged-"+hex.EncodeToString(nonce[:])).Scan(&p.tempID)
	if err != nil {
		_ = tx.Rollback(context.Background())
		return nil, fmt.Errorf("stage payload: placeholder: %w", err)
	}
	for range stagedBuffers {
		p.free <- make([]byte, 0, payloadChunk)
	}
	go p.copy(ctx)
	return p, nil
}

// copy inserts the pieces until Write's side is finished (full
// closed) or the stage is aborted. One INSERT a piece, not a COPY: the
// server buffers a binary COPY's rows (up to 1,000, a GiB of them) and
// stores them only at its end, after the unwrap, where an INSERT stores
// its piece while the next one is unwrapped.
func (p *StagedPayload) copy(ctx context.Context) {
	defer close(p.copied)
	t0 := time.Now()
	defer func() { p.copyTook = time.Since(t0) }()
	for seq := int32(1); ; seq++ {
		t := time.Now()
		var (
			c  []byte
			ok bool
		)
		select {
		case c, ok = <-p.full:
		case <-p.stop:
			p.copyErr = errStageAborted
			return
		}
		p.copyWait += time.Since(t)
		if !ok {
			return
		}
		if _, err := p.tx.Exec(ctx, `INSERT INTO payload_chunks (message_id, seq, data) VALUES ($1, $2, $3)`, p.tempID, seq, c); err != nil {
			p.copyErr = err
			return
		}
		p.free <- c[:0] // never blocks: free holds every piece
	}
}

// Write stores b (in pieces, as they fill). It never fails: see
// StagedPayload.
func (p *StagedPayload) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 && !p.failed {
		if p.cur == nil {
			t := time.Now()
			select {
			case p.cur = <-p.free:
			case <-p.copied:
				p.failed = true
				continue
			}
			p.writeWait += time.Since(t)
		}
		k := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur, b = p.cur[:len(p.cur)+k], b[k:]
		p.written += int64(k)
		if len(p.cur) == cap(p.cur) {
			p.send()
		}
	}
	return n, nil
}

// send queues the piece being filled.
func (p *StagedPayload) send() {
	t := time.Now()
	select {
	case p.full <- p.cur:
	case <-p.copied:
		p.failed = true
	}
	p.writeWait += time.Since(t)
	p.cur = nil
}

// finish queues the last piece, ends the inserts and waits for them; nil
// when every byte written is in payload_chunks.
func (p *StagedPayload) finish() error {
	if !p.failed && len(p.cur) > 0 {
		p.send()
	}
	if !p.failed {
		close(p.full)
	}
	<-p.copied
	if p.failed && p.copyErr == nil {
		p.copyErr = errors.New("copy ended early")
	}
	return p.copyErr
}

// take reports whether the stage is still to be used, and marks it used.
func (p *StagedPayload) take() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used {
		return false
	}
	p.used = true
	return true
}

// Abort rolls the stage back and waits for its inserts to end, unless
// SaveInbound took it. It is safe to call more than once, and from
// another goroutine than Write's once Write returned.
func (p *StagedPayload) Abort() {
	if p == nil || !p.take() {
		return
	}
	p.abort()
}

func (p *StagedPayload) abort() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.copied
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = p.tx.Rollback(ctx)
	p.s.stages.Add(-1)
}

// StagedStats is where a StagedPayload's time went: CopyWait, the
// inserts waiting for pieces (the unwrap behind); WriteWait, the unwrap
// waiting for a free piece (the inserts behind); Copy, the inserts' wall
// time; Finish, SaveInbound waiting for their end; Save, its statements and
// commit after that.
type StagedStats struct {
	CopyWait, WriteWait, Copy, Finish, Save time.Duration
}

// Stats reports the stage's times; valid once SaveInbound or Abort
// returned.
func (p *StagedPayload) Stats() StagedStats {
	return StagedStats{CopyWait: p.copyWait, WriteWait: p.writeWait, Copy: p.copyTook, Finish: p.finishTook, Save: p.saveTook}
}

// saveInboundStaged finishes m.Staged's transaction (see StagedPayload).
// It ends that transaction whatever happens; on ErrDuplicateInbound
// nothing was stored.
func (s *Store) saveInboundStaged(ctx context.Context, m *InboundMessage, hdr []byte) (id int64, err error) {
	p := m.Staged
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	t0 := time.Now()
	if err := p.finish(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStageFailed, err)
	}
	t1 := time.Now()
	p.finishTook = t1.Sub(t0)
	defer func() { p.saveTook = time.Since(t1) }()
	if !m.StagedZlib && p.written != m.PayloadSize {
		return 0, fmt.Errorf("%w: %d bytes staged, want %d", ErrStageFailed, p.written, m.PayloadSize)
	}
	tx := p.tx
	if id, err = insertStaged(ctx, tx, m); err != nil {
		return 0, err
	}
	// The pieces move to the message (their TOAST data stays where it
	// is: an UPDATE that leaves a value alone keeps it), and the
	// placeholder goes (its payloads row with it).
	if _, err := tx.Exec(ctx, `
WITH p AS (INSERT INTO payloads (message_id, data, chunked, encoding, inflated_skip) VALUES ($1, '', true, $3, $4) RETURNING message_id),
c AS (UPDATE payload_chunks SET message_id = (SELECT message_id FROM p) WHERE message_id = $2)
SELECT 1`, id, p.tempID, stagedEncoding(m), m.ZlibSkip); err != nil {
		return 0, fmt.Errorf("insert payload: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE id = $1`, p.tempID); err != nil {
		return 0, fmt.Errorf("drop the staged placeholder: %w", err)
	}
	if err := saveMDN(ctx, tx, id, m, hdr); err != nil {
		return 0, err
	}
	if err := saveEDI(ctx, tx, id, m.EDI); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	p.s.stages.Add(-1)
	return id, nil
}

// stagedEncoding is the payloads.encoding of m's staged payload.
func stagedEncoding(m *InboundMessage) string {
	if m.StagedZlib {
		return encodingZlib
	}
	return encodingIdentity
}

// insertStaged inserts m's row in the stage's transaction. A failed
// receipt of the same Message-ID is replaced there, as SaveInbound
// replaces it for other payloads: the stage may be the payload's only
// copy.
func insertStaged(ctx context.Context, tx pgx.Tx, m *InboundMessage) (id int64, err error) {
	err = tx.QueryRow(ctx, insertMessage, messageArgs(m)...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		tag, derr := tx.Exec(ctx, `DELETE FROM messages WHERE partner = $1 AND direction = 'inbound' AND message_id = $2 AND status = 'error'`, m.Partner, m.MessageID)
		if derr != nil {
			return 0, fmt.Errorf("replace a failed receipt: %w", derr)
		}
		if tag.RowsAffected() == 0 {
			return 0, ErrDuplicateInbound
		}
		err = tx.QueryRow(ctx, insertMessage, messageArgs(m)...).Scan(&id)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrDuplicateInbound
	}
	if err != nil {
		return 0, fmt.Errorf("insert message: %w", err)
	}
	return id, nil
}
