// Package leader elects one replica to run edihub's leader-gated workers
// and supervises them.
//
// An Elector campaigns for a lease, on Kubernetes (a coordination.k8s.io/v1
// Lease, see NewKubernetes) or on PostgreSQL (a lease row judged by the
// database clock, see NewPostgres). When it wins, it opens a term in
// PostgreSQL with the term's fencing token, starts every Worker under one
// context carrying that token (FenceFrom), renews the lease, and on loss
// cancels the workers and waits for them before it campaigns again. Every
// leader-gated write goes through postgres' fenced path with the token, so
// a replica that still believes it leads after a successor opened a term
// cannot write. docs/leadership.md explains the design and its timelines.
package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
)

// Terms is the database side of leadership. *postgres.Store implements
// it. Every method guards a safety property, so none is optional: a
// replica that cannot reach the database does not campaign (Ping), a term
// is opened before its workers start (OpenTerm) and confirmed at every
// renewal, the leader stepping down when it cannot confirm it for the
// renew deadline (CheckTerm), and a refused Kubernetes term is explained
// to the operator (CurrentTerm).
type Terms interface {
	// OpenTerm records f as the current term for holder. It returns an
	// error matching hub.ErrStaleFence when a newer term has opened.
	OpenTerm(ctx context.Context, f hub.Fence, holder string) error
	// CheckTerm confirms that f is still the current term; an error
	// matching hub.ErrStaleFence when a newer one opened.
	CheckTerm(ctx context.Context, f hub.Fence) error
	// CurrentTerm reads the lease's current term.
	CurrentTerm(ctx context.Context, lease string) (hub.Term, error)
	// Ping reports whether the database answers.
	Ping(ctx context.Context) error
}

// ErrWorkersHung is returned by Elector.Run when workers did not stop
// within Options.WorkerStopTimeout after leadership ended. The process must
// exit: a restart is better than a second leader.
var ErrWorkersHung = errors.New("leader-gated workers did not stop in time")

type fenceKey struct{}

// FenceFrom returns the fence of the term a worker runs in. Every context
// an Elector passes to Worker.Run carries one; ok is false elsewhere.
func FenceFrom(ctx context.Context) (f hub.Fence, ok bool) {
	f, ok = ctx.Value(fenceKey{}).(hub.Fence)
	return f, ok
}

// WithFence returns a context carrying f, as the Elector gives its workers.
// Tests of workers use it.
func WithFence(ctx context.Context, f hub.Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// Options configure an Elector, whatever its backend.
type Options struct {
	// LeaseName names the lease (Kubernetes Lease or lease row) and the
	// fence. Required.
	LeaseName string
	// Identity is this process's unique identity; see NewIdentity.
	Identity string
	// LeaseDuration is how long followers wait after the lease last
	// changed before they take it. Default 30 s.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps leading without a
	// successful renewal. Default 10 s.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews and followers poll.
	// Default 2 s.
	RetryPeriod time.Duration
	// WorkerStopTimeout bounds the wait for workers after leadership
	// ends; past it Run returns ErrWorkersHung. Default 5 s.
	WorkerStopTimeout time.Duration
	// StuckAfter is how long a worker may go without MarkSuccess, while
	// this replica leads, before it is reported stuck (and Healthy fails).
	// A Worker implementing ProgressDeadline overrides it. Default 10 min.
	StuckAfter time.Duration
	// Workers run while this replica leads, keyed by a name used in logs
	// and in the edihub_worker_running{worker} metric.
	Workers map[string]Worker
	// Terms opens and confirms each term in PostgreSQL. Required.
	Terms Terms
	// Logger and Registerer are required.
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

func (o *Options) defaults() error {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 30 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.WorkerStopTimeout == 0 {
		o.WorkerStopTimeout = 5 * time.Second
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = 10 * time.Minute
	}
	switch {
	case o.LeaseName == "":
		return errors.New("leader: empty lease name")
	case o.Identity == "":
		return errors.New("leader: empty identity")
	case o.Terms == nil, o.Logger == nil, o.Registerer == nil:
		return errors.New("leader: Terms, Logger and Registerer are required")
	case o.StuckAfter < 0:
		return &TimingError{"worker-stuck-after", fmt.Sprintf("must be positive, got %s", o.StuckAfter)}
	}
	return ValidateTiming(o.LeaseDuration, o.RenewDeadline, o.RetryPeriod, o.WorkerStopTimeout)
}

// TimingError reports an invalid combination of election timings. Field
// names the setting at fault: "lease-duration", "renew-deadline",
// "retry-period" or "worker-stop-timeout".
type TimingError struct {
	Field  string
	Reason string
}

func (e *TimingError) Error() string { return e.Field + ": " + e.Reason }

// ValidateTiming checks the timings like client-go's leader election does:
// all positive, leaseDuration > renewDeadline > retryPeriod × 1.2 (the
// leader must have several tries at renewing before its deadline, and must
// stop leading well before followers consider the lease expired). It also
// requires renewDeadline + retryPeriod + workerStopTimeout < leaseDuration:
// an old leader's workers must have stopped (or its process exited) before
// a follower may take the lease (docs/leadership.md, "Timelines").
func ValidateTiming(leaseDuration, renewDeadline, retryPeriod, workerStopTimeout time.Duration) error {
	switch {
	case leaseDuration <= 0:
		return &TimingError{"lease-duration", fmt.Sprintf("must be positive, got %s", leaseDuration)}
	case renewDeadline <= 0:
		return &TimingError{"renew-deadline", fmt.Sprintf("must be positive, got %s", renewDeadline)}
	case retryPeriod <= 0:
		return &TimingError{"retry-period", fmt.Sprintf("must be positive, got %s", retryPeriod)}
	case workerStopTimeout <= 0:
		return &TimingError{"worker-stop-timeout", fmt.Sprintf("must be positive, got %s", workerStopTimeout)}
	case leaseDuration <= renewDeadline:
		return &TimingError{"lease-duration", fmt.Sprintf("must be greater than the renew deadline (%s <= %s)", leaseDuration, renewDeadline)}
	case float64(renewDeadline) <= jitterFactor*float64(retryPeriod):
		return &TimingError{"renew-deadline", fmt.Sprintf("must be greater than %.1f × the retry period (%s <= %.1f × %s)", jitterFactor, renewDeadline, jitterFactor, retryPeriod)}
	case renewDeadline+retryPeriod+workerStopTimeout >= leaseDuration:
		return &TimingError{"worker-stop-timeout", fmt.Sprintf("renew deadline + retry period + worker stop timeout must be less than the lease duration (%s + %s + %s >= %s), so that the old leader's workers have stopped before a follower may take the lease; lower it to less than %s or raise the lease duration",
			renewDeadline, retryPeriod, workerStopTimeout, leaseDuration, leaseDuration-renewDeadline-retryPeriod)}
	}
	return nil
}

// jitterFactor is client-go's bound between renew deadline and retry period.
const jitterFactor = 1.2

// Status is a replica's view of the election.
type Status struct {
	Identity string `json:"identity"`
	IsLeader bool   `json:"is_leader"`
	// Holder is the lease's holder as last seen; "" when released or
	// unknown.
	Holder string `json:"holder"`
	// FencingToken is the current term's token while this replica leads.
	// Followers report the holder's token when the backend knows it
	// (postgres), else 0.
	FencingToken int64  `json:"fencing_token"`
	Backend      string `json:"backend"`
	LeaseName    string `json:"lease_name"`
	// Since is when this replica last became leader or stopped leading
	// (its start, before any transition).
	Since time.Time `json:"since"`
	// Workers are the leader-gated workers, by name.
	Workers map[string]WorkerStatus `json:"workers"`
}

// attempt is the outcome of one try at taking the lease.
type attempt struct {
	acquired bool
	token    int64  // the new term's token when acquired
	holder   string // the holder after the attempt
	// holderToken is the holder's token when the backend knows it.
	holderToken int64
	// retryIn is when the lease may become free; <= 0 when unknown.
	retryIn time.Duration
}

// errFatal marks a backend error after which the replica must not
// campaign again: Run returns it.
var errFatal = errors.New("leader election cannot go on")

// errLost reports a renewal refused because the lease is no longer ours.
var errLost = errors.New("lease no longer held")

// backend is one lease implementation.
type backend interface {
	kind() string
	// preflight checks the backend's environment when Run starts and
	// logs what it finds (the API server's version).
	preflight(ctx context.Context)
	// watch runs until ctx ends and calls changed whenever the lease may
	// have changed hands (released, deleted, taken). It returns nil when
	// ctx ends.
	watch(ctx context.Context, changed func()) error
	tryAcquire(ctx context.Context) (attempt, error)
	// renew returns an error wrapping errLost when the lease is no longer
	// held with token.
	renew(ctx context.Context, token int64) error
	release(ctx context.Context, token int64) error
}

// Elector campaigns for the lease and runs the workers while it holds it.
// Create one with NewKubernetes or NewPostgres; call Run once. Status is
// safe for concurrent use.
type Elector struct {
	o   Options
	b   backend
	log *zap.Logger
	m   *metrics

	changed chan struct{}
	workers *group

	mu     sync.Mutex
	status Status
}

func newElector(o Options, b backend) (*Elector, error) {
	m, err := newMetrics(o.Registerer, o.Workers)
	if err != nil {
		return nil, err
	}
	e := &Elector{
		o:       o,
		b:       b,
		log:     o.Logger.Named("leader").With(zap.String("identity", o.Identity), zap.String("lease", o.LeaseName), zap.String("backend", b.kind())),
		m:       m,
		changed: make(chan struct{}, 1),
		status: Status{
			Identity:  o.Identity,
			Backend:   b.kind(),
			LeaseName: o.LeaseName,
			Since:     time.Now(),
		},
	}
	e.workers = newGroup(&e.o, m)
	return e, nil
}

// Status returns this replica's view of the election.
func (e *Elector) Status() Status {
	e.mu.Lock()
	st := e.status
	e.mu.Unlock()
	st.Workers = e.workers.status(time.Now())
	return st
}

// Healthy returns an error naming the stuck workers while this replica
// leads with workers that made no progress for their stuck-after time
// (see Options.StuckAfter), else nil. GET /healthz fails with it, so that
// Kubernetes restarts the replica and another one leads. It never depends
// on who leads otherwise.
func (e *Elector) Healthy() error { return e.workers.healthy(time.Now()) }

// ErrWorkersStuck is returned by Elector.Healthy when leader-gated workers
// make no progress.
var ErrWorkersStuck = errors.New("leader-gated workers are stuck")

func (e *Elector) setStatus(fn func(*Status)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(&e.status)
}

func (e *Elector) notify() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// Run campaigns until ctx ends. While this replica leads, the workers run;
// when leadership ends they are cancelled and awaited, and the replica
// campaigns again. When ctx ends, Run stops the workers, waits for them,
// releases the lease and returns nil.
//
// Run returns an error wrapping ErrWorkersHung when workers do not stop
// within the stop timeout, and one wrapping ErrUnusableToken when the API
// server's resourceVersions cannot be fencing tokens; the caller must then
// exit the process. Errors talking to the API server or the database are
// logged and retried, never returned.
func (e *Elector) Run(ctx context.Context) error {
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := e.b.watch(wctx, e.notify); err != nil {
			e.log.Warn("lease watch ended; polling only", zap.Error(err))
		}
	}()
	defer func() { stopWatch(); <-watchDone }()

	e.b.preflight(ctx)
	e.log.Info("campaigning", zap.Duration("lease_duration", e.o.LeaseDuration), zap.Duration("renew_deadline", e.o.RenewDeadline), zap.Duration("retry_period", e.o.RetryPeriod))
	failures := 0
	for {
		token, acquiredAt, err := e.campaign(ctx)
		if err != nil {
			e.log.Error("leader election stopped", zap.Error(err))
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		out, err := e.lead(ctx, token, acquiredAt)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if !out.pause {
			failures = 0
			continue
		}
		if out.lasted > e.o.LeaseDuration {
			failures = 0
		}
		failures++
		pause := min(e.o.RetryPeriod<<min(failures-1, 5), e.o.LeaseDuration)
		e.log.Info("pausing before campaigning again", zap.Duration("pause", pause))
		if !Sleep(ctx, pause) {
			return nil
		}
	}
}

// campaign tries to take the lease until it succeeds or ctx ends (then
// ctx.Err() != nil). acquiredAt is when the successful attempt started:
// the lease is valid from then on at the latest. It returns an error only
// when election cannot go on (errFatal).
func (e *Elector) campaign(ctx context.Context) (token int64, acquiredAt time.Time, _ error) {
	var lastErr string
	dbDown := false
	for {
		pctx, cancel := context.WithTimeout(ctx, e.o.RenewDeadline/2)
		err := e.o.Terms.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return 0, time.Time{}, nil
		}
		if err != nil {
			if !dbDown {
				e.log.Warn("the database does not answer; not campaigning until it does", zap.Error(err))
				dbDown = true
			}
			if !Sleep(ctx, jittered(e.o.RetryPeriod)) {
				return 0, time.Time{}, nil
			}
			continue
		}
		if dbDown {
			e.log.Info("the database answers again; campaigning")
			dbDown = false
		}
		start := time.Now()
		a, err := e.b.tryAcquire(ctx)
		if errors.Is(err, errFatal) {
			return 0, time.Time{}, err
		}
		if ctx.Err() != nil {
			return 0, time.Time{}, nil
		}
		wait := jittered(e.o.RetryPeriod)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				e.log.Warn("cannot reach the lease; retrying", zap.Error(err))
				lastErr = err.Error()
			}
		case a.acquired:
			return a.token, start, nil
		default:
			lastErr = ""
			e.setStatus(func(s *Status) { s.Holder, s.FencingToken = a.holder, a.holderToken })
			if a.retryIn > 0 && a.retryIn < wait {
				wait = a.retryIn
			}
			if a.holder == "" {
				wait = 0 // released meanwhile: try again now
			}
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, time.Time{}, nil
			case <-e.changed:
				t.Stop()
			case <-t.C:
			}
		}
	}
}

type leadOutcome struct {
	pause  bool
	lasted time.Duration
}

// lead opens the term, runs the workers and holds the term until
// leadership ends, then stops the workers, waits for them and, when the
// lease is still ours to give, releases it.
func (e *Elector) lead(ctx context.Context, token int64, acquiredAt time.Time) (leadOutcome, error) {
	t := e.newTerm(token, acquiredAt)
	if out, ok := t.open(ctx); !ok {
		return out, nil
	}
	began := time.Now()
	e.transition(true, token, e.o.Identity)
	t.log.Info("became leader", zap.String("reason", "lease acquired and term opened"))

	wctx, stopWorkers := context.WithCancel(WithFence(ctx, t.fence))
	defer stopWorkers()
	e.workers.start(wctx, t.log, began)
	end := t.hold(ctx, e.workers)

	stopWorkers()
	e.workers.endTerm()
	e.workers.status(time.Now()) // a follower's workers are never stuck
	err := e.workers.wait(t.log)
	e.transition(false, 0, "")
	if err != nil {
		return leadOutcome{}, err
	}
	if end.release {
		// Logged before the release: the workers have stopped, and a
		// follower may take the lease and log its new term the moment it
		// is released, so this line must come first to keep the logs in
		// the order things happened. A failed release is logged after it.
		t.log.Info("released", zap.String("reason", end.reason))
		e.releaseLease(ctx, t.log, token)
	} else {
		t.log.Warn("lost leadership", zap.String("reason", end.reason))
	}
	return leadOutcome{pause: end.pause, lasted: time.Since(began)}, nil
}

// explainStaleTerm logs what an operator needs when a Kubernetes term was
// refused: the fence's token in PostgreSQL, ours (the resourceVersion of
// the Lease write that made us leader) and the remedy. Once, it is a
// successor that opened its term first. When it repeats, the Lease's
// resourceVersions fell below the fence (etcd restored from a backup, the
// Lease moved to another cluster) and no replica can lead until the fence
// row is deleted.
func (e *Elector) explainStaleTerm(ctx context.Context, log *zap.Logger, token int64) {
	rctx, cancel := context.WithTimeout(ctx, e.o.RenewDeadline)
	defer cancel()
	cur, err := e.o.Terms.CurrentTerm(rctx, e.o.LeaseName)
	if err != nil {
		log.Warn("cannot read the fence to explain the stale term", zap.Error(err))
		return
	}
	if cur.Token <= token {
		return // the fence moved back meanwhile (reset by an operator?)
	}
	log.Error("term refused: the fencing token in PostgreSQL is above the Lease's resourceVersion",
		zap.Int64("fence_token", cur.Token),
		zap.String("fence_holder", cur.Holder),
		zap.Time("fence_opened_at", cur.OpenedAt),
		zap.Int64("our_token", token),
		zap.String("remedy", fmt.Sprintf("once, this is a successor that opened its term first and needs nothing. "+
			"If it repeats, no replica can lead: etcd was restored from a backup or the cluster changed, so Lease resourceVersions "+
			"(now %d) are below leader_fence.token (%d). Make sure no edihub replica of the old cluster or before the restore still runs "+
			"(holder %q), then run: DELETE FROM leader_fence WHERE lease = '%s'; (docs/leadership.md, \"Recovering after an etcd restore\")",
			token, cur.Token, cur.Holder, e.o.LeaseName)))
}

// releaseLease gives the lease up, even when ctx has ended (shutdown).
func (e *Elector) releaseLease(ctx context.Context, log *zap.Logger, token int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.RenewDeadline)
	defer cancel()
	if err := e.b.release(rctx, token); err != nil {
		log.Warn("lease release failed; followers wait for it to expire", zap.Error(err))
	}
}

func (e *Elector) transition(leader bool, token int64, holder string) {
	e.setStatus(func(s *Status) {
		if s.IsLeader != leader {
			e.m.transitions.Inc()
		}
		s.IsLeader, s.Since = leader, time.Now()
		if leader {
			s.Holder, s.FencingToken = holder, token
		} else if s.Holder == e.o.Identity {
			s.Holder, s.FencingToken = "", 0
		}
	})
	if leader {
		e.m.isLeader.Set(1)
		e.m.token.Set(float64(token))
	} else {
		e.m.isLeader.Set(0)
		e.m.token.Set(0)
	}
}

// jittered returns d stretched by up to 20 %, so followers do not poll in
// lockstep.
func jittered(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Sleep waits for d or until ctx ends; it reports whether d elapsed.
// Leader-gated workers use it between their steps and batches.
func Sleep(ctx context.Context, d time.Duration) bool { return sleepOrWake(ctx, d, nil) }
