package outbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// A message whose payload is larger than Options.SpoolFromBytes is never
// held whole. Its first attempt builds it as a stream (BuildStream: the
// payload read from PostgreSQL piece by piece, the next piece read while
// the build takes the one before, compressed on every core, signed and
// encrypted as it goes) into a spool file, records in the outbox row the
// inputs of the build rather than its bytes (frozenInputs: the profile
// it used, the time, the boundary, the signature, the content key, IV
// and recipient infos), the body's size and SHA-256, its headers and
// MICs (in every algorithm when an MDN is asked for, in its own
// otherwise), and posts the file with its Content-Length (sendfile(2)
// over plain HTTP). A retry or a resend builds the message again from
// its payload with those inputs into a new spool file, checks its size
// and SHA-256 against the first build's before it posts it, and posts
// it: the same bytes and the same MIC every time, as for a message built
// in memory, so that an MDN returned for an earlier attempt still
// matches. Storing the body itself (outbox_body_chunks, as before
// migration 00020) cost PostgreSQL more CPU than the whole build; a row
// frozen that way is still posted from its pieces (fetchBody). The file
// is removed when the attempt ends, on every path.
//
// A rebuild that comes out other than the first build (the compressor's
// output changed with an upgrade between attempts: everything else is
// recorded) is still posted, never dropped: it is the same payload,
// signed and encrypted as before, and refusing it would lose the
// message. Its size, SHA-256 and MICs are recorded (Store.RecordRebuild)
// and its MICs added to those an MDN is checked against, the first
// build's kept, with a warning in the log.

// bodyBuffer is the write buffer between a streamed build and its spool
// file.
const bodyBuffer = 256 << 10

// payloadAhead is how many pieces of a payload stored in pieces (1 MiB
// each) wait for a streamed build, read from PostgreSQL ahead of it;
// the reader holds the next one meanwhile. One piece ahead, a 2 GiB
// send waited 2.1 s of its 9.8 s for PostgreSQL on two cores shared
// with it; three ahead, 0.4 s of 8.8 s.
const payloadAhead = 3

// boundaryTries bounds the builds of a message whose payload holds the
// multipart boundary drawn for it (never by chance: 96 random bits).
const boundaryTries = 3

// frozenInputs is what a streamed build used besides its payload, kept
// in the outbox row (build_inputs, as JSON) so that every later attempt
// builds the same bytes: the partner profile, the time (Date and signing
// time) and what it drew. It holds the content key: it is never logged.
type frozenInputs struct {
	Time    time.Time `json:"time"`
	Profile profile   `json:"profile"`
	as2.StreamInputs
}

// profile is what of a partner's configuration shapes a built message,
// in its configuration spelling: a later attempt builds with the profile
// of the first even when the configuration changed since.
type profile struct {
	Sign              string `json:"sign,omitempty"`
	Encrypt           string `json:"encrypt,omitempty"`
	KeyEncryption     string `json:"key_encryption,omitempty"`
	Compress          bool   `json:"compress,omitempty"`
	CompressOrder     string `json:"compress_order,omitempty"`
	TransferEncoding  string `json:"transfer_encoding,omitempty"`
	MDNMICAlg         string `json:"mdn_mic_alg,omitempty"`
	MICIncludeHeaders bool   `json:"mic_include_headers,omitempty"`
	MICAlgNames       string `json:"mic_alg_names,omitempty"`
}

func profileOf(p *config.Partner) profile {
	return profile{Sign: p.Sign, Encrypt: p.Encrypt, KeyEncryption: p.KeyEncryption, Compress: p.Compress,
		CompressOrder: p.CompressOrder, TransferEncoding: p.TransferEncoding, MDNMICAlg: p.MDNMICAlg,
		MICIncludeHeaders: p.MICIncludeHeaders, MICAlgNames: p.MICAlgNames}
}

// apply is p with the profile pr.
func (pr profile) apply(p *config.Partner) *config.Partner {
	q := *p
	q.Sign, q.Encrypt, q.KeyEncryption, q.Compress = pr.Sign, pr.Encrypt, pr.KeyEncryption, pr.Compress
	q.CompressOrder, q.TransferEncoding, q.MDNMICAlg = pr.CompressOrder, pr.TransferEncoding, pr.MDNMICAlg
	q.MICIncludeHeaders, q.MICAlgNames = pr.MICIncludeHeaders, pr.MICAlgNames
	return &q
}

// streamed reports whether src is built as a stream for p.
func (d *Dispatcher) streamed(src postgres.OutboundSource, p *config.Partner) bool {
	// Every profile streams, AES-GCM included (its tag is computed as the
	// content streams).
	return d.o.Spool != nil && src.PayloadSize > d.o.SpoolFromBytes
}

// buildStreamed builds src as a stream into a spool file, records the
// build's inputs, size, SHA-256, headers and MICs in the outbox row and
// returns the file, positioned for posting; on error the file is gone.
func (d *Dispatcher) buildStreamed(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource) (*spool.File, error) {
	start := time.Now()
	var f *spool.File
	var b postgres.OutboundBuild
	var in frozenInputs
	var stats buildStats
	var err error
	for range boundaryTries {
		in, stats = frozenInputs{Time: d.o.Now(), Profile: profileOf(p)}, buildStats{}
		f, b, err = d.buildFile(ctx, it, st, p, src, &in, &stats)
		if !errors.Is(err, as2.ErrBoundaryInContent) {
			break
		}
	}
	if errors.Is(err, as2.ErrBoundaryInContent) {
		return nil, fmt.Errorf("%w: %w", errBuild, err)
	}
	if err != nil {
		return nil, err
	}
	built := time.Now()
	if b.Inputs, err = json.Marshal(in); err == nil {
		err = d.o.Store.SaveOutboundBuild(ctx, *it, b)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	// Where the time of a large message goes, for operators: the build
	// (the payload read ahead of it; the time it waited for the payload
	// and wrote its spool file) and the save of its record after it.
	d.log.Info("built as a stream", zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID),
		zap.Int64("payload_bytes", src.PayloadSize), zap.Int64("body_bytes", f.Size()),
		zap.Duration("build", built.Sub(start)), zap.Duration("read_wait", stats.readWait),
		zap.Duration("spool_write", stats.spoolWrite), zap.Duration("save", time.Since(built)))
	it.Headers, it.MIC, it.MICAlg, it.MICs = b.Headers, b.MIC, b.MICAlg, b.MICs
	it.BodyChunked, it.BodySize, it.BuildInputs, it.BodySHA256 = true, f.Size(), b.Inputs, b.BodySHA256
	return f, nil
}

// rebuildStreamed builds the message of it, built as a stream at its
// first attempt, again from its payload with the inputs that build
// recorded, into a new spool file, and returns the file; on error the
// file is gone. A body other than the first build's (size or SHA-256)
// is recorded and returned all the same (see the comment at the top).
func (d *Dispatcher) rebuildStreamed(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner) (*spool.File, error) {
	if d.o.Spool == nil {
		return nil, fmt.Errorf("%w: outbox %d was built as a stream and this replica has no spool (set EDIHUB_SPOOL_DIR)", errBuild, it.ID)
	}
	var in frozenInputs
	if err := json.Unmarshal(it.BuildInputs, &in); err != nil {
		return nil, fmt.Errorf("%w: outbox %d: its recorded build inputs: %w", errBuild, it.ID, err)
	}
	src, err := d.o.Store.OutboundSource(ctx, it.MessageID)
	if err != nil {
		return nil, err
	}
	var stats buildStats
	f, b, err := d.buildFile(ctx, it, st, in.Profile.apply(p), src, &in, &stats)
	if errors.Is(err, as2.ErrBoundaryInContent) {
		return nil, fmt.Errorf("%w: %w", errBuild, err)
	}
	if err != nil {
		return nil, err
	}
	if f.Size() == it.BodySize && bytes.Equal(b.BodySHA256, it.BodySHA256) {
		return f, nil
	}
	if it.BodySHA256 == nil {
		// Its first build was posted as it ran and ended before its
		// digests were recorded (see livepost.go): this build's are
		// the message's.
		if err := d.recordFirstDigests(ctx, it, f.Size(), b, &in); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	if err := d.recordRebuild(ctx, it, f.Size(), b); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// recordFirstDigests records the size, SHA-256, MICs and inputs of the
// build b of it (size bytes, with the inputs in) as its first build's.
func (d *Dispatcher) recordFirstDigests(ctx context.Context, it *postgres.OutboxItem, size int64, b postgres.OutboundBuild, in *frozenInputs) error {
	var err error
	b.BodySize = size
	if b.Inputs, err = json.Marshal(in); err != nil {
		return err
	}
	if err := d.o.Store.RecordStreamedBuild(ctx, *it, b); err != nil {
		return err
	}
	it.MIC, it.MICAlg, it.MICs, it.BodySize, it.BodySHA256, it.BuildInputs = b.MIC, b.MICAlg, b.MICs, size, b.BodySHA256, b.Inputs
	return nil
}

// recordRebuild records a rebuilt body of size bytes other than the
// first build's, and adds its MICs to it's.
func (d *Dispatcher) recordRebuild(ctx context.Context, it *postgres.OutboxItem, size int64, b postgres.OutboundBuild) error {
	mics := []string{b.MIC}
	for _, m := range b.MICs {
		if !slices.Contains(mics, m) {
			mics = append(mics, m)
		}
	}
	d.log.Warn("the message built again for this attempt differs from its first build (the compressor's output changed?); "+
		"posting the rebuilt body, its MICs added to those an MDN is checked against",
		zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID), zap.String("message_id", first(it.Headers, "Message-ID")),
		zap.Int64("first_bytes", it.BodySize), zap.Int64("rebuilt_bytes", size))
	if err := d.o.Store.RecordRebuild(ctx, *it, size, b.BodySHA256, mics); err != nil {
		return err
	}
	for _, m := range mics {
		if !slices.Contains(it.MICs, m) {
			it.MICs = append(it.MICs, m)
		}
	}
	it.BodySize, it.BodySHA256 = size, b.BodySHA256
	return nil
}

// buildFile builds src per p (and the station st) as a stream into a
// new spool file with the inputs in (recorded when empty, replayed
// when filled) and returns the file and the build, with its size and
// SHA-256; on error the file is gone. A profile it cannot build is
// errBuild; as2.ErrBoundaryInContent, storage and spool errors are
// returned as they are.
func (d *Dispatcher) buildFile(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource, in *frozenInputs, stats *buildStats) (*spool.File, postgres.OutboundBuild, error) {
	f, err := d.o.Spool.Create()
	if err != nil {
		return nil, postgres.OutboundBuild{}, err
	}
	b, err := d.buildInto(ctx, f, it, st, p, src, in, stats)
	if err != nil {
		f.Close()
		return nil, b, err
	}
	b.BodySize = f.Size()
	return f, b, nil
}

// buildStats is where the time of a streamed build went, beside its own
// work: waiting for the payload's pieces, writing the spool file.
type buildStats struct {
	readWait, spoolWrite time.Duration
}

// buildInto writes the message built from src to f and digests it. A
// profile it cannot build is errBuild; storage and spool errors are
// returned as they are.
func (d *Dispatcher) buildInto(ctx context.Context, f *spool.File, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource, in *frozenInputs, stats *buildStats) (postgres.OutboundBuild, error) {
	sum := sha256.New()
	// The body's SHA-256 and the spool file beside the build; stats is
	// read once bw has closed.
	bw := newAheadWriter(io.MultiWriter(&timedWriter{w: f, d: &stats.spoolWrite}, sum), bodyBuffer, aheadBuffers)
	defer bw.Close()
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
	b, err := BuildStream(st, p, src, writePayload, &errWriter{w: bw, err: &ioErr}, in.Time, d.o.Rand, &in.StreamInputs)
	if err == nil {
		err = bw.Flush()
		ioErr = err
	}
	switch {
	case err == nil:
		b.BodySHA256 = sum.Sum(nil)
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
		_, err := d.o.Store.WritePayload(ctx, id, func(hub.MessageInfo) io.Writer {
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
