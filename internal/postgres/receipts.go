package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Group commit of receipts. Concurrent SaveInbound calls of the
// one-statement path (payload in memory up to largePayload, no EDI) are
// written together: while one flush runs, the callers that come meanwhile
// wait in line; when it ends, the first of them flushes the line (up to
// receiptBatchRows receipts and receiptBatchBytes bytes) for all, in one
// statement (saveMany: one round trip, one transaction, the executor set
// up once for the whole batch), on one connection instead of as many
// contending for the server's cores. A caller that finds no flush running
// writes at once, with the one-receipt statement, as before; each caller
// gets its own outcome (id, ErrDuplicateInbound, error) only after the
// commit that made its receipt durable, or its failure. Should the
// batch's statement fail (one bad receipt, the connection), each of its
// receipts is written on its own, so that one cannot fail the others.
// (A batch takes its Message-IDs in sorted order, so two replicas'
// batches of the same Message-IDs cannot deadlock: saveMany.) (Pipelining the
// one-receipt statement N times in one transaction was measured too: it
// saves the round trips and commits but not the per-statement work, and
// cost PostgreSQL 0.80–0.88 × the receipt alone at 7–8 receipts per
// flush, against 0.50–0.63 × for the one statement: docs/performance.md.)
//
// The flushes run on one connection taken from the pool for as long as
// receipts keep coming, and given back when the line is empty (or a
// write failed): one backend, its caches warm, writes them in turn,
// instead of whichever idle connection the pool hands out next (it
// rotates them). In the served bench that cost PostgreSQL 0.77-1.04 x the
// CPU per message, median 0.89, in five alternating pairs
// (docs/performance.md).
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
	m    *InboundMessage
	hdr  []byte
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

	// conn is the connection the flushes run on while the line is not
	// empty; nil until a flush takes one. Only the caller that flushes
	// uses it; handOff gives it back to the pool under mu.
	conn *pgxpool.Conn

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

// saveReceipt writes m (no EDI, its payload in memory) through the group
// commit; hdr is its MDN's header encoded.
func (s *Store) saveReceipt(ctx context.Context, m *InboundMessage, hdr []byte) (int64, error) {
	b := s.receipts
	r := &receipt{m: m, hdr: hdr, size: len(m.Payload)}
	if m.MDN != nil {
		r.size += len(m.MDN.Body) + len(hdr)
	}
	b.mu.Lock()
	if !b.flushing {
		// Nothing in flight: write at once, under the caller's context,
		// as a save without group commit does.
		b.flushing = true
		b.mu.Unlock()
		defer s.handOff()
		s.flush(ctx, []*receipt{r})
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
	defer s.handOff()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiptFlushTimeout)
	defer cancel()
	s.flush(fctx, batch)
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
		c := b.conn
		b.conn = nil
		b.mu.Unlock()
		if c != nil {
			c.Release()
		}
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
	written := false
	defer func() {
		// Should the write panic (the flushing caller's handler recovers
		// it), the others of the batch must not wait for ever.
		if !written {
			s.dropFlushConn()
		}
		for _, r := range batch {
			if !written {
				r.id, r.err = 0, errFlushAborted
			}
			if r.done != nil {
				close(r.done)
			}
		}
	}()
	s.receipts.perFlush.Observe(float64(len(batch)))
	q := s.flushConn(ctx)
	if len(batch) == 1 || s.saveMany(ctx, q, batch) != nil {
		if len(batch) > 1 {
			// One by one on the pool's connections, as the batch's may be
			// what failed.
			s.receipts.fallbacks.Inc()
			s.dropFlushConn()
			q = s.pool
		}
		for _, r := range batch {
			r.id, r.err = s.saveOne(ctx, q, r.m, r.hdr)
			if r.err != nil && !errors.Is(r.err, ErrDuplicateInbound) {
				s.dropFlushConn()
			}
		}
	}
	written = true
}

// querier is what a flush writes with: the connection it keeps, or the
// pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// flushConn returns the connection the flush runs on: the one kept since
// the line was last empty, else one taken from the pool now (the pool
// itself should that fail: the write then reports why). The caller
// flushes.
func (s *Store) flushConn(ctx context.Context) querier {
	b := s.receipts
	if b.conn == nil {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return s.pool
		}
		b.conn = c
	}
	return b.conn
}

// dropFlushConn gives the flush's connection, if it keeps one, back to
// the pool after a failed write (the pool closes it if it is broken or
// left in a transaction); the next flush takes one afresh. The caller
// flushes.
func (s *Store) dropFlushConn() {
	if c := s.receipts.conn; c != nil {
		s.receipts.conn = nil
		c.Release()
	}
}

// errFlushAborted is the outcome of the receipts of a flush that panicked.
var errFlushAborted = errors.New("the write of this receipt's batch was aborted")

// saveOne runs one receipt's statement on its own.
func (s *Store) saveOne(ctx context.Context, q querier, m *InboundMessage, hdr []byte) (int64, error) {
	sql, args := oneStatement(m, hdr)
	var id int64
	err := q.QueryRow(ctx, sql, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrDuplicateInbound
	}
	return id, err
}

// saveMany writes the receipts of batch in one statement: their values
// as arrays, unnested in the order of their Message-IDs (then partners;
// receipts of one Message-ID in the batch's order); the messages
// inserted in that order (a Message-ID stored before, or earlier in the
// batch, is skipped: ON CONFLICT DO NOTHING), then, for each message
// inserted and the first receipt of the batch that carries its
// Message-ID, its received event (in the order of the messages' ids),
// payload, MDN and outbox row. The receipts that get no id back are
// duplicates. The outcomes are set only when it commits.
//
// The order: each insert that meets a Message-ID another transaction
// inserted and has not yet committed waits for that transaction while
// holding the Message-IDs it inserted before. Two replicas' batches
// taking the same Message-IDs (a partner's message sent to both at once)
// in opposite orders would each wait for the other: a deadlock, one
// batch aborted and rewritten one by one. Taken in one order, one of
// them waits for the other, which ends.
func (s *Store) saveMany(ctx context.Context, q querier, batch []*receipt) error {
	batch = slices.Clone(batch)
	slices.SortStableFunc(batch, func(a, b *receipt) int {
		return cmp.Or(strings.Compare(a.m.MessageID, b.m.MessageID), strings.Compare(a.m.Partner, b.m.Partner))
	})
	var shape saveShape
	a := manyArgs{}
	for _, r := range batch {
		shape |= a.add(r.m, r.hdr)
	}
	rows, err := q.Query(ctx, saveManySQL[shape], a.list(shape)...)
	if err != nil {
		return err
	}
	ids := make([]int64, len(batch))
	var ord, id int64
	_, err = pgx.ForEachRow(rows, []any{&ord, &id}, func() error {
		if ord < 1 || int(ord) > len(batch) {
			return fmt.Errorf("receipt %d of %d returned", ord, len(batch))
		}
		ids[ord-1] = id
		return nil
	})
	if err != nil {
		return err
	}
	for i, r := range batch {
		r.id, r.err = ids[i], nil
		if ids[i] == 0 {
			r.err = ErrDuplicateInbound
		}
	}
	return nil
}

// manyArgs are the columns of saveManySQL's receipts, one array each.
type manyArgs struct {
	partner, as2From, as2To, messageID, status, contentType, filename []string
	size                                                              []int64
	signed, encrypted, compressed                                     []bool
	mic, micAlg, mdnMode                                              []string
	mdnSigned                                                         []bool
	mdnURL, disposition, errText                                      []string
	hasPayload                                                        []bool
	payload                                                           [][]byte
	hasMDN                                                            []bool
	dType, dHeaders                                                   []string
	dBody                                                             [][]byte
	dDisposition, dMIC                                                []string
	dSigned, outbox                                                   []bool
	attempts                                                          []int32
	window                                                            []int64
}

// add appends m's values and returns the tables it writes.
func (a *manyArgs) add(m *InboundMessage, hdr []byte) saveShape {
	a.partner, a.as2From, a.as2To = append(a.partner, m.Partner), append(a.as2From, m.AS2From), append(a.as2To, m.AS2To)
	a.messageID, a.status = append(a.messageID, m.MessageID), append(a.status, m.Status)
	a.contentType, a.filename = append(a.contentType, m.ContentType), append(a.filename, m.Filename)
	a.size, a.signed = append(a.size, m.PayloadSize), append(a.signed, m.Signed)
	a.encrypted, a.compressed = append(a.encrypted, m.Encrypted), append(a.compressed, m.Compressed)
	a.mic, a.micAlg, a.mdnMode = append(a.mic, m.MIC), append(a.micAlg, m.MICAlg), append(a.mdnMode, m.MDNMode)
	a.mdnSigned, a.mdnURL = append(a.mdnSigned, m.MDNSigned), append(a.mdnURL, m.MDNURL)
	a.disposition, a.errText = append(a.disposition, m.Disposition), append(a.errText, m.Error)
	var shape saveShape
	a.hasPayload, a.payload = append(a.hasPayload, m.Payload != nil), append(a.payload, m.Payload)
	if m.Payload != nil {
		shape |= shapePayload
	}
	d := m.MDN
	if d == nil {
		d = &StoredMDN{}
	} else {
		shape |= shapeMDN
	}
	a.hasMDN, a.dType = append(a.hasMDN, m.MDN != nil), append(a.dType, d.Header.Get("Content-Type"))
	a.dHeaders, a.dBody = append(a.dHeaders, string(hdr)), append(a.dBody, d.Body)
	a.dDisposition, a.dMIC, a.dSigned = append(a.dDisposition, d.Disposition), append(a.dMIC, d.MIC), append(a.dSigned, d.Signed)
	outbox := m.MDN != nil && m.Outbox
	if outbox {
		shape |= shapeOutbox
	}
	attempts, window := m.MDNRetry.args()
	a.outbox, a.attempts, a.window = append(a.outbox, outbox), append(a.attempts, int32(attempts)), append(a.window, window)
	return shape
}

// list is the statement's arguments for shape: the unnested columns
// ($1 to $27), then the arrays of the bulky values of the tables in
// shape (saveManyStatement).
func (a *manyArgs) list(shape saveShape) []any {
	args := []any{a.partner, a.as2From, a.as2To, a.messageID, a.status, a.contentType, a.filename,
		a.size, a.signed, a.encrypted, a.compressed, a.mic, a.micAlg, a.mdnMode, a.mdnSigned, a.mdnURL,
		a.disposition, a.errText, a.hasPayload, a.hasMDN, a.dType, a.dDisposition, a.dMIC, a.dSigned,
		a.outbox, a.attempts, a.window}
	if shape&shapePayload != 0 {
		args = append(args, a.payload)
	}
	if shape&shapeMDN != 0 {
		args = append(args, a.dHeaders, a.dBody)
	}
	return args
}

// saveManySQL is saveMany's statement for each union of its receipts'
// shapes: only the tables some receipt writes are in it.
var saveManySQL = func() (sqls [shapeOutbox << 1]string) {
	for shape := range saveShape(len(sqls)) {
		sqls[shape] = saveManyStatement(shape)
	}
	return sqls
}()

// saveManyStatement is the statement for shape. The receipts' values
// of fixed size are unnested into rows (i, r), their payloads, MDN header
// fields and MDN bodies taken from their arrays by each row's ordinal
// only where they are written: carried in the rows, each was copied into
// and out of the statement's materialized WITH queries, which cost the
// backend about a tenth of its CPU per receipt (docs/performance.md).
func saveManyStatement(shape saveShape) string {
	var b strings.Builder
	b.WriteString(receivedEventMarker + `WITH i AS (
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::bigint[], $9::boolean[], $10::boolean[], $11::boolean[], $12::text[], $13::text[], $14::text[],
                     $15::boolean[], $16::text[], $17::text[], $18::text[], $19::boolean[],
                     $20::boolean[], $21::text[], $22::text[], $23::text[], $24::boolean[],
                     $25::boolean[], $26::integer[], $27::bigint[])
       WITH ORDINALITY AS i(partner, as2_from, as2_to, message_id, status, content_type, filename,
                            payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode,
                            mdn_signed, mdn_url, disposition, error, has_payload,
                            has_mdn, d_type, d_disposition, d_mic, d_signed,
                            outbox, max_attempts, retry_window, ord)),
m AS (
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, filename,
                      payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, mdn_url,
                      disposition, error, attempts, completed_at)
SELECT 'inbound', partner, as2_from, as2_to, message_id, status, content_type, filename,
       payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, mdn_url,
       disposition, error, 1, now()
  FROM i ORDER BY ord
ON CONFLICT (partner, direction, message_id) DO NOTHING
RETURNING id, partner, message_id),
r AS (SELECT DISTINCT ON (m.id) m.id, i.*
        FROM m JOIN i ON i.partner = m.partner AND i.message_id = m.message_id
       ORDER BY m.id, i.ord),
e AS (INSERT INTO events (type, message, partner, direction, detail)
      SELECT 'received', id, partner, 'inbound', jsonb_strip_nulls(jsonb_build_object(
                 'message_id', message_id,
                 'status', status,
                 'disposition', nullif(disposition, ''),
                 'error', nullif(left(error, 300), ''),
                 'filename', nullif(filename, '')))
        FROM r WHERE status = 'processed' ORDER BY id)`)
	n := 27
	next := func() string { n++; return "$" + strconv.Itoa(n) }
	if shape&shapePayload != 0 {
		fmt.Fprintf(&b, `,
p AS (INSERT INTO payloads (message_id, data) SELECT id, (%s::bytea[])[ord::integer] FROM r WHERE has_payload)`, next())
	}
	if shape&shapeMDN != 0 {
		hdr, body := next(), next()
		fmt.Fprintf(&b, `,
d AS (INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
      SELECT id, d_type, (%[1]s::text[])[ord::integer]::jsonb, (%[2]s::bytea[])[ord::integer], d_disposition, d_mic, d_signed
        FROM r WHERE has_mdn)`, hdr, body)
		if shape&shapeOutbox != 0 {
			fmt.Fprintf(&b, `,
o AS (INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
      SELECT 'mdn', id, partner, mdn_url, (%[1]s::text[])[ord::integer]::jsonb, (%[2]s::bytea[])[ord::integer], 'pending', now(), max_attempts,
             CASE WHEN retry_window > 0 THEN now() + retry_window * interval '1 microsecond' END
        FROM r WHERE outbox)`, hdr, body)
		}
	}
	b.WriteString(`
SELECT ord, id FROM r`)
	return b.String()
}
