package api

import (
	"context"
	"io"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Enqueuer queues outbound documents; *outbox.Queue implements it.
type Enqueuer interface {
	Enqueue(ctx context.Context, d outbox.Document) (outbox.Queued, error)
}

// Reader reads messages; *postgres.Store implements it.
type Reader interface {
	Message(ctx context.Context, id int64) (hub.MessageInfo, error)
	Messages(ctx context.Context, q postgres.MessageQuery) ([]hub.MessageInfo, error)
	// WritePayload streams a message's payload (any size) to the writer
	// to returns, once the message is found.
	WritePayload(ctx context.Context, id int64, to func(hub.MessageInfo) io.Writer) (hub.MessageInfo, error)
	MessageMDN(ctx context.Context, id int64) (postgres.MDNInfo, error)
	Events(ctx context.Context, after postgres.EventCursor, limit int) ([]postgres.Event, error)
}

// Resender queues a failed or overdue outbound message again, same
// Message-ID and bytes; *postgres.Store implements it. Errors wrap
// hub.ErrMessageNotFound or postgres.ErrNotResendable.
type Resender interface {
	ResendMessage(ctx context.Context, id int64) (hub.MessageInfo, error)
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
// wrap hub.ErrMessageNotFound for an unknown message.
type Tracer interface {
	MessageTrace(ctx context.Context, id int64) (postgres.Trace, error)
}

// Canceller fails an outbound message before it is sent again;
// *postgres.Store implements it. Errors wrap hub.ErrMessageNotFound
// or postgres.ErrNotCancellable (with the reason).
type Canceller interface {
	CancelMessage(ctx context.Context, id int64, reason string) (hub.MessageInfo, error)
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
