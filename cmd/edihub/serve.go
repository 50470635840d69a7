package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/spool"
)

// serveOptions are the settings of edihub serve.
type serveOptions struct {
	log          logOptions
	databaseURL  string
	configPath   string
	secretsDir   string
	foldersDir   string
	httpAddr     string
	apiAddr      string
	opsAddr      string
	opsPprof     bool
	migrate      bool
	maxBodyBytes int64
	// maxMDNBytes bounds an async MDN, in the receiver and the poller.
	maxMDNBytes int64
	// as2ReadTimeout bounds reading one AS2 request body.
	as2ReadTimeout time.Duration
	// as2Restart* are the AS2 restart settings (receiver.Options.Restart).
	as2Restart                bool
	as2RestartMaxBytes        int64
	as2RestartPartnerMaxBytes int64
	// maxDecompressedBytes bounds the decompressed bytes of one message;
	// 0 means 4 × maxBodyBytes (see decompressionLimit).
	maxDecompressedBytes int64
	// maxInFlightBytes bounds the bytes all AS2 requests in flight hold;
	// 0 derives it from the Go memory limit (see inFlightLimit).
	maxInFlightBytes int64
	// gcHeapFloorBytes is the Go heap floor (gcfloor.go); 0 for none.
	gcHeapFloorBytes int64
	// maxConcurrentPerPartner bounds the AS2 requests in flight per
	// partner; 0 means no cap.
	maxConcurrentPerPartner int
	// spoolDir, spoolMaxBytes and spoolFromBytes configure the AS2 spool.
	spoolDir       string
	spoolMaxBytes  int64
	spoolFromBytes int64
	drainTimeout   time.Duration
	drainDelay     time.Duration
	apiToken       string
	dbMaxConns     int
	leader         leaderOptions
	outbound       outboundOptions
	purge          purgeOptions
	report         reportOptions
	oidc           oidcOptions

	// maxPasswordChecks bounds the console sign-ins checking a password
	// at once on this replica.
	maxPasswordChecks int
}

func serveFlags(fs *flagSet) func(context.Context, *environment) error {
	var o serveOptions
	o.log.flags(fs)
	fs.String(&o.databaseURL, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	fs.String(&o.configPath, "config", "", "path of the station and partner YAML file (see docs/configuration.md)")
	secretsDirFlag(fs, &o.secretsDir)
	foldersDirFlag(fs, &o.foldersDir)
	fs.String(&o.httpAddr, "http-addr", ":8080", "address of the AS2 and API listener")
	fs.String(&o.apiAddr, "api-addr", "", "address of a separate REST API listener, so partners reach only /as2; empty: the API is on the AS2 listener")
	fs.String(&o.opsAddr, "ops-addr", ":9090", "address of the ops listener (/metrics, /healthz, /readyz, /leader)")
	fs.Int64(&o.gcHeapFloorBytes, "gc-heap-floor-bytes", defaultHeapFloor, "bytes the Go heap may grow to before it is collected, however little is live; 0 leaves it to GOGC")
	fs.Bool(&o.opsPprof, "ops-pprof", false, "serve the Go runtime's profiles under /debug/pprof/ on the ops listener")
	fs.Bool(&o.migrate, "migrate", false, "apply pending database migrations before serving (otherwise an outdated schema stops the start)")
	fs.Int64(&o.maxBodyBytes, "max-body-bytes", 100<<20, "largest request body accepted on the AS2 and API listener, in bytes")
	fs.Int64(&o.maxMDNBytes, "max-mdn-bytes", mdn.DefaultMaxMDNBytes, "largest async MDN accepted on the AS2 listener, in bytes (HTTP 413 above it)")
	fs.Int64(&o.maxDecompressedBytes, "max-decompressed-bytes", 0, "most bytes one AS2 message may decompress to, all layers together; 0 means 4 × max-body-bytes")
	fs.Int64(&o.maxInFlightBytes, "max-in-flight-bytes", 0, "most bytes all AS2 requests in flight on this replica may hold (over it: HTTP 503); 0: from the memory limit")
	fs.Int(&o.maxConcurrentPerPartner, "max-concurrent-per-partner", 32, "most AS2 requests one partner may have in flight on this replica (over it: HTTP 503); 0 means no cap")
	fs.String(&o.spoolDir, "spool-dir", "", "directory of the spool for large messages; empty: the system's temporary directory")
	fs.Int64(&o.spoolMaxBytes, "spool-max-bytes", 8<<30, "most bytes the spool holds on disk on this replica; over it, HTTP 503 with Retry-After")
	fs.Int64(&o.spoolFromBytes, "spool-from-bytes", receiver.DefaultSpoolFromBytes, "messages above this many bytes are spooled to disk and handled as a stream; smaller ones in memory")
	fs.Bool(&o.as2Restart, "as2-restart", true, "let partners resume interrupted transfers of large messages (AS2 restart)")
	fs.Int64(&o.as2RestartMaxBytes, "as2-restart-max-bytes", receiver.DefaultRestartMaxBytes, "most bytes all partners' open AS2 restart transfers may hold in the database")
	fs.Int64(&o.as2RestartPartnerMaxBytes, "as2-restart-partner-max-bytes", receiver.DefaultRestartPartnerMaxBytes, "most bytes one partner's open AS2 restart transfers may hold in the database")
	fs.Duration(&o.as2ReadTimeout, "as2-read-timeout", 5*time.Minute, "longest a partner may take to send the body of one AS2 request; slower ones get HTTP 408")
	fs.Duration(&o.drainTimeout, "shutdown-timeout", 20*time.Second, "how long shutdown waits for in-flight HTTP requests")
	fs.Duration(&o.drainDelay, "shutdown-delay", 0, "on SIGTERM, how long to keep serving with /readyz failing before the listeners close; 5s suits Kubernetes")
	fs.String(&o.apiToken, "api-token", "", "shared bootstrap token of the REST API, an admin; empty: users' own tokens only (docs/users.md)")
	fs.Int(&o.dbMaxConns, "db-max-conns", 20, "largest number of database connections this replica opens")
	fs.Int(&o.maxPasswordChecks, "max-password-checks", auth.DefaultMaxPasswordChecks, "most console sign-ins that check a password at once on this replica (over it: HTTP 429)")
	o.leader.flags(fs)
	o.outbound.flags(fs)
	o.purge.flags(fs)
	o.report.flags(fs)
	o.oidc.flags(fs)
	return func(ctx context.Context, env *environment) error { return serve(ctx, env, o) }
}

func (o serveOptions) validate() error {
	if o.databaseURL == "" {
		return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
	}
	if o.configPath == "" {
		return errors.New("no station configuration: set EDIHUB_CONFIG (or -config) to the path of the station and partner YAML file")
	}
	if err := checkSecretsDir(o.secretsDir); err != nil {
		return err
	}
	if err := checkFoldersDir(o.foldersDir); err != nil {
		return err
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
	if o.gcHeapFloorBytes < 0 {
		return fmt.Errorf("EDIHUB_GC_HEAP_FLOOR_BYTES (-gc-heap-floor-bytes) must not be negative, got %d; 0 leaves the collector to GOGC alone", o.gcHeapFloorBytes)
	}
	if o.maxInFlightBytes < 0 {
		return fmt.Errorf("EDIHUB_MAX_IN_FLIGHT_BYTES (-max-in-flight-bytes) must not be negative, got %d; 0 derives it from the Go memory limit", o.maxInFlightBytes)
	}
	if o.maxInFlightBytes > 0 && o.maxInFlightBytes < o.inMemoryBodyBytes() {
		return fmt.Errorf("EDIHUB_MAX_IN_FLIGHT_BYTES (-max-in-flight-bytes) %d is below %d, the largest body held in memory (EDIHUB_MAX_BODY_BYTES, or EDIHUB_SPOOL_FROM_BYTES when smaller): the largest message could never be accepted; raise it or set 0 to derive it from the Go memory limit", o.maxInFlightBytes, o.inMemoryBodyBytes())
	}
	if err := o.validateSpool(); err != nil {
		return err
	}
	if o.as2RestartMaxBytes <= 0 || o.as2RestartPartnerMaxBytes <= 0 {
		return fmt.Errorf("EDIHUB_AS2_RESTART_MAX_BYTES (-as2-restart-max-bytes) and EDIHUB_AS2_RESTART_PARTNER_MAX_BYTES (-as2-restart-partner-max-bytes) must be positive, got %d and %d; to turn AS2 restart off, set EDIHUB_AS2_RESTART=false", o.as2RestartMaxBytes, o.as2RestartPartnerMaxBytes)
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
	if o.maxPasswordChecks < 1 {
		return fmt.Errorf("EDIHUB_MAX_PASSWORD_CHECKS (-max-password-checks) must be at least 1, got %d; the default is %d", o.maxPasswordChecks, auth.DefaultMaxPasswordChecks)
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
	return o.log.validate()
}

// validateSpool checks the EDIHUB_SPOOL_* settings.
func (o serveOptions) validateSpool() error {
	if o.spoolFromBytes <= 0 {
		return fmt.Errorf("EDIHUB_SPOOL_FROM_BYTES (-spool-from-bytes) must be positive, got %d; the default is %d (8 MiB)", o.spoolFromBytes, receiver.DefaultSpoolFromBytes)
	}
	if o.spoolMaxBytes < o.maxBodyBytes && o.maxBodyBytes > o.spoolFromBytes {
		return fmt.Errorf("EDIHUB_SPOOL_MAX_BYTES (-spool-max-bytes) %d is below EDIHUB_MAX_BODY_BYTES %d: the largest message could never be spooled; raise it to at least twice the body limit (a body and its payload)", o.spoolMaxBytes, o.maxBodyBytes)
	}
	return nil
}

// inMemoryBodyBytes is the largest body the receiver holds in memory:
// larger ones (by Content-Length) go to the spool.
func (o serveOptions) inMemoryBodyBytes() int64 {
	if o.spoolFromBytes <= 0 {
		return o.maxBodyBytes
	}
	return min(o.maxBodyBytes, o.spoolFromBytes)
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
	one := o.inMemoryBodyBytes() + o.decompressionLimit()
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
	rs, err := o.report.settings(os.ReadFile)
	if err != nil {
		return err
	}
	log, err := o.log.build(env.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	applyMemoryLimit(log, env.getenv, cgroupMemoryMax)

	// Sign-in settings wrong in themselves stop the start, before the
	// database is opened: the first person to try them would find them
	// otherwise. The provider is discovered in the background (run):
	// one that is down must not keep AS2 from being served.
	op, opName, err := o.oidc.provider(os.ReadFile, log)
	if err != nil {
		return err
	}
	if op != nil {
		log.Info("console sign-in with OpenID Connect", zap.String("issuer", o.oidc.issuer))
	}

	// The file is checked before the database is opened: a mistake in it
	// is reported first.
	base, err := config.Load(o.configPath, config.Options{Now: time.Now, SecretsDir: o.secretsDir})
	if err != nil {
		return err
	}
	for _, w := range base.Warnings {
		log.Warn("configuration", zap.String("warning", w))
	}
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
	identity, err := newIdentity(o.leader.identity)
	if err != nil {
		return err
	}
	if rs.mailer == nil {
		log.Info("report mail not configured (EDIHUB_SMTP_URL is empty): the leader stores each day's report, mails none")
	}
	reg := newRegistry(store)
	live, err := partners.NewLive(ctx, partners.LiveOptions{Store: store, Path: o.configPath, Base: base, SecretsDir: o.secretsDir, Logger: log, Registerer: reg, Identity: identity})
	if err != nil {
		return err
	}
	conns, err := connectors.NewLive(ctx, connectors.LiveOptions{Store: store, SecretsDir: o.secretsDir, FoldersDir: o.foldersDir, Logger: log, Registerer: reg, Identity: identity})
	if err != nil {
		return err
	}
	cfg := live.Current()
	log.Info("configuration loaded", zap.String("path", cfg.Path), zap.String("station", cfg.Station.AS2ID),
		zap.Int("partners", len(cfg.Partners)), zap.Int64("partners_revision", cfg.Revision))
	sp, err := spool.New(o.spoolDir, o.spoolMaxBytes)
	if err != nil {
		return fmt.Errorf("EDIHUB_SPOOL_DIR (-spool-dir) %q, point it at a writable directory (an emptyDir volume on Kubernetes): %w", o.spoolDir, err)
	}
	defer sp.Close()
	log.Info("spool ready", zap.String("dir", sp.Dir()), zap.Int64("max_bytes", o.spoolMaxBytes), zap.Int64("from_bytes", o.spoolFromBytes))
	defer applyHeapFloor(log, env.getenv, o.gcHeapFloorBytes).stop()
	r := &replica{log: log, reg: reg, store: store, cfg: live, live: live, connectors: conns, runtime: connectors.NewRuntime(conns.Current, o.secretsDir, o.foldersDir, log.Named("connectors")), o: o, report: rs, identity: identity, oidc: op, oidcName: opName, spool: sp}
	p, err := newParts(r)
	if err != nil {
		return err
	}
	defer p.sessionDB.Close()
	srvs, err := p.listen(r)
	if err != nil {
		return err
	}
	return p.run(ctx, r, srvs)
}

func newRegistry(store *postgres.Store) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		store.Collector(),
		buildInfo(),
	)
	return reg
}

// parts are a replica's running components.
type parts struct {
	as2     http.Handler
	console *console.Console
	// sessionDB is the console's handle on the database, closed after
	// the listeners stopped.
	sessionDB *sql.DB
	auth      *auth.Authenticator
	elector   *leader.Elector
	out       *outbound
	metrics   *httpserver.Metrics
	draining  atomic.Bool
}

func newParts(r *replica) (*parts, error) {
	p := &parts{metrics: httpserver.NewMetrics(r.reg)}
	var err error
	if p.auth, err = auth.New(auth.Options{Store: r.store, BootstrapToken: r.o.apiToken, Auditor: r.store, Logger: r.log,
		MaxPasswordChecks: r.o.maxPasswordChecks}); err != nil {
		return nil, err
	}
	if r.o.apiToken != "" {
		r.log.Warn("EDIHUB_API_TOKEN is set: it is a shared bootstrap token, and whoever holds it is an admin of the API; " +
			"create users and per-user tokens (edihub users add NAME -role admin, edihub users token NAME -name NAME) and unset it (docs/users.md)")
	}
	workers, err := buildWorkers(r)
	if err != nil {
		return nil, err
	}
	if p.elector, err = newElector(r, workers); err != nil {
		return nil, err
	}
	reports := &report.Service{Store: r.store, Location: r.report.loc, Now: time.Now, Builder: r.reportBuilder()}
	if p.out, err = newOutbound(r, reports); err != nil {
		return nil, err
	}
	if p.as2, err = newReceiver(r.log, r.reg, r.store, r.cfg, r.o, p.out.queue, r.spool); err != nil {
		return nil, err
	}
	if p.console, p.sessionDB, err = newConsole(r, p, reports); err != nil {
		return nil, err
	}
	return p, nil
}

// servers are the listeners of a replica, bound: as2 (with the API unless
// it has its own), api (or nil) and ops.
type servers struct{ as2, api, ops *httpserver.Server }

func (s servers) close() {
	for _, srv := range []*httpserver.Server{s.as2, s.api, s.ops} {
		if srv != nil {
			_ = srv.Close()
		}
	}
}

// listen binds every listener; when one cannot be bound, those bound
// already are closed again.
func (p *parts) listen(r *replica) (srvs servers, err error) {
	o := r.o
	defer func() {
		if err != nil {
			srvs.close()
		}
	}()
	router := func(opts httpserver.RouterOptions) http.Handler {
		opts.Logger, opts.Metrics, opts.Version, opts.MaxBodyBytes, opts.Authenticate = r.log, p.metrics, version(), o.maxBodyBytes, p.auth.API
		return httpserver.NewRouter(opts)
	}
	bind := func(name, addr string, h http.Handler, fix string) (*httpserver.Server, error) {
		srv, err := httpserver.Listen(httpserver.Options{Name: name, Addr: addr, Logger: r.log, DrainTimeout: o.drainTimeout, Handler: h})
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, fix)
		}
		return srv, nil
	}
	// The API and the console share the AS2 listener unless the API has
	// its own: then partners, who reach the AS2 listener, see neither.
	as2API, as2Console := p.out.api, http.Handler(p.console)
	if o.apiAddr != "" {
		as2API, as2Console = nil, nil
		if srvs.api, err = bind("api", o.apiAddr, router(httpserver.RouterOptions{API: p.out.api, Console: p.console, Listener: "api"}),
			"set EDIHUB_API_ADDR or -api-addr to a free address, or leave it empty to serve the API on the AS2 listener"); err != nil {
			return srvs, err
		}
	}
	if srvs.as2, err = bind("as2", o.httpAddr, router(httpserver.RouterOptions{AS2: p.as2, API: as2API, Console: as2Console}),
		"set EDIHUB_HTTP_ADDR or -http-addr to a free address"); err != nil {
		return srvs, err
	}
	srvs.ops, err = bind("ops", o.opsAddr, httpserver.NewOpsRouter(httpserver.OpsOptions{
		Logger:    r.log,
		Metrics:   p.metrics,
		Gatherer:  r.reg,
		Ready:     readiness(r.store, &p.draining),
		Leader:    leaderHandler(p.elector, r.cfg),
		Healthy:   p.elector.Healthy,
		Profiling: o.opsPprof,
	}), "set EDIHUB_OPS_ADDR or -ops-addr to a free address")
	return srvs, err
}

// run runs the parts until ctx ends. Shutdown order: the elector stops
// the workers, waits for them and releases the lease; only then do the
// HTTP servers drain. When workers do not stop in time, run returns
// leader.ErrWorkersHung at once, without draining: a follower takes the
// lease when it expires, and the hung worker must not act alongside it
// while HTTP drains (better a restart than a second leader; main exits).
func (p *parts) run(ctx context.Context, r *replica, srvs servers) error {
	log, o := r.log, r.o
	started := []zap.Field{zap.String("version", version()), zap.String("as2_addr", srvs.as2.Addr().String()), zap.String("ops_addr", srvs.ops.Addr().String())}
	if srvs.api != nil {
		started = append(started, zap.String("api_addr", srvs.api.Addr().String()))
	}
	log.Info("edihub started", started...)
	g, gctx := errgroup.WithContext(ctx)
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(gctx))
	defer stopHTTP()
	hung := make(chan error, 1)
	g.Go(func() error {
		defer stopHTTP()
		err := p.elector.Run(gctx)
		if errors.Is(err, leader.ErrWorkersHung) {
			hung <- err
			return err
		}
		if err == nil && ctx.Err() != nil && o.drainDelay > 0 {
			// Stopping on a signal: keep answering while endpoints and
			// load balancers catch up, with /readyz already failing.
			p.draining.Store(true)
			log.Info("serving on before draining", zap.Duration("delay", o.drainDelay))
			select {
			case <-time.After(o.drainDelay):
			case <-httpCtx.Done():
			}
		}
		return err
	})
	g.Go(func() error { return p.out.dispatcher.Run(gctx) })
	g.Go(func() error { return p.console.Run(gctx) })
	g.Go(func() error { return r.live.Run(gctx) })
	g.Go(func() error { return r.connectors.Run(gctx) })
	if r.oidc != nil {
		g.Go(func() error { return r.oidc.Run(gctx) })
	}
	if p.out.forwarder != nil {
		g.Go(func() error { return p.out.forwarder.Run(gctx) })
	}
	if p.out.deliveries != nil {
		g.Go(func() error { return p.out.deliveries.Run(gctx) })
	}
	for _, srv := range []*httpserver.Server{srvs.as2, srvs.api, srvs.ops} {
		if srv != nil {
			g.Go(func() error { return srv.Run(httpCtx) })
		}
	}
	err := waitOrHung(g.Wait, hung)
	if errors.Is(err, leader.ErrWorkersHung) {
		log.Error("exiting now without draining: better a restart than a second leader", zap.Error(err))
		return err
	}
	log.Info("edihub stopped")
	return err
}

// waitOrHung returns wait's error, or the first error from hung at once,
// leaving wait to the process's exit.
func waitOrHung(wait func() error, hung <-chan error) error {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-hung:
		return err
	case err := <-done:
		return err
	}
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
