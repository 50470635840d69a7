package receiver

import (
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// mdnTooLarge answers an async MDN over Options.MaxMDNBytes: 413, nothing
// stored. size is its size when known, else -1.
func (h *Handler) mdnTooLarge(w http.ResponseWriter, partner string, size int64) {
	h.metrics.received.WithLabelValues(partner, resultTooLarge).Inc()
	h.log.Warn("async MDN over the limit", zap.String("partner", partner), zap.Int64("size", size), zap.Int64("limit", h.o.MaxMDNBytes))
	http.Error(w, "async MDN too large: the limit is "+strconv.FormatInt(h.o.MaxMDNBytes, 10)+
		" bytes (an MDN is a few KiB); nothing was stored; ask the operator to raise EDIHUB_MAX_MDN_BYTES if this MDN is genuine", http.StatusRequestEntityTooLarge)
}

// intake stores an async MDN raw and answers at once; one over
// Options.MaxMDNBytes is refused.
func (h *Handler) intake(w http.ResponseWriter, r *http.Request, body []byte, partnerLabel string) {
	if int64(len(body)) > h.o.MaxMDNBytes {
		h.mdnTooLarge(w, partnerLabel, int64(len(body)))
		return
	}
	in := &postgres.InboxMDN{Header: r.Header.Clone(), Body: body}
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
		in.Header.Del(k) // credentials stay out of the database
	}
	var err error
	if in.AS2From, err = as2.ParseAS2Name(r.Header.Get("AS2-From")); err != nil {
		in.AS2From = r.Header.Get("AS2-From")
	}
	if in.AS2To, err = as2.ParseAS2Name(r.Header.Get("AS2-To")); err != nil {
		in.AS2To = r.Header.Get("AS2-To")
	}
	if m, err := mdn.Parse(r.Header, body, mdn.ParseOptions{Unverified: true, Limits: h.o.Limits}); err == nil {
		in.OriginalMessageID = m.OriginalMessageID
	}
	log := h.log.With(zap.String("as2_from", in.AS2From), zap.String("original_message_id", in.OriginalMessageID))
	id, err := h.o.Store.SaveInboxMDN(r.Context(), in)
	if err != nil {
		log.Error("store async MDN", zap.Error(err))
		http.Error(w, "the MDN could not be stored; please resend later", http.StatusServiceUnavailable)
		return
	}
	h.metrics.inbox.WithLabelValues(partnerLabel).Inc()
	log.Info("async MDN received", zap.Int64("inbox_id", id))
	w.WriteHeader(http.StatusOK)
}
