// Package connectors keeps the connectors document a replica serves in
// step with PostgreSQL, and changes it. The document (destinations,
// sources and routes: config.ParseConnectors) is stored whole, one
// revision per change (internal/postgres); every replica applies a
// change within a second or two (LISTEN/NOTIFY, with a periodic re-read
// as the safety net), and each change is recorded with who made it and
// what it changed.
//
// Live is a replica's view: its Current snapshot is replaced whole on
// each change, so that a delivery or a pickup batch keeps the document
// it started with. Service makes changes for the API and the CLI: plan
// (a dry run: validate and compare), apply against an expected revision,
// history and restore.
package connectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// LiveStore is what Live reads; *postgres.Store implements it.
type LiveStore interface {
	Connectors(ctx context.Context) (postgres.ConnectorsRevision, error)
	ListenConnectors(ctx context.Context, wake func()) error
	RecordServedConnectors(ctx context.Context, identity string, revision int64, appliedAt time.Time) error
}

// Defaults of LiveOptions.
const (
	DefaultResync     = 30 * time.Second
	DefaultListenWait = 2 * time.Second
)

// StoppedAfter is how long a replica may go without recording the
// revision it serves before the API's list of replicas leaves it out:
// three missed resyncs.
const StoppedAfter = 3 * DefaultResync

// LiveOptions configure NewLive.
type LiveOptions struct {
	Store LiveStore
	// SecretsDir and FoldersDir are this replica's directories
	// (EDIHUB_SECRETS_DIR, EDIHUB_FOLDERS_DIR): a secret or folder the
	// stored document names that is missing here is logged, and the
	// document served all the same (the connector reports it on use).
	SecretsDir, FoldersDir string
	Logger                 *zap.Logger
	Registerer             prometheus.Registerer
	// Identity names this replica in connector_replicas.
	Identity string
	// Resync is how often the stored revision is read again, in case a
	// notification was lost (DefaultResync).
	Resync time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Snapshot is the connectors document a replica serves at one revision.
// It is never changed: Live replaces it whole.
type Snapshot struct {
	// Revision is the stored revision, 0 when none was ever stored.
	Revision   int64
	Connectors *config.Connectors
	// AppliedAt is when this replica started serving it.
	AppliedAt time.Time
}

// Live is the connectors document a replica serves. Build it with
// NewLive and Run it for as long as the replica serves. Current is safe
// for concurrent use.
type Live struct {
	o   LiveOptions
	log *zap.Logger
	cur atomic.Pointer[Snapshot]

	mu sync.Mutex // serialises reloads
	// failed is the revision that did not parse here, so that it is
	// logged once.
	failed int64

	revision, loadErrors prometheus.Gauge
}

// NewLive reads the stored document: the first snapshot. A stored
// revision that does not parse on this replica (written by a newer
// version, say) is logged, and the empty document is served until one
// does.
func NewLive(ctx context.Context, o LiveOptions) (*Live, error) {
	if o.Store == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("connectors: Live needs Store, Logger and Registerer")
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Live{o: o, log: o.Logger.Named("connectors"),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{Name: "edihub_connectors_revision",
			Help: "Revision of the connectors document this replica serves (0: none stored)."}),
		loadErrors: prometheus.NewGauge(prometheus.GaugeOpts{Name: "edihub_connectors_load_errors",
			Help: "1 when the stored connectors revision does not parse on this replica: it serves the revision before."}),
	}
	for _, c := range []prometheus.Collector{l.revision, l.loadErrors} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("connectors metrics: %w", err)
		}
	}
	l.cur.Store(&Snapshot{Connectors: &config.Connectors{}, AppliedAt: o.Now()})
	if err := l.Reload(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Current returns the snapshot served now. It never changes; a later
// call may return a newer one.
func (l *Live) Current() *Snapshot { return l.cur.Load() }

// Reload reads the stored document and serves it, unless its revision is
// the one served already; either way it records what this replica
// serves.
func (l *Live) Reload(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	stored, err := l.o.Store.Connectors(ctx)
	if err != nil {
		return err
	}
	cur := l.cur.Load()
	if stored.Revision != cur.Revision && stored.Revision != l.failed {
		l.apply(stored, cur)
	}
	cur = l.cur.Load()
	if err := l.o.Store.RecordServedConnectors(ctx, l.o.Identity, cur.Revision, cur.AppliedAt); err != nil && ctx.Err() == nil {
		l.log.Warn("record served connectors revision", zap.Error(err))
	}
	return nil
}

// apply parses stored and serves it; one that does not parse leaves cur
// in service.
func (l *Live) apply(stored postgres.ConnectorsRevision, cur *Snapshot) {
	c, err := config.ParseConnectors([]byte(stored.Document), config.ConnectorsOptions{
		Name: fmt.Sprintf("connectors revision %d", stored.Revision), SecretsDir: l.o.SecretsDir, FoldersDir: l.o.FoldersDir, Away: true})
	if err != nil {
		l.failed = stored.Revision
		l.loadErrors.Set(1)
		l.log.Error("stored connectors revision does not parse on this replica; it serves the revision before",
			zap.Int64("revision", stored.Revision), zap.Int64("serving_revision", cur.Revision), zap.Error(err))
		return
	}
	for _, w := range c.Warnings {
		l.log.Warn("connectors", zap.Int64("revision", stored.Revision), zap.String("warning", w))
	}
	l.failed = 0
	l.loadErrors.Set(0)
	l.cur.Store(&Snapshot{Revision: stored.Revision, Connectors: c, AppliedAt: l.o.Now()})
	l.revision.Set(float64(stored.Revision))
	l.log.Info("connectors applied", zap.Int64("revision", stored.Revision), zap.Int("destinations", len(c.Destinations)),
		zap.Int("sources", len(c.Sources)), zap.Int("routes", len(c.Routes)))
}

// Run keeps the snapshot current until ctx ends: on every notification
// of a change and every Resync (a lost notification). A lost database
// connection is retried; Run returns nil when ctx ends.
func (l *Live) Run(ctx context.Context) error {
	wake, wait := postgres.Follow(ctx, l.o.Store.ListenConnectors, DefaultListenWait, func(err error) {
		l.log.Warn("listen for connectors changes; retrying (changes are still read every resync)", zap.Error(err))
	})
	defer wait()
	resync := time.NewTicker(l.o.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-resync.C:
		}
		if err := l.Reload(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("read connectors; serving the revision read before", zap.Error(err))
		}
	}
}
