package api

import (
	"time"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/postgres"
)

// Interchange is the JSON form of an EDI interchange a message carries.
type Interchange struct {
	Standard      string    `json:"standard"`
	ControlNumber string    `json:"control_number"`
	Sender        edi.Party `json:"sender"`
	Receiver      edi.Party `json:"receiver"`
	Version       string    `json:"version"`
	Test          bool      `json:"test"`
	// OK: every trailer agrees with its header; Problems says where not.
	OK                 bool     `json:"ok"`
	Problems           []string `json:"problems"`
	Groups             int      `json:"groups"`
	Sets               int      `json:"sets"`
	SetTypes           []string `json:"set_types"`
	GroupControlNumber []string `json:"group_control_numbers,omitempty"`
	// Acknowledges lists the acknowledgement kinds it carries (997, 999,
	// CONTRL) when it is one.
	Acknowledges []string `json:"acknowledges,omitempty"`
	// DuplicateOf is the message that carried the same interchange first.
	DuplicateOf *int64 `json:"duplicate_of,omitempty"`
	// Ack is the state of its functional acknowledgement (outbound):
	// pending, overdue, accepted, accepted-with-errors, rejected; "" when
	// none is expected.
	Ack        string     `json:"ack,omitempty"`
	AckCodes   []string   `json:"ack_codes,omitempty"`
	AckDueAt   *time.Time `json:"ack_due_at,omitempty"`
	AckedAt    *time.Time `json:"acked_at,omitempty"`
	AckMessage *int64     `json:"ack_message,omitempty"`
}

// MessageDetail is the JSON answer of GET /messages/{id}: the message,
// its interchanges, and the acknowledgement state of all of them (the
// worst: rejected, overdue, accepted-with-errors, pending, accepted).
type MessageDetail struct {
	Message
	Ack          string        `json:"ack,omitempty"`
	Interchanges []Interchange `json:"interchanges"`
}

// ackRank orders acknowledgement states from best to worst.
var ackRank = map[string]int{"": 0, "accepted": 1, "pending": 2, "accepted-with-errors": 3, "overdue": 4, "rejected": 5}

// DetailView is m with its interchanges.
func DetailView(m Message, ics []postgres.InterchangeInfo) MessageDetail {
	d := MessageDetail{Message: m, Interchanges: []Interchange{}}
	for _, ic := range ics {
		ack := ic.AckStatus
		if ack == "pending" && ic.AckOverdue {
			ack = "overdue"
		}
		if ackRank[ack] > ackRank[d.Ack] {
			d.Ack = ack
		}
		d.Interchanges = append(d.Interchanges, Interchange{
			Standard: ic.Standard, ControlNumber: ic.ControlNumber, Sender: ic.Sender, Receiver: ic.Receiver,
			Version: ic.Version, Test: ic.Test, OK: ic.OK, Problems: ic.Problems, Groups: ic.GroupCount, Sets: ic.SetCount,
			SetTypes: ic.SetTypes, GroupControlNumber: ic.GroupControlNumber, Acknowledges: ic.AckKinds,
			DuplicateOf: ic.DuplicateOf, Ack: ack, AckCodes: ic.AckCodes, AckDueAt: ic.AckDueAt, AckedAt: ic.AckedAt,
			AckMessage: ic.AckMessage,
		})
	}
	return d
}
