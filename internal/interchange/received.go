package interchange

import (
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
)

// Received reports what the receipt of message row id stored with it
// (in.Save, written by SaveInbound in the receipt's transaction): it
// counts and logs the interchanges, the duplicates, the acknowledgements
// received and those queued, and wakes the dispatcher for the latter.
// Call it only after the receipt was stored.
func (t *Tracker) Received(p *config.Partner, id int64, in Inspection) {
	if in.Save == nil {
		return
	}
	log := t.log.With(zap.String("partner", p.AS2ID), zap.Int64("message", id))
	for _, ic := range in.Doc.Interchanges {
		result := "ok"
		if !ic.OK() {
			result = "problems"
		}
		t.received.WithLabelValues(p.AS2ID, string(in.Doc.Standard), result).Inc()
	}
	action := "flagged"
	if in.Refuse {
		action = "refused"
	}
	for _, d := range in.Save.Duplicates {
		t.duplicates.WithLabelValues(p.AS2ID, action).Inc()
		log.Warn("duplicate interchange", zap.String("control_number", d.ControlNumber), zap.Int64("first_message", d.First), zap.String("action", action))
	}
	for _, m := range in.Save.Matches {
		t.acks.WithLabelValues(p.AS2ID, "received", m.Status).Inc()
		log.Info("acknowledgement received", zap.Int64("outbound_message", m.Message), zap.String("control_number", m.ControlNumber),
			zap.String("ack", m.Status), zap.Strings("codes", m.Codes))
	}
	if len(in.Save.Unmatched) > 0 {
		log.Warn("acknowledgement for nothing we sent", zap.Strings("control_numbers", in.Save.Unmatched))
	}
	for i, q := range in.Save.Queued {
		plan := in.acks[i]
		t.acks.WithLabelValues(p.AS2ID, "sent", string(plan.status)).Inc()
		log.Info("acknowledgement queued", zap.String("control_number", plan.control), zap.Int64("ack_message", q.ID), zap.String("ack", string(plan.status)))
	}
	if len(in.Save.Queued) > 0 {
		t.o.Acker.Notify()
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
