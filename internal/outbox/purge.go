package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// PurgeStore deletes finished rows in fenced batches; *postgres.Store
// implements it.
type PurgeStore interface {
	PurgeBatch(ctx context.Context, f hub.Fence, kind string, olderThan time.Duration, limit int) (int64, error)
}

// Defaults for PurgerOptions.
const (
	DefaultPurgeInterval  = time.Hour
	DefaultRetention      = 30 * 24 * time.Hour
	DefaultAuditRetention = 400 * 24 * time.Hour
	DefaultRestartExpiry  = 24 * time.Hour
	DefaultPurgeBatch     = 1000
	DefaultPurgePause     = 20 * time.Millisecond
)

// PurgerOptions configure NewPurger.
type PurgerOptions struct {
	Store      PurgeStore
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	// Interval between the starts of two runs (DefaultPurgeInterval). A
	// run starts as soon as the term starts.
	Interval time.Duration
	// Retention is how long finished outbox rows, payloads, MDNs, inbox
	// MDNs, heartbeats and events are kept (DefaultRetention).
	Retention time.Duration
	// AuditRetention is how long final message rows and audit log
	// entries are kept (DefaultAuditRetention); at least Retention.
	AuditRetention time.Duration
	// RestartExpiry is how long an interrupted AS2 restart transfer is
	// kept after its last byte arrived, for its sender to resume it
	// (DefaultRestartExpiry).
	RestartExpiry time.Duration
	// Batch bounds the rows one transaction deletes (DefaultPurgeBatch).
	Batch int
	// Pause is the least wait between two batches, so receivers and
	// dispatchers get the database between them (DefaultPurgePause;
	// negative: none). The wait is at least as long as the batch took, so
	// the purger keeps to half of one connection's time and backs off by
	// itself when the database is busy.
	Pause time.Duration
	// RetryBase and RetryMax shape the backoff after a failed batch
	// (1 s doubling up to 1 min by default).
	RetryBase, RetryMax time.Duration
}

// Purger is the leader-gated worker that deletes what edihub no longer
// needs: every Interval it deletes, kind by kind and in short fenced
// batches, the finished rows older than Retention, and the final message
// rows and audit log entries older than AuditRetention. It never touches a
// message that is not final. Build it with NewPurger; register it as a
// leader.Worker.
type Purger struct {
	o       PurgerOptions
	log     *zap.Logger
	deleted *prometheus.CounterVec
}

// NewPurger validates o and registers edihub_purge_deleted_total{kind}.
func NewPurger(o PurgerOptions) (*Purger, error) {
	if o.Store == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("outbox: purger needs Store, Logger and Registerer")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultPurgeInterval
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.AuditRetention <= 0 {
		o.AuditRetention = DefaultAuditRetention
	}
	if o.AuditRetention < o.Retention {
		return nil, fmt.Errorf("outbox: audit retention %s is shorter than the retention %s", o.AuditRetention, o.Retention)
	}
	if o.RestartExpiry <= 0 {
		o.RestartExpiry = DefaultRestartExpiry
	}
	if o.Batch <= 0 {
		o.Batch = DefaultPurgeBatch
	}
	if o.Pause == 0 {
		o.Pause = DefaultPurgePause
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.RetryMax < o.RetryBase {
		o.RetryMax = max(time.Minute, o.RetryBase)
	}
	p := &Purger{o: o, log: o.Logger.Named("purger"), deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edihub_purge_deleted_total",
		Help: "Rows the leader's purger deleted, by kind (outbox, payloads, mdns, mdn_inbox, heartbeats, events, replays, logins, restarts, messages, audit).",
	}, []string{"kind"})}
	for _, k := range postgres.PurgeKinds {
		p.deleted.WithLabelValues(k)
	}
	if err := o.Registerer.Register(p.deleted); err != nil {
		return nil, fmt.Errorf("purger metrics: %w", err)
	}
	return p, nil
}

// StuckAfter implements leader.ProgressDeadline: the purger marks success
// once per run, every Interval, so only two missed runs (and half an hour
// for a long one) make it stuck; the elector's default deadline is shorter
// than the default interval.
func (p *Purger) StuckAfter() time.Duration { return 2*p.o.Interval + 30*time.Minute }

// Run purges at once and then every Interval until ctx ends (nil). A
// failed batch is logged and retried with backoff; Run returns an error
// only when the fence is stale (wrapping hub.ErrStaleFence).
func (p *Purger) Run(ctx context.Context) error {
	return leader.Loop{Name: "purge", Step: p.step, Interval: p.o.Interval, Logger: p.log}.Run(ctx)
}

// step purges once and logs what it deleted.
func (p *Purger) step(ctx context.Context, f hub.Fence) error {
	start := time.Now()
	counts, err := p.run(ctx, f)
	if err != nil {
		return err
	}
	fields := []zap.Field{zap.Duration("took", time.Since(start))}
	for _, k := range postgres.PurgeKinds {
		fields = append(fields, zap.Int64(k, counts[k]))
	}
	p.log.Info("purge finished", fields...)
	return nil
}

// run purges every kind to the end once. It returns the counts, or an
// error when ctx ended or the fence is stale. A kind whose batches keep
// failing is left for the next run after purgeTries attempts, so one bad
// row does not stop the other kinds.
func (p *Purger) run(ctx context.Context, f hub.Fence) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, kind := range postgres.PurgeKinds {
		age := p.o.Retention
		switch {
		case postgres.AuditKind(kind):
			age = p.o.AuditRetention
		case kind == postgres.PurgeRestarts:
			age = p.o.RestartExpiry
		}
		for {
			start := time.Now()
			n, err := p.batch(ctx, f, kind, age)
			if errors.Is(err, errGaveUp) {
				break
			}
			if err != nil {
				return counts, err
			}
			counts[kind] += n
			p.deleted.WithLabelValues(kind).Add(float64(n))
			if n < int64(p.o.Batch) {
				break
			}
			pause := p.o.Pause
			if pause >= 0 {
				pause = max(pause, time.Since(start))
			}
			if !leader.Sleep(ctx, pause) {
				return counts, ctx.Err()
			}
		}
	}
	return counts, nil
}

// purgeTries bounds the attempts at one batch within a run.
const purgeTries = 5

var errGaveUp = errors.New("purge batch kept failing")

// batch deletes one batch, retrying transient errors with backoff. It
// returns errGaveUp after purgeTries failures, and the error when ctx ends
// or the fence is stale.
func (p *Purger) batch(ctx context.Context, f hub.Fence, kind string, age time.Duration) (int64, error) {
	wait := p.o.RetryBase
	for try := 1; ; try++ {
		n, err := p.o.Store.PurgeBatch(ctx, f, kind, age, p.o.Batch)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, hub.ErrStaleFence):
			return 0, err
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case try == purgeTries:
			p.log.Error("purge batch keeps failing; this kind waits for the next run", zap.String("kind", kind), zap.Int("tries", try), zap.Error(err))
			return 0, errGaveUp
		}
		p.log.Warn("purge batch failed; retrying", zap.String("kind", kind), zap.Duration("retry_in", wait), zap.Error(err))
		if !leader.Sleep(ctx, wait) {
			return 0, ctx.Err()
		}
		wait = min(2*wait, p.o.RetryMax)
	}
}
