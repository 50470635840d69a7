// Package outbox sends what edihub owes its trading partners: outbound AS2
// messages queued through the API or `edihub send`, and asynchronous MDNs
// queued by the receiver.
//
// Queue stores a document for a partner. Dispatcher, which runs on every
// replica, claims due outbox rows as a competing consumer, builds each
// message once per the partner profile (the bytes, headers and MIC are
// frozen at the first attempt, so every retry posts the same bytes with the
// same Message-ID), posts it, verifies a synchronous MDN and records the
// outcome. No database transaction is held across a call to a partner.
package outbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/postgres"
)

// ErrUnknownPartner reports a document for a partner the configuration
// does not name.
var ErrUnknownPartner = errors.New("unknown partner")

// ErrInvalidDocument reports a document that cannot be queued as given
// (empty payload, malformed content type or filename).
var ErrInvalidDocument = errors.New("invalid document")

// Document is a payload to send to a partner.
type Document struct {
	// Partner is the partner's AS2 ID, exactly as configured.
	Partner string
	// ContentType is the payload's MIME type; empty means the one its
	// envelope names (EnvelopeContentType) for an X12 or EDIFACT
	// interchange, else application/octet-stream.
	ContentType string
	// Filename, when set, is sent in Content-Disposition.
	Filename string
	Payload  []byte
	// Open, when set instead of Payload, opens a payload of Size bytes
	// (a spool file) for reading from its start; it may be called more
	// than once. Such a payload is read, never held whole: fingerprinted,
	// its EDI envelope parsed, and stored in pieces in the enqueue's
	// transaction.
	Open func() io.Reader
	Size int64
	// IdempotencyKey, when set, makes Enqueue idempotent for the partner:
	// the same key with the same document returns the message queued the
	// first time (Queued.Replayed) instead of a second one; with another
	// document it fails with postgres.ErrIdempotencyKeyReused.
	IdempotencyKey string
}

// Queued describes a queued document.
type Queued struct {
	ID        int64  // edihub's message id (API path /api/v1/messages/{id})
	MessageID string // the AS2 Message-ID
	Status    string
	CreatedAt time.Time
	// Replayed reports a repeated IdempotencyKey: this is the message
	// queued the first time, and nothing new was queued.
	Replayed bool
}

// EnqueueStore stores an outbound message with its payload and outbox row
// in one transaction; *postgres.Store implements it.
type EnqueueStore interface {
	EnqueueOutbound(ctx context.Context, m postgres.NewOutbound) (postgres.Enqueued, error)
}

// Queue validates documents against the partner profiles and queues them.
// It is safe for concurrent use.
type Queue struct {
	store  EnqueueStore
	cfg    config.Source
	newID  func(station string) string
	notify func()
	window time.Duration
	log    *zap.Logger
}

// QueueOptions configure NewQueue.
type QueueOptions struct {
	Store EnqueueStore
	// Config gives the partner profiles and the station in force.
	Config config.Source
	// MessageID generates AS2 Message-IDs; nil means a MessageIDs with
	// crypto/rand for the station.
	MessageID func() string
	// Notify, when set, is called after each successful enqueue (an
	// in-process wakeup for the local dispatcher).
	Notify func()
	// RetryWindow is how long a message is retried, past its partner's
	// max_attempts, before it fails; a partner's retry_window overrides
	// it. Zero means no window: max_attempts alone decides. edihub serve
	// sets it from EDIHUB_RETRY_WINDOW (DefaultRetryWindow).
	RetryWindow time.Duration
	// Logger, when set, gets a warning for each interchange queued whose
	// control number was sent to the partner before within its
	// edi_duplicate_window.
	Logger *zap.Logger
}

// DefaultRetryWindow is edihub serve's default retry window.
const DefaultRetryWindow = 24 * time.Hour

// NewQueue returns a Queue.
func NewQueue(o QueueOptions) (*Queue, error) {
	if o.Store == nil || o.Config == nil {
		return nil, errors.New("outbox: queue needs Store and Config")
	}
	newID := func(station string) string { return MessageIDs(station, rand.Reader)() }
	if o.MessageID != nil {
		newID = func(string) string { return o.MessageID() }
	}
	if o.RetryWindow < 0 {
		return nil, errors.New("outbox: negative retry window")
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Queue{store: o.Store, cfg: o.Config, newID: newID, notify: o.Notify, window: o.RetryWindow, log: log}, nil
}

// Enqueue queues d. Errors wrap ErrUnknownPartner, ErrInvalidDocument or
// the store's error.
func (q *Queue) Enqueue(ctx context.Context, d Document) (Queued, error) {
	m, p, err := q.prepare(d)
	if err != nil {
		return Queued{}, err
	}
	e, err := q.store.EnqueueOutbound(ctx, m)
	if err != nil {
		return Queued{}, err
	}
	if e.Replayed {
		return Queued{ID: e.ID, MessageID: e.MessageID, Status: e.Status, CreatedAt: e.CreatedAt, Replayed: true}, nil
	}
	for _, r := range e.Repeated {
		// The partner's acknowledgement names the control number
		// only: it is credited to the latest of the messages it took.
		q.log.Warn("interchange control number repeated within the duplicate window",
			zap.String("partner", p.AS2ID), zap.Int64("message", e.ID), zap.String("control_number", r.ControlNumber),
			zap.Int64("sent_before_in", r.First))
	}
	if q.notify != nil {
		q.notify()
	}
	return Queued{ID: e.ID, MessageID: e.MessageID, Status: e.Status, CreatedAt: e.CreatedAt}, nil
}

// Outbound validates d as Enqueue does and returns the message Enqueue
// would store, without storing it: for a caller that stores it in a
// transaction of its own (the pickup poller's, with its claim) and then
// calls Notify. d.IdempotencyKey must be empty. Errors wrap
// ErrUnknownPartner or ErrInvalidDocument.
func (q *Queue) Outbound(d Document) (postgres.NewOutbound, error) {
	if d.IdempotencyKey != "" {
		return postgres.NewOutbound{}, fmt.Errorf("%w: an idempotency key is not allowed here", ErrInvalidDocument)
	}
	m, _, err := q.prepare(d)
	return m, err
}

// prepare validates d against the profile of its partner, which it
// returns with the message to store.
func (q *Queue) prepare(d Document) (postgres.NewOutbound, *config.Partner, error) {
	cfg := q.cfg.Current()
	p, ok := cfg.Partner(d.Partner)
	if !ok {
		return postgres.NewOutbound{}, nil, fmt.Errorf("%w %q: no partner with this AS2 ID in the configuration (AS2 IDs are case-sensitive)", ErrUnknownPartner, d.Partner)
	}
	open, size := d.Open, d.Size
	if open == nil {
		open, size = func() io.Reader { return bytes.NewReader(d.Payload) }, int64(len(d.Payload))
	}
	ct := strings.TrimSpace(d.ContentType)
	if ct == "" {
		// Partners route by content type: an interchange goes as what
		// its envelope says it is.
		if ct = EnvelopeContentType(open()); ct == "" {
			ct = "application/octet-stream"
		}
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil || strings.ContainsAny(ct, "\r\n") {
		return postgres.NewOutbound{}, nil, fmt.Errorf("%w: content type %q is not a MIME type", ErrInvalidDocument, d.ContentType)
	}
	if strings.ContainsAny(d.Filename, "\r\n\x00/\\") || len(d.Filename) > 255 {
		return postgres.NewOutbound{}, nil, fmt.Errorf("%w: filename %q must be a plain file name of at most 255 bytes", ErrInvalidDocument, d.Filename)
	}
	if size == 0 {
		return postgres.NewOutbound{}, nil, fmt.Errorf("%w: empty payload", ErrInvalidDocument)
	}
	m := q.outbound(cfg, p, ct, d.Filename, d.Payload, open)
	if d.Open != nil {
		m.PayloadOpen, m.PayloadSize = d.Open, d.Size
	}
	if d.IdempotencyKey != "" {
		sum, err := fingerprint(ct, d.Filename, open(), size)
		if err != nil {
			return postgres.NewOutbound{}, nil, fmt.Errorf("read payload: %w", err)
		}
		m.IdempotencyKey, m.IdempotencyHash = d.IdempotencyKey, sum
	}
	return m, p, nil
}

// EnvelopeContentType is the MIME type (RFC 1767) of the EDI interchange
// r starts with: application/EDI-X12 for X12, application/EDIFACT for
// EDIFACT, and "" for anything else. It reads at most about 1 KiB of r.
func EnvelopeContentType(r io.Reader) string {
	std, err := edi.Detect(bufio.NewReaderSize(r, 2048))
	switch {
	case err != nil:
		return ""
	case std == edi.X12:
		return "application/EDI-X12"
	case std == edi.EDIFACT:
		return "application/EDIFACT"
	}
	return ""
}

// outbound is the message to queue for partner p: its profile's MDN,
// retries and URL, a fresh Message-ID, and the payload's EDI envelope
// (an X12 or EDIFACT payload awaits its acknowledgement for p's
// edi_ack_due).
func (q *Queue) outbound(cfg *config.File, p *config.Partner, ct, filename string, payload []byte, open func() io.Reader) postgres.NewOutbound {
	subject := "EDI message"
	if filename != "" {
		subject = filename
	}
	mdnURL := ""
	if p.MDN == config.MDNAsync {
		mdnURL = p.AsyncMDNURL
	}
	window := q.window
	if p.RetryWindow > 0 {
		window = p.RetryWindow
	}
	m := postgres.NewOutbound{
		Partner:     p.AS2ID,
		AS2From:     cfg.StationOf(p).AS2ID,
		AS2To:       p.AS2ID,
		MessageID:   q.newID(cfg.StationOf(p).AS2ID),
		Subject:     subject,
		ContentType: ct,
		Filename:    filename,
		MDNMode:     p.MDN,
		MDNSigned:   p.MDNSigned && p.MDN != config.MDNNone,
		MDNURL:      mdnURL,
		URL:         p.URL.String(),
		MaxAttempts: p.MaxAttempts,
		RetryWindow: window,
		Payload:     payload,
	}
	// A payload that is not EDI is told apart from its first bytes; an
	// EDI one whose envelope cannot be read is sent as it is, unrecorded.
	if doc, err := edi.Parse(bufio.NewReaderSize(open(), 64<<10), edi.Limits{}); err == nil && len(doc.Interchanges) > 0 {
		m.EDI = &postgres.EDIRecord{Partner: p.AS2ID, Direction: "outbound", Doc: doc, AckDue: p.EDI.AckDue, DuplicateWindow: p.EDI.DuplicateWindow}
	}
	return m
}

// AckBuilder writes an acknowledgement with the control number it is
// given and returns its bytes.
type AckBuilder func(control int64) ([]byte, error)

// AckOutbound returns what queues a functional acknowledgement to partner
// like any document (its profile, retries and MDN apply): given the
// partner's next acknowledgement control number, it writes the
// acknowledgement with build and returns its outbound message, which the
// caller stores (postgres.InboundEDI, in the receipt's transaction) and
// then calls Notify. The acknowledgement expects no acknowledgement
// itself. The partner's profile is the one in force now.
func (q *Queue) AckOutbound(partner, contentType string, build AckBuilder) (postgres.AckBuilder, error) {
	cfg := q.cfg.Current()
	p, ok := cfg.Partner(partner)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownPartner, partner)
	}
	return func(control int64) (postgres.NewOutbound, error) {
		b, err := build(control)
		if err != nil {
			return postgres.NewOutbound{}, err
		}
		m := q.outbound(cfg, p, contentType, "", b, func() io.Reader { return bytes.NewReader(b) })
		m.Subject = "EDI acknowledgement"
		return m, nil
	}, nil
}

// Notify wakes the local dispatcher (QueueOptions.Notify) for messages
// stored outside Enqueue, such as acknowledgements from AckOutbound.
func (q *Queue) Notify() {
	if q.notify != nil {
		q.notify()
	}
}

// fingerprint identifies a document for idempotency: what the request
// sends (content type, filename, the size bytes of payload), each
// length-prefixed so no two documents share a fingerprint by moving bytes
// between fields. The payload is read as a stream.
func fingerprint(ct, filename string, payload io.Reader, size int64) ([]byte, error) {
	h := sha256.New()
	var n [8]byte
	for _, b := range [][]byte{[]byte(ct), []byte(filename)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	binary.BigEndian.PutUint64(n[:], uint64(size))
	h.Write(n[:])
	if got, err := io.Copy(h, payload); err != nil {
		return nil, err
	} else if got != size {
		return nil, fmt.Errorf("%d payload bytes, want %d", got, size)
	}
	return h.Sum(nil), nil
}

// MessageIDs returns a Message-ID generator for station: each call returns
// "<hex@host>", where hex is 16 random bytes from rnd (crypto/rand when nil)
// and host is the station's AS2 ID reduced to the characters RFC 5322 allows
// in a dot-atom (anything else becomes '-'; "edihub" when nothing is left).
// It panics if rnd fails, which crypto/rand does not.
func MessageIDs(station string, rnd io.Reader) func() string {
	if rnd == nil {
		rnd = rand.Reader
	}
	host := SanitizeHost(station)
	return func() string {
		var b [16]byte
		if _, err := io.ReadFull(rnd, b[:]); err != nil {
			panic(fmt.Sprintf("outbox: message ID randomness: %v", err))
		}
		return "<" + hex.EncodeToString(b[:]) + "@" + host + ">"
	}
}

// SanitizeHost reduces s to a dot-atom usable right of '@' in a Message-ID.
func SanitizeHost(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		case c == '.' && len(b) > 0 && b[len(b)-1] != '.':
			b = append(b, c)
		default:
			if len(b) > 0 && b[len(b)-1] != '-' {
				b = append(b, '-')
			}
		}
	}
	h := strings.Trim(string(b), ".-")
	if h == "" {
		return "edihub"
	}
	return h
}
