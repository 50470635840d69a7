package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/postgres"
)

// ConnectorService plans, applies and restores the connectors document;
// *connectors.Service implements it.
type ConnectorService interface {
	Plan(ctx context.Context, data []byte, name string) (connectors.Plan, error)
	Apply(ctx context.Context, p connectors.Plan, expect int64, audit postgres.AuditEntry) (int64, error)
	Restore(ctx context.Context, revision, expect int64, audit postgres.AuditEntry) (int64, connectors.Plan, error)
	History(ctx context.Context, limit int, before int64) ([]postgres.ConnectorsRevision, error)
}

// ConnectorReader reads the stored connectors document and the revision
// each replica serves; *postgres.Store implements it.
type ConnectorReader interface {
	Connectors(ctx context.Context) (postgres.ConnectorsRevision, error)
	ServedConnectors(ctx context.Context, seenWithin time.Duration) ([]postgres.ReplicaRevision, error)
}

// ConnectorsDocument is the answer of GET /connectors: the current
// document (parsed, defaults filled in, and as written), its revision,
// the revision this replica serves and that of every replica seen
// lately.
type ConnectorsDocument struct {
	Revision       int64              `json:"revision"`
	ServedRevision int64              `json:"served_revision"`
	Replicas       []ReplicaServing   `json:"replicas"`
	UpdatedAt      *time.Time         `json:"updated_at,omitempty"`
	UpdatedBy      string             `json:"updated_by,omitempty"`
	Connectors     *config.Connectors `json:"connectors"`
	YAML           string             `json:"yaml"`
}

// ConnectorsApplied is the answer of PUT /connectors and of a restore:
// the revision stored (the one before when nothing changed) and the
// plan; with dry_run, the plan alone and nothing stored.
type ConnectorsApplied struct {
	Revision     int64           `json:"revision"`
	RestoredFrom int64           `json:"restored_from,omitempty"`
	DryRun       bool            `json:"dry_run,omitempty"`
	Plan         connectors.Plan `json:"plan"`
}

// ConnectorsRevision is one entry of GET /connectors/history.
type ConnectorsRevision struct {
	Revision     int64     `json:"revision"`
	Changes      []string  `json:"changes"`
	Actor        string    `json:"actor"`
	RestoredFrom int64     `json:"restored_from,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

func (h *handler) getConnectors(w http.ResponseWriter, r *http.Request) {
	cur, err := h.o.ConnectorReader.Connectors(r.Context())
	if err != nil {
		h.internal(w, "read connectors", err)
		return
	}
	w.Header().Set("ETag", etag(cur.Revision))
	if r.URL.Query().Get("format") == "yaml" {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = io.WriteString(w, cur.Document)
		return
	}
	c, err := config.ParseConnectors([]byte(cur.Document), config.ConnectorsOptions{Name: "stored", Away: true})
	if err != nil {
		h.internal(w, "read connectors", err)
		return
	}
	served, err := h.o.ConnectorReader.ServedConnectors(r.Context(), connectors.StoppedAfter)
	if err != nil {
		h.internal(w, "read connectors", err)
		return
	}
	out := ConnectorsDocument{Revision: cur.Revision, ServedRevision: h.o.ServedConnectors(), Replicas: []ReplicaServing{}, Connectors: c, YAML: cur.Document}
	if cur.Revision > 0 {
		out.UpdatedAt, out.UpdatedBy = &cur.CreatedAt, cur.Actor
	}
	for _, rr := range served {
		out.Replicas = append(out.Replicas, ReplicaServing{Identity: rr.Identity, Revision: rr.Revision, AppliedAt: rr.AppliedAt, Behind: rr.Revision < cur.Revision})
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

// expectedRevision reads the revision a change is made against: If-Match
// (the ETag of GET /connectors) or ?expect=. required answers 428
// without either; absent and not required is postgres.AnyRevision.
func expectedRevision(w http.ResponseWriter, r *http.Request, required bool) (int64, bool) {
	v, param := strings.TrimSpace(r.Header.Get("If-Match")), "If-Match"
	if q := r.URL.Query().Get("expect"); q != "" {
		v, param = q, "expect"
	}
	if v == "" {
		if required {
			writeError(w, http.StatusPreconditionRequired, "If-Match", `If-Match (or ?expect=) is required: send the revision you read (GET /connectors; ETag: "3"), or "0" when none is stored, so that a change made meanwhile is not overwritten`)
			return 0, false
		}
		return postgres.AnyRevision, true
	}
	n, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(v, "W/"), `"`), 10, 64)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, param, param+` must be the revision read, like "3" (the ETag of GET /connectors)`)
		return 0, false
	}
	return n, true
}

func (h *handler) putConnectors(w http.ResponseWriter, r *http.Request) {
	dryRun := r.URL.Query().Get("dry_run") == "true"
	expect, ok := expectedRevision(w, r, !dryRun)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, config.MaxConnectorsBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("connectors document larger than %d KiB", config.MaxConnectorsBytes>>10))
		return
	}
	plan, err := h.o.Connectors.Plan(r.Context(), body, "request")
	if err != nil {
		h.connectorsError(w, "plan connectors", err)
		return
	}
	if dryRun {
		httpserver.WriteJSON(w, http.StatusOK, ConnectorsApplied{Revision: plan.From, DryRun: true, Plan: plan})
		return
	}
	rev, err := h.o.Connectors.Apply(r.Context(), plan, expect, auth.AuditFromRequest(r))
	if err != nil {
		h.connectorsError(w, "apply connectors", err)
		return
	}
	w.Header().Set("ETag", etag(rev))
	httpserver.WriteJSON(w, http.StatusOK, ConnectorsApplied{Revision: rev, Plan: plan})
}

func (h *handler) connectorsHistory(w http.ResponseWriter, r *http.Request) {
	items, next, ok := listPage(h, w, r, "connectors history",
		func(limit int, before int64) ([]postgres.ConnectorsRevision, error) {
			return h.o.Connectors.History(r.Context(), limit, before)
		},
		func(c postgres.ConnectorsRevision) int64 { return c.Revision },
		func(c postgres.ConnectorsRevision) ConnectorsRevision {
			out := ConnectorsRevision{Revision: c.Revision, Actor: c.Actor, RestoredFrom: c.RestoredFrom, CreatedAt: c.CreatedAt, Changes: []string{}}
			for _, line := range strings.Split(strings.TrimRight(c.Summary, "\n"), "\n") {
				if line != "" {
					out.Changes = append(out.Changes, line)
				}
			}
			return out
		})
	if !ok {
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, struct {
		History    []ConnectorsRevision `json:"history"`
		NextCursor string               `json:"next_cursor,omitempty"`
	}{items, next})
}

func (h *handler) restoreConnectors(w http.ResponseWriter, r *http.Request) {
	expect, ok := expectedRevision(w, r, false)
	if !ok {
		return
	}
	v, err := strconv.ParseInt(chi.URLParam(r, "revision"), 10, 64)
	if err != nil || v <= 0 {
		writeError(w, http.StatusBadRequest, "revision", "revision must be the number of a stored revision (see GET /connectors/history)")
		return
	}
	rev, plan, err := h.o.Connectors.Restore(r.Context(), v, expect, auth.AuditFromRequest(r))
	if err != nil {
		h.connectorsError(w, "restore connectors", err)
		return
	}
	w.Header().Set("ETag", etag(rev))
	httpserver.WriteJSON(w, http.StatusOK, ConnectorsApplied{Revision: rev, RestoredFrom: v, Plan: plan})
}

// connectorsError answers a failed connectors change: 422 for a document
// that does not validate (its field, line and fix), 404 for an unknown
// revision, 412 for a stale one.
func (h *handler) connectorsError(w http.ResponseWriter, what string, err error) {
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		httpserver.WriteJSON(w, http.StatusUnprocessableEntity, configError{Error: ce.Msg, Field: ce.Field, Line: ce.Line, Fix: ce.Fix})
	case errors.Is(err, postgres.ErrConnectorsRevisionNotFound):
		writeError(w, http.StatusNotFound, "revision", err.Error())
	case errors.Is(err, postgres.ErrConnectorsConflict):
		writeError(w, http.StatusPreconditionFailed, "If-Match", err.Error()+": read the document again (GET /connectors) and make the change on the current revision")
	default:
		h.internal(w, what, err)
	}
}

var _ ConnectorService = (*connectors.Service)(nil)
