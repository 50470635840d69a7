package receiver

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// spooled is a request whose body is in a spool file, and the spool file
// its payload is unwrapped into.
type spooled struct {
	body, payload *spool.File
	// stage stores the payload in the database as it is unwrapped (nil
	// when the store cannot); SaveInbound commits it, close aborts it
	// otherwise. With a stage, the payload goes to its spool file only
	// when something reads it afterwards (staged).
	stage  *postgres.StagedPayload
	staged *payloadSpool
	// stats is where the unwrap's time went.
	stats as2.StreamStats
}

// payloadStager is a Store that stores a payload as it is unwrapped
// (*postgres.Store).
type payloadStager interface {
	StageInboundPayload(ctx context.Context, partner string) (*postgres.StagedPayload, error)
}

// serveSpooled receives a request whose body goes to the spool: a large
// message, or any chunked one. Its bytes count against the spool's limit
// on disk, not the in-flight budget; the partner's concurrency cap
// applies all the same. Both spool files are removed when it returns,
// whatever happened (deferred: panics included).
func (h *Handler) serveSpooled(w http.ResponseWriter, r *http.Request, rq request, partner *config.Partner, start time.Time) {
	label := partner.AS2ID
	if r.ContentLength > 0 && !h.o.Spool.Fits(r.ContentLength) {
		// Decided from the header: the body stays unread.
		w.Header().Set("Connection", "close")
		h.busy(w, label, "spool")
		return
	}
	held, err := h.budget.admit(label, 0)
	if err != nil {
		w.Header().Set("Connection", "close")
		h.busy(w, label, "admission")
		return
	}
	defer held.release()
	sp := &spooled{}
	defer sp.close()
	if sp.body, err = h.o.Spool.Create(); err == nil {
		sp.payload, err = h.o.Spool.Create()
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		h.log.Error("create spool file", zap.Error(err))
		http.Error(w, "the message could not be spooled; nothing was accepted, please resend later", http.StatusServiceUnavailable)
		return
	}
	t0 := time.Now()
	if err := h.spoolBody(w, r, sp.body); err != nil {
		h.bodyError(w, label, err, false)
		return
	}
	h.log.Debug("body spooled", zap.String("partner", label), zap.Int64("size", sp.body.Size()), zap.Duration("took", time.Since(t0)))
	h.metrics.bytes.WithLabelValues(label).Add(float64(sp.body.Size()))
	if h.spooledMDN(w, r, sp.body, label) {
		return
	}
	spoolTook := time.Since(t0)
	t1 := time.Now()
	out := h.receive(r.Context(), r.Header, nil, rq, partner, held, sp)
	h.answer(w, out, label, "spool", start)
	h.logTimings(sp, label, rq.messageID, spoolTook, time.Since(t1))
}

// logTimings logs where the time of a spooled message that was unwrapped
// as a stream went (the bench prints it): the spool, the unwrap and its
// stages, the store as it ran beside them, and what followed.
func (h *Handler) logTimings(sp *spooled, label, messageID string, spoolTook, receiveTook time.Duration) {
	st := sp.stats
	if st.Total == 0 { // not unwrapped: refused before, or by the spool
		return
	}
	fields := []zap.Field{zap.String("partner", label), zap.String("message_id", messageID), zap.Int64("body", sp.body.Size()),
		zap.Duration("spool", spoolTook), zap.Duration("unwrap", st.Total), zap.Duration("after_unwrap", receiveTook-st.Total),
		zap.Duration("read", st.Read), zap.Duration("decrypt", st.Decrypt), zap.Duration("verify", st.Verify),
		zap.Duration("inflate", st.Inflate), zap.Duration("payload", st.Payload)}
	if sp.stage != nil {
		ss := sp.stage.Stats()
		fields = append(fields, zap.Duration("copy", ss.Copy), zap.Duration("copy_wait", ss.CopyWait), zap.Duration("payload_wait", ss.WriteWait),
			zap.Duration("copy_finish", ss.Finish), zap.Duration("commit", ss.Save))
	}
	h.log.Info("large message timings", fields...)
}

// close aborts the stage (unless it was committed) and removes the spool
// files.
func (sp *spooled) close() {
	sp.stage.Abort()
	for _, f := range []*spool.File{sp.body, sp.payload} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// spoolBody copies the body into f within Options.ReadTimeout, then
// clears the deadline; after an error the connection is closed.
func (h *Handler) spoolBody(w http.ResponseWriter, r *http.Request, f *spool.File) error {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.o.ReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("set read deadline: %w", err)
	}
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, r.Body, buf)
	if err == nil && r.ContentLength > 0 && n != r.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		return err
	}
	_ = rc.SetReadDeadline(time.Time{})
	return nil
}

// spooledMDN takes a spooled body that is an async MDN (a signed one,
// told from its first part, which only a chunked request brings here) to
// the intake, or refuses it over Options.MaxMDNBytes. It reports whether
// it answered.
func (h *Handler) spooledMDN(w http.ResponseWriter, r *http.Request, f *spool.File, label string) bool {
	head := make([]byte, min(f.Size(), 64<<10))
	if _, err := io.ReadFull(f.Reader(), head); err != nil || !mdn.IsMDN(r.Header, head) {
		return false
	}
	if f.Size() > h.o.MaxMDNBytes {
		h.mdnTooLarge(w, label, f.Size())
		return true
	}
	body, err := io.ReadAll(f.Reader())
	if err != nil {
		h.log.Error("read spooled MDN", zap.Error(err))
		http.Error(w, "the MDN could not be stored; please resend later", http.StatusServiceUnavailable)
		return true
	}
	h.intake(w, r, body, label)
	return true
}

// peel unwraps the exchange's message: in memory, or as a stream from
// the spool into its payload file (every layer streams: AES-GCM and
// opaque signed-data too), stored in the database as it is unwrapped when
// the store can.
func (h *Handler) peel(ctx context.Context, x *exchange) (*as2.Message, error) {
	opts := as2.UnwrapOptions{
		Keys:         x.rq.station.Keys,
		PartnerCerts: x.partner.Certificates,
		MICAlgs:      x.plan.micAlgs,
		UnsignedMIC:  unsignedMIC(x.partner),
		Reserve:      x.budget.grow,
		Limits:       h.o.Limits,
		InPlace:      true, // body is ours and unused afterwards: a large message is held once
	}
	if x.sp == nil {
		return as2.Unwrap(x.hdr, x.body, opts)
	}
	opts.Stats = &x.sp.stats
	var payload io.Writer = x.sp.payload
	if st, ok := h.o.Store.(payloadStager); ok {
		// Stored as it is unwrapped, and spooled only when the EDI step
		// reads it afterwards (payloadSpool): a stage that fails then
		// fails the store, answered as any failed store (nothing
		// accepted, resend later).
		stage, err := st.StageInboundPayload(ctx, x.partner.AS2ID)
		switch {
		case errors.Is(err, postgres.ErrNoStage):
			x.log.Debug("payload stored after its unwrap", zap.Error(err))
		case err != nil:
			x.log.Warn("payload not stored as it is unwrapped; stored afterwards", zap.Error(err))
		default:
			x.sp.stage = stage
			x.sp.staged = &payloadSpool{f: x.sp.payload, need: h.readsPayload, head: make([]byte, 0, headBytes)}
			payload = io.MultiWriter(x.sp.staged, stage)
			// A payload that arrived compressed is stored as its zlib
			// stream (less than half the bytes to write for EDI), still
			// inflated whole here; the payload spool gets it inflated.
			opts.Compressed = &as2.CompressedOutput{Stream: stage, Plain: as2.PayloadWriter(x.sp.staged)}
		}
	}
	m, err := as2.UnwrapStream(x.hdr, x.sp.body.Reader(), opts, as2.PayloadWriter(payload))
	if err == nil && x.sp.staged != nil {
		err = x.sp.staged.decide() // a payload shorter than its head
	}
	if err != nil {
		// Its connection is free before the failure is stored.
		x.sp.stage.Abort()
	}
	if errors.Is(err, spool.ErrFull) {
		x.log.Warn("spool full while unwrapping", zap.Error(err))
		return nil, fmt.Errorf("%w: %w", errBusy, err)
	}
	return m, err
}

// signedContent is what a signature covered: the bytes (Unwrap) or their
// digests (UnwrapStream).
type signedContent struct {
	bytes   []byte
	digests map[crypto.Hash][]byte
}

// mic is the content's MIC in alg, when it can be had.
func (c signedContent) mic(alg crypto.Hash) (as2.MIC, bool) {
	if c.bytes != nil {
		return as2.ComputeMIC(alg, c.bytes), true
	}
	d, ok := c.digests[alg]
	return as2.MIC{Alg: alg, Digest: d}, ok
}

// payloadReader reads the payload of x's message for the EDI step: in
// memory or spooled, or its head when it is not EDI and only staged
// (payloadSpool).
func payloadReader(x *exchange) io.Reader {
	switch {
	case x.msg.PayloadOpen != nil:
		return x.msg.PayloadOpen()
	case x.sp != nil && x.sp.staged != nil:
		return bytes.NewReader(x.sp.staged.head)
	}
	return bytes.NewReader(x.msg.Payload)
}

// payloadOpen opens the spooled payload, or is nil when only its stage
// holds it.
func (sp *spooled) payloadOpen() func() io.Reader {
	if sp.staged != nil && !sp.staged.spill {
		return nil
	}
	return sp.payload.Reader
}

// headBytes of a staged payload are kept in memory: enough for the EDI
// step to tell an interchange from anything else (edi.Detect peeks
// 1 KiB of leading space and the first segment's tag).
const headBytes = 4 << 10

// payloadSpool is the spool file of a payload staged in the database:
// the payload is written to it only when something reads it after the
// unwrap (need, decided on its first headBytes: the EDI step, for an
// EDI interchange); any other is written once, to the database. The
// head stays in memory either way.
type payloadSpool struct {
	f    *spool.File
	need func(head []byte) bool
	head []byte
	// decided is set once need was asked; spill when it said yes.
	decided, spill bool
}

func (w *payloadSpool) Write(p []byte) (int, error) {
	n := len(p)
	if !w.decided {
		k := min(len(p), headBytes-len(w.head))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
		if len(w.head) < headBytes {
			return n, nil
		}
		if err := w.decide(); err != nil {
			return 0, err
		}
	}
	if w.spill && len(p) > 0 {
		if _, err := w.f.Write(p); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// decide asks need about the head (once) and spools it when the payload
// is read afterwards.
func (w *payloadSpool) decide() error {
	if w.decided {
		return nil
	}
	w.decided = true
	if !w.need(w.head) {
		return nil
	}
	w.spill = true
	_, err := w.f.Write(w.head)
	return err
}

// readsPayload reports whether a payload starting with head is read
// after its unwrap: by the EDI step, when it is an EDI interchange.
func (h *Handler) readsPayload(head []byte) bool {
	if h.o.EDI == nil {
		return false
	}
	_, err := edi.Detect(bufio.NewReader(bytes.NewReader(head)))
	return err == nil
}
