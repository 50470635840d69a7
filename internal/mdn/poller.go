package mdn

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// PollerStore is what the poller needs from storage; *postgres.Store
// implements it.
type PollerStore interface {
	PendingInboxMDNs(ctx context.Context, afterID int64, limit int) ([]postgres.PendingMDNRef, error)
	PendingInboxMDN(ctx context.Context, id int64) (postgres.PendingMDN, error)
	OutboundMessages(ctx context.Context, keys []postgres.MessageKey) (map[postgres.MessageKey]postgres.AwaitedMessage, error)
	SentBytes(ctx context.Context, id int64) (http.Header, []byte, error)
	ApplyMDNs(ctx context.Context, f hub.Fence, outs []postgres.MDNOutcome) ([]postgres.AppliedMDN, error)
	OverdueMDNs(ctx context.Context, limit int) ([]postgres.DueMDN, error)
	ApplyOverdue(ctx context.Context, f hub.Fence, acts []postgres.OverdueAction) ([]postgres.OverdueAction, error)
	MDNGauges(ctx context.Context) (postgres.MDNGauges, error)
}

// InboxListener delivers a wakeup when an async MDN is stored (Postgres
// LISTEN/NOTIFY); *postgres.Store implements it. ListenMDNInbox blocks
// until ctx ends or the connection fails.
type InboxListener interface {
	ListenMDNInbox(ctx context.Context, wake func()) error
}

// Defaults for PollerOptions.
const (
	DefaultPollInterval = 10 * time.Second
	DefaultBatchSize    = 100
)

// DefaultMaxMDNBytes bounds the body of an async MDN (PollerOptions and
// the receiver's intake): an MDN is a few KiB, signed or not, so 1 MiB
// leaves room for long texts and certificate chains while a batch of
// MDNs stays far below the memory a message may take.
const DefaultMaxMDNBytes = 1 << 20

// Results of edihub_mdn_processed_total: the bounded outcome of one inbox
// MDN.
const (
	ResultDelivered = "delivered" // the message is delivered
	ResultFailed    = "failed"    // the message failed on this MDN
	ResultOrphan    = "orphan"    // the MDN matched no message it could apply to
)

// unknownPartner is the partner label of MDNs and messages of partners not
// in the configuration, so labels stay bounded.
const unknownPartner = "unknown"

// PollerOptions configure NewPoller.
type PollerOptions struct {
	Store PollerStore
	// Config gives the partner profiles in force.
	Config config.Source
	Logger *zap.Logger
	// Registerer takes the poller's metrics.
	Registerer prometheus.Registerer
	// Listener, when set, wakes the poller as soon as an MDN is stored;
	// otherwise it finds MDNs at the next poll.
	Listener InboxListener
	// PollInterval is the time between polls when no wakeup comes
	// (DefaultPollInterval). It also bounds the backoff after errors.
	PollInterval time.Duration
	// BatchSize bounds the MDNs read and applied in one fenced transaction
	// (DefaultBatchSize).
	BatchSize int
	// Limits bound parsing an MDN.
	Limits as2.Limits
	// MaxMDNBytes bounds the body of an inbox MDN the poller reads
	// (DefaultMaxMDNBytes); a larger one (stored before the receiver
	// refused such MDNs, or under a larger setting) becomes an orphan
	// without being read.
	MaxMDNBytes int64
}

// Poller is the leader's MDN poller, a leader.Worker: it applies the async
// MDNs stored in the inbox to the outbound messages they answer, keeps the
// ones it cannot apply as orphans with their reason, and handles messages
// whose MDN is overdue. Build it with NewPoller; Run it under a leader (its
// context carries the term's fence).
type Poller struct {
	o    PollerOptions
	log  *zap.Logger
	wake chan struct{}

	processed *prometheus.CounterVec
	orphans   prometheus.Gauge
	overdue   *prometheus.GaugeVec
	latency   prometheus.Histogram
}

// NewPoller validates o, registers the poller's metrics on o.Registerer
// (edihub_mdn_processed_total, edihub_mdn_orphans, edihub_mdn_overdue,
// edihub_mdn_latency_seconds) and returns the Poller.
func NewPoller(o PollerOptions) (*Poller, error) {
	if o.Store == nil || o.Config == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("mdn: poller needs Store, Config, Logger and Registerer")
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.MaxMDNBytes <= 0 {
		o.MaxMDNBytes = DefaultMaxMDNBytes
	}
	p := &Poller{
		o:    o,
		log:  o.Logger.Named("mdn-poller"),
		wake: make(chan struct{}, 1),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_mdn_processed_total",
			Help: "Async MDNs the leader's poller decided, by partner (\"unknown\" for a sender not configured) and result: delivered, failed (the message failed on this MDN) or orphan (applied to no message).",
		}, []string{"partner", "result"}),
		orphans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edihub_mdn_orphans",
			Help: "Async MDNs kept as orphans (matching no message they could apply to) in the inbox now, as the leader last counted; they stay until purged.",
		}),
		overdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_mdn_overdue",
			Help: "Outbound messages whose async MDN is overdue and that are not final, by partner, as the leader last counted.",
		}, []string{"partner"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edihub_mdn_latency_seconds",
			Help:    "Time from a message's last send to its async MDN being applied.",
			Buckets: []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 21600, 86400},
		}),
	}
	for _, c := range []prometheus.Collector{p.processed, p.orphans, p.overdue, p.latency} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("mdn poller metrics: %w", err)
		}
	}
	for _, pa := range o.Config.Current().Partners {
		for _, r := range []string{ResultDelivered, ResultFailed, ResultOrphan} {
			p.processed.WithLabelValues(pa.AS2ID, r)
		}
	}
	return p, nil
}

// Wake makes Run poll at once. It never blocks and is safe for concurrent
// use.
func (p *Poller) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run polls until ctx ends (nil) or a write is refused for a stale fence
// (an error wrapping hub.ErrStaleFence: the term is over). Each poll
// applies every pending inbox MDN in batches of BatchSize, each batch one
// fenced transaction, then handles overdue MDNs. Other errors (a database
// blip) are logged and retried with backoff; they never end Run. ctx must
// carry a fence (leader.FenceFrom).
func (p *Poller) Run(ctx context.Context) error {
	f, ok := leader.FenceFrom(ctx)
	if !ok {
		return errors.New("mdn poller: no fence in the context (run it as a leader-gated worker)")
	}
	// The gauges are the leader's view: a replica that stops leading
	// reports none rather than its last, aging counts.
	defer func() {
		p.orphans.Set(0)
		p.overdue.Reset()
	}()
	var bg sync.WaitGroup
	defer bg.Wait()
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	if p.o.Listener != nil {
		bg.Go(func() { p.listen(lctx) })
	}
	p.log.Info("MDN poller started", zap.Stringer("fence", f), zap.Duration("poll_interval", p.o.PollInterval))
	err := leader.Loop{
		Name: "MDN poll", Step: p.poll, Interval: p.o.PollInterval, Wake: p.wake,
		Retry:  func(n int, _ error) time.Duration { return p.backoff(n) },
		Logger: p.log,
	}.Run(ctx)
	if errors.Is(err, hub.ErrStaleFence) {
		p.log.Warn("MDN poller stopped: a newer leadership term has opened", zap.Stringer("fence", f))
	}
	return err
}

// backoff is the wait after the n-th failed poll in a row: 100 ms doubling,
// at most the poll interval and 30 s.
func (p *Poller) backoff(n int) time.Duration {
	return leader.Backoff(n, 100*time.Millisecond, min(p.o.PollInterval, 30*time.Second))
}

// listen keeps a LISTEN connection open, reconnecting after failures.
func (p *Poller) listen(ctx context.Context) {
	for failures := 1; ; failures++ {
		err := p.o.Listener.ListenMDNInbox(ctx, p.Wake)
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("MDN inbox notifications lost; polling until the connection is back", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.backoff(failures)):
		}
	}
}

// poll runs one cycle: the inbox, then the overdue messages, then the
// gauges.
func (p *Poller) poll(ctx context.Context, f hub.Fence) error {
	var after int64
	var rowErr error
	for {
		refs, err := p.o.Store.PendingInboxMDNs(ctx, after, p.o.BatchSize)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			break
		}
		after = refs[len(refs)-1].ID
		outs, err := p.decide(ctx, refs)
		if err != nil {
			return err
		}
		if err := p.apply(ctx, f, outs); err != nil {
			if errors.Is(err, hub.ErrStaleFence) || ctx.Err() != nil {
				return err
			}
			rowErr = err // the other rows went on; these are retried next poll
		}
		if len(refs) < p.o.BatchSize {
			break
		}
	}
	if err := p.overdueMessages(ctx, f); err != nil {
		return err
	}
	if err := p.refreshGauges(ctx); err != nil {
		return err
	}
	return rowErr
}

// partnerLabel bounds the partner label to configured partners.
func (p *Poller) partnerLabel(id string) string {
	if _, ok := p.o.Config.Current().Partner(id); ok {
		return id
	}
	return unknownPartner
}

// parsed is an inbox row on its way to an outcome. It keeps the parsed
// report, never the body.
type parsed struct {
	partner *config.Partner
	mdn     *MDN
	out     postgres.MDNOutcome
	decided bool
}

// decide judges a batch of inbox rows without writing: each row's body is
// read alone (a row over MaxMDNBytes not at all: an orphan), parsed and
// verified against its partner's certificates, and dropped before the
// next is read, so a batch holds at most one body; then the messages are
// looked up at once and each MDN judged (disposition and MIC). An error
// is a storage error; every problem of an MDN makes it an orphan with its
// reason.
func (p *Poller) decide(ctx context.Context, refs []postgres.PendingMDNRef) ([]postgres.MDNOutcome, error) {
	ps := make([]parsed, 0, len(refs))
	var keys []postgres.MessageKey
	for _, ref := range refs {
		x := parsed{out: postgres.MDNOutcome{InboxID: ref.ID}}
		if ref.Size > p.o.MaxMDNBytes {
			if pa, ok := p.o.Config.Current().Partner(ref.AS2From); ok {
				x.out.Partner = pa.AS2ID
			}
			x.decided, x.out.Reason = true, fmt.Sprintf("too large: %d bytes, over the %d bytes an MDN may have (EDIHUB_MAX_MDN_BYTES); not read", ref.Size, p.o.MaxMDNBytes)
			ps = append(ps, x)
			continue
		}
		row, err := p.o.Store.PendingInboxMDN(ctx, ref.ID)
		switch {
		case errors.Is(err, postgres.ErrNotPending):
			continue // decided by another term meanwhile, or purged
		case err != nil:
			return nil, err
		}
		p.parse(&x, row)
		if x.mdn != nil {
			keys = append(keys, messageKeys(x.partner.AS2ID, x.mdn.OriginalMessageID)...)
		}
		ps = append(ps, x)
	}
	msgs, err := p.o.Store.OutboundMessages(ctx, keys)
	if err != nil {
		return nil, err
	}
	outs := make([]postgres.MDNOutcome, len(ps))
	for i := range ps {
		x := &ps[i]
		if !x.decided {
			if err := p.judge(ctx, x, msgs); err != nil {
				return nil, err
			}
		}
		outs[i] = x.out
	}
	return outs, nil
}

// parse finds the partner of row and parses and verifies its MDN into x,
// or decides x as an orphan. x keeps the report's fields, not the body.
func (p *Poller) parse(x *parsed, row postgres.PendingMDN) {
	pa, ok := p.o.Config.Current().Partner(row.AS2From)
	if !ok {
		x.decided, x.out.Reason = true, fmt.Sprintf("unknown partner: AS2-From %q is not a configured partner", row.AS2From)
		return
	}
	x.partner, x.out.Partner = pa, pa.AS2ID
	m, err := Parse(row.Header, row.Body, ParseOptions{PartnerCerts: pa.Certificates, Limits: p.o.Limits})
	switch {
	case errors.Is(err, ErrSignature):
		x.decided, x.out.Reason = true, "bad signature: "+err.Error()
		return
	case err != nil:
		x.decided, x.out.Reason = true, "unparseable: "+err.Error()
		return
	}
	// The body and the human-readable text are not needed to judge.
	m.Raw, m.Header, m.Text = nil, nil, ""
	x.mdn = m
}

// messageKeys are the keys an Original-Message-ID may match: as returned,
// and with the angle brackets some products drop or add.
func messageKeys(partner, id string) []postgres.MessageKey {
	t := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(id), "<"), ">")
	if t == "" {
		return nil
	}
	keys := []postgres.MessageKey{{Partner: partner, MessageID: id}}
	for _, v := range []string{t, "<" + t + ">"} {
		if v != id {
			keys = append(keys, postgres.MessageKey{Partner: partner, MessageID: v})
		}
	}
	return keys
}

func (p *Poller) judge(ctx context.Context, x *parsed, msgs map[postgres.MessageKey]postgres.AwaitedMessage) error {
	m := x.mdn
	var msg postgres.AwaitedMessage
	found := false
	for _, k := range messageKeys(x.partner.AS2ID, m.OriginalMessageID) {
		if msg, found = msgs[k]; found {
			break
		}
	}
	switch {
	case strings.TrimSpace(m.OriginalMessageID) == "":
		x.out.Reason = "the MDN has no Original-Message-ID"
		return nil
	case !found:
		x.out.Reason = fmt.Sprintf("no outbound message with Message-ID %q to partner %q", m.OriginalMessageID, x.partner.AS2ID)
		return nil
	case msg.Final():
		// Told here, with the status, rather than left to the database's
		// guard (which only says that the message no longer awaits an
		// MDN): and nothing is judged for a message that is decided.
		x.out.Reason = fmt.Sprintf("message %d is already final (%s)", msg.ID, msg.Status)
		return nil
	case !msg.RequestedAsyncMDN:
		// An MDN posted to us cannot decide a message that asked for its
		// MDN in the response, or for none: its outbox row may still be
		// retrying, and the partner would receive a decided message.
		x.out.Reason = fmt.Sprintf("message %d asked for no async MDN (mdn: %s)", msg.ID, msg.MDNMode)
		return nil
	case !msg.Built:
		x.out.Reason = fmt.Sprintf("message %d was not sent yet (status %s)", msg.ID, msg.Status)
		return nil
	case !m.Signed && msg.RequestedSignedReceipt:
		// Anyone can post an unsigned MDN; it must not decide a message
		// that asked for a signed one.
		x.out.Reason = fmt.Sprintf("unsigned MDN for message %d, which asked for a signed receipt", msg.ID)
		return nil
	}
	var storeErr error
	v := Judge(m, Expectation{
		MessageID:     msg.MessageID,
		MIC:           msg.MIC,
		MICs:          msg.MICs,
		SignedReceipt: msg.RequestedSignedReceipt,
		Recompute: func(alg crypto.Hash) (as2.MIC, error) {
			h, body, err := p.o.Store.SentBytes(ctx, msg.ID)
			if err != nil {
				if !errors.Is(err, hub.ErrMessageNotFound) {
					storeErr = err
				}
				return as2.MIC{}, err
			}
			return RecomputeMIC(h, body, alg, msg.Encrypted, p.o.Limits)
		},
	})
	if storeErr != nil {
		return storeErr
	}
	apply := &postgres.MDNApply{
		MessageID:   msg.ID,
		Status:      ResultDelivered,
		Disposition: v.Disposition,
		MIC:         m.MIC,
		Signed:      m.Signed,
	}
	switch {
	case v.Err != nil:
		apply.Status, apply.Error = ResultFailed, v.Err.Error()
		x.out.Reason = v.Err.Error()
	default:
		verified := v.MICVerified
		apply.MICVerified = &verified
		if !verified {
			x.out.Reason = "delivered; MIC unverified: unsigned MDN without Received-content-MIC for an unsigned receipt"
		}
	}
	x.out.Message = apply
	return nil
}

// apply records outs in one fenced transaction. When that fails for
// another reason than the fence, each outcome is applied alone so that one
// bad row does not hold back the others; a row the database refuses is
// kept as an orphan with the reason, and rows that fail otherwise are
// retried at the next poll (the returned error says how many).
func (p *Poller) apply(ctx context.Context, f hub.Fence, outs []postgres.MDNOutcome) error {
	applied, err := p.o.Store.ApplyMDNs(ctx, f, outs)
	if err == nil {
		p.record(applied)
		return nil
	}
	if errors.Is(err, hub.ErrStaleFence) || ctx.Err() != nil || len(outs) == 1 && !errors.Is(err, postgres.ErrRowRejected) {
		return err
	}
	p.log.Warn("applying a batch of MDNs failed; applying them one by one", zap.Int("batch", len(outs)), zap.Error(err))
	var failed int
	var last error
	for _, o := range outs {
		applied, err := p.o.Store.ApplyMDNs(ctx, f, []postgres.MDNOutcome{o})
		if errors.Is(err, postgres.ErrRowRejected) {
			orphan := postgres.MDNOutcome{InboxID: o.InboxID, Partner: o.Partner, Reason: "could not be applied: " + err.Error()}
			applied, err = p.o.Store.ApplyMDNs(ctx, f, []postgres.MDNOutcome{orphan})
		}
		switch {
		case errors.Is(err, hub.ErrStaleFence):
			return err
		case err != nil:
			if ctx.Err() != nil {
				return err
			}
			failed, last = failed+1, err
			p.log.Warn("MDN not applied; retried at the next poll", zap.Int64("inbox_id", o.InboxID), zap.Error(err))
			continue
		}
		p.record(applied)
	}
	if failed > 0 {
		return fmt.Errorf("%d MDNs not applied: %w", failed, last)
	}
	return nil
}

// record counts and logs what was applied.
func (p *Poller) record(applied []postgres.AppliedMDN) {
	for _, a := range applied {
		if a.State == "" {
			continue // decided by an earlier term
		}
		result := ResultOrphan
		if a.State == postgres.InboxProcessed {
			result = a.Status
			p.latency.Observe(a.Latency.Seconds())
		}
		p.processed.WithLabelValues(p.partnerLabel(a.Partner), result).Inc()
		fields := []zap.Field{zap.Int64("inbox_id", a.InboxID), zap.String("partner", a.Partner), zap.String("result", result)}
		if a.Reason != "" {
			fields = append(fields, zap.String("reason", a.Reason))
		}
		if result == ResultOrphan {
			p.log.Warn("async MDN kept as an orphan", fields...)
		} else {
			fields = append(fields, zap.Int64("id", a.Message), zap.String("message_id", a.MessageID))
			p.log.Info("async MDN applied", fields...)
		}
	}
}

// overdueMessages flags, resends or fails messages whose MDN is overdue,
// a bounded number of batches per poll.
func (p *Poller) overdueMessages(ctx context.Context, f hub.Fence) error {
	for range 10 {
		due, err := p.o.Store.OverdueMDNs(ctx, p.o.BatchSize)
		if err != nil {
			return err
		}
		if len(due) == 0 {
			return nil
		}
		acts := make([]postgres.OverdueAction, len(due))
		for i, d := range due {
			acts[i] = postgres.OverdueAction{Message: d, Action: postgres.OverdueFlag}
			if pa, ok := p.o.Config.Current().Partner(d.Partner); ok && pa.ResendOverdue > 0 {
				acts[i].Action = postgres.OverdueResend
				if d.Resends >= pa.ResendOverdue {
					acts[i].Action = postgres.OverdueGiveUp
				}
			}
		}
		done, err := p.o.Store.ApplyOverdue(ctx, f, acts)
		if err != nil {
			return err
		}
		for _, a := range done {
			fields := []zap.Field{zap.Int64("id", a.Message.ID), zap.String("partner", a.Message.Partner),
				zap.String("message_id", a.Message.MessageID), zap.Int("resends", a.Message.Resends)}
			switch a.Action {
			case postgres.OverdueFlag:
				p.log.Warn("async MDN overdue", fields...)
			case postgres.OverdueResend:
				p.log.Warn("async MDN overdue; message resent with the same Message-ID", fields...)
			case postgres.OverdueGiveUp:
				p.log.Error("async MDN overdue after every resend; message failed: no MDN", fields...)
			}
		}
		if len(due) < p.o.BatchSize {
			return nil
		}
	}
	return nil
}

// refreshGauges sets the orphan and overdue gauges from the database.
func (p *Poller) refreshGauges(ctx context.Context) error {
	g, err := p.o.Store.MDNGauges(ctx)
	if err != nil {
		return err
	}
	p.orphans.Set(float64(g.Orphans))
	counts := map[string]float64{}
	for _, pa := range p.o.Config.Current().Partners {
		counts[pa.AS2ID] = 0
	}
	for partner, n := range g.Overdue {
		counts[p.partnerLabel(partner)] += float64(n)
	}
	if _, ok := counts[unknownPartner]; !ok {
		counts[unknownPartner] = 0
	}
	for partner, n := range counts {
		p.overdue.WithLabelValues(partner).Set(n)
	}
	return nil
}
