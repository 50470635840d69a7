package outbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// A message whose payload is larger than Options.SpoolFromBytes is never
// held whole. Its first attempt builds it as a stream (BuildStream: the
// payload read from PostgreSQL piece by piece, the next piece read while
// the build takes the one before, compressed on every core, signed and
// encrypted as it goes) into a spool file and, as it goes, into the
// outbox row in pieces (outbox_body_chunks, by a COPY that follows the
// spool file as it grows, in a transaction that commits with its MICs
// once the build is done: in every algorithm when an MDN is asked for,
// in its own otherwise), and posts the file with its Content-Length
// (sendfile(2) over plain HTTP). A retry or
// a resend copies the frozen pieces into a new spool file and posts it:
// the same bytes and the same MIC every time, as for a message built in
// memory. Rebuilding from the payload instead would draw a new content
// key, IV, boundary and signing time, so the bytes and (for a signed or
// encrypted message) the MIC would change between attempts, and an MDN
// returned for an earlier attempt would no longer match. The file is
// removed when the attempt ends, on every path.

// bodyBuffer is the write buffer between a streamed build and its spool
// file (and the freeze).
const bodyBuffer = 256 << 10

// payloadAhead is how many pieces of a payload stored in pieces (1 MiB
// each) wait for a streamed build, read from PostgreSQL ahead of it;
// the reader holds the next one meanwhile.
const payloadAhead = 1

// boundaryTries bounds the builds of a message whose payload holds the
// multipart boundary drawn for it (never by chance: 96 random bits).
const boundaryTries = 3

// streamed reports whether src is built as a stream for p.
func (d *Dispatcher) streamed(src postgres.OutboundSource, p *config.Partner) bool {
	// Every profile streams, AES-GCM included (its tag is computed as the
	// content streams).
	return d.o.Spool != nil && src.PayloadSize > d.o.SpoolFromBytes
}

// buildStreamed builds src as a stream into a spool file, freezes it and
// returns the file, positioned for posting; on error the file is gone.
func (d *Dispatcher) buildStreamed(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource) (*spool.File, error) {
	start := time.Now()
	var f *spool.File
	var fr *postgres.BodyFreezer
	var b postgres.OutboundBuild
	var stats buildStats
	var err error
	var back *os.File // the file read back by the freeze
	for range boundaryTries {
		if f, err = d.o.Spool.Create(); err != nil {
			return nil, err
		}
		if back, err = f.Open(); err != nil {
			f.Close()
			return nil, err
		}
		if fr, err = d.o.Store.FreezeOutboundBody(ctx, *it, back); err != nil {
			back.Close()
			f.Close()
			return nil, err
		}
		stats = buildStats{}
		b, err = d.buildInto(ctx, f, fr, it, st, p, src, &stats)
		if err == nil {
			break
		}
		fr.Abort()
		back.Close()
		f.Close()
		if !errors.Is(err, as2.ErrBoundaryInContent) {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBuild, err)
	}
	built := time.Now()
	err = fr.Commit(ctx, b)
	back.Close()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Where the time of a large message goes, for operators: the build
	// (the payload read ahead of it, the copy into PostgreSQL beside it;
	// the time it waited for the payload and wrote its spool file) and
	// the freeze's end after it (the copy's tail, the commit).
	d.log.Info("built as a stream", zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID),
		zap.Int64("payload_bytes", src.PayloadSize), zap.Int64("body_bytes", f.Size()),
		zap.Duration("build", built.Sub(start)), zap.Duration("read_wait", stats.readWait),
		zap.Duration("spool_write", stats.spoolWrite), zap.Duration("freeze", time.Since(built)))
	it.Headers, it.MIC, it.MICAlg, it.MICs = b.Headers, b.MIC, b.MICAlg, b.MICs
	it.BodyChunked, it.BodySize = true, f.Size()
	return f, nil
}

// buildStats is where the time of a streamed build went, beside its own
// work: waiting for the payload's pieces, writing the spool file.
type buildStats struct {
	readWait, spoolWrite time.Duration
}

// buildInto writes the message built from src to f, then tells fr. A profile
// it cannot build is errBuild; storage and spool errors are returned as
// they are.
func (d *Dispatcher) buildInto(ctx context.Context, f *spool.File, fr *postgres.BodyFreezer, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource, stats *buildStats) (postgres.OutboundBuild, error) {
	bw := bufio.NewWriterSize(io.MultiWriter(&timedWriter{w: f, d: &stats.spoolWrite}, fr), bodyBuffer)
	var ioErr error // an error of the payload's source or of the file
	writePayload := func(w io.Writer) error {
		if !src.Chunked {
			_, err := w.Write(src.Payload)
			return err
		}
		err := d.readAhead(ctx, it.MessageID, w, &stats.readWait)
		if err != nil {
			ioErr = err
		}
		return err
	}
	b, err := BuildStream(st, p, src, writePayload, &errWriter{w: bw, err: &ioErr}, d.o.Now(), d.o.Rand)
	if err == nil {
		err = bw.Flush()
		ioErr = err
	}
	switch {
	case err == nil:
		return b, nil
	case ioErr != nil, errors.Is(err, as2.ErrBoundaryInContent):
		return b, err
	}
	return b, fmt.Errorf("%w: %w", errBuild, err)
}

// readAhead writes the payload of message id, stored in pieces, to w as
// Store.WritePayload does, but reads the next pieces (payloadAhead of
// them) on a goroutine of its own while w takes the one before, so that
// the build waits on PostgreSQL only when PostgreSQL is the slower; it
// adds the time w waited for a piece to *wait. The goroutine has ended
// when it returns. An error of w is returned as it is.
func (d *Dispatcher) readAhead(ctx context.Context, id int64, w io.Writer, wait *time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full, free := make(chan []byte, payloadAhead), make(chan []byte, payloadAhead)
	for range payloadAhead {
		free <- nil
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(full)
		_, err := d.o.Store.WritePayload(ctx, id, func(postgres.MessageInfo) io.Writer {
			return writerFunc(func(p []byte) (int, error) {
				var b []byte
				select {
				case b = <-free:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				full <- append(b[:0], p...) // never blocks: it holds every piece
				return len(p), nil
			})
		})
		readErr <- err
	}()
	var err error
	for {
		start := time.Now()
		b, ok := <-full
		*wait += time.Since(start)
		if !ok {
			break
		}
		if err == nil {
			if _, err = w.Write(b); err != nil {
				cancel() // the reader stops; the pieces it holds are drained
			}
		}
		free <- b
	}
	if rerr := <-readErr; err == nil {
		err = rerr
	}
	return err
}

// writerFunc is a function as an io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// timedWriter adds the time its writes to w take to *d.
type timedWriter struct {
	w io.Writer
	d *time.Duration
}

func (t *timedWriter) Write(p []byte) (int, error) {
	start := time.Now()
	n, err := t.w.Write(p)
	*t.d += time.Since(start)
	return n, err
}

// errWriter records the first error of w in *err, so that a failed write
// to the spool (ErrFull) is told from a profile the build refuses.
type errWriter struct {
	w   io.Writer
	err *error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && *e.err == nil {
		*e.err = err
	}
	return n, err
}

// fetchBody copies the frozen body of it, built as a stream, from the
// database into a new spool file and returns it; on error the file is
// gone. The copy is local and holds no transaction; the post that
// follows reads the file.
func (d *Dispatcher) fetchBody(ctx context.Context, it postgres.OutboxItem) (*spool.File, error) {
	if d.o.Spool == nil {
		return nil, fmt.Errorf("%w: outbox %d was built as a stream and this replica has no spool", errBuild, it.ID)
	}
	f, err := d.o.Spool.Create()
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, bodyBuffer)
	if err := d.o.Store.WriteOutboxBody(ctx, it, bw); err != nil {
		f.Close()
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
