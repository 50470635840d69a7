package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// exchange is one AS2 message being received: the request, the partner it
// comes from, the MDN it asks for, its share of the in-flight budget, the
// row being made of it, and the log carrying its names.
type exchange struct {
	log     *zap.Logger
	hdr     http.Header
	body    []byte
	rq      request
	plan    mdnPlan
	partner *config.Partner
	budget  *reservation
	msg     *postgres.InboundMessage
	// sp holds the spooled body and payload; nil when body holds it.
	sp *spooled
}

func (h *Handler) receive(ctx context.Context, hdr http.Header, body []byte, rq request, partner *config.Partner, budget *reservation, sp *spooled) *response {
	// The names go on every line logged about the message. Most messages
	// log one, the last, which is given them itself: log builds its
	// encoder only when something else is logged.
	names := [...]zap.Field{zap.String("as2_from", rq.from), zap.String("as2_to", rq.to), zap.String("message_id", rq.messageID), zap.String("partner", partner.AS2ID)}
	log := h.log.WithLazy(names[:]...)
	plan := planMDN(rq)
	if rq.messageID == "" {
		return h.noMessageID(log, rq, plan, partner)
	}

	// A resend is found by the insert, not looked up first: a new message
	// then costs one statement, and a resend (rare) an unwrap and an MDN
	// signature that are thrown away.
	msg := newInbound(rq, plan, partner)
	x := &exchange{log: log, hdr: hdr, body: body, rq: rq, plan: plan, partner: partner, budget: budget, msg: msg, sp: sp}
	t0 := time.Now()
	disp, mic, err := h.unwrap(ctx, x)
	unwrapTook := time.Since(t0)
	if err != nil {
		return &response{partner: partner.AS2ID, result: resultBusy}
	}
	asyncURL := h.asyncURL(log, rq, partner)
	if asyncURL != "" {
		msg.MDNMode, msg.MDNURL, msg.Outbox, msg.MDNRetry = "async", asyncURL, true, h.mdnRetry(partner)
	}
	var (
		edi       interchange.Inspection
		res       *response
		id        int64
		storeTook time.Duration
	)
	for attempt := 1; ; attempt++ {
		edi = h.inspectEDI(ctx, x, &disp)
		msg.Disposition = disp.String()
		if res, err = h.mdnReply(x, disp, mic); err != nil {
			log.Error("build MDN", zap.Error(err))
			return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
		}
		t1 := time.Now()
		id, err = h.o.Store.SaveInbound(ctx, msg)
		storeTook = time.Since(t1)
		// A copy of the same interchange, received at the same instant
		// and stored first (another replica), for a partner that refuses
		// duplicates: nothing was stored; look again, now to refuse it.
		if attempt == 1 && errors.Is(err, postgres.ErrDuplicateInterchange) {
			log.Info("duplicate interchange stored meanwhile; answering it refused", zap.Error(err))
			continue
		}
		break
	}
	if err != nil {
		return h.notStored(ctx, x, err, asyncURL)
	}
	if h.o.EDI != nil {
		h.o.EDI.Received(partner, id, edi)
	}
	res.partner, res.result = partner.AS2ID, resultFor(disp)
	if msg.Outbox {
		// The MDN leaves through the outbox; the partner gets 200 now.
		res = &response{status: http.StatusOK, partner: res.partner, result: res.result}
	}
	h.log.Info("message received", names[0], names[1], names[2], names[3], zap.String("disposition", msg.Disposition), zap.Int64("size", msg.PayloadSize),
		zap.String("mdn", msg.MDNMode), zap.Duration("unwrap", unwrapTook), zap.Duration("store", storeTook), zap.Bool("spooled", sp != nil))
	return res
}

// newInbound is the row of a received message before its unwrap.
func newInbound(rq request, plan mdnPlan, partner *config.Partner) *postgres.InboundMessage {
	msg := &postgres.InboundMessage{
		Partner: partner.AS2ID, AS2From: rq.from, AS2To: rq.to, MessageID: rq.messageID,
		MDNMode: "none", MDNSigned: plan.sign,
	}
	if rq.mdnWanted {
		msg.MDNMode = "sync"
	}
	return msg
}

// unwrap runs the receive pipeline and fills msg; it returns the
// disposition and the MIC to report.
func (h *Handler) unwrap(ctx context.Context, x *exchange) (mdn.Disposition, string, error) {
	log, hdr, plan, partner, msg := x.log, x.hdr, x.plan, x.partner, x.msg
	msg.Status = postgres.InboundError
	if plan.failure != "" {
		msg.Error = "MDN request cannot be honoured: " + plan.failure
		log.Warn("MDN request cannot be honoured", zap.String("options", hdr.Get("Disposition-Notification-Options")))
		return mdn.Failed(plan.failure), "", nil
	}
	m, err := h.peel(ctx, x)
	if err == nil {
		msg.Signed, msg.Encrypted, msg.Compressed = m.Signed, m.Encrypted, m.Compressed
		switch {
		case partner.RequireSigned && !m.Signed && m.Encrypted:
			// Decrypted content no signature vouches for gets the answer
			// of every other failure under encryption: telling "your
			// padding was right" apart would be a decryption oracle.
			err = &as2.Error{Disposition: as2.DispositionDecryptionFailed,
				Err: fmt.Errorf("%w: partner profile requires signed messages; encrypted but unsigned", as2.ErrInsufficientSecurity)}
		case partner.RequireSigned && !m.Signed:
			err = fmt.Errorf("%w: partner profile requires signed messages", as2.ErrInsufficientSecurity)
		case partner.RequireEncrypted && !m.Encrypted:
			err = fmt.Errorf("%w: partner profile requires encrypted messages", as2.ErrInsufficientSecurity)
		}
	}
	if errors.Is(err, errBusy) {
		return mdn.Disposition{}, "", err
	}
	if err == nil && m.Signed {
		err = h.checkReplay(ctx, log, partner, x.rq.messageID, m)
	}
	if err != nil {
		d := as2.Disposition(err)
		msg.Error = err.Error()
		log.Warn("message refused", zap.String("disposition", d), zap.Error(err))
		return mdn.Errored(d), "", nil
	}
	if m.Signed {
		h.noteSigner(ctx, log, partner, m.Signer)
	}
	msg.Status = postgres.InboundProcessed
	msg.MIC = m.MIC.String()
	msg.MICAlg = as2.MICAlgName(m.MIC.Alg)
	msg.ContentType, msg.Filename = m.ContentType, m.Filename
	msg.PayloadSize = m.PayloadSize
	msg.Payload = m.Payload
	switch {
	case x.sp != nil:
		msg.PayloadOpen, msg.Staged = x.sp.payloadOpen(), x.sp.stage
		if m.Zlib != nil {
			msg.StagedZlib, msg.ZlibSkip = true, m.Zlib.Skip
		}
	case msg.Payload == nil:
		msg.Payload = []byte{}
	}
	return mdn.Processed(), msg.MIC, nil
}

// unsignedMIC is the partner's MIC scope for unsigned, unencrypted
// messages: the content alone (RFC 4130 §7.3.1) unless its profile asks
// for the old form.
func unsignedMIC(p *config.Partner) as2.MICScope {
	if p.MICIncludeHeaders {
		return as2.MICWithHeaders
	}
	return as2.MICContentOnly
}

// inspectEDI reads the envelope of a processed message's payload
// (Options.EDI) and sets what msg's receipt stores with it; a duplicate
// interchange the partner's profile refuses turns the message into a
// refused one, *disp and msg changed accordingly.
func (h *Handler) inspectEDI(ctx context.Context, x *exchange, disp *mdn.Disposition) interchange.Inspection {
	log, partner, msg := x.log, x.partner, x.msg
	if h.o.EDI == nil || msg.Status != postgres.InboundProcessed {
		return interchange.Inspection{}
	}
	edi := h.o.EDI.Inspect(ctx, partner, payloadReader(x))
	msg.EDI = edi.Save
	if edi.Refuse {
		// RFC 4130 §5.5's answer to a document received before; the
		// payload is not kept, so nothing is delivered twice.
		*disp = mdn.Warned(mdn.DuplicateDocument)
		msg.Status, msg.Error, msg.Payload, msg.PayloadOpen, msg.Staged = postgres.InboundError, edi.Reason, nil, nil, nil
		log.Warn("message refused: duplicate interchange", zap.String("reason", edi.Reason))
	}
	return edi
}
