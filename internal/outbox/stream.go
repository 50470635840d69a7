package outbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// A message whose payload is larger than Options.SpoolFromBytes is never
// held whole. Its first attempt builds it as a stream (BuildStream: the
// payload read from PostgreSQL piece by piece, compressed, signed and
// encrypted as it goes) into a spool file and, as it goes, into the
// outbox row in pieces (outbox_body_chunks, by COPY in a transaction that
// commits with its MIC in every algorithm once the build is done), and
// posts the file with its Content-Length. A retry or
// a resend copies the frozen pieces into a new spool file and posts it:
// the same bytes and the same MIC every time, as for a message built in
// memory. Rebuilding from the payload instead would draw a new content
// key, IV, boundary and signing time, so the bytes and (for a signed or
// encrypted message) the MIC would change between attempts, and an MDN
// returned for an earlier attempt would no longer match. The file is
// removed when the attempt ends, on every path.

// bodyBuffer is the write buffer between a streamed build and its spool
// file.
const bodyBuffer = 256 << 10

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
	var err error
	for range boundaryTries {
		if f, err = d.o.Spool.Create(); err != nil {
			return nil, err
		}
		if fr, err = d.o.Store.FreezeOutboundBody(ctx, *it); err != nil {
			f.Close()
			return nil, err
		}
		b, err = d.buildInto(ctx, f, fr, it, st, p, src)
		if err == nil {
			break
		}
		fr.Abort()
		f.Close()
		if !errors.Is(err, as2.ErrBoundaryInContent) {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBuild, err)
	}
	built := time.Now()
	if err := fr.Commit(ctx, b); err != nil {
		f.Close()
		return nil, err
	}
	// Where the time of a large message goes, for operators: the build
	// (the copy into PostgreSQL runs beside it) and the commit after it.
	d.log.Info("built as a stream", zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID),
		zap.Int64("payload_bytes", src.PayloadSize), zap.Int64("body_bytes", f.Size()),
		zap.Duration("build", built.Sub(start)), zap.Duration("freeze", time.Since(built)))
	it.Headers, it.MIC, it.MICAlg, it.MICs = b.Headers, b.MIC, b.MICAlg, b.MICs
	it.BodyChunked, it.BodySize = true, f.Size()
	return f, nil
}

// buildInto writes the message built from src to f and to fr. A profile
// it cannot build is errBuild; storage and spool errors are returned as
// they are.
func (d *Dispatcher) buildInto(ctx context.Context, f *spool.File, fr *postgres.BodyFreezer, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource) (postgres.OutboundBuild, error) {
	bw := bufio.NewWriterSize(io.MultiWriter(f, fr), bodyBuffer)
	var ioErr error // an error of the payload's source or of the file
	writePayload := func(w io.Writer) error {
		if !src.Chunked {
			_, err := w.Write(src.Payload)
			return err
		}
		_, err := d.o.Store.WritePayload(ctx, it.MessageID, func(postgres.MessageInfo) io.Writer { return w })
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
