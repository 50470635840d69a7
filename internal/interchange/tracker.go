// Package interchange is what edihub does with the EDI interchanges it
// carries (issue 23): it reads the envelope of every message received,
// finds duplicate interchanges, answers with functional acknowledgements
// when the partner's profile asks for them, and settles what we sent with
// the partner's acknowledgements. Watcher, a leader-gated worker, flags
// the acknowledgements that do not come in time.
package interchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Store is the storage the Tracker needs; *postgres.Store implements it.
// What a receipt's envelope writes is written with the receipt
// (postgres.InboundMessage.EDI), not through Store.
type Store interface {
	FindDuplicateInterchanges(ctx context.Context, partner string, doc *edi.Document, window time.Duration) ([]postgres.Duplicate, error)
}

// Acker makes the outbound message of an acknowledgement to a partner,
// and wakes the dispatcher once it is stored; *outbox.Queue implements it.
type Acker interface {
	AckOutbound(partner, contentType string, build outbox.AckBuilder) (postgres.AckBuilder, error)
	Notify()
}

// Options configure NewTracker; all are required but Now.
type Options struct {
	Store      Store
	Acker      Acker
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// PartnerIDs are the partners whose series are exported at zero from
	// the start (a counter that first appears with its value shows no
	// increase in Prometheus).
	PartnerIDs []string
}

// Tracker is the receiver's EDI step. It is safe for concurrent use.
type Tracker struct {
	o          Options
	log        *zap.Logger
	duplicates *prometheus.CounterVec
	acks       *prometheus.CounterVec
	received   *prometheus.CounterVec
}

// NewTracker returns a Tracker.
func NewTracker(o Options) (*Tracker, error) {
	if o.Store == nil || o.Acker == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("interchange: tracker needs Store, Acker, Logger and Registerer")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Tracker{o: o, log: o.Logger.Named("edi"),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_edi_duplicate_interchanges_total",
			Help: "Interchanges received again from a partner within its window, by action (flagged, refused).",
		}, []string{"partner", "action"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_edi_acks_total",
			Help: "Functional acknowledgements by direction (sent, received) and status (accepted, accepted-with-errors, rejected).",
		}, []string{"partner", "direction", "status"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_edi_interchanges_received_total",
			Help: "Interchanges received, by standard and whether their trailers agree (ok, problems).",
		}, []string{"partner", "standard", "result"}),
	}
	for _, c := range []prometheus.Collector{t.duplicates, t.acks, t.received} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("interchange: register metrics: %w", err)
		}
	}
	for _, p := range o.PartnerIDs {
		t.duplicates.WithLabelValues(p, "flagged")
		t.acks.WithLabelValues(p, "received", string(edi.AckAccepted))
		t.acks.WithLabelValues(p, "sent", string(edi.AckAccepted))
	}
	return t, nil
}

// Inspection is what Inspect found in a payload.
type Inspection struct {
	// Doc is the payload's envelope; nil for a payload that is not EDI
	// or whose envelope could not be read.
	Doc        *edi.Document
	Duplicates []postgres.Duplicate
	// Refuse is set when the partner refuses duplicates and Duplicates
	// is not empty: the receiver answers duplicate-document and delivers
	// nothing.
	Refuse bool
	// Reason says why, for the message's error and the log.
	Reason string
	// Save is what the receipt writes with the message, in its
	// transaction (postgres.InboundMessage.EDI): the interchanges, the
	// acknowledgements the payload carries, and ours when the partner's
	// profile asks for them (edi_acks). Nil when Doc is.
	Save *postgres.InboundEDI
	// acks describes Save.Acks, in order.
	acks []*ackPlan
}

// ackPlan is one acknowledgement we answer with.
type ackPlan struct {
	control string // of the interchange acknowledged
	// status is what the acknowledgement says, set when it is built.
	status edi.AckStatus
}

// Inspect reads payload's envelope, looks for duplicate interchanges and
// decides what the receipt writes with it (Inspection.Save), before the
// receiver answers. It reads payload once, front to back, with bounded
// memory (a spooled body can be passed as it is); a payload that is not
// EDI costs a peek at its first bytes. Failures to look are logged: the
// message is then received as if there were no duplicate.
func (t *Tracker) Inspect(ctx context.Context, p *config.Partner, payload io.Reader) Inspection {
	doc, err := edi.Parse(payload, edi.Limits{})
	if errors.Is(err, edi.ErrNotEDI) {
		return Inspection{}
	}
	if err != nil {
		t.log.Warn("EDI envelope unreadable; the message is carried as it is", zap.String("partner", p.AS2ID), zap.Error(err))
		return Inspection{}
	}
	log := t.log.With(zap.String("partner", p.AS2ID))
	in := Inspection{Doc: doc}
	if dups, err := t.o.Store.FindDuplicateInterchanges(ctx, p.AS2ID, doc, p.EDI.DuplicateWindow); err != nil {
		log.Warn("duplicate interchange check", zap.Error(err))
	} else {
		in.Duplicates = dups
	}
	if len(in.Duplicates) > 0 && p.EDI.RefuseDuplicates {
		in.Refuse = true
		in.Reason = fmt.Sprintf("duplicate interchange %s (first received in message %d); edi_duplicates is refuse", in.Duplicates[0].ControlNumber, in.Duplicates[0].First)
	}
	in.Save = &postgres.InboundEDI{Record: postgres.EDIRecord{Partner: p.AS2ID, Direction: "inbound", Doc: doc,
		DuplicateWindow: p.EDI.DuplicateWindow, Refused: in.Refuse, RefuseDuplicates: p.EDI.RefuseDuplicates}}
	if in.Refuse {
		return in
	}
	in.Save.Reports = doc.Acknowledgements()
	if p.EDI.Acks {
		t.planAcks(log, p, &in)
	}
	return in
}

// planAcks adds to in one acknowledgement per interchange that is not
// itself an acknowledgement (acknowledgements are never acknowledged). An
// acknowledgement that cannot be written (the profile names no kind edi
// knows) is logged and left out, before anything is stored: it would
// fail the same way at every resend of the partner.
func (t *Tracker) planAcks(log *zap.Logger, p *config.Partner, in *Inspection) {
	doc := in.Doc
	ct := map[edi.Standard]string{edi.X12: "application/EDI-X12", edi.EDIFACT: "application/EDIFACT"}[doc.Standard]
	for i := range doc.Interchanges {
		ic := &doc.Interchanges[i]
		if onlyAcks(ic) {
			continue
		}
		req := edi.AckRequest{Interchange: ic, Standard: doc.Standard, Kind: edi.AckKind(p.EDI.X12Ack), Control: 1, Now: t.o.Now()}
		if _, err := edi.Acknowledge(req); err != nil {
			log.Error("acknowledgement not written", zap.String("control_number", ic.ControlNumber), zap.Error(err))
			continue
		}
		plan := &ackPlan{control: ic.ControlNumber}
		build, err := t.o.Acker.AckOutbound(p.AS2ID, ct, func(control int64) ([]byte, error) {
			req.Control, req.Now = control, t.o.Now()
			ack, err := edi.Acknowledge(req)
			plan.status = ack.Status
			return ack.Document, err
		})
		if err != nil {
			log.Error("acknowledgement not queued", zap.String("control_number", ic.ControlNumber), zap.Error(err))
			continue
		}
		in.Save.Acks = append(in.Save.Acks, build)
		in.acks = append(in.acks, plan)
	}
}
