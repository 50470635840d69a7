package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"
	yaml "go.yaml.in/yaml/v3"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
)

// PartnerService changes and reads the stored partners; *partners.Service
// implements the changes, *postgres.Store the reads.
type PartnerService interface {
	Put(ctx context.Context, actor string, entry []byte, expect int64) (postgres.StoredPartner, error)
	Delete(ctx context.Context, actor, as2ID string, expect int64) (int64, error)
	Restore(ctx context.Context, actor, as2ID string, version, expect int64) (postgres.StoredPartner, error)
}

// PartnerReader reads the stored partners; *postgres.Store implements it.
type PartnerReader interface {
	Partners(ctx context.Context) (postgres.PartnerSet, error)
	Partner(ctx context.Context, as2ID string) (postgres.StoredPartner, error)
	PartnerHistory(ctx context.Context, as2ID string, limit int) ([]postgres.PartnerHistoryEntry, error)
	ServedRevisions(ctx context.Context, seenWithin time.Duration) ([]postgres.ReplicaRevision, error)
}

// maxPartnerEntry bounds the body of a partner create or update: a profile
// with a few certificates is a few KiB.
const maxPartnerEntry = 1 << 20

// Partner is the JSON form of a stored partner. Spec holds the profile's
// keys as in the YAML file (certificates as PEM text).
type Partner struct {
	AS2ID     string         `json:"as2_id"`
	Version   int64          `json:"version"`
	Revision  int64          `json:"revision"`
	UpdatedAt time.Time      `json:"updated_at"`
	UpdatedBy string         `json:"updated_by"`
	Spec      map[string]any `json:"spec"`
	Location  string         `json:"location"`
}

// PartnerList is the answer of GET /partners: the stored partners, the
// revision of the set, the revision this replica serves and that of every
// replica seen lately, so that one that lags shows.
type PartnerList struct {
	Revision       int64            `json:"revision"`
	ServedRevision int64            `json:"served_revision"`
	Replicas       []ReplicaServing `json:"replicas"`
	Partners       []Partner        `json:"partners"`
}

// ReplicaServing is the partner set revision one replica serves.
type ReplicaServing struct {
	Identity  string    `json:"identity"`
	Revision  int64     `json:"revision"`
	AppliedAt time.Time `json:"applied_at"`
	Behind    bool      `json:"behind"`
}

// HistoryEntry is one change of a partner.
type HistoryEntry struct {
	Revision  int64          `json:"revision"`
	AS2ID     string         `json:"as2_id"`
	Version   int64          `json:"version"`
	Op        string         `json:"op"`
	Diff      []string       `json:"diff"`
	Actor     string         `json:"actor"`
	ChangedAt time.Time      `json:"changed_at"`
	Spec      map[string]any `json:"spec,omitempty"`
}

// configError is the answer to a profile that does not validate: the
// field, line and fix of the configuration file's errors.
type configError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Line  int    `json:"line,omitempty"`
	Fix   string `json:"fix,omitempty"`
}

// testPartner answers POST /partners/{as2id}/test: a connectivity test
// (internal/probe) against the partner as this replica serves it, 200
// with the report whether the test passed (its ok says) or not.
func (h *handler) testPartner(w http.ResponseWriter, r *http.Request) {
	rep, found := h.o.TestPartner(r.Context(), partnerID(r))
	if !found {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no partner %q is served (AS2 IDs are case-sensitive)", partnerID(r)))
		return
	}
	detail := map[string]any{}
	if pr, isReport := rep.(probe.Report); isReport {
		detail["ok"] = pr.OK
	}
	h.audit(r, "partner.test", partnerID(r), detail)
	httpserver.WriteJSON(w, http.StatusOK, rep)
}

// actorOf names who makes a change through the API, for the history:
// "user:alice from 192.0.2.7", "token:ci (alice) from ...".
func actorOf(r *http.Request) string {
	e := auth.AuditFromRequest(r)
	return e.Actor + " from " + e.Remote
}

func (h *handler) partnerLocation(id string) string {
	return strings.TrimSuffix(h.o.BasePath, "/") + "/partners/" + url.PathEscape(id)
}

func (h *handler) partnerView(sp postgres.StoredPartner) (Partner, error) {
	spec, err := specMap(sp.Spec)
	if err != nil {
		return Partner{}, err
	}
	return Partner{AS2ID: sp.AS2ID, Version: sp.Version, Revision: sp.Revision, UpdatedAt: sp.UpdatedAt, UpdatedBy: sp.UpdatedBy,
		Spec: spec, Location: h.partnerLocation(sp.AS2ID)}, nil
}

// specMap is a stored profile's YAML as a JSON object.
func specMap(text string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("decode stored partner profile: %w", err)
	}
	return m, nil
}

func (h *handler) listPartners(w http.ResponseWriter, r *http.Request) {
	set, err := h.o.PartnerReader.Partners(r.Context())
	if err != nil {
		h.internal(w, "list partners", err)
		return
	}
	served, err := h.o.PartnerReader.ServedRevisions(r.Context(), partners.StoppedAfter)
	if err != nil {
		h.internal(w, "list partners", err)
		return
	}
	out := PartnerList{Revision: set.Revision, ServedRevision: h.o.ServedRevision(), Replicas: []ReplicaServing{}, Partners: []Partner{}}
	for _, rr := range served {
		out.Replicas = append(out.Replicas, ReplicaServing{Identity: rr.Identity, Revision: rr.Revision, AppliedAt: rr.AppliedAt, Behind: rr.Revision < set.Revision})
	}
	for _, sp := range set.Partners {
		p, err := h.partnerView(sp)
		if err != nil {
			h.internal(w, "list partners", err)
			return
		}
		out.Partners = append(out.Partners, p)
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

// partnerID is the AS2 ID of the path. chi routes on the escaped path
// (RawPath) when the path has one, so that an escaped "/" stays in its
// segment, and on the decoded Path otherwise: the parameter is unescaped
// only in the first case, else an ID holding "%41" would name "A".
func partnerID(r *http.Request) string {
	raw := chi.URLParam(r, "as2id")
	if r.URL.RawPath == "" {
		return raw
	}
	if id, err := url.PathUnescape(raw); err == nil {
		return id
	}
	return raw
}

func (h *handler) getPartner(w http.ResponseWriter, r *http.Request) {
	sp, err := h.o.PartnerReader.Partner(r.Context(), partnerID(r))
	if err != nil {
		h.partnerError(w, "read partner", err, false)
		return
	}
	w.Header().Set("ETag", etag(sp.Version))
	if r.URL.Query().Get("format") == "yaml" {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = io.WriteString(w, sp.Spec)
		return
	}
	p, err := h.partnerView(sp)
	if err != nil {
		h.internal(w, "read partner", err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, p)
}

// readEntry reads a partner entry (YAML or JSON) from the request body.
func readEntry(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPartnerEntry))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("partner profile larger than %d bytes", maxPartnerEntry))
		return nil, false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		writeError(w, http.StatusBadRequest, "", "empty body: send the partner's profile as JSON or YAML, with the keys of a partners entry (as2_id, url, certificate as PEM text, ...)")
		return nil, false
	}
	return body, true
}

func (h *handler) createPartner(w http.ResponseWriter, r *http.Request) {
	body, ok := readEntry(w, r)
	if !ok {
		return
	}
	sp, err := h.o.Partners.Put(r.Context(), actorOf(r), body, 0)
	if err != nil {
		h.partnerError(w, "create partner", err, false)
		return
	}
	h.audit(r, "partner.create", sp.AS2ID, map[string]any{"version": sp.Version, "revision": sp.Revision})
	h.writePartner(w, http.StatusCreated, sp)
}

func (h *handler) writePartner(w http.ResponseWriter, status int, sp postgres.StoredPartner) {
	p, err := h.partnerView(sp)
	if err != nil {
		h.internal(w, "read partner", err)
		return
	}
	w.Header().Set("ETag", etag(sp.Version))
	w.Header().Set("Location", p.Location)
	httpserver.WriteJSON(w, status, p)
}

func (h *handler) updatePartner(w http.ResponseWriter, r *http.Request) {
	expect, ok := ifMatch(w, r, true)
	if !ok {
		return
	}
	body, ok := readEntry(w, r)
	if !ok {
		return
	}
	spec, err := config.DecodeSpec("request", string(body))
	if err != nil {
		h.partnerError(w, "update partner", err, true)
		return
	}
	if id := partnerID(r); spec.AS2ID != id {
		writeError(w, http.StatusBadRequest, "as2_id", fmt.Sprintf("the profile's as2_id %q is not the partner of the URL %q; an AS2 ID is not renamed: create the new partner and delete the old one", spec.AS2ID, id))
		return
	}
	sp, err := h.o.Partners.Put(r.Context(), actorOf(r), body, expect)
	if err != nil {
		h.partnerError(w, "update partner", err, true)
		return
	}
	h.audit(r, "partner.update", sp.AS2ID, map[string]any{"version": sp.Version, "revision": sp.Revision})
	h.writePartner(w, http.StatusOK, sp)
}

func (h *handler) deletePartner(w http.ResponseWriter, r *http.Request) {
	expect, ok := ifMatch(w, r, false)
	if !ok {
		return
	}
	rev, err := h.o.Partners.Delete(r.Context(), actorOf(r), partnerID(r), expect)
	if err != nil {
		h.partnerError(w, "delete partner", err, expect != postgres.AnyVersion)
		return
	}
	h.audit(r, "partner.delete", partnerID(r), map[string]any{"revision": rev})
	httpserver.WriteJSON(w, http.StatusOK, map[string]any{"deleted": partnerID(r), "revision": rev})
}

func (h *handler) partnerHistory(w http.ResponseWriter, r *http.Request) {
	limit, _, ok := page(w, r)
	if !ok {
		return
	}
	hist, err := h.o.PartnerReader.PartnerHistory(r.Context(), partnerID(r), limit)
	if err != nil {
		h.internal(w, "partner history", err)
		return
	}
	if len(hist) == 0 {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no partner %q was ever stored", partnerID(r)))
		return
	}
	out := struct {
		History []HistoryEntry `json:"history"`
	}{History: []HistoryEntry{}}
	for _, e := range hist {
		he := HistoryEntry{Revision: e.Revision, AS2ID: e.AS2ID, Version: e.Version, Op: e.Op, Actor: e.Actor, ChangedAt: e.ChangedAt, Diff: []string{}}
		for _, line := range strings.Split(strings.TrimRight(e.Diff, "\n"), "\n") {
			if line != "" {
				he.Diff = append(he.Diff, line)
			}
		}
		if e.Spec != nil {
			if he.Spec, err = specMap(*e.Spec); err != nil {
				h.internal(w, "partner history", err)
				return
			}
		}
		out.History = append(out.History, he)
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

func (h *handler) restorePartner(w http.ResponseWriter, r *http.Request) {
	expect, ok := ifMatch(w, r, false)
	if !ok {
		return
	}
	v, err := strconv.ParseInt(r.URL.Query().Get("version"), 10, 64)
	if err != nil || v <= 0 {
		writeError(w, http.StatusBadRequest, "version", "version must be the number of the version to restore (see GET .../history)")
		return
	}
	sp, err := h.o.Partners.Restore(r.Context(), actorOf(r), partnerID(r), v, expect)
	if err != nil {
		h.partnerError(w, "restore partner", err, expect != postgres.AnyVersion)
		return
	}
	h.audit(r, "partner.restore", sp.AS2ID, map[string]any{"from_version": v, "version": sp.Version, "revision": sp.Revision})
	h.writePartner(w, http.StatusOK, sp)
}

// etag is the ETag of a partner version.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads the version an update is made against from If-Match;
// required answers 428 without one. Absent and not required is
// postgres.AnyVersion.
func ifMatch(w http.ResponseWriter, r *http.Request, required bool) (int64, bool) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		if required {
			writeError(w, http.StatusPreconditionRequired, "If-Match", `If-Match is required: send the ETag of the version you read (GET the partner; ETag: "3"), so that a change made meanwhile is not overwritten`)
			return 0, false
		}
		return postgres.AnyVersion, true
	}
	n, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(v, "W/"), `"`), 10, 64)
	if err != nil || n <= 0 {
		writeError(w, http.StatusBadRequest, "If-Match", `If-Match must be the partner's ETag, a version number in quotes like "3"`)
		return 0, false
	}
	return n, true
}

// partnerError answers a failed partner change or read: 422 for a profile
// that does not validate (with its field and fix), 404, 409 or 412.
func (h *handler) partnerError(w http.ResponseWriter, what string, err error, precondition bool) {
	ce := config.EntryError(err)
	switch {
	case ce != nil:
		httpserver.WriteJSON(w, http.StatusUnprocessableEntity, configError{Error: ce.Msg, Field: ce.Field, Line: ce.Line, Fix: ce.Fix})
	case errors.Is(err, postgres.ErrPartnerNotFound):
		writeError(w, http.StatusNotFound, "", err.Error())
	case errors.Is(err, postgres.ErrPartnerConflict) && precondition:
		writeError(w, http.StatusPreconditionFailed, "If-Match", err.Error()+": read it again and make the change on the current version")
	case errors.Is(err, postgres.ErrPartnerConflict):
		writeError(w, http.StatusConflict, "", err.Error())
	default:
		h.internal(w, what, err)
	}
}

// internal answers 500 for an error that is not the caller's, logged.
func (h *handler) internal(w http.ResponseWriter, what string, err error) {
	h.log.Error(what, zap.Error(err))
	writeError(w, http.StatusInternalServerError, "", what+" failed; retry later")
}

var _ PartnerService = (*partners.Service)(nil)
