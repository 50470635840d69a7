package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
)

// leaderOptions are the leader-election settings of edihub serve.
type leaderOptions struct {
	backend           string
	leaseName         string
	namespace         string
	identity          string
	kubeconfig        string
	leaseDuration     time.Duration
	renewDeadline     time.Duration
	retryPeriod       time.Duration
	workerStopTimeout time.Duration
	workerStuckAfter  time.Duration
	// mdnPollInterval and mdnBatchSize configure the MDN poller.
	mdnPollInterval time.Duration
	mdnBatchSize    int
	// ackWatchInterval is how often the acknowledgement watcher looks.
	ackWatchInterval time.Duration
}

func (o *leaderOptions) flags(fs *flagSet) {
	fs.String(&o.backend, "leader-backend", "kubernetes", "where replicas elect the leader: kubernetes (a Lease) or postgres (a lease row in the database)")
	fs.String(&o.leaseName, "lease-name", "edihub-leader", "name of the leader lease (Kubernetes Lease or lease row)")
	fs.String(&o.namespace, "lease-namespace", "", "namespace of the Lease; default: the pod's service-account namespace", "POD_NAMESPACE")
	fs.String(&o.identity, "identity", "", "prefix of this process's leader identity (a random per-process suffix is added); default: the host name", "POD_NAME")
	fs.String(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for the Lease; empty: the in-cluster service account", "KUBECONFIG")
	fs.Duration(&o.leaseDuration, "lease-duration", 30*time.Second, "how long followers wait after the lease last changed before taking it")
	fs.Duration(&o.renewDeadline, "renew-deadline", 10*time.Second, "how long the leader keeps leading without renewing the lease")
	fs.Duration(&o.retryPeriod, "retry-period", 2*time.Second, "how often the leader renews the lease and followers look at it")
	fs.Duration(&o.workerStopTimeout, "worker-stop-timeout", 5*time.Second, "how long leader-gated workers may take to stop before the process exits")
	fs.Duration(&o.workerStuckAfter, "worker-stuck-after", 10*time.Minute, "a leader-gated worker without progress this long while leading is stuck: /healthz fails")
	fs.Duration(&o.mdnPollInterval, "mdn-poll-interval", mdn.DefaultPollInterval, "how often the leader's MDN poller looks for async MDNs and overdue messages unless woken sooner")
	fs.Int(&o.mdnBatchSize, "mdn-batch-size", mdn.DefaultBatchSize, "async MDNs the leader's poller applies per fenced transaction")
	fs.Duration(&o.ackWatchInterval, "ack-watch-interval", interchange.DefaultWatchInterval, "how often the leader's acknowledgement watcher flags overdue functional acknowledgements (997, 999, CONTRL)")
}

// purgeOptions are the settings of the leader's outbox purger.
type purgeOptions struct {
	interval       time.Duration
	retention      time.Duration
	auditRetention time.Duration
	restartExpiry  time.Duration
	batch          int
}

func (o *purgeOptions) flags(fs *flagSet) {
	fs.Duration(&o.interval, "purge-interval", outbox.DefaultPurgeInterval, "how often the leader deletes what is past its retention")
	fs.Duration(&o.retention, "retention", outbox.DefaultRetention, "how long finished outbox rows, payloads, MDNs, processed inbox MDNs, heartbeats and events are kept")
	fs.Duration(&o.auditRetention, "audit-retention", outbox.DefaultAuditRetention, "how long final message rows (the audit trail) are kept; at least -retention")
	fs.Duration(&o.restartExpiry, "as2-restart-expiry", outbox.DefaultRestartExpiry, "how long an interrupted AS2 restart transfer is kept after its last byte, for its partner to resume it")
	fs.Int(&o.batch, "purge-batch", outbox.DefaultPurgeBatch, "rows the purger deletes per short transaction")
}

func (o purgeOptions) validate() error {
	switch {
	case o.interval <= 0:
		return fmt.Errorf("EDIHUB_PURGE_INTERVAL (-purge-interval) must be positive, got %s; use a duration such as 1h", o.interval)
	case o.retention <= 0:
		return fmt.Errorf("EDIHUB_RETENTION (-retention) must be positive, got %s; use a duration such as 720h (30 days)", o.retention)
	case o.auditRetention < o.retention:
		return fmt.Errorf("EDIHUB_AUDIT_RETENTION (-audit-retention) %s must be at least EDIHUB_RETENTION (-retention) %s; raise it (default 9600h, 400 days)", o.auditRetention, o.retention)
	case o.restartExpiry <= 0:
		return fmt.Errorf("EDIHUB_AS2_RESTART_EXPIRY (-as2-restart-expiry) must be positive, got %s; use a duration such as 24h", o.restartExpiry)
	case o.batch < 1:
		return fmt.Errorf("EDIHUB_PURGE_BATCH (-purge-batch) must be at least 1, got %d", o.batch)
	}
	return nil
}

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func (o leaderOptions) validate() error {
	switch o.backend {
	case "kubernetes", "postgres":
	default:
		return fmt.Errorf("EDIHUB_LEADER_BACKEND (-leader-backend) must be kubernetes or postgres, got %q", o.backend)
	}
	if o.leaseName == "" {
		return errors.New("EDIHUB_LEASE_NAME (-lease-name) must not be empty")
	}
	if o.workerStuckAfter <= 0 {
		return fmt.Errorf("EDIHUB_WORKER_STUCK_AFTER (-worker-stuck-after) must be positive, got %s; use a duration like 10m", o.workerStuckAfter)
	}
	if o.mdnPollInterval <= 0 {
		return fmt.Errorf("EDIHUB_MDN_POLL_INTERVAL (-mdn-poll-interval) must be positive, got %s; set it to a duration such as 10s", o.mdnPollInterval)
	}
	if o.ackWatchInterval <= 0 {
		return fmt.Errorf("EDIHUB_ACK_WATCH_INTERVAL (-ack-watch-interval) must be positive, got %s; set it to a duration such as 30s", o.ackWatchInterval)
	}
	if o.mdnBatchSize < 1 || o.mdnBatchSize > 10000 {
		return fmt.Errorf("EDIHUB_MDN_BATCH_SIZE (-mdn-batch-size) must be from 1 to 10000, got %d; the default is %d", o.mdnBatchSize, mdn.DefaultBatchSize)
	}
	if err := leader.ValidateTiming(o.leaseDuration, o.renewDeadline, o.retryPeriod, o.workerStopTimeout); err != nil {
		var te *leader.TimingError
		if errors.As(err, &te) {
			return fmt.Errorf("%s (-%s) %s", envName(te.Field), te.Field, te.Reason)
		}
		return err
	}
	return nil
}

// resolveNamespace picks the Lease's namespace: the flag (or
// EDIHUB_LEASE_NAMESPACE, or POD_NAMESPACE), else the service account's.
func (o leaderOptions) resolveNamespace(readFile func(string) ([]byte, error)) (string, error) {
	if o.namespace != "" {
		return o.namespace, nil
	}
	if b, err := readFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns, nil
		}
	}
	return "", errors.New("no namespace for the leader Lease: set EDIHUB_LEASE_NAMESPACE (-lease-namespace) or POD_NAMESPACE, or run in a pod with a service account")
}

// newIdentity makes this process's identity: the prefix (or the host name)
// and a random suffix, so a restarted process is never taken for its
// predecessor.
func newIdentity(prefix string) (string, error) {
	if prefix == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("leader identity (set EDIHUB_IDENTITY or -identity): %w", err)
		}
		prefix = h
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	return prefix + "-" + hex.EncodeToString(b[:]), nil
}

// kubeClients builds the Lease clients: one for get/create/update whose
// requests time out at half the renew deadline, so a hung API server cannot
// hold a renewal past it, and one without a request timeout for the watch.
func (o leaderOptions) kubeClients() (lock, watch *kubernetes.Clientset, err error) {
	var cfg *rest.Config
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubeconfig %s (check KUBECONFIG or -kubeconfig): %w", o.kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("no Kubernetes configuration (set KUBECONFIG or -kubeconfig, run in a pod, or use EDIHUB_LEADER_BACKEND=postgres): %w", err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "edihub/" + version() + " (leader-election)"
	cfg.QPS, cfg.Burst = 5, 10
	watchCfg := rest.CopyConfig(cfg)
	cfg.Timeout = o.renewDeadline / 2
	if lock, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if watch, err = kubernetes.NewForConfig(watchCfg); err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return lock, watch, nil
}

// newElector builds the elector of r's backend for the workers: it only
// elects and supervises them.
func newElector(r *replica, workers map[string]leader.Worker) (*leader.Elector, error) {
	o := r.o.leader
	opts := leader.Options{
		LeaseName:         o.leaseName,
		Identity:          r.identity,
		LeaseDuration:     o.leaseDuration,
		RenewDeadline:     o.renewDeadline,
		RetryPeriod:       o.retryPeriod,
		WorkerStopTimeout: o.workerStopTimeout,
		StuckAfter:        o.workerStuckAfter,
		Workers:           workers,
		Terms:             r.store,
		Logger:            r.log,
		Registerer:        r.reg,
	}
	if o.backend == "postgres" {
		return leader.NewPostgres(r.store, opts)
	}
	ns, err := o.resolveNamespace(os.ReadFile)
	if err != nil {
		return nil, err
	}
	lock, watch, err := o.kubeClients()
	if err != nil {
		return nil, err
	}
	return leader.NewKubernetes(leader.KubernetesOptions{
		Leases:      lock.CoordinationV1(),
		WatchLeases: watch.CoordinationV1(),
		Namespace:   ns,
		Version:     lock.Discovery(),
	}, opts)
}

// leaderHandler serves GET /leader: this replica's view of the election.
func leaderHandler(e *leader.Elector, cfg config.Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpserver.WriteJSON(w, http.StatusOK, opsStatus{Status: e.Status(), PartnersRevision: cfg.Current().Revision})
	})
}
