// Command localstack is the local development stack behind "make run": a
// private PostgreSQL, a development station with a demo partner station,
// three edihub replicas behind a round-robin balancer on fixed loopback
// ports, with their logs interleaved and prefixed, and Mailpit, an SMTP
// catcher whose web UI shows the end-of-day report mails (mail.go). Ctrl-C
// stops everything it started.
//
// State lives in .local/ (git-ignored) and is reused across runs: the
// database and the control plane's etcd keep their data, and the keys are
// generated once.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgserver"
	"github.com/edihub/edihub/test/cluster"
	"github.com/edihub/edihub/test/controlplane"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "localstack:", err)
		os.Exit(1)
	}
}

type options struct {
	binary   string
	state    string
	replicas int
	pgPort   int
	backend  string
	demoMode string
	// portOffset shifts every fixed port of the stack (replicas, demo
	// station, PostgreSQL, Mailpit), so a second stack (the test of make
	// run) can run beside a developer's.
	portOffset int
}

// ports are the stack's loopback ports for o.
type ports struct {
	o options
}

func (p ports) balancer() string         { return fmt.Sprintf("127.0.0.1:%d", 8080+p.o.portOffset) }
func (p ports) replicaHTTP(i int) string { return fmt.Sprintf("127.0.0.1:%d", 8080+p.o.portOffset+i) }
func (p ports) replicaOps(i int) string  { return fmt.Sprintf("127.0.0.1:%d", 9090+p.o.portOffset+i) }
func (p ports) demoHTTP() string         { return fmt.Sprintf("127.0.0.1:%d", 8090+p.o.portOffset) }
func (p ports) demoOps() string          { return fmt.Sprintf("127.0.0.1:%d", 9190+p.o.portOffset) }
func (p ports) postgres() int {
	if p.o.pgPort != 0 {
		return p.o.pgPort
	}
	return 55432 + p.o.portOffset
}

func run(ctx context.Context) error {
	var o options
	flag.StringVar(&o.binary, "binary", "bin/edihub", "edihub binary to run")
	flag.StringVar(&o.state, "state", ".local", "directory for the stack's state (database, keys, config)")
	flag.IntVar(&o.replicas, "replicas", 3, "number of replicas (AS2/API on 127.0.0.1:8081.., ops on 127.0.0.1:9091..)")
	flag.IntVar(&o.pgPort, "pg-port", 0, "port of the private PostgreSQL on 127.0.0.1 (default 55432 + port-offset)")
	flag.IntVar(&o.portOffset, "port-offset", 0, "added to every port of the stack (8080, 8081.., 9091.., 8090, 9190, 55432, Mailpit's 1025 and 8025), to run a second stack beside the first (give it its own -state too)")
	backend := os.Getenv("EDIHUB_LEADER_BACKEND")
	if backend == "" {
		backend = "kubernetes"
	}
	flag.StringVar(&o.demoMode, "demo-mode", modeNormal, "what the demo partner does with each document: normal (delivered on a signed async MDN), negative (a negative MDN: the message fails), silent (no MDN: the message becomes overdue) or refuse (HTTP 403: the message fails at once); change it while the stack runs with curl -X PUT --data MODE <demo address>/demo-mode")
	flag.StringVar(&o.backend, "leader-backend", backend, "leader election backend: kubernetes (a local kube-apiserver and etcd) or postgres (default: $EDIHUB_LEADER_BACKEND, else kubernetes)")
	flag.Parse()
	if o.backend != "kubernetes" && o.backend != "postgres" {
		return fmt.Errorf("-leader-backend (EDIHUB_LEADER_BACKEND) must be kubernetes or postgres, got %q", o.backend)
	}

	if err := checkDemoMode(o.demoMode); err != nil {
		return fmt.Errorf("-demo-mode: %w", err)
	}
	if o.portOffset < 0 || o.portOffset > 50000 {
		return fmt.Errorf("-port-offset must be between 0 and 50000, got %d", o.portOffset)
	}
	pt := ports{o}
	demoSpec := cluster.ReplicaSpec{Name: "demo", HTTPAddr: pt.demoHTTP(), OpsAddr: pt.demoOps()}
	state, err := filepath.Abs(o.state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	var specs []cluster.ReplicaSpec
	var backends []string
	addrs := []string{pt.balancer()}
	for i := 1; i <= o.replicas; i++ {
		s := cluster.ReplicaSpec{
			Name:     fmt.Sprintf("replica-%d", i),
			HTTPAddr: pt.replicaHTTP(i),
			OpsAddr:  pt.replicaOps(i),
			Env:      []string{fmt.Sprintf("EDIHUB_IDENTITY=replica-%d", i)},
		}
		specs = append(specs, s)
		backends = append(backends, s.HTTPAddr)
		addrs = append(addrs, s.HTTPAddr, s.OpsAddr)
	}
	if err := cluster.CheckFree(addrs...); err != nil {
		return fmt.Errorf("%w: another stack may be running; stop it, or free these ports", err)
	}

	dbURL, demoURL := os.Getenv("EDIHUB_DATABASE_URL"), ""
	if dbURL == "" {
		if err := cluster.CheckFree(demoSpec.HTTPAddr, demoSpec.OpsAddr); err != nil {
			return fmt.Errorf("%w: the demo partner station wants these ports; free them", err)
		}
		pg, urls, err := startPostgres(ctx, filepath.Join(state, "postgres"), pt.postgres(), "edihub", "edihub_demo")
		if err != nil {
			return err
		}
		defer func() {
			say("stopping PostgreSQL")
			_ = pg.Stop()
		}()
		dbURL, demoURL = urls[0], urls[1]
	} else {
		say("using the database at EDIHUB_DATABASE_URL (no demo partner station: it needs a database of its own)")
	}

	// The hub's public AS2 URL: a round-robin balancer in front of the
	// replicas, as in production, so partners' messages and async MDNs
	// reach every replica and keep coming while one is down.
	lb, err := cluster.StartBalancer(pt.balancer(), backends...)
	if err != nil {
		return fmt.Errorf("balancer: %w", err)
	}
	defer lb.Close()
	cfgPath, err := ensureStation(state, "http://"+pt.demoHTTP()+"/as2", lb.URL()+"/as2")
	if err != nil {
		return err
	}
	token, err := ensureToken(filepath.Join(state, "api-token"))
	if err != nil {
		return err
	}

	leaderEnv := []string{"EDIHUB_LEADER_BACKEND=" + o.backend}
	if o.backend == "kubernetes" {
		// etcd's data is kept across runs, as PostgreSQL's is: the
		// fence a term left in PostgreSQL is a resourceVersion of this
		// etcd, and only a Lease written after it (a higher revision)
		// may open the next term. A fresh etcd would start its
		// revisions below the fence and refuse every term until they
		// caught up.
		dir := filepath.Join(state, "controlplane")
		say("starting kube-apiserver and etcd in %s", dir)
		cp, err := controlplane.Start(ctx, dir, controlplane.Options{KeepData: true, Logf: func(f string, a ...any) { say(f, a...) }})
		if err != nil {
			return fmt.Errorf("%w (or run with EDIHUB_LEADER_BACKEND=postgres)", err)
		}
		defer func() {
			say("stopping the control plane")
			_ = cp.Close()
		}()
		if err := releaseStaleLease(ctx, cp, leaseName); err != nil {
			return err
		}
		leaderEnv = append(leaderEnv, "EDIHUB_KUBECONFIG="+cp.EdihubKubeconfig, "EDIHUB_LEASE_NAMESPACE="+cp.Namespace)
		say("leader election on Lease %s/edihub-leader (kubectl --kubeconfig %s get lease -n %s)", cp.Namespace, cp.AdminKubeconfig, cp.Namespace)
	} else {
		say("leader election on the lease row in PostgreSQL")
	}

	say("applying migrations")
	for _, url := range []string{dbURL, demoURL} {
		if url == "" {
			continue
		}
		mig := exec.CommandContext(ctx, o.binary, "migrate")
		mig.Env = append(os.Environ(), "EDIHUB_DATABASE_URL="+url)
		mig.Stdout, mig.Stderr = os.Stdout, os.Stderr
		if err := mig.Run(); err != nil {
			return fmt.Errorf("edihub migrate: %w", err)
		}
	}
	adminPassword, err := ensureAdmin(ctx, o.binary, state, dbURL)
	if err != nil {
		return err
	}
	if demoURL != "" {
		// The demo partner: a second station with its own database, the
		// hub's configured partner, so documents sent to DEMO PARTNER are
		// delivered and answered with a signed asynchronous MDN, which the
		// hub's leader applies (the MDN poller). It listens on a private
		// port behind its front on the demo address, which applies
		// -demo-mode.
		backendAddr, err := cluster.FreeAddr()
		if err != nil {
			return err
		}
		front, err := startDemoFront(pt.demoHTTP(), backendAddr, o.demoMode)
		if err != nil {
			return err
		}
		defer front.Close()
		demoSpec.HTTPAddr = backendAddr
		demo, err := cluster.Start(cluster.Options{
			Binary: o.binary,
			Env: []string{
				"EDIHUB_DATABASE_URL=" + demoURL,
				"EDIHUB_CONFIG=" + filepath.Join(state, "demo", "edihub.yaml"),
				"EDIHUB_LOG_FORMAT=console",
				"EDIHUB_LOG_LEVEL=warn",
				"EDIHUB_API_TOKEN=" + token,
				"EDIHUB_SHUTDOWN_TIMEOUT=10s",
				"EDIHUB_LEADER_BACKEND=postgres",
			},
			Replicas: []cluster.ReplicaSpec{demoSpec},
			Output:   os.Stdout,
		})
		if err != nil {
			return err
		}
		defer func() { _ = demo.Stop(7 * time.Second) }()
	}

	mailEnv, stopMail := startMailpit(ctx, state, o.portOffset)
	defer stopMail()

	// A replica that exits (kill -9 of the leader, to see a takeover) is
	// started again after a short back-off, as Kubernetes would.
	restarts := newRestarter(ctx)
	c, err := cluster.Start(cluster.Options{
		Binary: o.binary,
		Env: append(append([]string{
			"EDIHUB_DATABASE_URL=" + dbURL,
			"EDIHUB_CONFIG=" + cfgPath,
			"EDIHUB_LOG_FORMAT=console",
			"EDIHUB_API_TOKEN=" + token,
			"EDIHUB_SHUTDOWN_TIMEOUT=10s",
			// The demo partner's MDN comes within a second; in its
			// silent mode none comes, and the message is overdue after
			// two minutes rather than the default hour.
			"EDIHUB_ASYNC_MDN_TIMEOUT=2m",
		}, leaderEnv...), mailEnv...),
		Replicas: specs,
		Output:   os.Stdout,
		OnExit:   restarts.Exited,
	})
	if err != nil {
		restarts.Stop()
		return err
	}
	for _, r := range c.Replicas() {
		restarts.Started(r)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	for _, r := range c.Replicas() {
		if err := r.WaitReady(rctx); err != nil {
			say("%s is not ready: %v", r.Spec.Name, err)
		}
	}
	cancel()
	if demoURL != "" {
		exchange(ctx, o.binary, state, dbURL, cfgPath, demoURL)
	}
	fmt.Println()
	say("stack is up (Ctrl-C stops it):")
	for _, r := range c.Replicas() {
		say("  %-10s AS2/API http://%s   ops http://%s   pid %d", r.Spec.Name, r.Spec.HTTPAddr, r.Spec.OpsAddr, r.PID())
	}
	say("  balancer   http://%s (round robin over the replicas: the hub's AS2 URL for partners)", lb.Addr())
	say("  console    http://%s/console/ (sign in as %s with the password below; any replica serves any page)", lb.Addr(), adminName)
	say("  leader     %s status -ops-urls %s   (kill -9 the leader's pid to see a takeover)", o.binary, opsURLs(c))
	if demoURL != "" {
		say("  demo       DEMO PARTNER station on http://%s (the hub's partner; warnings only in the log), mode %s:", pt.demoHTTP(), o.demoMode)
		say("               curl -X PUT --data MODE http://%s/demo-mode   (MODE: negative, silent, refuse or normal; docs/local-stack.md)", pt.demoHTTP())
	}
	sayMail(mailEnv, o.binary, dbURL, cfgPath, o.portOffset)
	say("  config     %s", cfgPath)
	say("  API token  in %s (the shared bootstrap token, an admin)", filepath.Join(state, "api-token"))
	say("  admin      user %s, password %s (kept in %s); a token of its own:", adminName, adminPassword, filepath.Join(state, "admin-password"))
	say("               EDIHUB_DATABASE_URL='%s' %s users token %s -name mine", dbURL, o.binary, adminName)
	fmt.Println()

	<-ctx.Done()
	say("stopping replicas")
	restarts.Stop()
	err = c.Stop(7 * time.Second)
	return err
}

// leaseName is the replicas' leader Lease (EDIHUB_LEASE_NAME's default).
const leaseName = "edihub-leader"

// releaseStaleLease releases the leader Lease when a replica of an earlier
// run still holds it. The control plane belongs to this stack and none of
// its replicas runs yet, so the holder is a process that was killed (kill
// -9, a closed terminal) before it could release the Lease; the new
// replicas would wait a lease duration for it to expire. It writes what a
// leader's release writes: no holder, a lease duration of one second.
func releaseStaleLease(ctx context.Context, cp *controlplane.ControlPlane, name string) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("release stale Lease: %w", err)
	}
	leases := cs.CoordinationV1().Leases(cp.Namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release stale Lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return nil
	}
	holder := *l.Spec.HolderIdentity
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity = ptr("")
	l.Spec.LeaseDurationSeconds = ptr(int32(1))
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("release stale Lease %s/%s held by %s: %w", cp.Namespace, name, holder, err)
	}
	say("Lease %s/%s was still held by %s of an earlier run (killed before it released it): released", cp.Namespace, name, holder)
	return nil
}

func ptr[T any](v T) *T { return &v }

func say(format string, args ...any) {
	fmt.Printf("localstack | "+format+"\n", args...)
}

// startPostgres starts the private server and creates the databases that
// do not exist yet; it returns their URLs in order.
func startPostgres(ctx context.Context, dir string, port int, dbs ...string) (*pgserver.Server, []string, error) {
	if err := cluster.CheckFree(fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return nil, nil, fmt.Errorf("%w: the private PostgreSQL wants this port; run with -pg-port N or set EDIHUB_DATABASE_URL", err)
	}
	say("starting PostgreSQL in %s on 127.0.0.1:%d", dir, port)
	pg, err := pgserver.New(pgserver.Options{Dir: dir, Port: port})
	if err != nil {
		return nil, nil, err
	}
	if err := pg.Start(ctx); err != nil {
		return nil, nil, err
	}
	urls, err := createDatabases(ctx, pg, dbs)
	if err != nil {
		_ = pg.Stop()
		return nil, nil, err
	}
	return pg, urls, nil
}

func createDatabases(ctx context.Context, pg *pgserver.Server, dbs []string) ([]string, error) {
	c, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	var urls []string
	for _, db := range dbs {
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
				return nil, err
			}
		}
		urls = append(urls, pg.URL(db))
	}
	return urls, nil
}

// ensureStation writes, once, a development station (EDIHUB) and a demo
// partner station (DEMO PARTNER) with their keys, and a config for each:
// .local/edihub.yaml for the hub, .local/demo/edihub.yaml for the demo
// station, so the two can be run as each other's partner.
func ensureStation(state, demoURL, hubURL string) (string, error) {
	hub := filepath.Join(state, "station")
	demo := filepath.Join(state, "demo")
	for _, d := range []string{hub, demo} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	if err := ensureKeyPair(hub, "station", "EDIHUB"); err != nil {
		return "", err
	}
	if err := ensureKeyPair(demo, "demo", "DEMO PARTNER"); err != nil {
		return "", err
	}
	hubCfg := filepath.Join(state, "edihub.yaml")
	if err := writeOnce(hubCfg, fmt.Sprintf(`# Development station generated by make run. Edit freely; it is not
# regenerated while it exists.
#
# DEMO PARTNER answers with asynchronous MDNs: it posts each signed MDN to
# async_mdn_url (the balancer in front of the replicas), the receiving
# replica stores it in the MDN inbox, and the leader's MDN poller applies it
# to the message. It also answers each X12 or EDIFACT interchange with a
# functional acknowledgement (997, CONTRL), due within edi_ack_due.
station:
  as2_id: "EDIHUB"
  private_key: station/station.key
  certificate: station/station.crt
  async_mdn_url: %s
partners:
  - as2_id: "DEMO PARTNER"
    url: %s
    certificate: demo/demo.crt
    sign: sha-256
    encrypt: aes256-cbc
    compress: false
    mdn: async
    mdn_signed: true
    allow_private_mdn_targets: true # both stations run on 127.0.0.1
    edi_ack_due: 4h
`, hubURL, demoURL)); err != nil {
		return "", err
	}
	if err := writeOnce(filepath.Join(demo, "edihub.yaml"), fmt.Sprintf(`# The demo partner's own station, run by make run as the hub's trading
# partner (AS2 at %s).
station: {as2_id: "DEMO PARTNER", private_key: demo.key, certificate: demo.crt}
partners:
  - as2_id: "EDIHUB"
    url: %s
    certificate: ../station/station.crt
    sign: sha-256
    encrypt: aes256-cbc
    compress: false
    mdn: sync
    mdn_signed: true
    allow_private_mdn_targets: true # both stations run on 127.0.0.1
    edi_acks: true # the demo partner answers interchanges with a 997 or CONTRL
`, demoURL, hubURL)); err != nil {
		return "", err
	}
	return hubCfg, nil
}

func writeOnce(path, content string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

func ensureKeyPair(dir, base, cn string) error {
	keyPath := filepath.Join(dir, base+".key")
	crtPath := filepath.Join(dir, base+".crt")
	if _, err := os.Stat(crtPath); err == nil {
		return nil
	}
	say("generating a development key and certificate for %q", cn)
	id, err := devpki.New(cn, devpki.Options{})
	if err != nil {
		return err
	}
	return id.WriteFiles(keyPath, crtPath)
}

func ensureToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", errors.New(path + " is empty: delete it to have a new token generated")
		}
		return t, nil
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(b[:])
	return t, os.WriteFile(path, []byte(t+"\n"), 0o600)
}

func opsURLs(c *cluster.Cluster) string {
	var us []string
	for _, r := range c.Replicas() {
		us = append(us, "http://"+r.Spec.OpsAddr)
	}
	return strings.Join(us, ",")
}
