// Package failover runs edihub's leadership scenarios against real parts:
// built `edihub serve` processes (test/cluster), a real kube-apiserver that
// each replica reaches through its own TCP proxy (test/netproxy), or the
// Postgres lease row, each replica then reaching PostgreSQL through its
// proxy, and a real PostgreSQL holding the fence.
//
// A Cluster records what happened: the replicas' JSON transition logs
// ("became leader", "lost leadership", "released", "stepped down") and the
// signals the harness sent, and, from the database, every opened term
// (leader_terms) and every accepted fenced write (leader_heartbeats). Check
// judges that history: no accepted write with a stale token, no interleaved
// terms, no overlapping terms.
//
// The scenario tests of this package and the failover report
// (test/failover/cmd/report, make failover-report) use it.
package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/test/cluster"
	"github.com/edihub/edihub/test/netproxy"
)

// Backend is a leader-election backend of edihub serve.
type Backend string

// The backends, as EDIHUB_LEADER_BACKEND spells them.
const (
	Kubernetes Backend = "kubernetes"
	Postgres   Backend = "postgres"
)

// Production timings (edihub's defaults); the scenarios run with them.
const (
	LeaseDuration     = 30 * time.Second
	RenewDeadline     = 10 * time.Second
	RetryPeriod       = 2 * time.Second
	WorkerStopTimeout = 5 * time.Second
)

// LeaseName is the lease (and fence) the replicas campaign for.
const LeaseName = "edihub-leader"

// Transition log messages of internal/leader.
const (
	MsgBecameLeader = "became leader"
	MsgLost         = "lost leadership"
	MsgReleased     = "released"
	MsgSteppedDown  = "stepped down"
	MsgCampaigning  = "campaigning"
	MsgStarted      = "edihub started"
	// The heartbeat worker's: a beat failed (not for a stale token), and
	// beats are accepted again.
	MsgBeatFailing   = "heartbeat not recorded; retrying"
	MsgBeatRecovered = "heartbeat recorded again"
)

// Pseudo-events the harness records for the signals it sends.
const (
	MsgKilled     = "harness: SIGKILL"
	MsgTerminated = "harness: SIGTERM"
	MsgFrozen     = "harness: SIGSTOP"
	MsgResumed    = "harness: SIGCONT"
	MsgCut        = "harness: cut"
	MsgRestored   = "harness: restored"
	MsgDBCut      = "harness: database cut"
	MsgDBRestored = "harness: database restored"
)

// BuildBinary builds edihub from the module containing the working
// directory into dir and returns the binary's path.
func BuildBinary(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "edihub")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/edihub")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/edihub:\n%s\n%w", out, err)
	}
	return bin, nil
}

// moduleRoot walks up from the working directory to the go.mod of
// github.com/edihub/edihub.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/edihub/edihub\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/edihub/edihub above %s", wd)
		}
		dir = parent
	}
}

// Options configure Start.
type Options struct {
	// Binary is the edihub binary (see BuildBinary).
	Binary string
	// Backend is the leader-election backend.
	Backend Backend
	// DatabaseURL is a migrated database (a postgres:// URL).
	DatabaseURL string
	// Kubeconfig is the edihub user's kubeconfig (Kubernetes backend).
	// Each replica gets a copy whose server is its own proxy.
	Kubeconfig string
	// Namespace of the Lease (Kubernetes backend).
	Namespace string
	// APIServer is the API server's host:port (Kubernetes backend).
	APIServer string
	// Replicas is the number of replicas; default 3.
	Replicas int
	// Dir receives the station, kubeconfigs; required.
	Dir string
	// Env is added to every replica's environment.
	Env []string
	// Config, if set, is the edihub.yaml the replicas run (its keys and
	// certificates beside it); default: a generated station with one
	// partner that is never sent to.
	Config string
	// Output, if set, receives every log line prefixed with the replica's
	// name.
	Output io.Writer
	// ProxyDatabase, on the Kubernetes backend, makes each replica reach
	// PostgreSQL through a proxy of its own too (Replica.DBProxies: one
	// per host of a libpq multi-host DatabaseURL), so a scenario can cut
	// one replica from the database alone.
	ProxyDatabase bool
}

// Cluster is a set of running replicas and what they did.
type Cluster struct {
	Backend Backend
	// Store reads the history; the replicas never use it.
	Store *postgres.Store

	c        *cluster.Cluster
	replicas []*Replica
	rec      *Recorder
	proxies  []*netproxy.Proxy
	dbProxy  []dbProxies // per replica (one per database host), or nil
}

// Replica is one edihub process slot: it keeps its name, addresses and
// proxy across restarts; its identity changes with every process.
type Replica struct {
	*cluster.Replica
	// Proxy carries this replica's traffic to the API server (Kubernetes
	// backend) or to PostgreSQL (Postgres backend); Cut partitions it.
	Proxy *netproxy.Proxy
	// DBProxies carry its traffic to PostgreSQL on the Kubernetes backend
	// with Options.ProxyDatabase, one per host of the database URL; nil
	// otherwise. CutDatabase partitions them.
	DBProxies dbProxies
	cl        *Cluster
}

// Start starts the replicas. It does not wait for readiness (WaitReady).
// Close stops everything it started, also after an error.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Binary == "" || o.DatabaseURL == "" || o.Dir == "" {
		return nil, errors.New("failover: Binary, DatabaseURL and Dir are required")
	}
	if o.Backend == Kubernetes && (o.Kubeconfig == "" || o.Namespace == "" || o.APIServer == "") {
		return nil, errors.New("failover: the Kubernetes backend needs Kubeconfig, Namespace and APIServer")
	}
	store, err := postgres.Open(ctx, o.DatabaseURL, postgres.Options{MaxConns: 4})
	if err != nil {
		return nil, fmt.Errorf("failover: open audit store: %w", err)
	}
	cl := &Cluster{Backend: o.Backend, Store: store, rec: newRecorder(o.Output)}
	defer func() {
		if err != nil {
			_ = cl.Close()
		}
	}()
	cfg := o.Config
	if cfg == "" {
		if cfg, err = writeStation(o.Dir); err != nil {
			return nil, err
		}
	}
	dbURL, err := url.Parse(o.DatabaseURL)
	if err != nil || dbURL.Host == "" {
		return nil, fmt.Errorf("failover: DatabaseURL must be a postgres:// URL with a host")
	}
	common := []string{
		"EDIHUB_LEADER_BACKEND=" + string(o.Backend),
		"EDIHUB_CONFIG=" + cfg,
		"EDIHUB_LOG_FORMAT=json",
		"EDIHUB_SHUTDOWN_TIMEOUT=10s",
		"EDIHUB_LEASE_NAME=" + LeaseName,
	}
	var specs []cluster.ReplicaSpec
	for i := 1; i <= o.Replicas; i++ {
		name := fmt.Sprintf("replica-%d", i)
		httpAddr, err := cluster.FreeAddr()
		if err != nil {
			return nil, err
		}
		opsAddr, err := cluster.FreeAddr()
		if err != nil {
			return nil, err
		}
		env := []string{"EDIHUB_IDENTITY=" + name}
		var p *netproxy.Proxy
		switch o.Backend {
		case Kubernetes:
			if p, err = netproxy.Start(o.APIServer); err != nil {
				return nil, err
			}
			kc, err := proxiedKubeconfig(o.Kubeconfig, filepath.Join(o.Dir, name+".kubeconfig"), p.Addr())
			if err != nil {
				p.Close()
				return nil, err
			}
			db := o.DatabaseURL
			var dp dbProxies
			if o.ProxyDatabase {
				if db, dp, err = proxyDatabase(dbURL); err != nil {
					p.Close()
					return nil, err
				}
			}
			cl.dbProxy = append(cl.dbProxy, dp)
			env = append(env, "EDIHUB_DATABASE_URL="+db, "EDIHUB_KUBECONFIG="+kc, "EDIHUB_LEASE_NAMESPACE="+o.Namespace)
		case Postgres:
			if p, err = netproxy.Start(dbURL.Host); err != nil {
				return nil, err
			}
			u := *dbURL
			u.Host = p.Addr()
			env = append(env, "EDIHUB_DATABASE_URL="+u.String())
		default:
			return nil, fmt.Errorf("failover: unknown backend %q", o.Backend)
		}
		cl.proxies = append(cl.proxies, p)
		specs = append(specs, cluster.ReplicaSpec{Name: name, HTTPAddr: httpAddr, OpsAddr: opsAddr, Env: env})
	}
	cl.c, err = cluster.Start(cluster.Options{
		Binary:   o.Binary,
		Env:      append(common, o.Env...),
		Replicas: specs,
		Output:   cl.rec,
	})
	if err != nil {
		return nil, err
	}
	for i, r := range cl.c.Replicas() {
		rep := &Replica{Replica: r, Proxy: cl.proxies[i], cl: cl}
		if i < len(cl.dbProxy) {
			rep.DBProxies = cl.dbProxy[i]
		}
		cl.replicas = append(cl.replicas, rep)
	}
	return cl, nil
}

// Close stops every replica (SIGCONT, SIGTERM, SIGKILL after 15 s), the
// proxies and the audit store. Their log readers have ended when it
// returns.
func (cl *Cluster) Close() error {
	var errs []error
	if cl.c != nil {
		// Stop may kill a replica that would not stop: that is an error of
		// the replica, reported by the scenario, not of the teardown.
		if err := cl.c.Stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range cl.proxies {
		p.Close()
	}
	for _, ps := range cl.dbProxy {
		ps.each(closeProxy)
	}
	cl.Store.Close()
	return errors.Join(errs...)
}

// Replicas returns the replicas in start order.
func (cl *Cluster) Replicas() []*Replica { return cl.replicas }

// Recorder is the cluster's log recorder.
func (cl *Cluster) Recorder() *Recorder { return cl.rec }

// WaitReady waits until every running replica answers /readyz.
func (cl *Cluster) WaitReady(ctx context.Context) error {
	for _, r := range cl.replicas {
		if r.PID() == 0 {
			continue
		}
		if err := r.WaitReady(ctx); err != nil {
			return fmt.Errorf("%s: %w", r.Spec.Name, err)
		}
	}
	return nil
}

// Replica returns the replica whose current or past process had identity
// id, or nil.
func (cl *Cluster) Replica(identity string) *Replica {
	name := cl.rec.ReplicaOf(identity)
	for _, r := range cl.replicas {
		if r.Spec.Name == name {
			return r
		}
	}
	return nil
}

// Kill sends SIGKILL, records it and waits for the process to exit; it
// returns the time the signal was sent.
func (r *Replica) Kill(ctx context.Context) (time.Time, error) {
	return r.signal(ctx, syscall.SIGKILL, MsgKilled, true)
}

// Terminate sends SIGTERM and records it; it does not wait for the exit.
func (r *Replica) Terminate(ctx context.Context) (time.Time, error) {
	return r.signal(ctx, syscall.SIGTERM, MsgTerminated, false)
}

// Freeze sends SIGSTOP and records it.
func (r *Replica) Freeze(ctx context.Context) (time.Time, error) {
	return r.signal(ctx, syscall.SIGSTOP, MsgFrozen, false)
}

// Resume sends SIGCONT and records it.
func (r *Replica) Resume(ctx context.Context) (time.Time, error) {
	return r.signal(ctx, syscall.SIGCONT, MsgResumed, false)
}

func (r *Replica) signal(ctx context.Context, sig syscall.Signal, msg string, wait bool) (time.Time, error) {
	id := r.Identity()
	at := time.Now()
	if err := r.Signal(sig); err != nil {
		return at, err
	}
	r.cl.rec.add(Event{Replica: r.Spec.Name, Identity: id, Time: at, Msg: msg})
	if wait {
		if err := r.Wait(ctx); ctx.Err() != nil {
			return at, err
		}
	}
	return at, nil
}

// record runs fn and records msg at the time it started.
func (r *Replica) record(msg string, fn func()) time.Time {
	at := time.Now()
	fn()
	r.cl.rec.add(Event{Replica: r.Spec.Name, Identity: r.Identity(), Time: at, Msg: msg})
	return at
}

// Cut partitions the replica (see netproxy.Proxy.Cut) and records it.
func (r *Replica) Cut() time.Time { return r.record(MsgCut, r.Proxy.Cut) }

// Restore ends a cut and records it.
func (r *Replica) Restore() time.Time { return r.record(MsgRestored, r.Proxy.Restore) }

// CutDatabase partitions the replica from PostgreSQL alone (DBProxies:
// every host) and records it.
func (r *Replica) CutDatabase() time.Time {
	return r.record(MsgDBCut, func() { r.DBProxies.each((*netproxy.Proxy).Cut) })
}

// RestoreDatabase ends a database cut and records it.
func (r *Replica) RestoreDatabase() time.Time {
	return r.record(MsgDBRestored, func() { r.DBProxies.each((*netproxy.Proxy).Restore) })
}

// dbProxies are one replica's proxies to PostgreSQL, one per host of the
// database URL.
type dbProxies []*netproxy.Proxy

// each calls fn on every proxy.
func (ps dbProxies) each(fn func(*netproxy.Proxy)) {
	for _, p := range ps {
		fn(p)
	}
}

func closeProxy(p *netproxy.Proxy) { p.Close() }

// proxyDatabase starts a proxy to each host of u (one, or several in a
// libpq multi-host URL) and returns u with the proxies' addresses in
// their place.
func proxyDatabase(u *url.URL) (string, dbProxies, error) {
	var ps dbProxies
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		p, err := netproxy.Start(h)
		if err != nil {
			ps.each(closeProxy)
			return "", nil, err
		}
		ps = append(ps, p)
		hosts = append(hosts, p.Addr())
	}
	v := *u
	v.Host = strings.Join(hosts, ",")
	return v.String(), ps, nil
}

// FreezeInFencedTransaction sends SIGSTOP to the leader r while it is
// inside a fenced transaction, so that the transaction stays open holding
// the fence row's share lock (issue 10, item 2). It slows r's database
// proxy (DBProxy, Options.ProxyDatabase) so each statement's round trip
// leaves r's transaction idle for a while, waits for such an idle
// transaction, freezes r, and checks that a transaction stays idle (it is
// r's, frozen); otherwise it resumes r and tries again. On the Postgres
// backend r's Proxy is the one slowed. It returns the
// time of the SIGSTOP that held.
func (cl *Cluster) FreezeInFencedTransaction(ctx context.Context, r *Replica) (time.Time, error) {
	const delay = 150 * time.Millisecond
	db := r.DBProxies
	if cl.Backend == Postgres {
		db = dbProxies{r.Proxy} // all its traffic goes to PostgreSQL
	}
	if len(db) == 0 {
		return time.Time{}, errors.New("failover: FreezeInFencedTransaction needs Options.ProxyDatabase on the Kubernetes backend")
	}
	setDelay := func(d time.Duration) { db.each(func(p *netproxy.Proxy) { p.SetDelay(d) }) }
	setDelay(delay)
	defer setDelay(0)
	fenced := func(min time.Duration) (bool, error) {
		its, err := cl.Store.IdleTransactions(ctx, min)
		if err != nil {
			return false, err
		}
		for _, it := range its {
			if strings.Contains(it.Query, "leader_fence") || strings.Contains(it.Query, "leader_heartbeats") {
				return true, nil
			}
		}
		return false, nil
	}
	for attempt := 1; attempt <= 20; attempt++ {
		for {
			ok, err := fenced(0)
			if err != nil {
				return time.Time{}, err
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		at, err := r.Freeze(ctx)
		if err != nil {
			return at, err
		}
		// A running leader's transaction is idle about two proxy delays
		// at a time; one idle for much longer belongs to the frozen one.
		select {
		case <-ctx.Done():
			return at, ctx.Err()
		case <-time.After(8 * delay):
		}
		ok, err := fenced(6 * delay)
		if err != nil || ok {
			return at, err
		}
		if _, err := r.Resume(ctx); err != nil {
			return at, err
		}
	}
	return time.Time{}, errors.New("could not freeze the leader inside a fenced transaction in 20 attempts")
}

// Identity is the current (or last) process's leader identity, from its
// log; "" before it logged one.
func (r *Replica) Identity() string { return r.cl.rec.IdentityOf(r.Spec.Name) }

// LeaderStatus is a replica's GET /leader answer.
type LeaderStatus struct {
	Identity     string    `json:"identity"`
	IsLeader     bool      `json:"is_leader"`
	Holder       string    `json:"holder"`
	FencingToken int64     `json:"fencing_token"`
	Backend      string    `json:"backend"`
	LeaseName    string    `json:"lease_name"`
	Since        time.Time `json:"since"`
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// Leader returns the replica's GET /leader.
func (r *Replica) Leader(ctx context.Context) (LeaderStatus, error) {
	var st LeaderStatus
	b, err := r.get(ctx, "http://"+r.Spec.OpsAddr+"/leader")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s /leader: %w", r.Spec.Name, err)
	}
	return st, nil
}

// Get fetches path from the replica's AS2/API listener ("as2") or ops
// listener ("ops") and returns the body of a 200 answer.
func (r *Replica) Get(ctx context.Context, listener, path string) ([]byte, error) {
	addr := r.Spec.OpsAddr
	if listener == "as2" {
		addr = r.Spec.HTTPAddr
	}
	return r.get(ctx, "http://"+addr+path)
}

func (r *Replica) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Spec.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: GET %s: %w", r.Spec.Name, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: GET %s: %s", r.Spec.Name, u, resp.Status)
	}
	return b, nil
}

// Metric returns the value of the sample series (a metric name with its
// labels as exposed, e.g. `edihub_worker_running{worker="heartbeat"}`)
// from the replica's /metrics.
func (r *Replica) Metric(ctx context.Context, series string) (float64, error) {
	b, err := r.get(ctx, "http://"+r.Spec.OpsAddr+"/metrics")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no series %s in /metrics", r.Spec.Name, series)
}

// Leaders returns the running replicas whose /leader says is_leader; a
// replica that does not answer is left out (and reported in err).
func (cl *Cluster) Leaders(ctx context.Context) (leaders []*Replica, err error) {
	var errs []error
	for _, r := range cl.replicas {
		if r.PID() == 0 {
			continue
		}
		st, err := r.Leader(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.IsLeader {
			leaders = append(leaders, r)
		}
	}
	return leaders, errors.Join(errs...)
}

// WaitEvent waits for the first event at or after since that matches.
func (cl *Cluster) WaitEvent(ctx context.Context, since time.Time, match func(Event) bool) (Event, error) {
	return cl.rec.Wait(ctx, since, match)
}

// WaitNewLeader waits for a "became leader" logged at or after since by a
// replica other than the excluded ones, and returns the event and replica.
func (cl *Cluster) WaitNewLeader(ctx context.Context, since time.Time, exclude ...*Replica) (Event, *Replica, error) {
	ev, err := cl.rec.Wait(ctx, since, func(e Event) bool {
		if e.Msg != MsgBecameLeader {
			return false
		}
		for _, x := range exclude {
			if x != nil && e.Replica == x.Spec.Name {
				return false
			}
		}
		return true
	})
	if err != nil {
		return ev, nil, fmt.Errorf("no new leader: %w", err)
	}
	return ev, cl.Replica(ev.Identity), nil
}

// WaitTermEnd waits for replica r to log, at or after since, the end of
// its term token: "lost leadership" or "released the lease".
func (cl *Cluster) WaitTermEnd(ctx context.Context, since time.Time, r *Replica, token int64) (Event, error) {
	return cl.rec.Wait(ctx, since, func(e Event) bool {
		return e.Replica == r.Spec.Name && e.Token == token && (e.Msg == MsgLost || e.Msg == MsgReleased)
	})
}

// Takeover is a new leader's term: its "became leader" event, the replica
// and the term's first accepted heartbeat.
type Takeover struct {
	Became Event
	Leader *Replica
	Beat   Beat
}

// WaitTakeover waits for a "became leader" logged at or after since by a
// replica other than the excluded ones, then for that term's first
// accepted heartbeat: the moment the successor really leads.
func (cl *Cluster) WaitTakeover(ctx context.Context, since time.Time, exclude ...*Replica) (Takeover, error) {
	became, r, err := cl.WaitNewLeader(ctx, since, exclude...)
	if err != nil {
		return Takeover{}, err
	}
	beat, err := cl.FirstBeat(ctx, became.Token)
	if err != nil {
		return Takeover{}, fmt.Errorf("%s became leader (token %d) but no heartbeat of its term was accepted: %w", r.Spec.Name, became.Token, err)
	}
	return Takeover{Became: became, Leader: r, Beat: beat}, nil
}

// FirstBeat waits until the term token has an accepted heartbeat and
// returns the first one.
func (cl *Cluster) FirstBeat(ctx context.Context, token int64) (postgres.Beat, error) {
	for {
		beats, err := cl.Store.Heartbeats(ctx, LeaseName)
		if err == nil {
			for _, b := range beats {
				if b.Token == token {
					return b, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return postgres.Beat{}, fmt.Errorf("no heartbeat of term %d (last read: %v): %w", token, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// History reads the terms and accepted heartbeats from the database and
// joins the terms with their log intervals.
func (cl *Cluster) History(ctx context.Context) (History, error) {
	dbTerms, err := cl.Store.Terms(ctx, LeaseName)
	if err != nil {
		return History{}, err
	}
	beats, err := cl.Store.Heartbeats(ctx, LeaseName)
	if err != nil {
		return History{}, err
	}
	return History{Terms: cl.rec.Terms(dbTerms), Beats: beats}, nil
}

// proxiedKubeconfig copies the kubeconfig src to dst with every cluster's
// server replaced by https://proxy. The API server's certificate names
// 127.0.0.1, so TLS holds through the TCP proxy.
func proxiedKubeconfig(src, dst, proxy string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return "", fmt.Errorf("failover: read kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + proxy
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return "", fmt.Errorf("failover: write kubeconfig: %w", err)
	}
	return dst, nil
}

// writeStation writes a station key, certificate and config into dir.
func writeStation(dir string) (string, error) {
	id, err := devpki.New("EDIHUB", devpki.Options{})
	if err != nil {
		return "", err
	}
	crt := id.CertPEM()
	files := map[string][]byte{
		"station.key": id.KeyPEM(),
		"station.crt": crt,
		"partner.crt": crt,
		"edihub.yaml": []byte(`station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
partners:
  - as2_id: "ACME CORP"
    url: http://127.0.0.1:1/as2
    certificate: partner.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: sync
    mdn_signed: true
`),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "edihub.yaml"), nil
}

// Recorder collects the replicas' log lines (as cluster's Output) and the
// harness's signal events.
type Recorder struct {
	out io.Writer

	mu       sync.Mutex
	events   []Event
	lines    []string
	identity map[string]string // replica name → current identity
	replica  map[string]string // identity → replica name
	changed  chan struct{}     // closed and replaced at every event
}

// Event is one transition (or harness action) of one replica.
type Event struct {
	Replica  string
	Identity string
	Time     time.Time
	Msg      string
	Token    int64
	Reason   string
}

func newRecorder(out io.Writer) *Recorder {
	return &Recorder{out: out, identity: map[string]string{}, replica: map[string]string{}, changed: make(chan struct{})}
}

// Write takes "name | line\n" writes from cluster, one line each.
func (r *Recorder) Write(p []byte) (int, error) {
	if r.out != nil {
		_, _ = r.out.Write(p)
	}
	for line := range strings.Lines(string(p)) {
		line = strings.TrimRight(line, "\n")
		name, rest, ok := strings.Cut(line, " | ")
		if !ok {
			continue
		}
		r.mu.Lock()
		r.lines = append(r.lines, line)
		r.mu.Unlock()
		var e struct {
			Time     string `json:"time"`
			Msg      string `json:"msg"`
			Identity string `json:"identity"`
			Token    int64  `json:"token"`
			Reason   string `json:"reason"`
		}
		if json.Unmarshal([]byte(rest), &e) != nil {
			continue
		}
		switch e.Msg {
		case MsgBecameLeader, MsgLost, MsgReleased, MsgSteppedDown, MsgCampaigning, MsgStarted, MsgBeatFailing, MsgBeatRecovered:
		default:
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, e.Time)
		if err != nil {
			continue
		}
		r.mu.Lock()
		if e.Msg == MsgCampaigning {
			r.identity[name], r.replica[e.Identity] = e.Identity, name
		}
		if e.Identity == "" && e.Msg != MsgStarted {
			e.Identity = r.identity[name] // the heartbeat's lines carry none
		}
		r.mu.Unlock()
		r.add(Event{Replica: name, Identity: e.Identity, Time: at, Msg: e.Msg, Token: e.Token, Reason: e.Reason})
	}
	return len(p), nil
}

func (r *Recorder) add(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Events returns every event so far, in arrival order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Lines returns every log line so far, each prefixed with its replica.
func (r *Recorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// IdentityOf returns the replica's current identity.
func (r *Recorder) IdentityOf(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.identity[name]
}

// ReplicaOf returns the name of the replica that had identity id.
func (r *Recorder) ReplicaOf(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replica[id]
}

// Wait waits for the first event stamped at or after since that matches.
func (r *Recorder) Wait(ctx context.Context, since time.Time, match func(Event) bool) (Event, error) {
	seen := 0
	for {
		r.mu.Lock()
		evs, ch := r.events[seen:], r.changed
		seen = len(r.events)
		r.mu.Unlock()
		for _, e := range evs {
			if !e.Time.Before(since) && match(e) {
				return e, nil
			}
		}
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-ch:
		}
	}
}

// Terms joins the database's terms with the log: each term's start is its
// "became leader" line, its stop the "lost leadership" or "released" line
// of the same identity and token, or the SIGKILL of its process.
func (r *Recorder) Terms(db []hub.Term) []Term {
	evs := r.Events()
	terms := make([]Term, 0, len(db))
	for _, d := range db {
		t := Term{Identity: d.Holder, Token: d.Token, OpenedAt: d.OpenedAt, Replica: r.ReplicaOf(d.Holder)}
		for _, e := range evs {
			if e.Identity != d.Holder {
				continue
			}
			switch {
			case e.Msg == MsgBecameLeader && e.Token == d.Token:
				t.Start = e.Time
			case t.Start.IsZero() || !t.Stop.IsZero():
			case (e.Msg == MsgLost || e.Msg == MsgReleased) && e.Token == d.Token, e.Msg == MsgKilled:
				t.Stop, t.StopReason = e.Time, e.Msg
				if e.Reason != "" {
					t.StopReason += ": " + e.Reason
				}
			}
		}
		terms = append(terms, t)
	}
	return terms
}
