package receiver

import (
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
)

// request holds the AS2 header fields of a message.
type request struct {
	// station is the station the request addresses, from the snapshot
	// its header was read with (set by address).
	station             *Station
	from, to, messageID string
	mdnWanted           bool
	asyncURL            string
	opts                as2.DispositionOptions
	optsErr             error
}

func parseRequest(h http.Header) request {
	rq := request{
		messageID: messageID(headerValue(h, "Message-Id")),
		mdnWanted: len(h["Disposition-Notification-To"]) > 0,
		asyncURL:  strings.TrimSpace(headerValue(h, "Receipt-Delivery-Option")),
	}
	rq.from, _ = as2.ParseAS2Name(headerValue(h, "As2-From"))
	rq.to, _ = as2.ParseAS2Name(headerValue(h, "As2-To"))
	if v := headerValue(h, "Disposition-Notification-Options"); v != "" {
		rq.opts, rq.optsErr = as2.ParseDispositionOptions(v)
	}
	return rq
}

// headerValue is h.Get for a key already in canonical form ("As2-From"
// for AS2-From): Get canonicalises its key each time, and builds a new
// string for one that is not, once per field per message.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// messageID returns the Message-ID as received (net/http already trimmed
// it), or "" when it holds control characters no MDN could echo.
func messageID(v string) string {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return ""
		}
	}
	return v
}

// address finds the partner of a request from its header alone, for
// messages and async MDNs alike: anyone else's body is never read. A nil
// partner comes with the answer to send.
func (h *Handler) address(hdr http.Header, rq *request) (*config.Partner, *response) {
	if rq.from == "" || rq.to == "" {
		h.log.Info("request without a valid AS2-From or AS2-To", zap.String("as2_from", hdr.Get("AS2-From")), zap.String("as2_to", hdr.Get("AS2-To")))
		return nil, textResponse(http.StatusBadRequest, partnerUnknown, resultBadRequest,
			"AS2-From and AS2-To header fields are required (1 to 128 printable ASCII characters, quoted when they hold spaces)")
	}
	dir := h.directory()
	partner, ok := dir.partners.Partner(rq.from)
	if ok {
		rq.station = dir.partnerStation(partner)
		if rq.to == rq.station.AS2ID {
			return partner, nil
		}
	}
	// Answered by the station addressed, if it is one of ours.
	if st, ok := dir.station(rq.to); ok {
		rq.station = st
	} else {
		rq.station = dir.first
	}
	log := h.log.With(zap.String("as2_from", rq.from), zap.String("as2_to", rq.to), zap.String("message_id", rq.messageID))
	log.Warn("unknown trading relationship")
	if !rq.mdnWanted || rq.messageID == "" {
		return nil, textResponse(http.StatusForbidden, partnerUnknown, mdn.UnknownTradingRelationship,
			"unknown trading relationship: no partner "+strconv.Quote(rq.from)+" configured for station "+strconv.Quote(rq.to))
	}
	// Not stored, and in the response even when an async MDN was asked
	// for: we send nothing to unknown parties' URLs. Signed with the
	// station key when a signed receipt was asked for, like every error.
	plan := planMDN(*rq)
	res, err := h.mdnResponse(*rq, mdnPlan{sign: plan.sign, alg: plan.alg}, mdn.Errored(mdn.UnknownTradingRelationship), "")
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return nil, textResponse(http.StatusInternalServerError, partnerUnknown, resultUnavailable, "internal error")
	}
	res.partner, res.result = partnerUnknown, mdn.UnknownTradingRelationship
	return nil, res
}
