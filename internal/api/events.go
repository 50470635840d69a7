package api

import (
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Limits of GET /events.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
)

// Events is the JSON answer of GET /events. NextCursor is always set: the
// ?after= of the next call (the same position when no event was new).
type Events struct {
	Events     []outbox.Event `json:"events"`
	NextCursor string         `json:"next_cursor"`
}

// events serves the event feed. Events come oldest first; a consumer
// keeps next_cursor and calls again with ?after= it. An event whose
// transaction (or an older one) is still running is held back until it
// ends, so paging never skips an event (see postgres.EventCursor).
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "after", "limit")
	if !ok {
		return
	}
	after, err := postgres.ParseEventCursor(q.Get("after"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "after", fmt.Sprintf("after %q: use the next_cursor of the previous page, or leave it out to start at the oldest event", q.Get("after")))
		return
	}
	limit := DefaultEventLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxEventLimit {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, MaxEventLimit))
			return
		}
		limit = n
	}
	evs, err := h.o.Store.Events(r.Context(), after, limit)
	if err != nil {
		h.log.Error("read events", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "events could not be read; retry later")
		return
	}
	out := Events{Events: make([]outbox.Event, 0, len(evs)), NextCursor: after.String()}
	for _, e := range evs {
		out.Events = append(out.Events, outbox.EventView(e))
		out.NextCursor = e.Cursor.String()
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}
