package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// The first attempt of a large message whose body's length is known
// before it is built (uncompressed, and unsigned or signed with an RSA
// key: see as2.WrapWriter.Size) is posted while it is built, without a
// spool file: the build writes into the request's body as the partner
// reads it, announced with the Content-Length computed in advance. The
// build's inputs and headers are recorded before the post, as for a
// spool file (so that a retry builds the same bytes); its SHA-256, MICs
// and signature once the body ended (Store.RecordStreamedBuild). The
// bytes are those the spool path posts. A body whose length comes out
// other than announced fails the attempt and never reaches the partner
// whole (lengthGate): its last byte is held until the length checked.
// Retries, every other profile, and partners that take AS2 restart
// (its transfer ID names the body's SHA-256, unknown before the body is
// built), take the spool path.

// errLength means a body built while posted did not have the length
// announced for it.
var errLength = errors.New("the body built differs in length from the Content-Length computed for it")

// liveBuild is a message's build, opened and recorded, waiting to be
// posted while it runs (see run).
type liveBuild struct {
	ww    *as2.WrapWriter
	opts  as2.WrapOptions
	src   postgres.OutboundSource
	in    frozenInputs
	size  int64
	gate  *lengthGate
	bw    *aheadWriter
	sum   hash.Hash
	ioErr error // an error of the payload's source or of the post
	stats buildStats
	start time.Time
}

// liveable reports whether the first attempt of it, src for p signed
// by st, can be posted while it is built.
func (d *Dispatcher) liveable(it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource) bool {
	// AS2 restart names a transfer by the body's SHA-256 (restartETag),
	// known only once the body is built: such a partner's messages take
	// the spool path.
	if !d.streamed(src, p) || it.Attempts > 1 || p.Compress || p.AS2RestartSend {
		return false
	}
	// A station key is RSA (config.Station): its signatures are as long
	// as its modulus, whatever they sign. WrapWriter.Size has the last
	// word.
	return p.Sign == "" || st.PrivateKey != nil
}

// openLive opens the build of src for p, computes its length and
// records its headers, length and inputs in the outbox row. ok is false
// (nothing recorded, nothing drawn kept) when its length cannot be
// known in advance.
func (d *Dispatcher) openLive(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner, src postgres.OutboundSource) (lb *liveBuild, ok bool, err error) {
	lb = &liveBuild{src: src, in: frozenInputs{Time: d.o.Now(), Profile: profileOf(p)}, gate: &lengthGate{}, sum: sha256.New(), start: time.Now()}
	// The body's SHA-256 and the post beside the build.
	lb.bw = newAheadWriter(io.MultiWriter(lb.gate, lb.sum), bodyBuffer, aheadBuffers)
	lb.ww, lb.opts, err = openStream(st, p, src, &errWriter{w: lb.bw, err: &lb.ioErr}, lb.in.Time, d.o.Rand, &lb.in.StreamInputs)
	if err != nil {
		lb.bw.Close()
		return nil, false, fmt.Errorf("%w: %w", errBuild, err)
	}
	if lb.size, ok = lb.ww.Size(src.PayloadSize); !ok || lb.size == 0 {
		lb.abort()
		return nil, false, nil
	}
	lb.size += d.o.liveSizeSkew
	b, err := frozen(src, lb.opts, &as2.Wrapped{Header: lb.ww.Header()}, lb.in.Time)
	if err == nil {
		b.BodySize = lb.size
		b.Inputs, err = json.Marshal(lb.in)
	}
	if err == nil {
		err = d.o.Store.SaveOutboundBuild(ctx, *it, b)
	}
	if err != nil {
		lb.abort()
		return nil, false, err
	}
	it.Headers, it.MIC, it.MICAlg, it.MICs = b.Headers, "", "", nil
	it.BodyChunked, it.BodySize, it.BuildInputs, it.BodySHA256 = true, lb.size, b.Inputs, nil
	return lb, true, nil
}

// run builds the message into w (the request's body) with its payload
// read from the store, checks its length and records its SHA-256, MICs
// and inputs in the outbox row and it. w is not closed.
func (lb *liveBuild) run(ctx context.Context, d *Dispatcher, it *postgres.OutboxItem, w io.Writer) error {
	defer lb.abort()
	// The head, written when the build opened, waits in the gate: the
	// gate is the writer's goroutine's from start on.
	err := lb.bw.Flush()
	if err != nil {
		return err
	}
	lb.gate.start(w, lb.size)
	if !lb.src.Chunked {
		_, err = lb.ww.Write(lb.src.Payload)
	} else if err = d.readAhead(ctx, it.MessageID, lb.ww, &lb.stats.readWait); err != nil && lb.ioErr == nil {
		lb.ioErr = err
	}
	var b postgres.OutboundBuild
	if err == nil {
		b, err = closeStream(lb.ww, lb.src, lb.opts, lb.in.Time)
	}
	if err == nil {
		err = lb.bw.Flush()
	}
	if err == nil {
		err = lb.gate.finish()
	}
	if err != nil {
		return err
	}
	b.BodySize, b.BodySHA256 = lb.size, lb.sum.Sum(nil)
	if b.Inputs, err = json.Marshal(lb.in); err != nil {
		return err
	}
	if err := d.o.Store.RecordStreamedBuild(ctx, *it, b); err != nil {
		return err
	}
	it.MIC, it.MICAlg, it.MICs, it.BodySHA256, it.BuildInputs = b.MIC, b.MICAlg, b.MICs, b.BodySHA256, b.Inputs
	// buildStreamed's line, its build the post's body too.
	d.log.Info("built as a stream", zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID),
		zap.Bool("posted_while_built", true), zap.Int64("payload_bytes", lb.src.PayloadSize), zap.Int64("body_bytes", lb.size),
		zap.Duration("build", time.Since(lb.start)), zap.Duration("read_wait", lb.stats.readWait))
	return nil
}

// abort ends the build's goroutines, a no-op once they ended.
func (lb *liveBuild) abort() {
	lb.ww.Abort()
	lb.bw.Close()
}

// lengthGate passes a body built while it is posted on to the request:
// what is written before start (the build's head, written when it
// opens) is held until then; after it, a write that would take the body
// past the size announced fails, and the body's last byte is held until
// finish found the body of that size. A body of another length thus
// never reaches the partner whole: the post is cut short of its
// Content-Length.
type lengthGate struct {
	w       io.Writer
	size    int64
	n, sent int64  // bytes written to the gate, passed on
	held    []byte // written before start
	last    []byte // the body's last byte, once written
}

// start sets where the body goes and its announced size.
func (g *lengthGate) start(w io.Writer, size int64) { g.w, g.size = w, size }

func (g *lengthGate) Write(p []byte) (int, error) {
	if g.w == nil {
		g.held = append(g.held, p...)
		g.n += int64(len(p))
		return len(p), nil
	}
	if g.n+int64(len(p)) > g.size {
		return 0, fmt.Errorf("%w: more than %d bytes", errLength, g.size)
	}
	if len(g.held) > 0 {
		if err := g.pass(g.held); err != nil {
			return 0, err
		}
		g.held = nil
	}
	g.n += int64(len(p))
	if err := g.pass(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// pass writes p on, but for the body's last byte.
func (g *lengthGate) pass(p []byte) error {
	if g.sent+int64(len(p)) == g.size && len(p) > 0 {
		g.last, p = append(g.last, p[len(p)-1]), p[:len(p)-1]
	}
	_, err := g.w.Write(p)
	g.sent += int64(len(p))
	return err
}

// finish checks that the body has its announced size and writes its
// last byte.
func (g *lengthGate) finish() error {
	if len(g.held) > 0 {
		if g.n > g.size {
			return fmt.Errorf("%w: %d bytes, announced %d", errLength, g.n, g.size)
		}
		if err := g.pass(g.held); err != nil {
			return err
		}
		g.held = nil
	}
	if g.n != g.size || len(g.last) != 1 {
		return fmt.Errorf("%w: %d bytes, announced %d", errLength, g.n, g.size)
	}
	_, err := g.w.Write(g.last)
	return err
}

// errPostEnded ends a build whose post ended before it.
var errPostEnded = errors.New("the post ended before its body was built")

// sendLive posts it while its build lb runs into the request's body,
// and judges the answer once both ended. A body of another length than
// announced fails the attempt loudly (it never reached the partner
// whole); so does a build that failed after the partner answered, unless
// the answer already fails it. Either way the retry builds into the
// spool. The build's goroutine has ended when it returns.
func (d *Dispatcher) sendLive(ctx context.Context, log *zap.Logger, it *postgres.OutboxItem, p *config.Partner, lb *liveBuild) attempt {
	timeout := timeoutOf(*it, p)
	client, err := d.clientFor(*it, p)
	if err != nil {
		lb.abort()
		return attempt{err: err}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := NewRequestFrom(rctx, it.URL, it.Headers, pr, lb.size, p)
	if err != nil {
		lb.abort()
		return attempt{err: err}
	}
	sent := *it // run records the build in it
	built := make(chan error, 1)
	go func() {
		err := lb.run(rctx, d, it, pw)
		pw.CloseWithError(err) // nil: the body's end
		built <- err
	}()
	resp, body, err := d.post(rctx, client, req, sent, p, nil, lb.size)
	pr.CloseWithError(errPostEnded) // stops a build the post no longer reads
	berr := <-built
	switch {
	case errors.Is(berr, errLength):
		log.Error("the message built while posted differs in length from the Content-Length computed for it; "+
			"the post was cut short of it, and the retry builds into the spool", zap.Int64("announced_bytes", lb.size), zap.Error(berr))
		return attempt{retryable: true, err: fmt.Errorf("build while posting: %w", berr)}
	case err != nil:
		return postFailed(ctx, err, timeout)
	case berr != nil:
		if a := judgeStatus(*it, resp); a.err != nil {
			return a // the partner refused it before it was whole
		}
		return attempt{retryable: true, err: fmt.Errorf("build while posting: %w", berr)}
	}
	return d.judge(*it, p, resp, body)
}
