package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/probe"
)

// outboundOptions are the dispatcher's settings (edihub serve).
type outboundOptions struct {
	workers      int
	pollInterval time.Duration
	lease        time.Duration
	backoffBase  time.Duration
	backoffMax   time.Duration
	asyncMDNWait time.Duration
	retryWindow  time.Duration
	// webhookURL, when set, receives every feed event, signed with the
	// secret read from webhookSecretFile.
	webhookURL        string
	webhookSecretFile string
}

func (o *outboundOptions) flags(fs *flagSet) {
	fs.Int(&o.workers, "dispatch-workers", outbox.DefaultWorkers, "outbound sends this replica runs at once (messages and async MDNs)")
	fs.Duration(&o.pollInterval, "dispatch-poll-interval", outbox.DefaultPollInterval, "mean time between outbox polls (jittered ±50%); new work also wakes the dispatchers at once through LISTEN/NOTIFY")
	fs.Duration(&o.lease, "dispatch-lease", 0, "how long a claimed outbox item stays claimed; 0 means 90s (the default partner timeout plus 30s)")
	fs.Duration(&o.backoffBase, "retry-backoff", outbox.DefaultBackoffBase, "base of the exponential retry backoff (full jitter: retry n waits up to base·2^(n-1))")
	fs.Duration(&o.backoffMax, "retry-backoff-max", outbox.DefaultBackoffMax, "longest wait between two attempts of one message")
	fs.Duration(&o.retryWindow, "retry-window", outbox.DefaultRetryWindow, "how long an outbound message is retried before it fails; 0 means max_attempts alone")
	fs.String(&o.webhookURL, "webhook-url", "", "URL that receives every event of the feed as a signed JSON POST; empty disables the webhook")
	fs.String(&o.webhookSecretFile, "webhook-secret-file", "", "file holding the webhook's HMAC secret; required with -webhook-url")
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
	case o.retryWindow < 0:
		return fmt.Errorf("EDIHUB_RETRY_WINDOW (-retry-window) must not be negative, got %s; use a duration such as 24h, or 0 for max_attempts alone", o.retryWindow)
	}
	if o.webhookURL == "" {
		if o.webhookSecretFile != "" {
			return errors.New("EDIHUB_WEBHOOK_SECRET_FILE (-webhook-secret-file) is set without EDIHUB_WEBHOOK_URL (-webhook-url): set the URL too, or unset the secret file")
		}
		return nil
	}
	u, err := url.Parse(o.webhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("EDIHUB_WEBHOOK_URL (-webhook-url) %q is not an absolute http(s) URL; set it like https://backoffice.example/edihub-events", o.webhookURL)
	}
	if o.webhookSecretFile == "" {
		return errors.New("EDIHUB_WEBHOOK_URL (-webhook-url) is set but EDIHUB_WEBHOOK_SECRET_FILE (-webhook-secret-file) is not: point it to a file holding the secret that signs the deliveries")
	}
	return nil
}

// webhookSecret reads the webhook secret: the file's content without
// surrounding white space. Errors never quote the content.
func (o outboundOptions) webhookSecret() ([]byte, error) {
	if o.webhookURL == "" {
		return nil, nil
	}
	b, err := os.ReadFile(o.webhookSecretFile)
	if err != nil {
		return nil, fmt.Errorf("webhook secret (check EDIHUB_WEBHOOK_SECRET_FILE or -webhook-secret-file): %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("webhook secret file %s is empty (EDIHUB_WEBHOOK_SECRET_FILE / -webhook-secret-file): write a long random secret into it", o.webhookSecretFile)
	}
	return b, nil
}

// outbound is the sending side of a replica: the REST API handler and the
// outbox dispatcher, which serve runs under its errgroup.
type outbound struct {
	api   http.Handler
	queue *outbox.Queue
	// partners, certificates and testPartner serve the console as the
	// API: the same checks, the same certificates, the same test.
	partners     *partners.Service
	certificates func(time.Time) []config.CertificateInfo
	testPartner  func(ctx context.Context, as2ID string) (probe.Report, bool)
	dispatcher   *outbox.Dispatcher
	// forwarder moves feed events into the outbox; nil without a webhook.
	forwarder *outbox.Forwarder
	// deliveries queues received documents for the connectors'
	// destinations; nil without routes.
	deliveries *outbox.DeliveryForwarder
}

func newOutbound(r *replica, reports api.Reports) (*outbound, error) {
	log, reg, store, cfg, o := r.log, r.reg, r.store, r.cfg, r.o
	secret, err := o.outbound.webhookSecret()
	if err != nil {
		return nil, err
	}
	dl := newDeliveries(r)
	d, err := outbox.NewDispatcher(outbox.Options{
		Destinations:    dl.destinations,
		Store:           store,
		Listener:        store,
		Config:          cfg,
		Logger:          log,
		Metrics:         outbox.NewMetrics(reg, store.OutboxStats),
		Identity:        r.identity,
		Workers:         o.outbound.workers,
		PollInterval:    o.outbound.pollInterval,
		Lease:           o.outbound.lease,
		ShutdownTimeout: o.drainTimeout,
		BackoffBase:     o.outbound.backoffBase,
		BackoffMax:      o.outbound.backoffMax,
		AsyncMDNWait:    o.outbound.asyncMDNWait,
		WebhookSecret:   secret,
		// Messages larger than the receiver's threshold are built as a
		// stream into the same spool.
		Spool:          r.spool,
		SpoolFromBytes: o.spoolFromBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("%w (raise EDIHUB_DISPATCH_LEASE / -dispatch-lease, or leave it 0)", err)
	}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: store, Config: cfg, Notify: d.Wake, RetryWindow: o.outbound.retryWindow, Logger: log.Named("queue")})
	if err != nil {
		return nil, err
	}
	certs := func(now time.Time) []config.CertificateInfo { return cfg.Current().Certificates(now) }
	svc := &partners.Service{Store: store, Base: func() *config.File { return cfg.Current() }, Now: time.Now}
	test := func(ctx context.Context, id string) (probe.Report, bool) {
		c := cfg.Current()
		p, ok := c.Partner(id)
		if !ok {
			return probe.Report{}, false
		}
		return probe.Run(ctx, probe.Options{Station: *c.StationOf(p), Partner: p, MaxMDNBytes: o.maxMDNBytes}), true
	}
	h, err := api.New(api.Options{Queue: q, Store: store, Logger: log, Resender: store, Inbox: store, Reports: reports, Certificates: certs,
		Tracer: store, Canceller: store, Reapplier: store, Interchanges: store,
		Partners: svc, PartnerReader: store, ServedRevision: func() int64 { return cfg.Current().Revision },
		TestPartner: func(ctx context.Context, id string) (any, bool) {
			rep, ok := test(ctx, id)
			if !ok {
				return nil, false
			}
			return rep, true
		},
		Connectors:      &connectors.Service{Store: store, Options: config.ConnectorsOptions{SecretsDir: o.secretsDir, FoldersDir: o.foldersDir}},
		ConnectorReader: store, ServedConnectors: func() int64 { return r.connectors.Current().Revision },
		Auditor: store, Audit: store, Users: &auth.Users{Store: store, Now: time.Now},
		Spool: r.spool, SpoolFromBytes: o.spoolFromBytes})
	if err != nil {
		return nil, err
	}
	if err := reg.Register(api.NewCertificateCollector(certs)); err != nil {
		return nil, fmt.Errorf("register certificate metrics: %w", err)
	}
	if err := reg.Register(outbox.NewDeliveryBacklog(store.DeliveryBacklogs)); err != nil {
		return nil, fmt.Errorf("register delivery metrics: %w", err)
	}
	out := &outbound{api: h, queue: q, partners: svc, certificates: certs, testPartner: test, dispatcher: d}
	if o.outbound.webhookURL != "" {
		out.forwarder, err = outbox.NewForwarder(outbox.ForwarderOptions{
			Store: store, Logger: log, URL: o.outbound.webhookURL, Notify: d.Wake,
			MaxAttempts: config.DefaultMaxAttempts, RetryWindow: o.outbound.retryWindow,
		})
		if err != nil {
			return nil, err
		}
		log.Info("webhook enabled", zap.String("url", redactURL(o.outbound.webhookURL)))
	}
	if dl.route != nil {
		out.deliveries, err = outbox.NewDeliveryForwarder(outbox.DeliveryForwarderOptions{
			Store: store, Logger: log, Route: dl.route, Notify: d.Wake,
			MaxAttempts: config.DefaultMaxAttempts, RetryWindow: o.outbound.retryWindow,
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// redactURL drops user information from u for logs.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable)"
	}
	return p.Redacted()
}
