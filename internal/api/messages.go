package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// Limits of GET /messages.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

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

func (h *handler) location(id int64) string { return messageLocation(h.o.BasePath, id) }

func messageLocation(basePath string, id int64) string {
	return strings.TrimSuffix(basePath, "/") + "/messages/" + strconv.FormatInt(id, 10)
}

func (h *handler) view(m hub.MessageInfo) Message { return MessageView(m, h.o.BasePath) }

// MessageView is m as the API shows it, its location under basePath
// (such as "/api/v1"). The CLI prints the same.
func MessageView(m hub.MessageInfo, basePath string) Message {
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

func notVisibleASCII(r rune) bool { return r < 0x21 || r > 0x7e }

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
	out.Messages, out.NextCursor, ok = listPage(h, w, r, "messages", func(limit int, before int64) ([]hub.MessageInfo, error) {
		mq.Limit, mq.Before = limit, before
		return h.o.Store.Messages(r.Context(), mq)
	}, func(m hub.MessageInfo) int64 { return m.ID }, h.view)
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

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := h.id(w, r)
	if !ok {
		return
	}
	m, err := h.o.Store.Message(r.Context(), id)
	if err != nil {
		h.writeMessageError(w, id, opRead, err)
		return
	}
	if h.o.Interchanges == nil {
		httpserver.WriteJSON(w, http.StatusOK, h.view(m))
		return
	}
	ics, err := h.o.Interchanges.Interchanges(r.Context(), id)
	if err != nil {
		h.writeMessageError(w, id, opRead, err)
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
	_, err := h.o.Store.WritePayload(r.Context(), id, func(m hub.MessageInfo) io.Writer {
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
		h.writeMessageError(w, id, opRead, err)
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
		h.writeMessageError(w, id, opRead, err)
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
	if err != nil {
		h.writeMessageError(w, id, opResend, err)
		return
	}
	h.log.Info("queued again", zap.Int64("id", id), zap.String("partner", m.Partner), zap.String("message_id", m.MessageID))
	h.audit(r, "message.resend", strconv.FormatInt(id, 10), map[string]any{"partner": m.Partner, "message_id": m.MessageID})
	w.Header().Set("Location", h.location(id))
	httpserver.WriteJSON(w, http.StatusOK, h.view(m))
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
