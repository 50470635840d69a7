// Package api is edihub's REST API for internal systems, mounted under
// /api/v1 behind the authentication of httpserver.RouterOptions (a user's
// API token, or the bootstrap token). Each route needs a role (viewer <
// operator < admin, see internal/auth and docs/users.md):
//
//	POST /messages?partner=ID&filename=F   operator  queue the body for a partner (202;
//	                                                 200 for a repeated Idempotency-Key)
//	GET  /messages?partner=&direction=&status=&since=&until=&message_id=&filename=&icn=&overdue=&limit=&cursor=   viewer
//	                                                 newest first; message_id: exact, with or
//	                                                 without <>; filename: names that start with it;
//	                                                 icn: carrying that interchange control number
//	GET  /messages/{id}                    viewer    one message, inbound or outbound, with its EDI
//	                                                 interchanges and acknowledgement (ack)
//	GET  /messages/{id}/payload            operator  the document, raw
//	GET  /messages/{id}/mdn                operator  the MDN as stored, raw
//	GET  /messages/{id}/trace              viewer    the message, its attempts, events, MDN and async
//	                                                 MDNs (no payload or MDN bytes)
//	POST /messages/{id}/resend             operator  send a failed or overdue message again
//	POST /messages/{id}/cancel             operator  fail a message still queued or retrying; body
//	                                                 optional: {"reason": "..."} (409 when it cannot be)
//	GET  /mdns?state=&limit=&cursor=       viewer    async MDNs received: pending, processed, orphan
//	POST /mdns/{id}/reapply                operator  judge an orphan async MDN again (409 when not one)
//	GET  /events?after=CURSOR&limit=N      viewer    the event feed, oldest first
//	GET  /reports/{day}?format=            viewer    a day's report (YYYY-MM-DD, today,
//	                                                 yesterday): html, text, csv, json
//	                                                 or png (the hourly chart); by
//	                                                 default chosen from Accept, else json
//	GET  /certificates                     viewer    station and partner certificates, with expiry
//	GET  /partners                         viewer    stored partners, the set's revision, each replica's
//	POST /partners                         admin     create a partner (its entry as JSON or YAML)
//	GET  /partners/{as2id}                 viewer    one partner (?format=yaml: its entry); ETag: version
//	PUT  /partners/{as2id}                 admin     update it; If-Match: the version read (428 without, 412 stale)
//	DELETE /partners/{as2id}               admin     delete it (If-Match optional)
//	GET  /partners/{as2id}/history         viewer    its changes: who, when, the diff
//	POST /partners/{as2id}/restore?version=N  admin  make version N current again
//	POST /partners/{as2id}/test            operator  send a test document, report each step
//	GET  /audit?actor=&action=&target=&since=&until=&limit=&cursor=   admin   the audit log, newest first
//	GET  /users                            admin     the users
//	POST /users                            admin     add a user ({"name", "role", "password"})
//	POST /users/{name}/disable             admin     disable a user: its tokens stop working
//	POST /users/{name}/enable              admin     enable it again
//	GET  /users/{name}/tokens              viewer    a user's API tokens (the user itself or an admin)
//	POST /users/{name}/tokens              viewer    make one ({"name", "role", "expires_in"}); shown once
//	DELETE /users/{name}/tokens/{token}    viewer    revoke one
//	GET  /openapi.json                     viewer    this list as an OpenAPI 3.1 document (OpenAPI)
//
// Every change is recorded in the audit log (Options.Auditor).
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
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/spool"
)

// Enqueuer queues outbound documents; *outbox.Queue implements it.
type Enqueuer interface {
	Enqueue(ctx context.Context, d outbox.Document) (outbox.Queued, error)
}

// Reader reads messages; *postgres.Store implements it.
type Reader interface {
	Message(ctx context.Context, id int64) (postgres.MessageInfo, error)
	Messages(ctx context.Context, q postgres.MessageQuery) ([]postgres.MessageInfo, error)
	// WritePayload streams a message's payload (any size) to the writer
	// to returns, once the message is found.
	WritePayload(ctx context.Context, id int64, to func(postgres.MessageInfo) io.Writer) (postgres.MessageInfo, error)
	MessageMDN(ctx context.Context, id int64) (postgres.MDNInfo, error)
	Events(ctx context.Context, after postgres.EventCursor, limit int) ([]postgres.Event, error)
}

// Resender queues a failed or overdue outbound message again, same
// Message-ID and bytes; *postgres.Store implements it. Errors wrap
// postgres.ErrMessageNotFound or postgres.ErrNotResendable.
type Resender interface {
	ResendMessage(ctx context.Context, id int64) (postgres.MessageInfo, error)
}

// InboxReader lists the async MDNs received; *postgres.Store implements it.
type InboxReader interface {
	InboxMDNs(ctx context.Context, q postgres.InboxQuery) ([]postgres.InboxMDNInfo, error)
}

// InterchangeReader reads the EDI interchanges of a message;
// *postgres.Store implements it.
type InterchangeReader interface {
	Interchanges(ctx context.Context, id int64) ([]postgres.InterchangeInfo, error)
}

// Tracer reads a message's trace; *postgres.Store implements it. Errors
// wrap postgres.ErrMessageNotFound for an unknown message.
type Tracer interface {
	MessageTrace(ctx context.Context, id int64) (postgres.Trace, error)
}

// Canceller fails an outbound message before it is sent again;
// *postgres.Store implements it. Errors wrap postgres.ErrMessageNotFound
// or postgres.ErrNotCancellable (with the reason).
type Canceller interface {
	CancelMessage(ctx context.Context, id int64, reason string) (postgres.MessageInfo, error)
}

// Reapplier puts an orphan async MDN back before the MDN poller;
// *postgres.Store implements it. Errors wrap postgres.ErrInboxMDNNotFound
// or postgres.ErrNotOrphan.
type Reapplier interface {
	ReapplyInboxMDN(ctx context.Context, id int64) (postgres.InboxMDNInfo, error)
}

// Reports renders day reports; *report.Service implements it. Errors
// wrapping report.ErrInvalidDay or report.ErrUnknownFormat are the
// caller's.
type Reports interface {
	Render(ctx context.Context, day, format string) ([]byte, error)
}

// Limits of GET /messages.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Limits of GET /events.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
)

// auditTimeout bounds the write of an audit entry.
const auditTimeout = 10 * time.Second

// IdempotencyKeyHeader makes POST /messages idempotent per partner.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxIdempotencyKey is the longest Idempotency-Key accepted, in bytes.
const MaxIdempotencyKey = 255

// Limits of the search filters of GET /messages and of a cancel's
// reason, in bytes.
const (
	MaxMessageIDFilter = 998 // the longest header line RFC 5322 allows
	MaxFilenameFilter  = 255
	MaxICNFilter       = 35 // EDIFACT's interchange control reference is at most 14, X12's 9
	MaxCancelReason    = 500
)

// Options configure New.
type Options struct {
	Queue  Enqueuer
	Store  Reader
	Logger *zap.Logger
	// Resender, when set, serves POST /messages/{id}/resend.
	Resender Resender
	// Inbox, when set, serves GET /mdns.
	Inbox InboxReader
	// Tracer, when set, serves GET /messages/{id}/trace.
	Tracer Tracer
	// Interchanges, when set, adds each message's EDI interchanges and
	// acknowledgement state to GET /messages/{id}.
	Interchanges InterchangeReader
	// Canceller, when set, serves POST /messages/{id}/cancel.
	Canceller Canceller
	// Reapplier, when set, serves POST /mdns/{id}/reapply.
	Reapplier Reapplier
	// Certificates lists the configured certificates for GET
	// /certificates; nil answers an empty list.
	Certificates CertificateLister
	// BasePath is where the handler is mounted, for Location headers;
	// default "/api/v1".
	BasePath string
	// Reports serves GET /reports/{day}; nil leaves it out.
	Reports Reports
	// Partners and PartnerReader, when set, serve /partners: the stored
	// partners, changed with the checks of the configuration file.
	Partners      PartnerService
	PartnerReader PartnerReader
	// ServedRevision is the partner set revision this replica serves.
	ServedRevision func() int64
	// TestPartner, when set, serves POST /partners/{as2id}/test: it runs
	// a connectivity test and returns its report (JSON), or false for a
	// partner not served.
	TestPartner func(ctx context.Context, as2ID string) (any, bool)
	// Auditor, when set, records every change made through the API in the
	// audit log: who, what, from where.
	Auditor auth.Auditor
	// Audit, when set, serves GET /audit.
	Audit AuditReader
	// Users, when set, serves /users: users and their API tokens.
	Users UserService
	// Spool, when set, takes the documents of POST /messages larger than
	// SpoolFromBytes, or of unknown length (chunked): the body is
	// written to a spool file as it arrives and stored from it in
	// pieces, never held whole. Without it every document is read into
	// memory.
	Spool *spool.Spool
	// SpoolFromBytes is the Content-Length above which a document is
	// spooled (outbox.DefaultSpoolFromBytes when zero).
	SpoolFromBytes int64
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
	if h.o.ServedRevision == nil {
		h.o.ServedRevision = func() int64 { return 0 }
	}
	r := chi.NewRouter()
	// Every route names the least role it needs; the caller was resolved
	// by the authentication in front (auth.Authenticator.API). The table
	// of docs/users.md lists them, and TestRouteRoles checks each.
	for _, rt := range h.routes() {
		if rt.on {
			r.With(auth.Require(rt.role)).Method(rt.method, rt.path, rt.h)
		}
	}
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such API endpoint")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "", "method not allowed")
	})
	return r, nil
}

// route is one endpoint: its method and path, the least role it needs,
// its handler, and whether it is served (the Options it needs are set).
type route struct {
	method, path string
	role         auth.Role
	h            http.HandlerFunc
	on           bool
}

// routes are the API's endpoints.
func (h *handler) routes() []route {
	o := h.o
	const get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	viewer, operator, admin := auth.RoleViewer, auth.RoleOperator, auth.RoleAdmin
	partners := o.Partners != nil && o.PartnerReader != nil
	return []route{
		{post, "/messages", operator, h.enqueue, true},
		{get, "/messages", viewer, h.list, true},
		{get, "/messages/{id}", viewer, h.get, true},
		{get, "/messages/{id}/payload", operator, h.payload, true}, // payload bytes: never for viewers
		{get, "/messages/{id}/mdn", operator, h.mdn, true},
		{get, "/messages/{id}/trace", viewer, h.trace, o.Tracer != nil},
		{post, "/messages/{id}/resend", operator, h.resend, o.Resender != nil},
		{post, "/messages/{id}/cancel", operator, h.cancel, o.Canceller != nil},
		{get, "/mdns", viewer, h.mdns, o.Inbox != nil},
		{post, "/mdns/{id}/reapply", operator, h.reapply, o.Reapplier != nil},
		{get, "/events", viewer, h.events, true},
		{get, "/reports/{day}", viewer, h.report, o.Reports != nil},
		{get, "/certificates", viewer, h.certificates, true},
		{get, "/partners", viewer, h.listPartners, partners},
		{post, "/partners", admin, h.createPartner, partners},
		{get, "/partners/{as2id}", viewer, h.getPartner, partners},
		{put, "/partners/{as2id}", admin, h.updatePartner, partners},
		{del, "/partners/{as2id}", admin, h.deletePartner, partners},
		{get, "/partners/{as2id}/history", viewer, h.partnerHistory, partners},
		{post, "/partners/{as2id}/restore", admin, h.restorePartner, partners},
		{post, "/partners/{as2id}/test", operator, h.testPartner, partners && o.TestPartner != nil},
		{get, "/audit", admin, h.auditLog, o.Audit != nil},
		{get, "/users", admin, h.listUsers, o.Users != nil},
		{post, "/users", admin, h.addUser, o.Users != nil},
		{post, "/users/{name}/disable", admin, h.disableUser, o.Users != nil},
		{post, "/users/{name}/enable", admin, h.enableUser, o.Users != nil},
		// A user's own tokens: any role for itself (auth.Users checks
		// that the caller is the user or an admin).
		{get, "/users/{name}/tokens", viewer, h.listTokens, o.Users != nil},
		{post, "/users/{name}/tokens", viewer, h.createToken, o.Users != nil},
		{del, "/users/{name}/tokens/{token}", viewer, h.revokeToken, o.Users != nil},
		// The description of these routes (openapi.yaml): any caller that
		// may use the API may read it.
		{get, "/openapi.json", viewer, h.openAPI, true},
	}
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
	// MDNOverdue: the async MDN did not come by mdn_due_at.
	MDNOverdue bool `json:"mdn_overdue"`
	// MDNResends counts resends for an overdue MDN.
	MDNResends int `json:"mdn_resends"`
	// MICVerified is false for a message delivered on an unsigned MDN
	// without MIC, true when the MDN's MIC matched, null otherwise.
	MICVerified *bool  `json:"mic_verified"`
	Location    string `json:"location"`
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
	// Replayed is true when the Idempotency-Key was used before for the
	// same document: this is that message, and nothing new was queued.
	Replayed bool `json:"replayed,omitempty"`
}

// Events is the JSON answer of GET /events. NextCursor is always set: the
// ?after= of the next call (the same position when no event was new).
type Events struct {
	Events     []outbox.Event `json:"events"`
	NextCursor string         `json:"next_cursor"`
}

// apiError is every error body.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func (h *handler) location(id int64) string { return messageLocation(h.o.BasePath, id) }

func messageLocation(basePath string, id int64) string {
	return strings.TrimSuffix(basePath, "/") + "/messages/" + strconv.FormatInt(id, 10)
}

func (h *handler) view(m postgres.MessageInfo) Message { return MessageView(m, h.o.BasePath) }

// MessageView is m as the API shows it, its location under basePath
// (such as "/api/v1"). The CLI prints the same.
func MessageView(m postgres.MessageInfo, basePath string) Message {
	return Message{
		ID: m.ID, Direction: m.Direction, Partner: m.Partner, AS2From: m.AS2From, AS2To: m.AS2To,
		MessageID: m.MessageID, Status: m.Status, Disposition: m.Disposition, MIC: m.MIC, MICAlg: m.MICAlg,
		ContentType: m.ContentType, Filename: m.Filename, Size: m.Size, Signed: m.Signed,
		Encrypted: m.Encrypted, Compressed: m.Compressed, MDNMode: m.MDNMode, MDNSigned: m.MDNSigned,
		Attempts: m.Attempts, Error: m.Error, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		CompletedAt: m.CompletedAt, MDNDueAt: m.MDNDueAt, MDNOverdue: m.MDNOverdue, MDNResends: m.MDNResends,
		MICVerified: m.MICVerified, Location: messageLocation(basePath, m.ID),
	}
}

func (h *handler) enqueue(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	partner := q.Get("partner")
	if partner == "" {
		writeError(w, http.StatusBadRequest, "partner", "missing query parameter partner: the AS2 ID of the partner to send to")
		return
	}
	doc, cleanup, ok := h.readDocument(w, r)
	if !ok {
		return
	}
	defer cleanup()
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			writeError(w, http.StatusBadRequest, "Content-Type", fmt.Sprintf("Content-Type %q is not a MIME type", ct))
			return
		}
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if len(r.Header.Values(IdempotencyKeyHeader)) > 1 || len(key) > MaxIdempotencyKey || strings.IndexFunc(key, notVisibleASCII) >= 0 {
		writeError(w, http.StatusBadRequest, IdempotencyKeyHeader, fmt.Sprintf("one %s of 1 to %d printable ASCII characters, like a UUID", IdempotencyKeyHeader, MaxIdempotencyKey))
		return
	}
	doc.Partner, doc.ContentType, doc.Filename, doc.IdempotencyKey = partner, ct, q.Get("filename"), key
	res, err := h.o.Queue.Enqueue(r.Context(), doc)
	switch {
	case errors.Is(err, postgres.ErrIdempotencyKeyReused):
		writeError(w, http.StatusUnprocessableEntity, IdempotencyKeyHeader, fmt.Sprintf(
			"%s %q was already used for a different document to partner %q: a key names one document; use a new key for a new document", IdempotencyKeyHeader, key, partner))
		return
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
	loc := h.location(res.ID)
	w.Header().Set("Location", loc)
	out := Queued{ID: res.ID, MessageID: res.MessageID, Status: res.Status, Location: loc, Replayed: res.Replayed}
	if res.Replayed {
		// The first request's message: 200, not a second 202.
		h.log.Info("idempotent replay", zap.String("partner", partner), zap.Int64("id", res.ID), zap.String("message_id", res.MessageID))
		httpserver.WriteJSON(w, http.StatusOK, out)
		return
	}
	size := doc.Size
	if doc.Open == nil {
		size = int64(len(doc.Payload))
	}
	h.log.Info("queued", zap.String("partner", partner), zap.Int64("id", res.ID), zap.String("message_id", res.MessageID), zap.Int64("size", size))
	h.audit(r, "message.send", strconv.FormatInt(res.ID, 10), map[string]any{
		"partner": partner, "message_id": res.MessageID, "filename": q.Get("filename"), "size": size})
	httpserver.WriteJSON(w, http.StatusAccepted, out)
}

// readDocument reads the body of POST /messages: into memory up to
// SpoolFromBytes, else (or of unknown length) into a spool file, removed
// by cleanup. ok is false when the answer is written already: 413 past
// the body limit, 503 with Retry-After when the spool has no room.
func (h *handler) readDocument(w http.ResponseWriter, r *http.Request) (doc outbox.Document, cleanup func(), ok bool) {
	cleanup = func() {}
	readErr := func(err error) {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("document larger than %d bytes", mbe.Limit))
		case errors.Is(err, spool.ErrFull):
			w.Header().Set("Retry-After", "60")
			writeError(w, http.StatusServiceUnavailable, "", "no room for the document on this replica now (spool full); retry later")
		default:
			writeError(w, http.StatusBadRequest, "", "read body: "+err.Error())
		}
	}
	from := h.o.SpoolFromBytes
	if from <= 0 {
		from = outbox.DefaultSpoolFromBytes
	}
	if h.o.Spool == nil || (r.ContentLength >= 0 && r.ContentLength <= from) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			readErr(err)
			return doc, cleanup, false
		}
		return outbox.Document{Payload: body}, cleanup, true
	}
	if r.ContentLength > 0 && !h.o.Spool.Fits(r.ContentLength) {
		readErr(spool.ErrFull)
		return doc, cleanup, false
	}
	f, err := h.o.Spool.Create()
	if err != nil {
		h.log.Error("spool a document", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the document could not be queued; retry later")
		return doc, cleanup, false
	}
	if _, err := io.CopyBuffer(f, r.Body, make([]byte, 256<<10)); err != nil {
		f.Close()
		readErr(err)
		return doc, cleanup, false
	}
	return outbox.Document{Open: f.Reader, Size: f.Size()}, func() { f.Close() }, true
}

// audit records a change made through the API: its action, target and
// detail, with the caller and its address. The change is made: a failure
// to record it is logged, not answered.
func (h *handler) audit(r *http.Request, action, target string, detail map[string]any) {
	if h.o.Auditor == nil {
		return
	}
	c := auth.CallerOf(r)
	// The change is made: a client that goes away now must not cancel
	// its record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if err := auth.Audit(ctx, h.o.Auditor, c, action, target, detail); err != nil {
		h.log.Error("audit entry not written", zap.String("action", action), zap.String("target", target), zap.String("actor", c.Actor()), zap.Error(err))
	}
}

func notVisibleASCII(r rune) bool { return r < 0x21 || r > 0x7e }

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

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "partner", "direction", "status", "since", "until", "message_id", "filename", "icn", "overdue", "limit", "cursor")
	if !ok {
		return
	}
	mq := postgres.MessageQuery{Partner: q.Get("partner"), Status: q.Get("status")}
	if mq.Direction, ok = oneOf(w, q, "direction", "inbound", "outbound"); !ok {
		return
	}
	for _, p := range []struct {
		name string
		max  int
		dst  *string
		what string
	}{
		{"message_id", MaxMessageIDFilter, &mq.MessageID, "an AS2 Message-ID, with or without its <>"},
		{"filename", MaxFilenameFilter, &mq.Filename, "the start of a file name"},
		{"icn", MaxICNFilter, &mq.ICN, "an interchange control number (ISA13, UNB05)"},
	} {
		v := q.Get(p.name)
		if len(v) > p.max || !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			writeError(w, http.StatusBadRequest, p.name, fmt.Sprintf("%s: want %s, at most %d bytes of UTF-8 without control characters", p.name, p.what, p.max))
			return
		}
		*p.dst = v
	}
	if v := q.Get("overdue"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "overdue", fmt.Sprintf("overdue %q: want true (only messages whose async MDN is overdue) or false", v))
			return
		}
		mq.Overdue = b
	}
	if !timeRange(w, q, &mq.Since, &mq.Until) {
		return
	}
	var out List
	out.Messages, out.NextCursor, ok = listPage(h, w, r, "messages", func(limit int, before int64) ([]postgres.MessageInfo, error) {
		mq.Limit, mq.Before = limit, before
		return h.o.Store.Messages(r.Context(), mq)
	}, func(m postgres.MessageInfo) int64 { return m.ID }, h.view)
	if ok {
		httpserver.WriteJSON(w, http.StatusOK, out)
	}
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
	if h.o.Interchanges == nil {
		httpserver.WriteJSON(w, http.StatusOK, h.view(m))
		return
	}
	ics, err := h.o.Interchanges.Interchanges(r.Context(), id)
	if err != nil {
		h.readErr(w, id, err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, DetailView(h.view(m), ics))
}

// payload streams a message's payload as it reads it from the database:
// the header (with the Content-Length the message row records) goes out
// once the message is found, so a payload of any size passes through in
// pieces. An error after that cuts the response short, which the client
// sees against the Content-Length.
func (h *handler) payload(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	started := false
	_, err := h.o.Store.WritePayload(r.Context(), id, func(m postgres.MessageInfo) io.Writer {
		started = true
		ct := m.ContentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		name := m.Filename
		if name == "" {
			name = fmt.Sprintf("message-%d", id)
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Length", strconv.FormatInt(m.Size, 10))
		w.WriteHeader(http.StatusOK)
		return w
	})
	switch {
	case err != nil && !started:
		h.readErr(w, id, err)
	case err != nil:
		h.log.Warn("payload cut short", zap.Int64("message", id), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
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

func (h *handler) resend(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	m, err := h.o.Resender.ResendMessage(r.Context(), id)
	switch {
	case errors.Is(err, postgres.ErrMessageNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no message %d", id))
		return
	case errors.Is(err, postgres.ErrNotResendable):
		_, reason, _ := strings.Cut(err.Error(), postgres.ErrNotResendable.Error()+": ")
		if reason == "" {
			reason = "only failed outbound messages and messages whose MDN is overdue are resent"
		}
		writeError(w, http.StatusConflict, "", fmt.Sprintf("message %d cannot be resent: %s", id, reason))
		return
	case err != nil:
		h.log.Error("resend", zap.Int64("id", id), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "the message could not be queued again; retry later")
		return
	}
	h.log.Info("queued again", zap.Int64("id", id), zap.String("partner", m.Partner), zap.String("message_id", m.MessageID))
	h.audit(r, "message.resend", strconv.FormatInt(id, 10), map[string]any{"partner": m.Partner, "message_id": m.MessageID})
	w.Header().Set("Location", h.location(id))
	httpserver.WriteJSON(w, http.StatusOK, h.view(m))
}

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

// query returns r's query parameters; it answers 400 naming the first
// parameter that is not one of known, and returns false then.
func query(w http.ResponseWriter, r *http.Request, known ...string) (url.Values, bool) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(known, k) {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (use %s)", k, strings.Join(known, ", ")))
			return nil, false
		}
	}
	return q, true
}

// oneOf returns query parameter name, which may be absent ("") or one of
// allowed; otherwise it answers 400 naming the parameter and the values,
// and returns false.
func oneOf(w http.ResponseWriter, q url.Values, name string, allowed ...string) (string, bool) {
	v := q.Get(name)
	if v != "" && !slices.Contains(allowed, v) {
		writeError(w, http.StatusBadRequest, name, fmt.Sprintf("%s %q: want %s", name, v, orList(allowed)))
		return "", false
	}
	return v, true
}

// orList joins "a", "b", "c" as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// listPage answers the paging of an id-paged listing: it reads the
// limit and cursor of r (answering 400 itself), fetches one row more
// than the limit (which tells whether a next page exists; 500 on an
// error, logged as reading what), and cuts the page. ok is false when it
// answered.
func listPage[T, V any](h *handler, w http.ResponseWriter, r *http.Request, what string, fetch func(limit int, before int64) ([]T, error), id func(T) int64, view func(T) V) (items []V, next string, ok bool) {
	limit, before, ok := page(w, r)
	if !ok {
		return nil, "", false
	}
	rows, err := fetch(limit+1, before)
	if err != nil {
		h.log.Error("list "+what, zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", what+" could not be read; retry later")
		return nil, "", false
	}
	items, next = cut(rows, limit, id, view)
	return items, next, true
}

// cut keeps the first limit rows of a page read with one row more than
// limit, as views, and returns the cursor of the next page ("" on the last).
func cut[T, V any](rows []T, limit int, id func(T) int64, view func(T) V) ([]V, string) {
	out := make([]V, 0, min(len(rows), limit))
	for i, r := range rows {
		if i == limit {
			return out, strconv.FormatInt(id(rows[i-1]), 10)
		}
		out = append(out, view(r))
	}
	return out, ""
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

// reportTypes maps report formats to content types.
var reportTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"text": "text/plain; charset=utf-8",
	"csv":  "text/csv; charset=utf-8",
	"json": "application/json",
	"png":  "image/png",
}

// reportFormat is ?format=, else the first known type in Accept, else json.
func reportFormat(r *http.Request) string {
	if f := r.URL.Query().Get("format"); f != "" {
		return f
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		for f, ct := range reportTypes {
			if want, _, _ := mime.ParseMediaType(ct); want == mt {
				return f
			}
		}
	}
	return "json"
}

func (h *handler) report(w http.ResponseWriter, r *http.Request) {
	format := reportFormat(r)
	b, err := h.o.Reports.Render(r.Context(), chi.URLParam(r, "day"), format)
	switch {
	case errors.Is(err, report.ErrInvalidDay):
		writeError(w, http.StatusBadRequest, "day", err.Error())
		return
	case errors.Is(err, report.ErrUnknownFormat):
		writeError(w, http.StatusBadRequest, "format", err.Error())
		return
	case err != nil:
		h.log.Error("render report", zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, "", "the report could not be built; try again later")
		return
	}
	w.Header().Set("Content-Type", reportTypes[format])
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("Vary", "Accept")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// page reads the limit (default DefaultLimit, at most MaxLimit) and cursor
// (an id: the page holds smaller ones) of a listing that pages by id,
// newest first. ok is false when it answered 400 naming the parameter.
func page(w http.ResponseWriter, r *http.Request) (limit int, before int64, ok bool) {
	q := r.URL.Query()
	limit = DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, MaxLimit))
			return 0, 0, false
		}
		limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "cursor", fmt.Sprintf("cursor %q: use the next_cursor of the previous page", v))
			return 0, 0, false
		}
		before = n
	}
	return limit, before, true
}

// timeRange parses the query's since and until, RFC 3339 times, into
// since and until (left as they are when absent); false when it answered
// 400.
func timeRange(w http.ResponseWriter, q url.Values, since, until *time.Time) bool {
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", since}, {"until", until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, p.name, fmt.Sprintf("%s %q: want an RFC 3339 time like 2026-01-31T23:00:00Z", p.name, v))
			return false
		}
		*p.dst = t
	}
	return true
}
