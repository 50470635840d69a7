package interchange

import (
	"context"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/postgres"
)

// Received finishes the EDI step of a stored receipt (message row id):
// it records the interchanges (and the duplicates), settles what we sent
// with the acknowledgements the payload carries, and queues our
// acknowledgements when the partner's profile asks (edi_acks). It runs
// after the partner got its MDN; failures are logged, the receipt stands.
func (t *Tracker) Received(ctx context.Context, p *config.Partner, id int64, in Inspection) {
	if in.Doc == nil {
		return
	}
	log := t.log.With(zap.String("partner", p.AS2ID), zap.Int64("message", id))
	rec := postgres.EDIRecord{Partner: p.AS2ID, Direction: "inbound", Doc: in.Doc, DuplicateWindow: p.EDI.DuplicateWindow, Refused: in.Refuse}
	dups, err := t.o.Store.RecordInterchanges(ctx, id, rec)
	if err != nil {
		log.Error("record interchanges", zap.Error(err))
		return
	}
	for _, ic := range in.Doc.Interchanges {
		result := "ok"
		if !ic.OK() {
			result = "problems"
		}
		t.received.WithLabelValues(p.AS2ID, string(in.Doc.Standard), result).Inc()
	}
	for _, d := range dups {
		action := "flagged"
		if in.Refuse {
			action = "refused"
		}
		t.duplicates.WithLabelValues(p.AS2ID, action).Inc()
		log.Warn("duplicate interchange", zap.String("control_number", d.ControlNumber), zap.Int64("first_message", d.First), zap.String("action", action))
	}
	if in.Refuse {
		return
	}
	t.settle(ctx, log, p, id, in.Doc)
	if p.EDI.Acks {
		t.acknowledge(ctx, log, p, in.Doc)
	}
}

// settle applies the acknowledgements in doc to what we sent.
func (t *Tracker) settle(ctx context.Context, log *zap.Logger, p *config.Partner, id int64, doc *edi.Document) {
	reports := doc.Acknowledgements()
	if len(reports) == 0 {
		return
	}
	matches, unmatched, err := t.o.Store.ApplyAcks(ctx, p.AS2ID, id, reports)
	if err != nil {
		log.Error("apply acknowledgements", zap.Error(err))
		return
	}
	for _, m := range matches {
		t.acks.WithLabelValues(p.AS2ID, "received", m.Status).Inc()
		log.Info("acknowledgement received", zap.Int64("outbound_message", m.Message), zap.String("control_number", m.ControlNumber),
			zap.String("ack", m.Status), zap.Strings("codes", m.Codes))
	}
	if len(unmatched) > 0 {
		log.Warn("acknowledgement for nothing we sent", zap.Strings("control_numbers", unmatched))
	}
}

// acknowledge queues one acknowledgement per interchange of doc that is
// not itself an acknowledgement (acknowledgements are never acknowledged).
func (t *Tracker) acknowledge(ctx context.Context, log *zap.Logger, p *config.Partner, doc *edi.Document) {
	ct := map[edi.Standard]string{edi.X12: "application/EDI-X12", edi.EDIFACT: "application/EDIFACT"}[doc.Standard]
	for i := range doc.Interchanges {
		ic := &doc.Interchanges[i]
		if onlyAcks(ic) {
			continue
		}
		var status edi.AckStatus
		q, err := t.o.Acker.EnqueueAck(ctx, p.AS2ID, ct, func(control int64) ([]byte, error) {
			ack, err := edi.Acknowledge(edi.AckRequest{Interchange: ic, Standard: doc.Standard, Kind: edi.AckKind(p.EDI.X12Ack), Control: control, Now: t.o.Now()})
			status = ack.Status
			return ack.Document, err
		})
		if err != nil {
			log.Error("queue acknowledgement", zap.String("control_number", ic.ControlNumber), zap.Error(err))
			continue
		}
		t.acks.WithLabelValues(p.AS2ID, "sent", string(status)).Inc()
		log.Info("acknowledgement queued", zap.String("control_number", ic.ControlNumber), zap.Int64("ack_message", q.ID), zap.String("ack", string(status)))
	}
}

// onlyAcks reports whether every set of ic is an acknowledgement.
func onlyAcks(ic *edi.Interchange) bool {
	n := 0
	for _, g := range ic.Groups {
		for _, s := range g.Sets {
			if s.Ack == nil {
				return false
			}
			n++
		}
	}
	return n > 0 || ic.GroupCount == 0
}
