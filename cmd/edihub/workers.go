package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/oidc"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/pickup"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// replica is what serve builds once and every component of a replica is
// made from: its logger and registry, the database, the configuration,
// the settings, the report's settings and this process's identity (minted
// once: the elector, the dispatcher and the report's claims share it).
type replica struct {
	log   *zap.Logger
	reg   *prometheus.Registry
	store *postgres.Store
	// cfg gives the station and partners in force: live, the partner set
	// kept in step with the database.
	cfg  config.Source
	live *partners.Live
	// connectors is the connectors document this replica serves.
	connectors *connectors.Live
	// runtime builds the connectors the document in force names, for
	// deliveries and the pickup poller.
	runtime  *connectors.Runtime
	o        serveOptions
	report   reportSettings
	identity string
	// oidc signs people in to the console with an OpenID Connect
	// provider, named oidcName, discovered by its Run; nil: passwords
	// only.
	oidc     *oidc.Lazy
	oidcName string
	// spool takes AS2 bodies too large for memory (EDIHUB_SPOOL_*).
	spool *spool.Spool
}

// leaderWorkers lists the leader-gated workers: they run only while this
// replica leads (see internal/leader). Adding one is its constructor and
// one line here.
var leaderWorkers = []struct {
	name string
	make func(r *replica) (leader.Worker, error)
}{
	{"heartbeat", newHeartbeat},
	{"mdn-poller", newMDNPoller},
	{"purger", newPurger},
	{"report", newReportWorker},
	{"ack-watcher", newAckWatcher},
	{"pickup", newPickupPoller},
}

// buildWorkers makes every worker of leaderWorkers for r, by name.
func buildWorkers(r *replica) (map[string]leader.Worker, error) {
	ws := make(map[string]leader.Worker, len(leaderWorkers))
	for _, w := range leaderWorkers {
		worker, err := w.make(r)
		if err != nil {
			return nil, fmt.Errorf("leader-gated worker %s: %w", w.name, err)
		}
		ws[w.name] = worker
	}
	return ws, nil
}

func newHeartbeat(r *replica) (leader.Worker, error) {
	return leader.NewHeartbeat(leader.HeartbeatOptions{Store: r.store, Holder: r.identity, Logger: r.log, Registerer: r.reg})
}

// newMDNPoller builds the poller of async MDNs; -max-mdn-bytes bounds the
// inbox MDNs it reads (a larger one becomes an orphan unread).
func newMDNPoller(r *replica) (leader.Worker, error) {
	return mdn.NewPoller(mdn.PollerOptions{
		Store:        r.store,
		Listener:     r.store,
		Config:       r.cfg,
		Logger:       r.log,
		Registerer:   r.reg,
		PollInterval: r.o.leader.mdnPollInterval,
		BatchSize:    r.o.leader.mdnBatchSize,
		Limits:       as2.Limits{MaxDecompressedSize: r.o.decompressionLimit()},
		MaxMDNBytes:  r.o.maxMDNBytes,
	})
}

func newPurger(r *replica) (leader.Worker, error) {
	po := r.o.purge
	return outbox.NewPurger(outbox.PurgerOptions{
		Store: r.store, Logger: r.log, Registerer: r.reg,
		Interval: po.interval, Retention: po.retention, AuditRetention: po.auditRetention, RestartExpiry: po.restartExpiry, Batch: po.batch,
	})
}

// newAckWatcher builds the watcher that flags overdue functional
// acknowledgements (issue 23).
func newAckWatcher(r *replica) (leader.Worker, error) {
	return interchange.NewWatcher(interchange.WatcherOptions{Store: r.store, Logger: r.log, Registerer: r.reg, Interval: r.o.leader.ackWatchInterval,
		Partners: func() []string { return partnerNames(r.cfg.Current()) }})
}

// newPickupPoller builds the poller of the connector sources. It queues
// picked-up files through a queue of its own, with the API's profile
// checks and retry window; a file larger than -max-body-bytes (what the
// API accepts) stays at its source with a reason. Sources come from the
// connectors document in force; with none it idles.
func newPickupPoller(r *replica) (leader.Worker, error) {
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: r.store, Config: r.cfg, RetryWindow: r.o.outbound.retryWindow, Logger: r.log.Named("pickup-queue")})
	if err != nil {
		return nil, err
	}
	return pickup.NewPoller(pickup.Options{
		Store:          r.store,
		Sources:        (&pickupSources{r: r, failed: map[string]string{}}).specs,
		Outbound:       q.Outbound,
		MaxSize:        r.o.maxBodyBytes,
		ClaimRetention: r.o.purge.retention,
		Logger:         r.log,
		Registerer:     r.reg,
	})
}

// pickupSources are the sources of the connectors document in force, as
// the pickup poller lists them. A source whose connector cannot be built
// (a secret missing on this replica) is left out until it can be, and
// logged once per reason rather than at every tick.
type pickupSources struct {
	r      *replica
	mu     sync.Mutex
	failed map[string]string // source → the error last logged
}

func (p *pickupSources) specs() []pickup.SourceSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.r.connectors.Current().Connectors
	specs := make([]pickup.SourceSpec, 0, len(c.Sources))
	for _, s := range c.Sources {
		src, err := p.r.runtime.Source(s.Name)
		if err != nil {
			if p.failed[s.Name] != err.Error() {
				p.failed[s.Name] = err.Error()
				p.r.log.Warn("pickup source not usable; its files wait", zap.String("source", s.Name), zap.Error(err))
			}
			continue
		}
		delete(p.failed, s.Name)
		specs = append(specs, pickup.SourceSpec{
			Name:    s.Name,
			Source:  src,
			Stable:  pickup.Stability(s.Stable),
			Delete:  s.After == config.AfterDelete,
			Archive: s.Archive,
			Poll:    time.Duration(s.Poll),
			Route: func(path string) (pickup.Route, bool) {
				rt, ok := c.SourceRoute(s.Name, path)
				return pickup.Route{Name: rt.Name, Partner: rt.Partner}, ok
			},
		})
	}
	return specs
}
