// Package api is edihub's REST API for internal systems, mounted under
// /api/v1 behind the bearer token (httpserver.RouterOptions.API):
//
//	POST /messages?partner=ID&filename=F   queue the body for a partner (202)
//	GET  /messages?partner=&direction=&status=&since=&until=&limit=&cursor=
//	GET  /messages/{id}                    one message, inbound or outbound
//	GET  /messages/{id}/payload            the document, raw
//	GET  /messages/{id}/mdn                the MDN as stored, raw
//	GET  /certificates                     station and partner certificates, with expiry
//
// Errors are JSON {"error": "...", "parameter": "..."}; a bad query
// parameter is a 400 that names it.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Enqueuer queues outbound documents; *outbox.Queue implements it.
type Enqueuer interface {
	Enqueue(ctx context.Context, d outbox.Document) (outbox.Queued, error)
}

// Reader reads messages; *postgres.Store implements it.
type Reader interface {
	Message(ctx context.Context, id int64) (postgres.MessageInfo, error)
	Messages(ctx context.Context, q postgres.MessageQuery) ([]postgres.MessageInfo, error)
	MessagePayload(ctx context.Context, id int64) (postgres.MessageInfo, []byte, error)
	MessageMDN(ctx context.Context, id int64) (postgres.MDNInfo, error)
}

// Limits of GET /messages.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Options configure New.
type Options struct {
	Queue  Enqueuer
	Store  Reader
	Logger *zap.Logger
	// Certificates lists the configured certificates for GET
	// /certificates; nil answers an empty list.
	Certificates CertificateLister
	// BasePath is where the handler is mounted, for Location headers;
	// default "/api/v1".
	BasePath string
}

type handler struct {
	o   Options
	log *zap.Logger
}

// New returns the API handler, with paths relative to its mount point.
func New(o Options) (http.Handler, error) {
	if o.Queue == nil || o.Store == nil || o.Logger == nil {
		return nil, errors.New("api: Queue, Store and Logger are required")
	}
	if o.BasePath == "" {
		o.BasePath = "/api/v1"
	}
	if o.Certificates == nil {
		o.Certificates = func(time.Time) []config.CertificateInfo { return nil }
	}
	h := &handler{o: o, log: o.Logger.Named("api")}
	r := chi.NewRouter()
	r.Post("/messages", h.enqueue)
	r.Get("/messages", h.list)
	r.Get("/messages/{id}", h.get)
	r.Get("/messages/{id}/payload", h.payload)
	r.Get("/messages/{id}/mdn", h.mdn)
	r.Get("/certificates", h.certificates)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such API endpoint")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "", "method not allowed")
	})
	return r, nil
}

// Message is the JSON form of a message.
type Message struct {
	ID          int64      `json:"id"`
	Direction   string     `json:"direction"`
	Partner     string     `json:"partner"`
	AS2From     string     `json:"as2_from"`
	AS2To       string     `json:"as2_to"`
	MessageID   string     `json:"message_id"`
	Status      string     `json:"status"`
	Disposition string     `json:"disposition"`
	MIC         string     `json:"mic"`
	MICAlg      string     `json:"mic_alg"`
	ContentType string     `json:"content_type"`
	Filename    string     `json:"filename"`
	Size        int64      `json:"size"`
	Signed      bool       `json:"signed"`
	Encrypted   bool       `json:"encrypted"`
	Compressed  bool       `json:"compressed"`
	MDNMode     string     `json:"mdn_mode"`
	MDNSigned   bool       `json:"mdn_signed"`
	Attempts    int        `json:"attempts"`
	Error       string     `json:"error"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at"`
	MDNDueAt    *time.Time `json:"mdn_due_at"`
	Location    string     `json:"location"`
}

// List is the JSON answer of GET /messages. NextCursor, when not empty,
// fetches the next (older) page as ?cursor=.
type List struct {
	Messages   []Message `json:"messages"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// Queued is the JSON answer of POST /messages.
type Queued struct {
	ID        int64  `json:"id"`
	MessageID string `json:"message_id"`
	Status    string `json:"status"`
	Location  string `json:"location"`
}

// apiError is every error body.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func (h *handler) location(id int64) string {
	return strings.TrimSuffix(h.o.BasePath, "/") + "/messages/" + strconv.FormatInt(id, 10)
}

func (h *handler) view(m postgres.MessageInfo) Message {
	return Message{
		ID: m.ID, Direction: m.Direction, Partner: m.Partner, AS2From: m.AS2From, AS2To: m.AS2To,
		MessageID: m.MessageID, Status: m.Status, Disposition: m.Disposition, MIC: m.MIC, MICAlg: m.MICAlg,
		ContentType: m.ContentType, Filename: m.Filename, Size: m.Size, Signed: m.Signed,
		Encrypted: m.Encrypted, Compressed: m.Compressed, MDNMode: m.MDNMode, MDNSigned: m.MDNSigned,
		Attempts: m.Attempts, Error: m.Error, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		CompletedAt: m.CompletedAt, MDNDueAt: m.MDNDueAt, Location: h.location(m.ID),
	}
}

func (h *handler) enqueue(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	partner := q.Get("partner")
	if partner == "" {
		writeError(w, http.StatusBadRequest, "partner", "missing query parameter partner: the AS2 ID of the partner to send to")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("document larger than %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "", "read body: "+err.Error())
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			writeError(w, http.StatusBadRequest, "Content-Type", fmt.Sprintf("Content-Type %q is not a MIME type", ct))
			return
		}
	}
	res, err := h.o.Queue.Enqueue(r.Context(), outbox.Document{Partner: partner, ContentType: ct, Filename: q.Get("filename"), Payload: body})
	switch {
	case errors.Is(err, outbox.ErrUnknownPartner):
		writeError(w, http.StatusNotFound, "partner", err.Error())
		return
	case errors.Is(err, outbox.ErrInvalidDocument):
		param := ""
		if strings.Contains(err.Error(), "filename") {
			param = "filename"
		}
		writeError(w, http.StatusBadRequest, param, err.Error())
		return
	case err != nil:
		h.log.Error("enqueue", zap.String("partner", partner), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the document could not be queued; retry later")
		return
	}
	h.log.Info("queued", zap.String("partner", partner), zap.Int64("id", res.ID), zap.String("message_id", res.MessageID), zap.Int("size", len(body)))
	loc := h.location(res.ID)
	w.Header().Set("Location", loc)
	httpserver.WriteJSON(w, http.StatusAccepted, Queued{ID: res.ID, MessageID: res.MessageID, Status: res.Status, Location: loc})
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "partner", "direction", "status", "since", "until", "limit", "cursor":
		default:
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (use partner, direction, status, since, until, limit, cursor)", k))
			return
		}
	}
	mq := postgres.MessageQuery{Partner: q.Get("partner"), Status: q.Get("status"), Limit: DefaultLimit}
	switch d := q.Get("direction"); d {
	case "", "inbound", "outbound":
		mq.Direction = d
	default:
		writeError(w, http.StatusBadRequest, "direction", fmt.Sprintf("direction %q: want inbound or outbound", d))
		return
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &mq.Since}, {"until", &mq.Until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, p.name, fmt.Sprintf("%s %q: want an RFC 3339 time like 2026-01-31T23:00:00Z", p.name, v))
			return
		}
		*p.dst = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, MaxLimit))
			return
		}
		mq.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "cursor", fmt.Sprintf("cursor %q: use the next_cursor of the previous page", v))
			return
		}
		mq.Before = n
	}
	limit := mq.Limit
	mq.Limit++ // one more tells whether a next page exists
	ms, err := h.o.Store.Messages(r.Context(), mq)
	if err != nil {
		h.log.Error("list messages", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "messages could not be read; retry later")
		return
	}
	out := List{Messages: make([]Message, 0, min(len(ms), limit))}
	for i, m := range ms {
		if i == limit {
			out.NextCursor = strconv.FormatInt(ms[i-1].ID, 10)
			break
		}
		out.Messages = append(out.Messages, h.view(m))
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

// id parses {id}, answering 404 itself when it is not a message id.
func (h *handler) id(w http.ResponseWriter, r *http.Request) (int64, bool) {
	v := chi.URLParam(r, "id")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no message %q: ids are positive integers", v))
		return 0, false
	}
	return n, true
}

// readErr answers a read error: 404 for a missing message or MDN.
func (h *handler) readErr(w http.ResponseWriter, id int64, err error) {
	switch {
	case errors.Is(err, postgres.ErrMessageNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no message %d", id))
	case errors.Is(err, postgres.ErrNoMDN):
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("message %d has no MDN (yet)", id))
	default:
		h.log.Error("read message", zap.Int64("id", id), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the message could not be read; retry later")
	}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	m, err := h.o.Store.Message(r.Context(), id)
	if err != nil {
		h.readErr(w, id, err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, h.view(m))
}

func (h *handler) payload(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	m, data, err := h.o.Store.MessagePayload(r.Context(), id)
	if err != nil {
		h.readErr(w, id, err)
		return
	}
	ct := m.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	name := m.Filename
	if name == "" {
		name = fmt.Sprintf("message-%d", id)
	}
	raw(w, ct, mime.FormatMediaType("attachment", map[string]string{"filename": name}), data)
}

func (h *handler) mdn(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	m, err := h.o.Store.MessageMDN(r.Context(), id)
	if err != nil {
		h.readErr(w, id, err)
		return
	}
	ct := m.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	raw(w, ct, mime.FormatMediaType("attachment", map[string]string{"filename": fmt.Sprintf("mdn-%d.eml", id)}), m.Body)
}

func raw(w http.ResponseWriter, ct, disposition string, b []byte) {
	w.Header().Set("Content-Type", ct)
	if disposition != "" {
		w.Header().Set("Content-Disposition", disposition)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, param, msg string) {
	httpserver.WriteJSON(w, status, apiError{Error: msg, Parameter: param})
}
