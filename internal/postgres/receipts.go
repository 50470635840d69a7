package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Group commit of receipts. Concurrent SaveInbound calls of the
// one-statement path (payload in memory up to largePayload, no EDI) are
// written together: while one flush runs, the callers that come meanwhile
// wait in line; when it ends, the first of them flushes the line (up to
// receiptBatchRows receipts and receiptBatchBytes bytes) for all: their
// statements pipelined on one connection in one round trip, in one
// transaction (the extended protocol's implicit one, up to its Sync), so
// PostgreSQL commits once for several receipts instead of serving them on
// as many connections contending for its cores. A caller that finds no
// flush running writes at once, as before; each caller gets its own
// outcome (id, ErrDuplicateInbound, error) only after the commit that
// made its receipt durable, or its failure. Should the batch's
// transaction fail (one bad receipt, a deadlock with another replica's
// batch, the connection), each of its receipts is written on its own, so
// that one cannot fail the others.
//
// EDI receipts (InboundMessage.EDI) do not join: their writes need the
// message's id back and take the partner's control numbers, a
// transaction of several round trips of their own.

// receiptBatchRows and receiptBatchBytes bound one flush: the receipts
// and their payload and MDN bytes (a receipt larger than the bytes is
// flushed alone).
const (
	receiptBatchRows  = 32
	receiptBatchBytes = 4 << 20
)

// receiptFlushTimeout bounds a flush of receipts taken from the line: it
// runs for all of them, whatever becomes of the context of the caller
// that flushes it.
const receiptFlushTimeout = 30 * time.Second

// receipt is one caller's save waiting in the line or being flushed.
type receipt struct {
	sql  string
	args []any
	size int
	// lead receives the batch this caller flushes for the others, done
	// is closed when id and err are set.
	lead chan []*receipt
	done chan struct{}
	// taken: in a batch being flushed (receiptBatcher.mu).
	taken bool
	id    int64
	err   error
}

// receiptBatcher is the line of receipts and its metrics.
type receiptBatcher struct {
	mu       sync.Mutex
	flushing bool
	line     []*receipt

	perFlush  prometheus.Histogram
	fallbacks prometheus.Counter
}

func newReceiptBatcher() *receiptBatcher {
	return &receiptBatcher{
		perFlush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edihub_receipt_flush_receipts",
			Help:    "Receipts written per flush (transaction) of the group commit of inbound messages.",
			Buckets: []float64{1, 2, 4, 8, 16, 32},
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edihub_receipt_flush_fallbacks_total",
			Help: "Flushes of several receipts whose transaction failed, their receipts then written one by one.",
		}),
	}
}

// saveReceipt writes the one statement sql of a receipt (its id, or no
// row for a duplicate) through the group commit.
func (s *Store) saveReceipt(ctx context.Context, sql string, args []any, size int) (int64, error) {
	b := s.receipts
	r := &receipt{sql: sql, args: args, size: size}
	b.mu.Lock()
	if !b.flushing {
		// Nothing in flight: write at once, under the caller's context,
		// as a save without group commit does.
		b.flushing = true
		b.mu.Unlock()
		s.flush(ctx, []*receipt{r})
		s.handOff()
		return r.id, r.err
	}
	r.lead, r.done = make(chan []*receipt, 1), make(chan struct{})
	b.line = append(b.line, r)
	b.mu.Unlock()
	select {
	case batch := <-r.lead:
		s.flushTaken(ctx, batch)
	case <-r.done:
	case <-ctx.Done():
		b.mu.Lock()
		if !r.taken {
			b.leave(r)
			b.mu.Unlock()
			return 0, ctx.Err()
		}
		b.mu.Unlock()
		// Taken: its batch is being (or about to be) flushed; wait for
		// the outcome, bounded by the flush's own timeout.
		select {
		case batch := <-r.lead:
			s.flushTaken(ctx, batch)
		case <-r.done:
		}
	}
	<-r.done
	return r.id, r.err
}

// flushTaken flushes a batch taken from the line, independently of the
// context of the caller that runs it, and hands the line on.
func (s *Store) flushTaken(ctx context.Context, batch []*receipt) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiptFlushTimeout)
	s.flush(fctx, batch)
	cancel()
	s.handOff()
}

// leave takes r, not taken, out of the line (b.mu held).
func (b *receiptBatcher) leave(r *receipt) {
	for i, q := range b.line {
		if q == r {
			last := len(b.line) - 1
			copy(b.line[i:], b.line[i+1:])
			b.line[last] = nil
			b.line = b.line[:last]
			return
		}
	}
}

// handOff ends a flush: the first receipts of the line, if any, are
// taken as the next batch and their first caller flushes it; otherwise
// the next caller writes at once.
func (s *Store) handOff() {
	b := s.receipts
	b.mu.Lock()
	if len(b.line) == 0 {
		b.flushing = false
		b.mu.Unlock()
		return
	}
	n, bytes := 0, 0
	for n < len(b.line) && n < receiptBatchRows && (n == 0 || bytes+b.line[n].size <= receiptBatchBytes) {
		b.line[n].taken = true
		bytes += b.line[n].size
		n++
	}
	batch := make([]*receipt, n)
	copy(batch, b.line)
	rest := copy(b.line, b.line[n:])
	clear(b.line[rest:])
	b.line = b.line[:rest]
	b.mu.Unlock()
	batch[0].lead <- batch
}

// flush writes batch and sets each receipt's outcome: several in one
// transaction, each on its own should that fail.
func (s *Store) flush(ctx context.Context, batch []*receipt) {
	s.receipts.perFlush.Observe(float64(len(batch)))
	if len(batch) == 1 || s.saveBatch(ctx, batch) != nil {
		if len(batch) > 1 {
			s.receipts.fallbacks.Inc()
		}
		for _, r := range batch {
			r.id, r.err = s.saveOne(ctx, r.sql, r.args)
		}
	}
	for _, r := range batch {
		if r.done != nil {
			close(r.done)
		}
	}
}

// saveOne runs one receipt's statement on its own.
func (s *Store) saveOne(ctx context.Context, sql string, args []any) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrDuplicateInbound
	}
	return id, err
}

// saveBatch runs the statements of batch in one pipeline, one round trip
// and one transaction (pgx ends a batch with one Sync: the server runs
// everything before it as one implicit transaction, rolled back whole on
// an error). The outcomes are set only when it commits.
func (s *Store) saveBatch(ctx context.Context, batch []*receipt) error {
	var pb pgx.Batch
	for _, r := range batch {
		pb.Queue(r.sql, r.args...)
	}
	br := s.pool.SendBatch(ctx, &pb)
	ids := make([]int64, len(batch))
	errs := make([]error, len(batch))
	for i := range batch {
		err := br.QueryRow().Scan(&ids[i])
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = ErrDuplicateInbound
		case err != nil:
			_ = br.Close()
			return fmt.Errorf("receipt %d of %d: %w", i+1, len(batch), err)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	for i, r := range batch {
		r.id, r.err = ids[i], errs[i]
	}
	return nil
}
