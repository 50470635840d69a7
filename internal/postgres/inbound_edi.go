package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/edi"
)

// InboundEDI is what the envelope of a received EDI payload writes with
// its receipt (InboundMessage.EDI), in the receipt's transaction: the
// receipt, its interchanges, the settlement of what we sent and our
// acknowledgements are stored together or not at all, so a crash after
// the partner's receipt is stored cannot lose the acknowledgement owed for
// it.
type InboundEDI struct {
	// Record is the payload's interchanges; with Record.DuplicateWindow
	// set, each is also looked up as a duplicate.
	Record EDIRecord
	// Reports are the acknowledgements the payload carries: they settle
	// the interchanges we sent to Record.Partner (see ApplyAcks).
	Reports []*edi.AckReport
	// Acks are our acknowledgements to Record.Partner, each built with
	// the partner's next control number and queued as an outbound
	// message. An error from one rolls the receipt back.
	Acks []AckBuilder

	// What SaveInbound wrote, set when it returns nil.
	Duplicates []Duplicate
	Matches    []AckMatch
	// Unmatched are the control numbers of verdicts in Reports that
	// match nothing sent.
	Unmatched []string
	// Queued are the acknowledgements queued, in the order of Acks.
	Queued []Enqueued
}

// saveEDI writes e for inbound message id in tx.
func saveEDI(ctx context.Context, tx pgx.Tx, id int64, e *InboundEDI) error {
	if e == nil {
		return nil
	}
	// A transaction retried (a failed receipt replaced) starts afresh.
	e.Duplicates, e.Matches, e.Unmatched, e.Queued = nil, nil, nil, nil
	dups, err := insertInterchanges(ctx, tx, id, e.Record)
	if err != nil {
		return err
	}
	matches, unmatched, err := applyAcks(ctx, tx, e.Record.Partner, id, e.Reports)
	if err != nil {
		return err
	}
	queued := make([]Enqueued, 0, len(e.Acks))
	for _, build := range e.Acks {
		q, err := queueAck(ctx, tx, e.Record.Partner, build)
		if err != nil {
			return err
		}
		queued = append(queued, q)
	}
	e.Duplicates, e.Matches, e.Unmatched, e.Queued = dups, matches, unmatched, queued
	return nil
}
