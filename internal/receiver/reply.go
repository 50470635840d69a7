package receiver

import (
	"context"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// response is what ServeHTTP writes.
type response struct {
	status  int
	header  http.Header
	body    []byte
	text    string // a plain-text error answer
	partner string // metric label
	result  string
}

func (res *response) write(w http.ResponseWriter) {
	for k, v := range res.header {
		w.Header()[k] = v
	}
	if res.text != "" {
		http.Error(w, res.text, res.status)
		return
	}
	if res.body != nil {
		w.Header().Set("Content-Length", strconv.Itoa(len(res.body)))
	}
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body)
}

func textResponse(status int, partner, result, text string) *response {
	return &response{status: status, text: text, partner: partner, result: result}
}

func unavailable(partner string) *response {
	return textResponse(http.StatusServiceUnavailable, partner, resultUnavailable,
		"the message could not be stored; nothing was accepted, please resend later")
}

func resultFor(d mdn.Disposition) string {
	if d.Modifier == "" {
		return resultProcessed
	}
	return d.Description()
}

// mdnPlan is how the MDN is to be built: signed or not, and with which
// digest, or the failure the request itself earns.
type mdnPlan struct {
	sign    bool
	alg     crypto.Hash
	micAlgs []crypto.Hash
	failure string // "unsupported MIC-algorithms" etc., or ""
}

func planMDN(rq request) mdnPlan {
	p := mdnPlan{micAlgs: rq.opts.SupportedMICAlgs()}
	if len(p.micAlgs) > 0 {
		p.alg = p.micAlgs[0]
	}
	if !rq.opts.SignedReceipt() {
		if rq.opts.ProtocolImportance == "required" && len(rq.opts.Protocols) > 0 {
			p.failure = "unsupported format"
		}
		return p
	}
	p.sign = true
	if p.alg == 0 {
		if rq.opts.MICAlgImportance == "required" && len(rq.opts.MICAlgs) > 0 {
			// The receipt cannot be signed as asked; an unsigned
			// failure says so.
			p.sign = false
			p.failure = mdn.UnsupportedMICAlgorithms
		}
		p.alg = crypto.SHA256
	}
	return p
}

// asyncURL is the URL an asynchronous MDN goes to, or "" for an answer in
// the response. Receipt-Delivery-Option is not covered by any signature,
// so it is honoured only for an http or https URL whose host the
// partner's profile allows (config.Partner.AllowsMDNTarget: mdn_hosts,
// else the host of the partner's URL; never a non-public address unless
// allowed, checked again when the outbox dials). Signed or not, a message
// whose target is allowed gets its MDN asynchronously, as asked.
func (h *Handler) asyncURL(log *zap.Logger, rq request, partner *config.Partner) string {
	if !rq.mdnWanted || rq.asyncURL == "" {
		return ""
	}
	if err := partner.AllowsMDNTarget(rq.asyncURL); err != nil {
		h.metrics.mdnTargetRefused.WithLabelValues(partner.AS2ID).Inc()
		log.Warn("Receipt-Delivery-Option refused; MDN sent in the response", zap.String("receipt_delivery_option", redactURL(rq.asyncURL)), zap.Error(err))
		return ""
	}
	return rq.asyncURL
}

// redactURL removes the userinfo (a password) from a URL for logs and
// stored text; what cannot be parsed is replaced whole.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// mdnRetry is how an async MDN owed to partner is retried: as long as
// the partner's outbound messages (its max_attempts, its retry_window or
// the station's), for the partner that does not get it keeps waiting.
func (h *Handler) mdnRetry(partner *config.Partner) postgres.Retry {
	r := postgres.Retry{MaxAttempts: partner.MaxAttempts, Window: h.o.RetryWindow}
	if partner.RetryWindow > 0 {
		r.Window = partner.RetryWindow
	}
	return r
}

// mdnReply is the response to x with disposition disp: its MDN, also set
// on x.msg to be stored with it, when one is wanted, else a bare 200.
func (h *Handler) mdnReply(x *exchange, disp mdn.Disposition, mic string) (*response, error) {
	if !x.rq.mdnWanted {
		return &response{status: http.StatusOK}, nil
	}
	res, err := h.mdnResponse(x.rq, x.plan, disp, mic)
	if err != nil {
		return nil, err
	}
	x.msg.MDN = &postgres.StoredMDN{Header: res.header, Body: res.body, Disposition: x.msg.Disposition, MIC: mic, Signed: x.plan.sign}
	return res, nil
}

// mdnResponse builds the MDN and its HTTP header fields.
func (h *Handler) mdnResponse(rq request, plan mdnPlan, d mdn.Disposition, mic string) (*response, error) {
	now := h.o.Now()
	hdr, body, err := mdn.Build(mdn.Report{
		ReportingUA:       h.o.ReportingUA,
		OriginalRecipient: rq.to,
		FinalRecipient:    rq.to,
		OriginalMessageID: rq.messageID,
		Disposition:       d,
		MIC:               mic,
	}, mdn.BuildOptions{
		Sign: plan.sign, MICAlg: plan.alg, Key: rq.station.Key, Cert: rq.station.Cert, Rand: h.o.Rand, Time: now,
	})
	if err != nil {
		return nil, err
	}
	from, err := as2.FormatAS2Name(rq.to)
	if err != nil {
		return nil, err
	}
	to, err := as2.FormatAS2Name(rq.from)
	if err != nil {
		return nil, err
	}
	var id string
	if h.o.NewMessageID != nil {
		id = h.o.NewMessageID()
	} else {
		id = newMessageID(messageIDHost(rq.station.AS2ID), h.o.Rand)
	}
	// hdr.Set with the keys in canonical form (as Set stores them; the
	// EDIINT-Features key keeps its spelling), the values in one array.
	v := []string{"1.2", from, to, id, now.UTC().Format(time.RFC1123Z), "Message Disposition Notification", as2.EDIINTFeatures}
	hdr["As2-Version"] = v[0:1:1]
	hdr["As2-From"] = v[1:2:2]
	hdr["As2-To"] = v[2:3:3]
	hdr["Message-Id"] = v[3:4:4]
	hdr["Date"] = v[4:5:5]
	hdr["Subject"] = v[5:6:6]
	hdr["EDIINT-Features"] = v[6:7:7]
	return &response{status: http.StatusOK, header: hdr, body: body}, nil
}

// noMessageID answers a message without a Message-ID: an error MDN when a
// synchronous one was asked for, else 400.
func (h *Handler) noMessageID(log *zap.Logger, rq request, plan mdnPlan, partner *config.Partner) *response {
	log.Warn("message without Message-ID")
	if !rq.mdnWanted || rq.asyncURL != "" {
		return textResponse(http.StatusBadRequest, partner.AS2ID, resultBadRequest, "the Message-ID header field is required")
	}
	res, err := h.mdnResponse(rq, plan, mdn.Errored(as2.DispositionUnexpectedProcessing), "")
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
	}
	res.partner, res.result = partner.AS2ID, as2.DispositionUnexpectedProcessing
	return res
}

// notStored answers x when storing it failed with err: a resend, or a
// concurrent identical post that won the race, gets what was answered
// the first time; anything else 503.
func (h *Handler) notStored(ctx context.Context, x *exchange, err error, asyncURL string) *response {
	if !errors.Is(err, postgres.ErrDuplicateInbound) {
		x.log.Error("store inbound message", zap.Error(err))
		return unavailable(x.partner.AS2ID)
	}
	rec, err := h.o.Store.InboundByMessageID(ctx, x.partner.AS2ID, x.rq.messageID)
	if err != nil {
		x.log.Error("read back the stored MDN", zap.Error(err))
		return unavailable(x.partner.AS2ID)
	}
	return h.duplicate(ctx, x, rec, asyncURL)
}

// duplicate answers a resend: the MDN stored the first time, byte for
// byte; nothing is stored or delivered again. asyncURL is where the
// resend's own verified request wants its MDN, or "".
func (h *Handler) duplicate(ctx context.Context, x *exchange, rec *postgres.InboundRecord, asyncURL string) *response {
	log, rq, plan, partner := x.log, x.rq, x.plan, x.partner
	log.Info("duplicate message", zap.String("first_disposition", rec.Disposition))
	if !rq.mdnWanted {
		return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
	}
	if rec.MDN != nil {
		if asyncURL != "" && rec.MDNURL == "" {
			// The first answer went in the response: so does this one. A
			// resend never sends the stored MDN somewhere new.
			asyncURL = ""
		}
		if asyncURL != "" {
			if rec.MDNURL != asyncURL {
				log.Warn("resend asks for its MDN at another URL; sent to the first one", zap.String("receipt_delivery_option", redactURL(asyncURL)), zap.String("first", redactURL(rec.MDNURL)))
				asyncURL = rec.MDNURL
			}
			if err := h.o.Store.RequeueInboundMDN(ctx, rec.ID, asyncURL, h.mdnRetry(partner)); err != nil {
				log.Error("requeue MDN", zap.Error(err))
				return unavailable(partner.AS2ID)
			}
			return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
		}
		return &response{status: http.StatusOK, header: rec.MDN.Header.Clone(), body: rec.MDN.Body, partner: partner.AS2ID, result: resultDuplicate}
	}
	if asyncURL != "" {
		// Nothing stored to send; the first receipt asked for none.
		return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
	}
	// The first receipt asked for no MDN: a fresh warning, not stored.
	mic := ""
	if rec.Status == postgres.InboundProcessed {
		mic = rec.MIC
	}
	res, err := h.mdnResponse(rq, plan, mdn.Warned(mdn.DuplicateDocument), mic)
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
	}
	res.partner, res.result = partner.AS2ID, resultDuplicate
	return res
}

// MessageIDs returns a Message-ID generator: "<edihub-" + 16 random hex
// bytes + "@" + station + ">", the station name reduced to characters
// allowed in a Message-ID. It panics only if rnd fails.
func MessageIDs(station string, rnd io.Reader) func() string {
	right := messageIDHost(station)
	return func() string { return newMessageID(right, rnd) }
}

// messageIDHost is the right-hand side of the Message-IDs of station.
func messageIDHost(station string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, station)
}

// newMessageID is one of MessageIDs' Message-IDs for host.
func newMessageID(host string, rnd io.Reader) string {
	var r [16]byte
	if _, err := io.ReadFull(rnd, r[:]); err != nil {
		panic(fmt.Sprintf("receiver: message ID randomness: %v", err))
	}
	b := make([]byte, 0, len("<edihub-")+32+1+len(host)+1)
	b = append(b, "<edihub-"...)
	b = hex.AppendEncode(b, r[:])
	b = append(b, '@')
	b = append(b, host...)
	return string(append(b, '>'))
}
