package outbox

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// Headers of a webhook delivery.
const (
	// SignatureHeader carries "sha256=" and the hex HMAC-SHA256, under the
	// webhook secret, of the timestamp, the event id and the body (see
	// Sign): a receiver that checks it and the timestamp's age rejects a
	// delivery replayed later, or the body of one event under another's
	// id.
	SignatureHeader = "X-Edihub-Signature"
	// TimestampHeader carries when the delivery was signed, in Unix
	// seconds; each attempt is signed afresh.
	TimestampHeader = "X-Edihub-Timestamp"
	// EventIDHeader carries the event id: a receiver that sees an id
	// twice (deliveries are at least once) ignores the repeat.
	EventIDHeader = "X-Edihub-Event-Id"
	// EventTypeHeader carries the event type.
	EventTypeHeader = "X-Edihub-Event-Type"
)

// WebhookTimeout bounds one webhook delivery: a hanging webhook must not
// hold the dispatchers' slots, which partners' messages share, for long.
const WebhookTimeout = 10 * time.Second

// Event is the JSON form of a feed event, in GET /api/v1/events and in
// webhook bodies.
type Event struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	Message   int64           `json:"message"`
	Partner   string          `json:"partner"`
	Direction string          `json:"direction"`
	CreatedAt time.Time       `json:"created_at"`
	Detail    json.RawMessage `json:"detail"`
	// Cursor is the feed position after this event (?after=).
	Cursor string `json:"cursor"`
}

// EventView is the JSON form of e.
func EventView(e postgres.Event) Event {
	d := e.Detail
	if len(d) == 0 {
		d = json.RawMessage("{}")
	}
	return Event{ID: e.ID, Type: e.Type, Message: e.Message, Partner: e.Partner, Direction: e.Direction,
		CreatedAt: e.CreatedAt, Detail: d, Cursor: e.Cursor.String()}
}

// Sign returns the SignatureHeader value of a delivery under secret:
// "sha256=" and the hex HMAC-SHA256 of "<timestamp>.<event id>.<body>"
// (timestamp and event id as in TimestampHeader and EventIDHeader).
func Sign(secret []byte, timestamp, eventID string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp + "." + eventID + "."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// signDelivery sets the timestamp and the signature of a webhook delivery
// about to be sent at now.
func signDelivery(h http.Header, secret, body []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(TimestampHeader, ts)
	h.Set(SignatureHeader, Sign(secret, ts, h.Get(EventIDHeader), body))
}

// ForwardStore moves feed events into the outbox; *postgres.Store
// implements it.
type ForwardStore interface {
	ForwardEvents(ctx context.Context, w postgres.WebhookForward) (int, error)
}

// Default of ForwarderOptions.
const DefaultForwardInterval = time.Second

// ForwarderOptions configure NewForwarder.
type ForwarderOptions struct {
	Store  ForwardStore
	Logger *zap.Logger
	// URL is the webhook's URL.
	URL string
	// Interval between two looks at the feed (DefaultForwardInterval).
	Interval time.Duration
	// MaxAttempts and RetryWindow bound the retries of one delivery, as
	// for messages (config.DefaultMaxAttempts; no window when zero).
	MaxAttempts int
	RetryWindow time.Duration
	// Notify, when set, is called after events were queued (a wakeup for
	// the local dispatcher).
	Notify func()
}

// Forwarder runs on every replica when a webhook is configured: it moves
// new feed events into the outbox as webhook deliveries, which the
// dispatchers of every replica send, signed, with the outbox's retries.
// The move and the cursor advance are one transaction and the cursor row
// is locked while one replica forwards, so each event is queued once.
type Forwarder struct {
	o   ForwarderOptions
	log *zap.Logger
}

// WebhookCursor names the forwarder's position in the feed.
const WebhookCursor = "webhook"

// NewForwarder validates o.
func NewForwarder(o ForwarderOptions) (*Forwarder, error) {
	if o.Store == nil || o.Logger == nil || o.URL == "" {
		return nil, errors.New("outbox: forwarder needs Store, Logger and URL")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultForwardInterval
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	return &Forwarder{o: o, log: o.Logger.Named("webhook")}, nil
}

// Run forwards until ctx ends, then returns nil. Database errors are logged
// and retried at the next interval.
func (f *Forwarder) Run(ctx context.Context) error {
	failing := false
	for {
		for ctx.Err() == nil {
			n, err := f.o.Store.ForwardEvents(ctx, postgres.WebhookForward{
				Cursor: WebhookCursor, URL: f.o.URL, Limit: 100,
				MaxAttempts: f.o.MaxAttempts, RetryWindow: f.o.RetryWindow, Build: delivery,
			})
			if err != nil {
				if ctx.Err() == nil && !failing {
					f.log.Warn("forward events to the webhook; retrying", zap.Error(err))
				}
				failing = true
				break
			}
			if failing {
				f.log.Info("forwarding events to the webhook again")
				failing = false
			}
			if n > 0 && f.o.Notify != nil {
				f.o.Notify()
			}
			if n < 100 {
				break
			}
		}
		if !leader.Sleep(ctx, f.o.Interval) {
			return nil
		}
	}
}

// delivery is the webhook request of one event, unsigned: the dispatcher
// signs at send time, so the secret is never stored.
func delivery(e postgres.Event) (postgres.WebhookDelivery, error) {
	body, err := json.Marshal(EventView(e))
	if err != nil {
		return postgres.WebhookDelivery{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(EventIDHeader, strconv.FormatInt(e.ID, 10))
	h.Set(EventTypeHeader, e.Type)
	h.Set("User-Agent", "edihub-webhook")
	return postgres.WebhookDelivery{Header: h, Body: body}, nil
}
