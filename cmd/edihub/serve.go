package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
)

// serveOptions are the settings of edihub serve.
type serveOptions struct {
	log          logOptions
	databaseURL  string
	configPath   string
	httpAddr     string
	apiAddr      string
	opsAddr      string
	migrate      bool
	maxBodyBytes int64
	// maxMDNBytes bounds an async MDN, in the receiver and the poller.
	maxMDNBytes int64
	// as2ReadTimeout bounds reading one AS2 request body.
	as2ReadTimeout time.Duration
	// maxDecompressedBytes bounds the decompressed bytes of one message;
	// 0 means 4 × maxBodyBytes (see decompressionLimit).
	maxDecompressedBytes int64
	// maxInFlightBytes bounds the bytes all AS2 requests in flight hold;
	// 0 derives it from the Go memory limit (see inFlightLimit).
	maxInFlightBytes int64
	// maxConcurrentPerPartner bounds the AS2 requests in flight per
	// partner; 0 means no cap.
	maxConcurrentPerPartner int
	drainTimeout            time.Duration
	drainDelay              time.Duration
	apiToken                string
	dbMaxConns              int
	leader                  leaderOptions
	outbound                outboundOptions
	purge                   purgeOptions
	report                  reportOptions
}

func serveFlags(fs *flagSet) func(context.Context, *environment) error {
	var o serveOptions
	o.log.flags(fs)
	fs.String(&o.databaseURL, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	fs.String(&o.configPath, "config", "", "path of the station and partner YAML file (see docs/configuration.md)")
	fs.String(&o.httpAddr, "http-addr", ":8080", "address of the AS2 and API listener")
	fs.String(&o.apiAddr, "api-addr", "", "address of a separate REST API listener, so partners reach only /as2 on the AS2 listener; empty: the API is served on the AS2 listener")
	fs.String(&o.opsAddr, "ops-addr", ":9090", "address of the ops listener (/metrics, /healthz, /readyz, /leader)")
	fs.Bool(&o.migrate, "migrate", false, "apply pending database migrations before serving (otherwise an outdated schema stops the start)")
	fs.Int64(&o.maxBodyBytes, "max-body-bytes", 100<<20, "largest request body accepted on the AS2 and API listener, in bytes")
	fs.Int64(&o.maxMDNBytes, "max-mdn-bytes", mdn.DefaultMaxMDNBytes, "largest async MDN accepted on the AS2 listener, in bytes (HTTP 413 above it; an MDN is a few KiB); the leader's MDN poller keeps a larger one already stored as an orphan without reading it")
	fs.Int64(&o.maxDecompressedBytes, "max-decompressed-bytes", 0, "largest number of bytes one AS2 message may decompress to, all compressed layers together (decompression-failed above it); 0 means 4 × max-body-bytes")
	fs.Int64(&o.maxInFlightBytes, "max-in-flight-bytes", 0, "largest number of bytes all AS2 requests in flight on this replica may hold at once (bodies and decompression); over it, HTTP 503 with Retry-After so partners resend; 0 derives it from the Go memory limit (half of it, at least max-body-bytes plus the decompression limit; without a memory limit, 4 times that)")
	fs.Int(&o.maxConcurrentPerPartner, "max-concurrent-per-partner", 32, "largest number of AS2 requests one partner may have in flight on this replica; over it, HTTP 503 with Retry-After before the body is read; 0 means no cap")
	fs.Duration(&o.as2ReadTimeout, "as2-read-timeout", 5*time.Minute, "how long a partner may take to send the body of one AS2 request (after its header); slower requests get HTTP 408 and nothing is stored")
	fs.Duration(&o.drainTimeout, "shutdown-timeout", 20*time.Second, "how long shutdown waits for in-flight HTTP requests")
	fs.Duration(&o.drainDelay, "shutdown-delay", 0, "on SIGTERM, how long to keep serving HTTP (with /readyz failing) after the lease is released, so load balancers stop sending traffic before the listeners close; 5s suits Kubernetes")
	fs.String(&o.apiToken, "api-token", "", "bearer token the REST API requires; empty disables the API")
	fs.Int(&o.dbMaxConns, "db-max-conns", 20, "largest number of database connections this replica opens")
	o.leader.flags(fs)
	o.outbound.flags(fs)
	o.purge.flags(fs)
	o.report.flags(fs)
	return func(ctx context.Context, env *environment) error { return serve(ctx, env, o) }
}

func (o serveOptions) validate() error {
	if o.databaseURL == "" {
		return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
	}
	if o.configPath == "" {
		return errors.New("no station configuration: set EDIHUB_CONFIG (or -config) to the path of the station and partner YAML file")
	}
	if o.maxBodyBytes <= 0 {
		return fmt.Errorf("EDIHUB_MAX_BODY_BYTES (-max-body-bytes) must be positive, got %d", o.maxBodyBytes)
	}
	if o.maxMDNBytes <= 0 {
		return fmt.Errorf("EDIHUB_MAX_MDN_BYTES (-max-mdn-bytes) must be positive, got %d; the default is %d (1 MiB)", o.maxMDNBytes, mdn.DefaultMaxMDNBytes)
	}
	if o.maxDecompressedBytes < 0 {
		return fmt.Errorf("EDIHUB_MAX_DECOMPRESSED_BYTES (-max-decompressed-bytes) must not be negative, got %d; 0 means 4 × EDIHUB_MAX_BODY_BYTES", o.maxDecompressedBytes)
	}
	if o.maxInFlightBytes < 0 {
		return fmt.Errorf("EDIHUB_MAX_IN_FLIGHT_BYTES (-max-in-flight-bytes) must not be negative, got %d; 0 derives it from the Go memory limit", o.maxInFlightBytes)
	}
	if o.maxInFlightBytes > 0 && o.maxInFlightBytes < o.maxBodyBytes {
		return fmt.Errorf("EDIHUB_MAX_IN_FLIGHT_BYTES (-max-in-flight-bytes) %d is below EDIHUB_MAX_BODY_BYTES %d: the largest message could never be accepted; raise it or set 0 to derive it from the Go memory limit", o.maxInFlightBytes, o.maxBodyBytes)
	}
	if o.maxConcurrentPerPartner < 0 {
		return fmt.Errorf("EDIHUB_MAX_CONCURRENT_PER_PARTNER (-max-concurrent-per-partner) must not be negative, got %d; 0 means no cap", o.maxConcurrentPerPartner)
	}
	if o.as2ReadTimeout <= 0 {
		return fmt.Errorf("EDIHUB_AS2_READ_TIMEOUT (-as2-read-timeout) must be positive, got %s; set it to a duration such as 5m", o.as2ReadTimeout)
	}
	if o.drainTimeout <= 0 {
		return fmt.Errorf("EDIHUB_SHUTDOWN_TIMEOUT (-shutdown-timeout) must be positive, got %s", o.drainTimeout)
	}
	if o.drainDelay < 0 {
		return fmt.Errorf("EDIHUB_SHUTDOWN_DELAY (-shutdown-delay) must not be negative, got %s", o.drainDelay)
	}
	if o.dbMaxConns < 2 {
		return fmt.Errorf("EDIHUB_DB_MAX_CONNS (-db-max-conns) must be at least 2, got %d", o.dbMaxConns)
	}
	if err := o.leader.validate(); err != nil {
		return err
	}
	if err := o.outbound.validate(); err != nil {
		return err
	}
	if err := o.purge.validate(); err != nil {
		return err
	}
	if _, err := o.report.settings(os.ReadFile); err != nil {
		return err
	}
	return o.log.validate()
}

// decompressionLimit is the decompressed bytes one message may reach.
func (o serveOptions) decompressionLimit() int64 {
	if o.maxDecompressedBytes > 0 {
		return o.maxDecompressedBytes
	}
	return 4 * o.maxBodyBytes
}

// inFlightLimit is the in-flight byte budget of the AS2 receiver: the
// setting, or half the Go memory limit (memLimit, math.MaxInt64 when
// none), never below what the largest message needs (its body and its
// decompression); without a memory limit, four such messages.
func (o serveOptions) inFlightLimit(memLimit int64) int64 {
	if o.maxInFlightBytes > 0 {
		return o.maxInFlightBytes
	}
	one := o.maxBodyBytes + o.decompressionLimit()
	if memLimit <= 0 || memLimit == math.MaxInt64 {
		return 4 * one
	}
	return max(memLimit/2, one)
}

// serve runs one replica until ctx ends, then shuts down in order.
func serve(ctx context.Context, env *environment, o serveOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	log, err := o.log.build(env.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	applyMemoryLimit(log, env.getenv, cgroupMemoryMax)

	cfg, err := config.Load(o.configPath, config.Options{Now: time.Now})
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings {
		log.Warn("configuration", zap.String("warning", w))
	}
	log.Info("configuration loaded", zap.String("path", cfg.Path), zap.String("station", cfg.Station.AS2ID), zap.Int("partners", len(cfg.Partners)))

	store, err := openStore(ctx, log, o.databaseURL, postgres.Options{
		MaxConns: int32(o.dbMaxConns),
		// A paused or cut-off leader's fenced transaction holds the
		// successor's term opening no longer than its workers may take
		// to stop.
		FencedIdleTimeout: o.leader.workerStopTimeout,
	}, o.migrate)
	if err != nil {
		return err
	}
	defer store.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		store.Collector(),
		buildInfo(),
	)
	httpMetrics := httpserver.NewMetrics(reg)
	var draining atomic.Bool
	as2Handler, err := newReceiver(log, reg, store, cfg, o)
	if err != nil {
		return err
	}
	rs, err := o.report.settings(os.ReadFile)
	if err != nil {
		return err
	}
	if rs.mailer == nil {
		log.Info("report mail not configured (EDIHUB_SMTP_URL is empty): the leader stores each day's report, mails none")
	}
	elector, err := newElector(log, reg, store, cfg, as2.Limits{MaxDecompressedSize: o.decompressionLimit()}, o.maxMDNBytes, o.leader, o.purge, func(identity string) (map[string]leader.Worker, error) {
		w, err := newReportWorker(log, reg, store, cfg, o.leader.leaseName, identity, rs)
		if err != nil {
			return nil, err
		}
		return map[string]leader.Worker{"report": w}, nil
	})
	if err != nil {
		return err
	}
	reports := &report.Service{Store: store, Location: rs.loc, Now: time.Now, Builder: &report.Builder{
		Source: store, Station: cfg.Station.AS2ID, Lease: o.leader.leaseName, Partners: partnerNames(cfg), Now: time.Now}}
	out, err := newOutbound(log, reg, store, cfg, o, reports)
	if err != nil {
		return err
	}

	// The API shares the AS2 listener unless it has its own.
	as2API := out.api
	if o.apiAddr != "" {
		as2API = nil
	}
	as2Srv, err := httpserver.Listen(httpserver.Options{
		Name:         "as2",
		Addr:         o.httpAddr,
		Logger:       log,
		DrainTimeout: o.drainTimeout,
		Handler: httpserver.NewRouter(httpserver.RouterOptions{
			Logger:       log,
			Metrics:      httpMetrics,
			Version:      version(),
			MaxBodyBytes: o.maxBodyBytes,
			AS2:          as2Handler,
			API:          as2API,
			APIToken:     o.apiToken,
		}),
	})
	if err != nil {
		return fmt.Errorf("%w (set EDIHUB_HTTP_ADDR or -http-addr to a free address)", err)
	}
	var apiSrv *httpserver.Server
	if o.apiAddr != "" {
		apiSrv, err = httpserver.Listen(httpserver.Options{
			Name:         "api",
			Addr:         o.apiAddr,
			Logger:       log,
			DrainTimeout: o.drainTimeout,
			Handler: httpserver.NewRouter(httpserver.RouterOptions{
				Logger:       log,
				Metrics:      httpMetrics,
				Version:      version(),
				MaxBodyBytes: o.maxBodyBytes,
				API:          out.api,
				APIToken:     o.apiToken,
				Listener:     "api",
			}),
		})
		if err != nil {
			return fmt.Errorf("%w (set EDIHUB_API_ADDR or -api-addr to a free address, or leave it empty to serve the API on the AS2 listener)", err)
		}
	}
	opsSrv, err := httpserver.Listen(httpserver.Options{
		Name:         "ops",
		Addr:         o.opsAddr,
		Logger:       log,
		DrainTimeout: o.drainTimeout,
		Handler: httpserver.NewOpsRouter(httpserver.OpsOptions{
			Logger:   log,
			Metrics:  httpMetrics,
			Gatherer: reg,
			Ready:    readiness(store, &draining),
			Leader:   leaderHandler(elector),
			Healthy:  elector.Healthy,
		}),
	})
	if err != nil {
		return fmt.Errorf("%w (set EDIHUB_OPS_ADDR or -ops-addr to a free address)", err)
	}

	started := []zap.Field{zap.String("version", version()), zap.String("as2_addr", as2Srv.Addr().String()), zap.String("ops_addr", opsSrv.Addr().String())}
	if apiSrv != nil {
		started = append(started, zap.String("api_addr", apiSrv.Addr().String()))
	}
	log.Info("edihub started", started...)
	// Shutdown order: the elector stops the workers, waits for them and
	// releases the lease; only then do the HTTP servers drain.
	g, gctx := errgroup.WithContext(ctx)
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(gctx))
	defer stopHTTP()
	g.Go(func() error {
		defer stopHTTP()
		err := elector.Run(gctx)
		exitIfWorkersHung(log, err, os.Exit)
		if err == nil && ctx.Err() != nil && o.drainDelay > 0 {
			// Stopping on a signal: keep answering while endpoints and
			// load balancers catch up, with /readyz already failing.
			draining.Store(true)
			log.Info("serving on before draining", zap.Duration("delay", o.drainDelay))
			select {
			case <-time.After(o.drainDelay):
			case <-httpCtx.Done():
			}
		}
		return err
	})
	g.Go(func() error { return out.dispatcher.Run(gctx) })
	if out.forwarder != nil {
		g.Go(func() error { return out.forwarder.Run(gctx) })
	}
	g.Go(func() error { return as2Srv.Run(httpCtx) })
	if apiSrv != nil {
		g.Go(func() error { return apiSrv.Run(httpCtx) })
	}
	g.Go(func() error { return opsSrv.Run(httpCtx) })
	err = g.Wait()
	log.Info("edihub stopped")
	return err
}

// openStore connects and makes sure the schema is the one this binary
// expects, migrating first when asked to.
func openStore(ctx context.Context, log *zap.Logger, url string, opts postgres.Options, migrate bool) (*postgres.Store, error) {
	store, err := postgres.Open(ctx, url, opts)
	if err != nil {
		return nil, fmt.Errorf("%w (check EDIHUB_DATABASE_URL)", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if migrate {
		applied, err := store.Migrate(cctx)
		if err != nil {
			store.Close()
			return nil, err
		}
		for _, m := range applied {
			log.Info("migration applied", zap.Int64("version", m.Version), zap.String("name", m.Name), zap.Duration("took", m.Duration))
		}
	}
	if err := store.CheckSchema(cctx); err != nil {
		store.Close()
		switch {
		case errors.Is(err, postgres.ErrSchemaOutdated):
			return nil, fmt.Errorf("%w: run 'edihub migrate' first, or start with EDIHUB_MIGRATE=true", err)
		case errors.Is(err, postgres.ErrSchemaNewer):
			return nil, fmt.Errorf("%w: deploy the newer edihub binary (schema downgrades are not supported)", err)
		}
		return nil, fmt.Errorf("%w (is the database at EDIHUB_DATABASE_URL reachable?)", err)
	}
	return store, nil
}

// readiness answers /readyz: the database must answer, and a replica that
// is shutting down is not ready. Leadership plays no part.
func readiness(store *postgres.Store, draining *atomic.Bool) func(context.Context) error {
	return func(ctx context.Context) error {
		if draining.Load() {
			return httpserver.ErrShuttingDown
		}
		return store.Ping(ctx)
	}
}

func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edihub_build_info",
		Help: "Always 1; labels carry the edihub version.",
	}, []string{"version"})
	g.WithLabelValues(version()).Set(1)
	return g
}
