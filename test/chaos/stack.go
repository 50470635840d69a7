package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgserver"
	"github.com/edihub/edihub/test/cluster"
	"github.com/edihub/edihub/test/controlplane"
	"github.com/edihub/edihub/test/failover"
)

// The stations' names and the shared API token of the run.
const (
	hubID     = "EDIHUB"
	partnerID = "PARTNER"
	apiToken  = "chaos-api-token"
	// seedHolder opened the seeded first term (see seedFirstTerm).
	seedHolder = "chaos-seed"
)

// frontTryTimeout is how long the hub's front door waits for a replica's
// answer before it sends the request to the next one: well under the
// partner's own timeout (5 s, stationYAML), so that the retry's answer
// still reaches it.
const frontTryTimeout = 2 * time.Second

// stack is every part a run starts; close stops them all, in reverse.
type stack struct {
	o   Options
	dir string

	cp           *controlplane.ControlPlane
	db           *haDB
	partnerPG    *pgserver.Server
	mail         *mailSink
	lb           *cluster.Balancer
	hubFront     *front // partner → hub: documents and async MDNs
	partnerFront *front // hub → partner: documents
	hub          *failover.Cluster
	partner      *cluster.Cluster
	partnerLog   *lineBuffer
	hubDB        *pgxpool.Pool // through the front address
	partnerDB    *pgxpool.Pool
	reportAt     time.Time    // when the report of yesterday is due
	standbyDone  <-chan error // the standby rebuilt after a failover

	mu      sync.Mutex
	closers []func()
}

func (s *stack) onClose(f func()) {
	s.mu.Lock()
	s.closers = append(s.closers, f)
	s.mu.Unlock()
}

// close stops everything started, last first.
func (s *stack) close() {
	s.mu.Lock()
	cs := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// start brings the stack up; on error what started is stopped.
func start(ctx context.Context, o Options) (_ *stack, err error) {
	s := &stack{o: o}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// The postgres user must reach the data directories when running as
	// root: a world-searchable directory.
	if s.dir, err = os.MkdirTemp("", "edihub-chaos-"); err != nil {
		return nil, err
	}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return nil, err
	}
	if !o.KeepDir {
		s.onClose(func() { _ = os.RemoveAll(s.dir) })
	}
	o.Logf("run directory %s", s.dir)
	if err := s.startDatabases(ctx); err != nil {
		return nil, err
	}
	if s.cp, err = controlplane.Start(ctx, filepath.Join(s.dir, "controlplane"), controlplane.Options{}); err != nil {
		return nil, err
	}
	s.onClose(func() { _ = s.cp.Close() })
	if s.mail, err = startMailSink(); err != nil {
		return nil, err
	}
	s.onClose(s.mail.Close)
	if err := s.startFronts(); err != nil {
		return nil, err
	}
	cfg, err := s.writeStations()
	if err != nil {
		return nil, err
	}
	if err := s.startPartner(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.startHub(ctx, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// startDatabases starts the hub's HA pair and the partner's server,
// migrates both and opens the checkers' pools.
func (s *stack) startDatabases(ctx context.Context) (err error) {
	if s.db, err = startHA(ctx, filepath.Join(s.dir, "hub-db"), s.o.Async, s.o.MultiHost, s.o.Logf); err != nil {
		return err
	}
	s.onClose(s.db.Close)
	if s.partnerPG, err = pgserver.New(pgserver.Options{Dir: filepath.Join(s.dir, "partner-db")}); err != nil {
		return err
	}
	if err := s.partnerPG.Start(ctx); err != nil {
		return err
	}
	s.onClose(func() { _ = s.partnerPG.Stop() })
	for _, u := range []string{s.db.URL(), s.partnerPG.URL("postgres")} {
		if err := migrate(ctx, u); err != nil {
			return err
		}
	}
	if s.hubDB, err = pgxpool.New(ctx, s.db.URL()); err != nil {
		return err
	}
	s.onClose(s.hubDB.Close)
	if s.partnerDB, err = pgxpool.New(ctx, s.partnerPG.URL("postgres")); err != nil {
		return err
	}
	s.onClose(s.partnerDB.Close)
	return seedYesterday(ctx, s.hubDB)
}

func migrate(ctx context.Context, u string) error {
	st, err := postgres.Open(ctx, u, postgres.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = st.Migrate(ctx)
	return err
}

// seedYesterday records a leadership term opened just after yesterday's
// midnight (UTC), as an installation running since yesterday would have:
// the report worker reports only days that ended after the first term, so
// yesterday's report falls due at the report time set inside the run, and
// no day before it. It also records yesterday's traffic, 24 documents
// received from the partner (two of them refused), so that the report
// mail has figures for the recount to check.
func seedYesterday(ctx context.Context, db *pgxpool.Pool) error {
	y := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	if _, err := db.Exec(ctx, `INSERT INTO leader_terms (lease, token, holder, opened_at) VALUES ($1, 1, $2, $3)`,
		failover.LeaseName, seedHolder, y.Add(time.Second)); err != nil {
		return fmt.Errorf("seed the first term: %w", err)
	}
	_, err := db.Exec(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, payload_size,
                      signed, encrypted, disposition, attempts, created_at, updated_at, completed_at)
SELECT 'inbound', $1::text, $1::text, $2::text, format('<yesterday-%s@%s>', i, $1::text),
       CASE WHEN i % 12 = 5 THEN 'error' ELSE 'processed' END, 'application/EDI-X12', 1000 + 10 * i,
       true, true,
       CASE WHEN i % 12 = 5 THEN 'automatic-action/MDN-sent-automatically; processed/Error: decryption-failed'
            ELSE 'automatic-action/MDN-sent-automatically; processed' END,
       1, $3::timestamptz + make_interval(mins => 50 * i), $3::timestamptz + make_interval(mins => 50 * i),
       $3::timestamptz + make_interval(mins => 50 * i)
  FROM generate_series(1, 24) AS i`, partnerID, hubID, y)
	if err != nil {
		return fmt.Errorf("seed yesterday's traffic: %w", err)
	}
	return nil
}

// startFronts starts the balancer and the two recording fronts.
func (s *stack) startFronts() (err error) {
	if s.lb, err = cluster.StartBalancer("127.0.0.1:0"); err != nil {
		return err
	}
	s.onClose(func() { _ = s.lb.Close() })
	if s.hubFront, err = startFront(s.lb); err != nil {
		return err
	}
	s.onClose(func() { _ = s.hubFront.Close() })
	return nil
}

// stationFiles are the paths startPartner and startHub need.
type stationFiles struct {
	dir                     string
	partnerHTTP, partnerOps string
}

// writeStations writes both stations' keys and configs: the hub asks the
// partner for signed async MDNs, posted to the hub's front; the partner
// sends to the hub's front and asks for signed sync MDNs.
func (s *stack) writeStations() (stationFiles, error) {
	f := stationFiles{dir: filepath.Join(s.dir, "stations")}
	var err error
	if f.partnerHTTP, err = cluster.FreeAddr(); err != nil {
		return f, err
	}
	if f.partnerOps, err = cluster.FreeAddr(); err != nil {
		return f, err
	}
	u := &url.URL{Scheme: "http", Host: f.partnerHTTP}
	if s.partnerFront, err = startFront(httputil.NewSingleHostReverseProxy(u)); err != nil {
		return f, err
	}
	s.onClose(func() { _ = s.partnerFront.Close() })
	hub, err := devpki.New(hubID, devpki.Options{})
	if err != nil {
		return f, err
	}
	partner, err := devpki.New(partnerID, devpki.Options{})
	if err != nil {
		return f, err
	}
	files := map[string][]byte{
		"hub.key": hub.KeyPEM(), "hub.crt": hub.CertPEM(),
		"partner.key": partner.KeyPEM(), "partner.crt": partner.CertPEM(),
		"hub.yaml":     fmt.Appendf(nil, stationYAML, hubID, "hub", s.hubFront.URL(), partnerID, s.partnerFront.URL(), "partner", "async"),
		"partner.yaml": fmt.Appendf(nil, stationYAML, partnerID, "partner", s.partnerFront.URL(), hubID, s.hubFront.URL(), "hub", "sync"),
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return f, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(f.dir, name), data, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// stationYAML: station id, key base, its async MDN URL; the partner's id,
// URL, certificate base and MDN mode.
const stationYAML = `station: {as2_id: %q, private_key: %[2]s.key, certificate: %[2]s.crt, async_mdn_url: %q}
partners:
  - as2_id: %q
    url: %q
    certificate: %s.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: %s
    mdn_signed: true
    timeout: 5s
    allow_private_mdn_targets: true # everything runs on 127.0.0.1
`

// startPartner starts the partner station: one edihub process, its own
// database, never faulted.
func (s *stack) startPartner(ctx context.Context, f stationFiles) (err error) {
	s.partnerLog = &lineBuffer{}
	s.partner, err = cluster.Start(cluster.Options{
		Binary: s.o.Binary,
		Env: []string{
			"EDIHUB_DATABASE_URL=" + s.partnerPG.URL("postgres"),
			"EDIHUB_CONFIG=" + filepath.Join(f.dir, "partner.yaml"),
			"EDIHUB_LOG_FORMAT=json",
			"EDIHUB_LOG_LEVEL=warn",
			"EDIHUB_SHUTDOWN_TIMEOUT=10s",
			"EDIHUB_LEADER_BACKEND=postgres",
			"EDIHUB_IDENTITY=partner",
			"EDIHUB_API_TOKEN=" + apiToken,
			"EDIHUB_RETRY_BACKOFF=200ms",
			"EDIHUB_RETRY_BACKOFF_MAX=2s",
		},
		Replicas: []cluster.ReplicaSpec{{Name: "partner", HTTPAddr: f.partnerHTTP, OpsAddr: f.partnerOps}},
		Output:   s.partnerLog,
	})
	if err != nil {
		return fmt.Errorf("start the partner station: %w", err)
	}
	s.onClose(func() { _ = s.partner.Stop(15 * time.Second) })
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.partner.Replicas()[0].WaitReady(wctx)
}

// startHub starts the hub's three replicas (Kubernetes backend, each
// behind its own proxies to the API server and to the database) behind
// the balancer, with the report due at the next minute at least a minute
// from now.
func (s *stack) startHub(ctx context.Context, f stationFiles) (err error) {
	s.reportAt = time.Now().UTC().Add(time.Minute + 59*time.Second).Truncate(time.Minute)
	if s.o.Mode == Long {
		s.reportAt = time.Now().UTC().Add(3*time.Minute + 59*time.Second).Truncate(time.Minute)
	}
	env := append([]string{
		"EDIHUB_API_TOKEN=" + apiToken,
		"EDIHUB_SMTP_URL=" + s.mail.URL(),
		"EDIHUB_REPORT_FROM=edihub <edihub@localhost>",
		"EDIHUB_REPORT_TO=managers@localhost",
		"EDIHUB_REPORT_TZ=UTC",
		"EDIHUB_REPORT_AT=" + s.reportAt.Format("15:04"),
	}, s.o.timings()...)
	s.hub, err = failover.Start(ctx, failover.Options{
		Binary: s.o.Binary, Backend: failover.Kubernetes, DatabaseURL: s.db.URL(),
		Kubeconfig: s.cp.EdihubKubeconfig, Namespace: s.cp.Namespace,
		APIServer: strings.TrimPrefix(s.cp.URL, "https://"),
		Dir:       f.dir, Env: env, Config: filepath.Join(f.dir, "hub.yaml"),
		ProxyDatabase: true,
	})
	if err != nil {
		return err
	}
	s.onClose(func() { _ = s.hub.Close() })
	var backends []string
	ops := map[string]string{}
	for _, r := range s.hub.Replicas() {
		backends = append(backends, r.Spec.HTTPAddr)
		ops[r.Spec.HTTPAddr] = r.Spec.OpsAddr
	}
	s.lb.SetBackends(backends...)
	// The front door of a Kubernetes Service with readiness probes behind
	// an ingress that retries (docs/operations.md, "The front door"): a
	// replica whose /readyz fails twice in a row (checked every second)
	// leaves the rotation, and a 503 or no answer within frontTryTimeout
	// goes to the next replica.
	s.lb.Watch(func(be string) string { return "http://" + ops[be] + "/readyz" }, time.Second, time.Second, 2, frontTryTimeout)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.hub.WaitReady(wctx)
}

// lineBuffer keeps the last lines written to it.
type lineBuffer struct {
	mu    sync.Mutex
	lines []string
}

var _ io.Writer = (*lineBuffer)(nil)

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for line := range strings.Lines(string(p)) {
		b.lines = append(b.lines, strings.TrimRight(line, "\n"))
	}
	if len(b.lines) > 2000 {
		b.lines = b.lines[len(b.lines)-1000:]
	}
	return len(p), nil
}

func (b *lineBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.lines
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
