package hub

import (
	"errors"
	"time"
)

// ErrMessageNotFound reports a message id the store holds no message
// for. Match it with errors.Is.
var ErrMessageNotFound = errors.New("message not found")

// ErrNoMDN reports a message that exists but has no stored MDN (none
// received or answered yet). Match it with errors.Is.
var ErrNoMDN = errors.New("no MDN stored for the message")

// MessageInfo is one message, inbound or outbound, as the store reads it
// and the API, the console and the dispatcher show or use it. Direction
// is "inbound" or "outbound"; Status is the state the receiver (inbound)
// or the outbox (outbound) last wrote.
type MessageInfo struct {
	ID          int64
	Direction   string
	Partner     string
	AS2From     string
	AS2To       string
	MessageID   string
	Status      string
	Subject     string
	ContentType string
	Filename    string
	Size        int64
	Signed      bool
	Encrypted   bool
	Compressed  bool
	MIC         string
	MICAlg      string
	MDNMode     string
	MDNSigned   bool
	Disposition string
	Error       string
	Attempts    int
	MDNDueAt    *time.Time
	// MDNOverdue is set when the async MDN did not come by MDNDueAt.
	MDNOverdue bool
	// MDNResends counts resends for an overdue MDN.
	MDNResends int
	// MICVerified is false for a message delivered on an unsigned MDN
	// without MIC, true when the returned MIC matched, nil otherwise.
	MICVerified *bool
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt *time.Time
}
