package api

import (
	"net/http"
	"time"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/postgres"
)

// InboxMDN is the JSON form of an async MDN as received and decided.
type InboxMDN struct {
	ID                int64     `json:"id"`
	ReceivedAt        time.Time `json:"received_at"`
	AS2From           string    `json:"as2_from"`
	AS2To             string    `json:"as2_to"`
	OriginalMessageID string    `json:"original_message_id"`
	ContentType       string    `json:"content_type"`
	Size              int       `json:"size"`
	// State is pending, processed or orphan.
	State string `json:"state"`
	// Result is the message's new status (delivered, failed) or orphan.
	Result string `json:"result"`
	// Reason says why an orphan is one, or why the message failed.
	Reason      string     `json:"reason"`
	Partner     string     `json:"partner"`
	Message     *int64     `json:"message"`
	MessageURL  string     `json:"message_location,omitempty"`
	ProcessedAt *time.Time `json:"processed_at"`
	// Fence is the leadership token of the term that decided it.
	Fence *int64 `json:"fence"`
}

// MDNList is the JSON answer of GET /mdns.
type MDNList struct {
	MDNs       []InboxMDN `json:"mdns"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

func (h *handler) mdns(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "state", "limit", "cursor")
	if !ok {
		return
	}
	iq := postgres.InboxQuery{}
	if iq.State, ok = oneOf(w, q, "state", postgres.InboxPending, postgres.InboxProcessed, postgres.InboxOrphan); !ok {
		return
	}
	var out MDNList
	out.MDNs, out.NextCursor, ok = listPage(h, w, r, "MDNs", func(limit int, before int64) ([]postgres.InboxMDNInfo, error) {
		iq.Limit, iq.Before = limit, before
		return h.o.Inbox.InboxMDNs(r.Context(), iq)
	}, func(m postgres.InboxMDNInfo) int64 { return m.ID }, h.inboxView)
	if ok {
		httpserver.WriteJSON(w, http.StatusOK, out)
	}
}

// inboxView is m as the API shows it.
func (h *handler) inboxView(m postgres.InboxMDNInfo) InboxMDN {
	v := InboxMDN{
		ID: m.ID, ReceivedAt: m.ReceivedAt, AS2From: m.AS2From, AS2To: m.AS2To, OriginalMessageID: m.OriginalMessageID,
		ContentType: m.ContentType, Size: m.Size, State: m.State, Result: m.Result, Reason: m.Reason,
		Partner: m.Partner, Message: m.MessageRef, ProcessedAt: m.ProcessedAt, Fence: m.Fence,
	}
	if m.MessageRef != nil {
		v.MessageURL = h.location(*m.MessageRef)
	}
	return v
}
