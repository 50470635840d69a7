package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Trace is the JSON answer of GET /messages/{id}/trace: everything stored
// about a message but its payload and MDN bytes (those are
// /messages/{id}/payload and /messages/{id}/mdn).
type Trace struct {
	Message Message `json:"message"`
	// Attempts are the send attempts of an outbound message, oldest
	// first.
	Attempts []Attempt `json:"attempts"`
	// MDN is the MDN kept for the message (returned by the partner,
	// or answered by us for an inbound message); null when none.
	MDN *TraceMDN `json:"mdn"`
	// AsyncMDNs are the async MDNs received for an outbound message:
	// the one applied to it and the orphans naming its Message-ID.
	AsyncMDNs []InboxMDN `json:"async_mdns"`
	// Events are the message's events, oldest first.
	Events []outbox.Event `json:"events"`
}

// Attempt is one send attempt of a trace.
type Attempt struct {
	Attempt int       `json:"attempt"`
	Replica string    `json:"replica"`
	At      time.Time `json:"at"`
	// HTTPStatus is the partner's answer, null when none came.
	HTTPStatus *int `json:"http_status"`
	// Outcome is retrying, done or failed.
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
}

// TraceMDN describes the MDN kept for a message.
type TraceMDN struct {
	Disposition string `json:"disposition"`
	MIC         string `json:"mic"`
	Signed      bool   `json:"signed"`
	// MICVerified is true when the MIC the MDN returned matched, false
	// for a delivery on an unsigned MDN without MIC, null otherwise.
	MICVerified *bool     `json:"mic_verified"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	StoredAt    time.Time `json:"stored_at"`
	// Location is where the MDN's bytes are.
	Location string `json:"location"`
}

func (h *handler) trace(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	t, err := h.o.Tracer.MessageTrace(r.Context(), id)
	if err != nil {
		h.readErr(w, id, err)
		return
	}
	out := Trace{Message: h.view(t.Message), Attempts: []Attempt{}, AsyncMDNs: []InboxMDN{}, Events: []outbox.Event{}}
	for _, a := range t.Attempts {
		v := Attempt{Attempt: a.Attempt, Replica: a.Replica, At: a.At, Outcome: a.Outcome, Error: a.Error}
		if a.HTTPStatus != 0 {
			v.HTTPStatus = &a.HTTPStatus
		}
		out.Attempts = append(out.Attempts, v)
	}
	if m := t.MDN; m != nil {
		out.MDN = &TraceMDN{Disposition: m.Disposition, MIC: m.MIC, Signed: m.Signed, MICVerified: m.MICVerified,
			ContentType: m.ContentType, Size: m.Size, StoredAt: m.CreatedAt, Location: h.location(id) + "/mdn"}
	}
	for _, m := range t.InboxMDNs {
		out.AsyncMDNs = append(out.AsyncMDNs, h.inboxView(m))
	}
	for _, e := range t.Events {
		out.Events = append(out.Events, outbox.EventView(e))
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

// CancelRequest is the optional JSON body of POST /messages/{id}/cancel.
type CancelRequest struct {
	// Reason is recorded in the message's error: "cancelled: <reason>".
	Reason string `json:"reason"`
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "read body: "+err.Error())
		return
	}
	var req CancelRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "", fmt.Sprintf(`body: want nothing or {"reason": "…"}: %v`, err))
			return
		}
	}
	if len(req.Reason) > MaxCancelReason || !utf8.ValidString(req.Reason) {
		writeError(w, http.StatusBadRequest, "reason", fmt.Sprintf("reason: at most %d bytes of UTF-8", MaxCancelReason))
		return
	}
	m, err := h.o.Canceller.CancelMessage(r.Context(), id, req.Reason)
	switch {
	case errors.Is(err, hub.ErrMessageNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no message %d", id))
		return
	case errors.Is(err, postgres.ErrNotCancellable):
		_, reason, _ := strings.Cut(err.Error(), postgres.ErrNotCancellable.Error()+": ")
		if reason == "" {
			reason = "only outbound messages queued or retrying are cancelled"
		}
		writeError(w, http.StatusConflict, "", fmt.Sprintf("message %d cannot be cancelled: %s", id, reason))
		return
	case err != nil:
		h.log.Error("cancel", zap.Int64("id", id), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the message could not be cancelled; retry later")
		return
	}
	h.log.Info("cancelled", zap.Int64("id", id), zap.String("partner", m.Partner), zap.String("message_id", m.MessageID), zap.String("reason", req.Reason))
	h.audit(r, "message.cancel", strconv.FormatInt(id, 10), map[string]any{"partner": m.Partner, "message_id": m.MessageID, "reason": req.Reason})
	w.Header().Set("Location", h.location(id))
	httpserver.WriteJSON(w, http.StatusOK, h.view(m))
}

func (h *handler) reapply(w http.ResponseWriter, r *http.Request) {
	v := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no async MDN %q: ids are positive integers", v))
		return
	}
	m, err := h.o.Reapplier.ReapplyInboxMDN(r.Context(), id)
	switch {
	case errors.Is(err, postgres.ErrInboxMDNNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no async MDN %d", id))
		return
	case errors.Is(err, postgres.ErrNotOrphan):
		_, state, _ := strings.Cut(err.Error(), postgres.ErrNotOrphan.Error()+": ")
		writeError(w, http.StatusConflict, "", fmt.Sprintf("async MDN %d is not an orphan (%s): only orphans are applied again", id, state))
		return
	case err != nil:
		h.log.Error("re-apply MDN", zap.Int64("id", id), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the MDN could not be re-applied; retry later")
		return
	}
	h.log.Info("async MDN queued for the poller again", zap.Int64("inbox_id", id), zap.String("as2_from", m.AS2From))
	h.audit(r, "mdn.reapply", strconv.FormatInt(id, 10), map[string]any{"original_message_id": m.OriginalMessageID, "as2_from": m.AS2From})
	httpserver.WriteJSON(w, http.StatusOK, h.inboxView(m))
}
