package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// AS2 restart (draft-harding-as2-restart). A partner whose request says
// "EDIINT-Features: AS2-Restart" and names the transfer in an ETag has
// the body of a large message (over SpoolFromBytes, of known length)
// kept in the database as it arrives, committed every restartCommit
// bytes and when the connection breaks. Cut off, it asks with HEAD and
// If-Match how much arrived (Content-Length; 0 for a transfer we do not
// hold) and POSTs the rest with If-Match and Content-Range, on any
// replica. The request that brings the last byte reads the body back to
// the spool, processes it as any spooled message and answers with its
// MDN; the transfer is then deleted. The database, not a replica's disk,
// holds the bytes: the HEAD and the rest may reach another replica.

// Defaults of the restart limits (edihub serve's settings).
const (
	DefaultRestartMaxBytes        = 16 << 30
	DefaultRestartPartnerMaxBytes = 4 << 30
)

// RestartStore keeps the transfers partners may resume;
// *postgres.Store implements it.
type RestartStore interface {
	BeginRestart(ctx context.Context, partner, etag string, header []byte, total int64, lim postgres.RestartLimits) (postgres.RestartTransfer, error)
	RestartTransferOf(ctx context.Context, partner, etag string) (postgres.RestartTransfer, error)
	AppendRestart(ctx context.Context, id, at int64, chunks [][]byte) (int64, error)
	WriteRestartBody(ctx context.Context, id int64, w io.Writer) (int64, error)
	DeleteRestart(ctx context.Context, id int64) error
}

const (
	// restartChunk is the size of one stored piece of a transfer.
	restartChunk = 1 << 20
	// restartCommit is how much of a body is held in memory before it
	// is committed: what a broken connection can lose at most is what
	// had not arrived, since the bytes read are committed on any error.
	restartCommit = 4 * restartChunk
	// maxETag bounds a transfer ID.
	maxETag = 256
	// restartFeature is the EDIINT-Features token a sender asks with.
	restartFeature = "AS2-Restart"
)

// Events counted in edihub_as2_restart_total.
const (
	restartBegun       = "begun"
	restartInterrupted = "interrupted"
	restartResumed     = "resumed"
	restartCompleted   = "completed"
	restartRefused     = "refused"
	restartFull        = "full"
)

func newRestartMetric(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edihub_as2_restart_total",
		Help: "AS2 restart transfers (draft-harding-as2-restart), by partner and event: begun, interrupted (the connection broke; the bytes received are kept), resumed, completed (the message was processed), refused (a resume at the wrong offset or of an unknown transfer), full (the restart limits were reached; received without restart).",
	}, []string{"partner", "event"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("receiver: register metrics: %w", err)
	}
	return c, nil
}

// restarts reports whether h keeps transfers for partner to resume.
func (h *Handler) restarts(partner *config.Partner) bool {
	return h.o.Restart != nil && h.o.Spool != nil && partner.AS2Restart
}

// restartable reports whether a POST from partner goes through the
// restart path: a resume (If-Match or Content-Range), or a first request
// asking for restart with an ETag and a known length over SpoolFromBytes.
func (h *Handler) restartable(r *http.Request, partner *config.Partner, reportMDN bool) bool {
	if reportMDN || !h.restarts(partner) {
		return false
	}
	if r.Header.Get("If-Match") != "" || r.Header.Get("Content-Range") != "" {
		return true
	}
	return r.Header.Get("ETag") != "" && hasFeature(r.Header, restartFeature) && r.ContentLength > h.o.SpoolFromBytes
}

// hasFeature reports whether the EDIINT-Features fields list feature
// (case-insensitively).
func hasFeature(h http.Header, feature string) bool {
	for _, v := range h.Values("EDIINT-Features") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), feature) {
				return true
			}
		}
	}
	return false
}

// transferID is the transfer's ETag from If-Match (a HEAD or a resume),
// else from ETag (a first request; older drafts' HEAD), without W/ and
// quotes; false when absent or not 1 to maxETag visible ASCII characters.
func transferID(h http.Header) (string, bool) {
	v := h.Get("If-Match")
	if v == "" {
		v = h.Get("ETag")
	}
	v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" || len(v) > maxETag {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f || v[i] == '"' {
			return "", false
		}
	}
	return v, true
}

// contentRange is a Content-Range "bytes first-last/total".
type contentRange struct{ first, last, total int64 }

// errContentRange means a Content-Range the restart path cannot use.
var errContentRange = errors.New("Content-Range must be bytes first-last/total with first <= last < total")

// parseContentRange parses a Content-Range of a resumed request: the
// bytes unit (any case), one range, a known total, first <= last <
// total, each at most 2^63-1.
func parseContentRange(s string) (contentRange, error) {
	unit, rest, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return contentRange{}, errContentRange
	}
	rng, total, ok := strings.Cut(strings.TrimSpace(rest), "/")
	if !ok {
		return contentRange{}, errContentRange
	}
	first, last, ok := strings.Cut(rng, "-")
	if !ok {
		return contentRange{}, errContentRange
	}
	var c contentRange
	for _, f := range []struct {
		s   string
		dst *int64
	}{{first, &c.first}, {last, &c.last}, {total, &c.total}} {
		n, err := parseDigits(f.s)
		if err != nil {
			return contentRange{}, errContentRange
		}
		*f.dst = n
	}
	if c.first > c.last || c.last >= c.total {
		return contentRange{}, errContentRange
	}
	return c, nil
}

// parseDigits parses a non-negative decimal of ASCII digits only (no
// sign, no spaces) that fits an int64.
func parseDigits(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, errContentRange
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errContentRange
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// String formats c as a Content-Range value.
func (c contentRange) String() string {
	return fmt.Sprintf("bytes %d-%d/%d", c.first, c.last, c.total)
}

// serveHead answers HEAD /as2 with If-Match (or ETag): 200 with the
// Content-Length of the bytes stored of the partner's transfer, 0 when
// there is none (never begun, completed, expired, or restart is off for
// the partner): the sender then sends from the first byte.
func (h *Handler) serveHead(w http.ResponseWriter, r *http.Request) {
	w.Header()["EDIINT-Features"] = []string{as2.EDIINTFeatures}
	rq := parseRequest(r.Header)
	partner := h.headPartner(rq)
	if partner == nil {
		h.log.Info("HEAD from an unknown trading relationship", zap.String("as2_from", rq.from), zap.String("as2_to", rq.to))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	etag, ok := transferID(r.Header)
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var received int64
	if h.restarts(partner) {
		tr, err := h.o.Restart.RestartTransferOf(r.Context(), partner.AS2ID, etag)
		switch {
		case errors.Is(err, postgres.ErrRestartNotFound):
		case err != nil:
			h.log.Error("find restart transfer", zap.String("partner", partner.AS2ID), zap.Error(err))
			w.Header().Set("Retry-After", strconv.Itoa(int(h.o.RetryAfter/time.Second)))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		default:
			received = tr.Received
		}
	}
	w.Header().Set("ETag", strconv.Quote(etag))
	w.Header().Set("Content-Length", strconv.FormatInt(received, 10))
	w.WriteHeader(http.StatusOK)
}

// headPartner is the partner a HEAD comes from, or nil when its
// AS2-From and AS2-To name no configured relationship.
func (h *Handler) headPartner(rq request) *config.Partner {
	if rq.from == "" || rq.to == "" {
		return nil
	}
	dir := h.directory()
	p, ok := dir.partners.Partner(rq.from)
	if !ok || dir.partnerStation(p).AS2ID != rq.to {
		return nil
	}
	return p
}

// serveRestart receives one request of a restartable transfer: it
// appends the body to the stored transfer and, once the transfer is
// whole, processes the message. A first request that the restart limits
// cannot take is received as any spooled message.
func (h *Handler) serveRestart(w http.ResponseWriter, r *http.Request, rq request, partner *config.Partner, start time.Time) {
	label := partner.AS2ID
	etag, ok := transferID(r.Header)
	if !ok {
		w.Header().Set("Connection", "close")
		h.refuse(w, label, http.StatusBadRequest, "the transfer ID (If-Match or ETag) must be 1 to 256 visible ASCII characters")
		return
	}
	rng, total, msg := h.transferRange(r)
	if msg != "" {
		w.Header().Set("Connection", "close")
		h.refuse(w, label, http.StatusBadRequest, msg)
		return
	}
	if h.o.MaxBodyBytes > 0 && total > h.o.MaxBodyBytes {
		w.Header().Set("Connection", "close")
		h.refuse(w, label, http.StatusRequestEntityTooLarge, "message too large: the limit is "+strconv.FormatInt(h.o.MaxBodyBytes, 10)+" bytes")
		return
	}
	held, err := h.budget.admit(label, 0)
	if err == nil {
		// The bytes between two commits are held in memory.
		if err = held.grow(min(total-rng.first, restartCommit)); err != nil {
			held.release()
		}
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		h.busy(w, label, "admission")
		return
	}
	defer held.release()
	// The transfer's storage outlives a broken connection: the bytes
	// that arrived are committed after the request's context ended.
	ctx := context.WithoutCancel(r.Context())
	log := h.log.With(zap.String("partner", label), zap.String("etag", etag), zap.String("message_id", rq.messageID))
	tr, res := h.openTransfer(ctx, log, r, partner, etag, rng, total)
	if res != nil {
		w.Header().Set("Connection", "close")
		res.write(w)
		return
	}
	if tr == nil {
		held.release()
		h.serveSpooled(w, r, rq, partner, start)
		return
	}
	storeErr, bodyErr := h.appendBody(ctx, w, r, tr)
	switch {
	case errors.Is(storeErr, postgres.ErrRestartConflict):
		w.Header().Set("Connection", "close")
		h.refuse(w, label, http.StatusPreconditionFailed, "the transfer changed while this request was sent (another request appended to it, or it expired); send HEAD with If-Match and resume from its Content-Length")
		return
	case storeErr != nil:
		w.Header().Set("Connection", "close")
		log.Error("store restart transfer", zap.Error(storeErr))
		unavailable(label).write(w)
		return
	case bodyErr != nil:
		h.restartEvents.WithLabelValues(label, restartInterrupted).Inc()
		log.Info("restart transfer interrupted; the partner may resume it", zap.Int64("received", tr.Received), zap.Int64("total", tr.Total), zap.Error(bodyErr))
		h.bodyError(w, label, bodyErr, false)
		return
	}
	h.completeRestart(ctx, log, w, rq, partner, held, tr, start)
}

// transferRange reads the range a request brings: its Content-Range, or
// the whole body; total is the transfer's length. A request that cannot
// be taken gets a message for a 400 answer.
func (h *Handler) transferRange(r *http.Request) (contentRange, int64, string) {
	if v := r.Header.Get("Content-Range"); v != "" {
		rng, err := parseContentRange(v)
		if err != nil {
			return rng, 0, err.Error()
		}
		if r.ContentLength != rng.last-rng.first+1 {
			return rng, 0, "Content-Length must be the length of the Content-Range"
		}
		if rng.last != rng.total-1 {
			return rng, 0, "a resumed transfer sends its remaining bytes to the end: Content-Range bytes first-(total-1)/total"
		}
		return rng, rng.total, ""
	}
	if r.ContentLength <= 0 {
		return contentRange{}, 0, "a restartable transfer needs a Content-Length"
	}
	return contentRange{first: 0, last: r.ContentLength - 1, total: r.ContentLength}, r.ContentLength, ""
}

// openTransfer returns the transfer a request appends to: a new one for
// a request from the first byte (replacing one of the same ETag), the
// stored one for a resume at the offset it holds. A nil transfer and
// response mean the restart limits are reached: receive without restart.
func (h *Handler) openTransfer(ctx context.Context, log *zap.Logger, r *http.Request, partner *config.Partner, etag string, rng contentRange, total int64) (*postgres.RestartTransfer, *response) {
	label := partner.AS2ID
	if rng.first == 0 {
		hdr, err := json.Marshal(storedHeader(r.Header))
		if err != nil {
			log.Error("encode header", zap.Error(err))
			return nil, unavailable(label)
		}
		tr, err := h.o.Restart.BeginRestart(ctx, label, etag, hdr, total, h.o.RestartLimits)
		switch {
		case errors.Is(err, postgres.ErrRestartFull):
			h.restartEvents.WithLabelValues(label, restartFull).Inc()
			log.Warn("restart limits reached: message received without restart", zap.Error(err))
			return nil, nil
		case err != nil:
			log.Error("begin restart transfer", zap.Error(err))
			return nil, unavailable(label)
		}
		h.restartEvents.WithLabelValues(label, restartBegun).Inc()
		return &tr, nil
	}
	tr, err := h.o.Restart.RestartTransferOf(ctx, label, etag)
	switch {
	case errors.Is(err, postgres.ErrRestartNotFound):
		h.restartEvents.WithLabelValues(label, restartRefused).Inc()
		log.Info("resume of an unknown restart transfer", zap.Int64("first", rng.first))
		return nil, textResponse(http.StatusPreconditionFailed, label, resultBadRequest,
			"no transfer with this ID is held (never begun, completed or expired): send the message again from its first byte")
	case err != nil:
		log.Error("find restart transfer", zap.Error(err))
		return nil, unavailable(label)
	case tr.Total != total:
		h.restartEvents.WithLabelValues(label, restartRefused).Inc()
		return nil, textResponse(http.StatusPreconditionFailed, label, resultBadRequest,
			"the Content-Range total is not the length of the transfer begun with this ID")
	case tr.Received != rng.first:
		h.restartEvents.WithLabelValues(label, restartRefused).Inc()
		log.Info("resume at another offset than the bytes held", zap.Int64("first", rng.first), zap.Int64("received", tr.Received))
		res := textResponse(http.StatusRequestedRangeNotSatisfiable, label, resultBadRequest,
			"the range does not start at the bytes held: send HEAD with If-Match and resume from its Content-Length")
		res.header = http.Header{"Content-Range": {"bytes */" + strconv.FormatInt(tr.Total, 10)}}
		return nil, res
	}
	h.restartEvents.WithLabelValues(label, restartResumed).Inc()
	return &tr, nil
}

// refuse answers a restart request that cannot be taken.
func (h *Handler) refuse(w http.ResponseWriter, label string, status int, text string) {
	textResponse(status, label, resultBadRequest, text).write(w)
	h.metrics.received.WithLabelValues(label, resultBadRequest).Inc()
}

// storedHeader is what is kept of the first request's header fields to
// process the message with: no credentials, none of the transfer's own.
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie", "Content-Length", "Content-Range",
		"If-Match", "Transfer-Encoding", "Connection", "Expect", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		out.Del(k)
	}
	return out
}

// appendBody stores the request body in tr from tr.Received, committing
// every restartCommit bytes and, when the body breaks off, what arrived
// before; tr.Received follows. It returns a storage error or a body
// error (after which the connection is closed).
func (h *Handler) appendBody(ctx context.Context, w http.ResponseWriter, r *http.Request, tr *postgres.RestartTransfer) (storeErr, bodyErr error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.o.ReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("set read deadline: %w", err), nil
	}
	var bufs [restartCommit / restartChunk][]byte
	var fill [][]byte
	left := r.ContentLength
	for left > 0 && bodyErr == nil {
		i := len(fill)
		if bufs[i] == nil {
			bufs[i] = make([]byte, min(restartChunk, left))
		}
		n, err := io.ReadFull(r.Body, bufs[i][:min(int64(len(bufs[i])), left)])
		left -= int64(n)
		if n > 0 {
			fill = append(fill, bufs[i][:n])
		}
		if err != nil {
			bodyErr = err
			if err == io.EOF {
				bodyErr = io.ErrUnexpectedEOF
			}
		}
		if len(fill) > 0 && (len(fill) == len(bufs) || bodyErr != nil || left == 0) {
			got, err := h.o.Restart.AppendRestart(ctx, tr.ID, tr.Received, fill)
			if err != nil {
				w.Header().Set("Connection", "close")
				return err, nil
			}
			h.metrics.bytes.WithLabelValues(tr.Partner).Add(float64(got - tr.Received))
			tr.Received, fill = got, fill[:0]
		}
	}
	if bodyErr != nil {
		w.Header().Set("Connection", "close")
		return nil, bodyErr
	}
	_ = rc.SetReadDeadline(time.Time{})
	return nil, nil
}

// completeRestart processes a transfer whose bytes are all stored: read
// back to the spool, received as any spooled message, answered with its
// MDN. The transfer is deleted whatever the outcome: processed, it is
// stored as a message (a resend is a duplicate); failed, the sender
// sends it again from its first byte.
func (h *Handler) completeRestart(ctx context.Context, log *zap.Logger, w http.ResponseWriter, rq request, partner *config.Partner, held *reservation, tr *postgres.RestartTransfer, start time.Time) {
	label := partner.AS2ID
	defer func() {
		if err := h.o.Restart.DeleteRestart(ctx, tr.ID); err != nil {
			log.Warn("delete completed restart transfer; the purger will", zap.Error(err))
		}
	}()
	var hdr http.Header
	if err := json.Unmarshal(tr.Header, &hdr); err != nil {
		log.Error("decode stored header", zap.Error(err))
		unavailable(label).write(w)
		return
	}
	sp := &spooled{}
	defer sp.close()
	var err error
	if sp.body, err = h.o.Spool.Create(); err == nil {
		sp.payload, err = h.o.Spool.Create()
	}
	var n int64
	if err == nil {
		n, err = h.o.Restart.WriteRestartBody(ctx, tr.ID, sp.body)
	}
	switch {
	case errors.Is(err, spool.ErrFull):
		h.busy(w, label, "spool")
		return
	case err == nil && n != tr.Total:
		err = fmt.Errorf("read back %d bytes of %d", n, tr.Total)
		fallthrough
	case err != nil:
		log.Error("read restart transfer back", zap.Error(err))
		unavailable(label).write(w)
		return
	}
	first := parseRequest(hdr)
	first.station = rq.station
	out := h.receive(ctx, hdr, nil, first, partner, held, sp)
	if out.result != resultBusy {
		h.restartEvents.WithLabelValues(label, restartCompleted).Inc()
	}
	h.answer(w, out, label, "spool", start)
}
