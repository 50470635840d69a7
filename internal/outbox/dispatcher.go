package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// Store is what the dispatcher needs from storage; *postgres.Store
// implements it.
type Store interface {
	ClaimOutboxKinds(ctx context.Context, by string, lease time.Duration, limit int, kinds []string) ([]postgres.OutboxItem, error)
	OutboundSource(ctx context.Context, id int64) (postgres.OutboundSource, error)
	SaveOutboundBuild(ctx context.Context, it postgres.OutboxItem, b postgres.OutboundBuild) error
	FinishOutbox(ctx context.Context, it postgres.OutboxItem, r postgres.OutboxResult) error
	// ExtendOutboxClaim keeps a claim alive while a slow item is built
	// and sent (see keepClaim): without it another dispatcher would post
	// the item a second time.
	ExtendOutboxClaim(ctx context.Context, it postgres.OutboxItem, lease time.Duration) (time.Time, error)
	// WritePayload streams a payload stored in pieces into a streamed
	// build (the first, and every rebuild); WriteOutboxBody a body
	// frozen in pieces before migration 00020 into the spool file a
	// retry posts.
	WritePayload(ctx context.Context, id int64, to func(hub.MessageInfo) io.Writer) (hub.MessageInfo, error)
	WriteOutboxBody(ctx context.Context, it postgres.OutboxItem, w io.Writer) error
	// RecordRebuild records a rebuilt body other than the first build's
	// and adds its MICs to those an MDN is checked against.
	RecordRebuild(ctx context.Context, it postgres.OutboxItem, size int64, sum []byte, mics []string) error
	// RecordStreamedBuild records the SHA-256 and MICs of a body built
	// while it was posted, once it ended (see livepost.go).
	RecordStreamedBuild(ctx context.Context, it postgres.OutboxItem, b postgres.OutboundBuild) error
}

// Listener delivers wakeups when rows are queued (Postgres LISTEN/NOTIFY);
// *postgres.Store implements it. ListenOutbox blocks until ctx ends.
type Listener interface {
	ListenOutbox(ctx context.Context, wake func()) error
}

// Message statuses the dispatcher writes.
const (
	StatusSending     = "sending"
	StatusRetrying    = "retrying"
	StatusDelivered   = "delivered"
	StatusSent        = "sent" // accepted by the partner; no MDN requested
	StatusAwaitingMDN = "awaiting-mdn"
	StatusFailed      = "failed"
)

// Defaults for Options.
const (
	DefaultWorkers = 8
	// DefaultLease is the default partner timeout plus 30 s: a crashed
	// replica's items are sent again within it.
	DefaultLease = config.DefaultTimeout + 30*time.Second
	// MinLease bounds Options.Lease below: claims are extended every
	// third of it.
	MinLease                = time.Second
	DefaultBatch            = 16
	DefaultPollInterval     = 5 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultBackoffBase      = 30 * time.Second
	DefaultBackoffMax       = time.Hour
	DefaultAsyncMDNWait     = time.Hour
	DefaultMaxResponseBytes = 16 << 20
	// DefaultSpoolFromBytes is the receiver's threshold too: the same
	// sizes are held in memory both ways.
	DefaultSpoolFromBytes = 8 << 20
)

// Options configure NewDispatcher.
type Options struct {
	Store Store
	// Config gives the partner profiles and the station in force; each
	// item is sent with the snapshot current when it was claimed.
	Config config.Source
	Logger *zap.Logger
	// Metrics is required; build it with NewMetrics.
	Metrics *Metrics
	// Identity names this dispatcher in claimed_by (unique per process).
	Identity string
	// Listener, when set, wakes the dispatcher as soon as work is queued.
	Listener Listener
	// Client posts to partners; nil means a client with a cloned default
	// transport. Per-request timeouts come from the partner profiles. The
	// dispatcher uses a copy that never follows redirects: a 3xx is a
	// final failure (see send).
	Client *http.Client
	// Workers bounds concurrent sends (DefaultWorkers).
	Workers int
	// PollInterval is the mean time between claims when idle; each wait is
	// jittered in [0.5, 1.5) of it (DefaultPollInterval).
	PollInterval time.Duration
	// Lease is how long a claim lasts; a crashed dispatcher's rows come back
	// after it. A dispatcher extends the claims of the items it is sending
	// every third of it, so a partner timeout may be longer. Zero means
	// DefaultLease; at least MinLease.
	Lease time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight sends after
	// its context ends; sends still running then are abandoned and their
	// rows come back when the claim expires (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// BackoffBase and BackoffMax shape retries: the wait before retry n is
	// uniform in [0, min(BackoffMax, BackoffBase·2^(n-1))) (full jitter).
	BackoffBase, BackoffMax time.Duration
	// AsyncMDNWait is how long an async MDN may take before the message is
	// overdue (messages.mdn_due_at) (DefaultAsyncMDNWait).
	AsyncMDNWait time.Duration
	// MaxResponseBytes bounds a partner's response body (a sync MDN).
	MaxResponseBytes int64
	// Limits bound parsing a returned MDN.
	Limits as2.Limits
	// Now is the clock (Date header, signing time, durations); nil means
	// time.Now.
	Now func() time.Time
	// Jitter returns uniform values in [0, 1) for backoff and poll jitter;
	// it must be safe for concurrent use. Nil means math/rand/v2.
	Jitter func() float64
	// Rand supplies key material, IVs and boundaries to as2.Wrap; nil means
	// crypto/rand.
	Rand io.Reader
	// WebhookSecret signs webhook deliveries (SignatureHeader). Never
	// logged.
	WebhookSecret []byte
	// Spool, when set, takes the messages whose payload is larger than
	// SpoolFromBytes: they are built as a stream into a spool file,
	// frozen in the database in pieces and posted from the file with
	// its Content-Length, in constant memory (see stream.go). Without
	// it every message is built in memory.
	Spool *spool.Spool
	// SpoolFromBytes is the payload size above which a message is built
	// as a stream (DefaultSpoolFromBytes).
	SpoolFromBytes int64
	// Destinations, when set, are the destinations deliveries (received
	// documents, kind delivery) are written to; Store must then implement
	// DeliveryStore. Without, deliveries are left to replicas that have
	// them.
	Destinations Destinations

	// liveSizeSkew is added to the length computed for a body posted
	// while it is built: tests set it (export_test.go) to have one come
	// out of another length than announced.
	liveSizeSkew int64
}

// Dispatcher sends due outbox items. Build it with NewDispatcher and call
// Run once.
type Dispatcher struct {
	o    Options
	log  *zap.Logger
	wake chan struct{}
	// mdnClient delivers async MDNs to partners that do not allow
	// non-public targets (see mdntarget.go).
	mdnClient *http.Client
	// partnerClients are the clients of partners with their own TLS or
	// proxy settings (see credentials.go).
	partnerClients *partnerClients
	// deliveries is Store's DeliveryStore when Destinations is set.
	deliveries DeliveryStore
}

// NewDispatcher validates o and returns a Dispatcher.
func NewDispatcher(o Options) (*Dispatcher, error) {
	if o.Store == nil || o.Config == nil || o.Logger == nil || o.Metrics == nil {
		return nil, errors.New("outbox: dispatcher needs Store, Config, Logger and Metrics")
	}
	if o.Identity == "" {
		return nil, errors.New("outbox: dispatcher needs an Identity")
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.AsyncMDNWait <= 0 {
		o.AsyncMDNWait = DefaultAsyncMDNWait
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.SpoolFromBytes <= 0 {
		o.SpoolFromBytes = DefaultSpoolFromBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	// Following a redirect would turn the POST into a GET (301, 302, 303)
	// and could record a partner's status page as a delivery; the partner's
	// URL must be fixed in the configuration instead.
	c := *o.Client
	c.CheckRedirect = noRedirect
	o.Client = &c
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < MinLease {
		return nil, fmt.Errorf("outbox: claim lease %s is below %s", o.Lease, MinLease)
	}
	var deliveries DeliveryStore
	if o.Destinations != nil {
		ds, ok := o.Store.(DeliveryStore)
		if !ok {
			return nil, errors.New("outbox: Destinations need a Store that implements DeliveryStore")
		}
		deliveries = ds
	}
	cfg := o.Config.Current()
	ids := make([]string, 0, len(cfg.Partners))
	for _, p := range cfg.Partners {
		ids = append(ids, p.AS2ID)
	}
	o.Metrics.presetPartners(ids)
	return &Dispatcher{o: o, log: o.Logger.Named("outbox"), wake: make(chan struct{}, 1), mdnClient: guardedClient(o.Client), partnerClients: &partnerClients{base: o.Client}, deliveries: deliveries}, nil
}

// Wake makes Run claim at once instead of at the next poll. It never
// blocks and is safe for concurrent use.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run claims and sends due items until ctx ends. It then stops claiming,
// waits up to ShutdownTimeout for the sends in flight, abandons the rest
// (their claims expire and another dispatcher takes them) and returns nil.
// Errors from the database are logged and retried at the next poll; Run
// never returns an error.
func (d *Dispatcher) Run(ctx context.Context) error {
	defer d.closeIdle()
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	var sends, bg sync.WaitGroup
	if d.o.Listener != nil {
		bg.Go(func() { d.listen(ctx) })
	}
	slots := make(chan struct{}, d.o.Workers)
	d.log.Info("dispatcher started", zap.String("identity", d.o.Identity), zap.Int("workers", d.o.Workers), zap.Duration("lease", d.o.Lease))

	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-timer.C:
		case <-d.wake:
		}
		for ctx.Err() == nil {
			free := d.o.Workers - len(slots)
			if free == 0 {
				break // a finishing send wakes us
			}
			items, err := d.o.Store.ClaimOutboxKinds(ctx, d.o.Identity, d.o.Lease, min(free, DefaultBatch), d.claimKinds())
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("claim outbox", zap.Error(err))
				}
				break
			}
			for _, it := range items {
				slots <- struct{}{}
				d.o.Metrics.inFlight.Inc()
				sends.Go(func() {
					defer func() {
						d.o.Metrics.inFlight.Dec()
						<-slots
						d.Wake()
					}()
					d.process(sendCtx, it)
				})
			}
			if len(items) < min(free, DefaultBatch) {
				break // drained what is due
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d.pollWait())
	}

	done := make(chan struct{})
	go func() { sends.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.o.ShutdownTimeout):
		d.log.Warn("abandoning in-flight sends; their claims return when the lease expires", zap.Int("in_flight", len(slots)))
		cancelSends()
		<-done
	}
	bg.Wait()
	d.log.Info("dispatcher stopped")
	return nil
}

func (d *Dispatcher) pollWait() time.Duration {
	return time.Duration((0.5 + d.o.Jitter()) * float64(d.o.PollInterval))
}

// listen keeps a LISTEN connection open, reconnecting after failures.
func (d *Dispatcher) listen(ctx context.Context) {
	for {
		err := d.o.Listener.ListenOutbox(ctx, d.Wake)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("outbox notifications lost; polling until the connection is back", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.pollWait()):
		}
	}
}

// backoff is the wait before the retry that follows attempt n (n >= 1).
func (d *Dispatcher) backoff(n int) time.Duration {
	ceil := d.o.BackoffMax
	if n-1 < 40 {
		if c := d.o.BackoffBase << (n - 1); c > 0 && c < ceil {
			ceil = c
		}
	}
	return time.Duration(d.o.Jitter() * float64(ceil))
}

// retry reports whether a retryable failure of it's attempt is tried again,
// and sets *in to the wait: while attempts are left, or while the wait ends
// inside the retry window. Both must be used up before an item fails, so a
// partner down for a night does not fail messages after the first hour
// of backoff.
func (d *Dispatcher) retry(it postgres.OutboxItem, in *time.Duration) bool {
	*in = d.backoff(it.Attempts)
	return it.Attempts < it.MaxAttempts || *in < it.RetryWindowLeft
}

// attempt is the outcome of one exchange, before it is recorded.
type attempt struct {
	httpStatus int
	// retryable marks a failure worth another attempt.
	retryable bool
	err       error
	result    postgres.OutboxResult
}

// process runs one claimed item to its recorded outcome. ctx ends only when
// shutdown gives up on in-flight sends: the item is then abandoned.
func (d *Dispatcher) process(ctx context.Context, it postgres.OutboxItem) {
	log := d.log.With(zap.String("partner", it.Partner), zap.Int64("outbox_id", it.ID), zap.String("kind", it.Kind), zap.Int("attempt", it.Attempts))
	defer d.keepClaim(ctx, log, it)()
	cfg := d.o.Config.Current()
	var p *config.Partner
	if kindOf(it).partner {
		p, _ = cfg.Partner(it.Partner)
	}
	ready := true
	// body, when set, is the spool file the message is posted from; it
	// is removed on every path.
	var body *spool.File
	defer func() {
		if body != nil {
			body.Close()
		}
	}()
	// live, when set, is a build posted as it runs (see livepost.go).
	var live *liveBuild
	switch it.Kind {
	case postgres.OutboxKindWebhook:
		log, ready = d.prepareWebhook(ctx, &it)
	case postgres.OutboxKindDelivery:
		// No HTTP exchange: the destination's connector writes it.
		d.deliver(ctx, log, it)
		return
	case postgres.OutboxKindMessage:
		st := &cfg.Station
		if p != nil {
			st = cfg.StationOf(p)
		}
		log, body, live, ready = d.prepareMessage(ctx, log, &it, st, p)
	}
	if !ready {
		return
	}
	var a attempt
	if live != nil {
		a = d.sendLive(ctx, log, &it, p, live)
	} else {
		a = d.send(ctx, it, p, body)
	}
	if ctx.Err() != nil {
		log.Warn("send abandoned at shutdown; the claim expires and another dispatcher sends it again")
		return
	}
	d.finish(ctx, log, it, p, a)
}

// prepareWebhook signs a webhook delivery; the row's partner names the
// event's partner, the webhook is no partner (default timeout, plain
// request). ready is false when the outcome is recorded already.
func (d *Dispatcher) prepareWebhook(ctx context.Context, it *postgres.OutboxItem) (log *zap.Logger, ready bool) {
	log = d.log.With(zap.Int64("outbox_id", it.ID), zap.String("kind", it.Kind), zap.Int("attempt", it.Attempts),
		zap.String("event_id", first(it.Headers, EventIDHeader)))
	if len(d.o.WebhookSecret) == 0 {
		// Not claimed without a secret (kinds); should one come anyway,
		// it is never posted unsigned.
		d.finish(ctx, log, *it, nil, attempt{retryable: true, err: errors.New("this replica has no webhook secret (EDIHUB_WEBHOOK_SECRET_FILE); a replica with one retries")})
		return log, false
	}
	it.Headers = it.Headers.Clone()
	signDelivery(it.Headers, d.o.WebhookSecret, it.Body, d.o.Now())
	return log, true
}

// prepareMessage builds an AS2 message on its first attempt, and for a
// message built as a stream returns the spool file it is posted from
// (the caller closes it). ready is false when the outcome is recorded
// already (no partner, a build that can never succeed, a spool without
// room) or left to the claim's expiry.
func (d *Dispatcher) prepareMessage(ctx context.Context, log *zap.Logger, it *postgres.OutboxItem, st *config.Station, p *config.Partner) (*zap.Logger, *spool.File, *liveBuild, bool) {
	if p == nil {
		d.finish(ctx, log, *it, p, attempt{err: fmt.Errorf("partner %q is no longer configured", it.Partner)})
		return log, nil, nil, false
	}
	var body *spool.File
	var live *liveBuild
	var err error
	switch {
	case !it.Built():
		body, live, err = d.buildItem(ctx, it, st, p)
	case it.BodyChunked && it.BuildInputs != nil:
		body, err = d.rebuildStreamed(ctx, it, st, p)
	case it.BodyChunked:
		body, err = d.fetchBody(ctx, *it) // frozen in pieces before migration 00020
	}
	switch {
	case err == nil:
		return log.With(zap.String("message_id", first(it.Headers, "Message-ID"))), body, live, true
	case errors.Is(err, errBuild):
		d.finish(ctx, log, *it, p, attempt{err: err})
	case errors.Is(err, hub.ErrMessageNotFound):
		// The message or its payload is gone (deleted by hand,
		// purged): no attempt can ever build it.
		d.finish(ctx, log, *it, p, attempt{err: fmt.Errorf("nothing to send: %w", err)})
	case errors.Is(err, spool.ErrFull):
		// Other large messages in flight hold the spool: try later.
		d.finish(ctx, log, *it, p, attempt{retryable: true, err: err})
	case ctx.Err() == nil && !errors.Is(err, postgres.ErrClaimLost):
		log.Warn("build or fetch the message; the claim expires and it is tried again", zap.Error(err))
	}
	return log, nil, nil, false
}

// kind is what differs between the outbox's kinds of item.
type kind struct {
	// partner: the item goes to its partner (the partner's profile and
	// HTTP client, per-partner metrics); the webhook is no partner.
	partner bool
	// message: the item is an AS2 message whose status its outcome moves.
	message bool
	// done, retry and failed are the results (the metrics' label, the
	// log's) of an attempt that succeeded, will be tried again, or failed
	// for good; a message's done depends on what it asked for.
	done, retry, failed string
	// timeout, when set, bounds every attempt instead of the partner's.
	timeout time.Duration
}

var kinds = map[string]kind{
	postgres.OutboxKindMessage: {partner: true, message: true, retry: ResultRetry, failed: ResultFailed},
	postgres.OutboxKindMDN:     {partner: true, done: ResultMDNSent, retry: ResultMDNRetry, failed: ResultMDNFailed},
	postgres.OutboxKindWebhook: {done: ResultWebhookDelivered, retry: ResultWebhookRetry, failed: ResultWebhookFailed, timeout: WebhookTimeout},
	// Deliveries are counted by destination (see finishDelivery).
	postgres.OutboxKindDelivery: {done: ResultDeliveryDone, retry: ResultDeliveryRetry, failed: ResultDeliveryFailed, timeout: DeliveryTimeout},
}

// kindOf is it's kind; an unknown kind is sent like an MDN (a plain post
// to a partner).
func kindOf(it postgres.OutboxItem) kind {
	if k, ok := kinds[it.Kind]; ok {
		return k
	}
	return kinds[postgres.OutboxKindMDN]
}

// claimKinds are the outbox kinds this dispatcher claims: messages and
// MDNs always; webhook deliveries only with the webhook secret (a replica
// not yet configured for the webhook, during a rolling change, cannot
// sign them: claiming them would only spend their attempts); deliveries
// to destinations only with Destinations.
func (d *Dispatcher) claimKinds() []string {
	k := []string{postgres.OutboxKindMessage, postgres.OutboxKindMDN}
	if len(d.o.WebhookSecret) > 0 {
		k = append(k, postgres.OutboxKindWebhook)
	}
	if d.o.Destinations != nil {
		k = append(k, postgres.OutboxKindDelivery)
	}
	return k
}

var errBuild = errors.New("build AS2 message")

// buildItem builds and freezes it's message: in memory, or as a stream
// into the spool file it returns (see stream.go), or opens its build to
// be posted as it runs (see livepost.go).
func (d *Dispatcher) buildItem(ctx context.Context, it *postgres.OutboxItem, st *config.Station, p *config.Partner) (*spool.File, *liveBuild, error) {
	src, err := d.o.Store.OutboundSource(ctx, it.MessageID)
	if err != nil {
		return nil, nil, err
	}
	if d.liveable(it, st, p, src) {
		live, ok, err := d.openLive(ctx, it, st, p, src)
		if ok || err != nil {
			return nil, live, err
		}
	}
	if d.streamed(src, p) {
		f, err := d.buildStreamed(ctx, it, st, p, src)
		return f, nil, err
	}
	if src.Chunked {
		// Stored in pieces, built in memory: no spool on this replica.
		var buf bytes.Buffer
		buf.Grow(int(src.PayloadSize))
		if _, err := d.o.Store.WritePayload(ctx, it.MessageID, func(hub.MessageInfo) io.Writer { return &buf }); err != nil {
			return nil, nil, err
		}
		src.Payload = buf.Bytes()
	}
	b, err := Build(st, p, src, d.o.Now(), d.o.Rand)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errBuild, err)
	}
	if err := d.o.Store.SaveOutboundBuild(ctx, *it, b); err != nil {
		return nil, nil, err
	}
	it.Headers, it.Body, it.MIC, it.MICAlg, it.MICs = b.Headers, b.Body, b.MIC, b.MICAlg, b.MICs
	return nil, nil, nil
}

// finish turns an attempt into the recorded outcome: done, retry or final
// failure, with the message status moved once. It returns the result and
// whether it was recorded.
func (d *Dispatcher) finish(ctx context.Context, log *zap.Logger, it postgres.OutboxItem, p *config.Partner, a attempt) (string, bool) {
	k := kindOf(it)
	r := a.result
	r.HTTPStatus = a.httpStatus
	var result string
	switch {
	case a.err == nil:
		r.State, result = postgres.OutboxDone, k.done
		if k.message {
			result = messageResult(r.Message)
		}
	case a.retryable && d.retry(it, &r.RetryIn):
		r.State, r.Error, result = postgres.OutboxPending, a.err.Error(), k.retry
		if k.message {
			r.Message = &postgres.MessageUpdate{Status: StatusRetrying, Error: r.Error}
		}
		if k.partner {
			d.o.Metrics.retries.WithLabelValues(it.Partner).Inc()
		}
	default:
		r.State, r.Error, result = postgres.OutboxFailed, gaveUp(it, a), k.failed
		if k.message {
			if r.Message == nil {
				r.Message = &postgres.MessageUpdate{Status: StatusFailed, Final: true}
			}
			r.Message.Error = r.Error
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := d.o.Store.FinishOutbox(fctx, it, r); err != nil {
		if errors.Is(err, postgres.ErrClaimLost) {
			// An async MDN that decided the message meanwhile does not
			// get here: FinishOutbox records the attempt then.
			log.Warn("claim expired and the item was claimed again or finished before the outcome was recorded; the attempt is not recorded", zap.String("result", result))
		} else {
			log.Error("record outcome; the claim expires and the item is retried", zap.String("result", result), zap.Error(err))
		}
		return result, false
	}
	d.recorded(log, it, p, a, r, result)
	return result, true
}

// messageResult is the result of a message whose attempt succeeded.
func messageResult(u *postgres.MessageUpdate) string {
	switch {
	case u != nil && u.Status == StatusAwaitingMDN:
		return ResultAwaitingMDN
	case u != nil && u.Status == StatusSent:
		return ResultSent
	}
	return ResultDelivered
}

// gaveUp is the recorded error of a final failure: a retryable one says
// that the attempts (and the retry window) are used up.
func gaveUp(it postgres.OutboxItem, a attempt) string {
	if !a.retryable {
		return a.err.Error()
	}
	window := ""
	if it.Attempts >= it.MaxAttempts && it.RetryWindowLeft > 0 {
		window = " and the retry window"
	}
	return fmt.Sprintf("gave up after %d attempts%s: %s", it.Attempts, window, a.err.Error())
}

// recorded counts and logs an outcome FinishOutbox recorded.
func (d *Dispatcher) recorded(log *zap.Logger, it postgres.OutboxItem, p *config.Partner, a attempt, r postgres.OutboxResult, result string) {
	if kindOf(it).partner {
		partner := it.Partner
		if p == nil {
			partner = "unknown"
		}
		d.o.Metrics.sent.WithLabelValues(partner, result).Inc()
	} else if it.Kind == postgres.OutboxKindWebhook {
		d.o.Metrics.webhook.WithLabelValues(result).Inc()
	}
	fields := []zap.Field{zap.String("result", result), zap.Int("http_status", a.httpStatus)}
	switch r.State {
	case postgres.OutboxPending:
		log.Warn("attempt failed; retrying", append(fields, zap.Duration("retry_in", r.RetryIn), zap.Error(a.err))...)
	case postgres.OutboxFailed:
		log.Error("send failed", append(fields, zap.String("reason", r.Error))...)
	default:
		log.Info("sent", fields...)
	}
}
