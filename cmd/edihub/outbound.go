package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// outboundOptions are the dispatcher's settings (edihub serve).
type outboundOptions struct {
	workers      int
	pollInterval time.Duration
	lease        time.Duration
	backoffBase  time.Duration
	backoffMax   time.Duration
	asyncMDNWait time.Duration
}

func (o *outboundOptions) flags(fs *flagSet) {
	fs.Int(&o.workers, "dispatch-workers", outbox.DefaultWorkers, "outbound sends this replica runs at once (messages and async MDNs)")
	fs.Duration(&o.pollInterval, "dispatch-poll-interval", outbox.DefaultPollInterval, "mean time between outbox polls (jittered ±50%); new work also wakes the dispatchers at once through LISTEN/NOTIFY")
	fs.Duration(&o.lease, "dispatch-lease", 0, "how long a claimed outbox item stays claimed; a crashed replica's items are sent again after it. 0 means the longest partner timeout plus 30s")
	fs.Duration(&o.backoffBase, "retry-backoff", outbox.DefaultBackoffBase, "base of the exponential retry backoff (full jitter: retry n waits up to base·2^(n-1))")
	fs.Duration(&o.backoffMax, "retry-backoff-max", outbox.DefaultBackoffMax, "longest wait between two attempts of one message")
	fs.Duration(&o.asyncMDNWait, "async-mdn-timeout", outbox.DefaultAsyncMDNWait, "how long a partner may take to send an async MDN before the message is overdue (messages.mdn_due_at)")
}

func (o outboundOptions) validate() error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("EDIHUB_DISPATCH_WORKERS (-dispatch-workers) must be at least 1, got %d", o.workers)
	case o.pollInterval <= 0:
		return fmt.Errorf("EDIHUB_DISPATCH_POLL_INTERVAL (-dispatch-poll-interval) must be positive, got %s", o.pollInterval)
	case o.lease < 0:
		return fmt.Errorf("EDIHUB_DISPATCH_LEASE (-dispatch-lease) must not be negative, got %s", o.lease)
	case o.backoffBase <= 0 || o.backoffMax < o.backoffBase:
		return fmt.Errorf("EDIHUB_RETRY_BACKOFF (-retry-backoff) must be positive and at most EDIHUB_RETRY_BACKOFF_MAX (-retry-backoff-max); got %s and %s", o.backoffBase, o.backoffMax)
	case o.asyncMDNWait <= 0:
		return fmt.Errorf("EDIHUB_ASYNC_MDN_TIMEOUT (-async-mdn-timeout) must be positive, got %s", o.asyncMDNWait)
	}
	return nil
}

// outbound is the sending side of a replica: the REST API handler and the
// outbox dispatcher, which serve runs under its errgroup.
type outbound struct {
	api        http.Handler
	dispatcher *outbox.Dispatcher
}

func newOutbound(log *zap.Logger, reg prometheus.Registerer, store *postgres.Store, cfg *config.File, o serveOptions) (*outbound, error) {
	identity, err := newIdentity(o.leader.identity)
	if err != nil {
		return nil, err
	}
	d, err := outbox.NewDispatcher(outbox.Options{
		Store:           store,
		Listener:        store,
		Config:          cfg,
		Logger:          log,
		Metrics:         outbox.NewMetrics(reg, store.OutboxStats),
		Identity:        identity,
		Workers:         o.outbound.workers,
		PollInterval:    o.outbound.pollInterval,
		Lease:           o.outbound.lease,
		ShutdownTimeout: o.drainTimeout,
		BackoffBase:     o.outbound.backoffBase,
		BackoffMax:      o.outbound.backoffMax,
		AsyncMDNWait:    o.outbound.asyncMDNWait,
	})
	if err != nil {
		return nil, fmt.Errorf("%w (raise EDIHUB_DISPATCH_LEASE / -dispatch-lease, or leave it 0)", err)
	}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: store, Config: cfg, Notify: d.Wake})
	if err != nil {
		return nil, err
	}
	h, err := api.New(api.Options{Queue: q, Store: store, Logger: log, Certificates: cfg.Certificates})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(api.NewCertificateCollector(cfg.Certificates)); err != nil {
		return nil, fmt.Errorf("register certificate metrics: %w", err)
	}
	return &outbound{api: h, dispatcher: d}, nil
}
