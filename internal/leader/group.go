package leader

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
)

// Worker is a leader-gated component. Run runs until ctx ends and then
// returns nil. Workers know nothing of elections: ctx ends when leadership
// ends, and FenceFrom(ctx) gives the term's fence for their fenced writes.
//
// A worker retries transient errors itself. When Run returns while the
// replica still leads (with an error, or nil), the elector restarts it in
// the same term after a backoff; only an error matching
// hub.ErrStaleFence (a newer term opened) ends the term. A worker
// calls MarkSuccess after each cycle of its work; one that makes no
// progress for Options.StuckAfter (or its own ProgressDeadline) is reported
// stuck (Status, edihub_worker_stuck, Elector.Healthy).
type Worker interface {
	Run(ctx context.Context) error
}

// WorkerFunc adapts a function to Worker.
type WorkerFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f WorkerFunc) Run(ctx context.Context) error { return f(ctx) }

// ProgressDeadline is implemented by a Worker whose cycles are further
// apart than Options.StuckAfter (a daily report): StuckAfter returns how
// long it may go without MarkSuccess before it counts as stuck; 0 or less
// never.
type ProgressDeadline interface {
	StuckAfter() time.Duration
}

type progressKey struct{}

// MarkSuccess records that the worker running under ctx finished a cycle of
// its work: it sets edihub_worker_last_success_timestamp_seconds{worker} to
// now. Workers call it after each successful poll, purge batch or report, so
// that alerts see a leader whose workers run but make no progress. Outside
// a worker's context (tests of a worker alone) it does nothing.
func MarkSuccess(ctx context.Context) {
	if mark, ok := ctx.Value(progressKey{}).(func()); ok {
		mark()
	}
}

// withProgress returns ctx carrying mark, which MarkSuccess calls.
func withProgress(ctx context.Context, mark func()) context.Context {
	return context.WithValue(ctx, progressKey{}, mark)
}

// WorkerStatus is one leader-gated worker as this replica sees it.
type WorkerStatus struct {
	// Running is true while the worker runs (or waits to be restarted)
	// in this replica's term.
	Running bool `json:"running"`
	// LastSuccess is when it last called MarkSuccess on this replica;
	// zero if never (then left out of the JSON, not 0001-01-01).
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Restarts counts the times it returned while this replica led and
	// was started again, since the process started.
	Restarts int `json:"restarts"`
	// Stuck is true while this replica leads and the worker has not
	// called MarkSuccess for its stuck-after time since the later of the
	// term's start and its last success.
	Stuck bool `json:"stuck"`
	// StuckAfter is that time in seconds; 0: never stuck.
	StuckAfter float64 `json:"stuck_after_seconds"`
}

// workerState is the group's record of one worker, under group.mu.
type workerState struct {
	running     bool
	termStart   time.Time // start of the term it runs in; zero when not leading
	lastSuccess time.Time
	restarts    int
	stuckAfter  time.Duration
}

// stuck reports whether the worker made no progress for its stuck-after
// time in the current term.
func (w *workerState) stuck(now time.Time) bool {
	if w.termStart.IsZero() || w.stuckAfter <= 0 {
		return false
	}
	from := w.termStart
	if w.lastSuccess.After(from) {
		from = w.lastSuccess
	}
	return now.Sub(from) > w.stuckAfter
}

// workerResult is a worker's return from supervise.
type workerResult struct {
	name string
	err  error
}

// group supervises the leader-gated workers for one term at a time: it
// starts them (start), restarts one that returns early (supervise), tells
// the term loop when one returns for good (results), and stops and awaits
// them when the term ends (wait). Its methods other than start, results
// and wait are safe for concurrent use; those three belong to the term
// loop's goroutine.
type group struct {
	// o are the elector's options: Workers, StuckAfter, the restart
	// backoff's bounds (RetryPeriod, LeaseDuration), WorkerStopTimeout.
	o *Options
	m *metrics

	mu     sync.Mutex
	states map[string]*workerState

	// The current term's workers: their results, and those still running.
	out     chan workerResult
	running map[string]bool
}

func newGroup(o *Options, m *metrics) *group {
	g := &group{o: o, m: m, states: map[string]*workerState{}}
	for name, w := range o.Workers {
		g.states[name] = g.newState(w)
	}
	return g
}

func (g *group) newState(w Worker) *workerState {
	ws := &workerState{stuckAfter: g.o.StuckAfter}
	if pd, ok := w.(ProgressDeadline); ok {
		ws.stuckAfter = pd.StuckAfter()
	}
	return ws
}

// start runs every worker under ctx, the term's context, from began on.
func (g *group) start(ctx context.Context, log *zap.Logger, began time.Time) {
	g.out = make(chan workerResult, len(g.o.Workers))
	g.running = map[string]bool{}
	g.mu.Lock()
	for name, w := range g.o.Workers {
		ws := g.newState(w)
		if old := g.states[name]; old != nil {
			ws.lastSuccess, ws.restarts = old.lastSuccess, old.restarts
		}
		ws.termStart, ws.running = began, true
		g.states[name] = ws
	}
	g.mu.Unlock()
	for name, w := range g.o.Workers {
		g.running[name] = true
		g.m.workerRunning.WithLabelValues(name).Set(1)
		go func() {
			g.out <- workerResult{name, g.supervise(ctx, log, name, w)}
		}()
	}
}

// results delivers a worker that returned for good in this term (see
// supervise); the receiver passes it to exited.
func (g *group) results() <-chan workerResult { return g.out }

// exited records that r's worker no longer runs.
func (g *group) exited(r workerResult) {
	delete(g.running, r.name)
	g.m.workerRunning.WithLabelValues(r.name).Set(0)
	g.mu.Lock()
	g.states[r.name].running = false
	g.mu.Unlock()
}

// endTerm marks the term over for the stuck check: a follower's workers
// are never stuck.
func (g *group) endTerm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ws := range g.states {
		ws.termStart = time.Time{}
	}
}

// wait waits, up to the stop timeout, for the workers of a term whose
// context has ended. It returns an error wrapping ErrWorkersHung naming
// those still running past it.
func (g *group) wait(log *zap.Logger) error {
	t := time.NewTimer(g.o.WorkerStopTimeout)
	defer t.Stop()
	for len(g.running) > 0 {
		select {
		case r := <-g.out:
			g.exited(r)
			if r.err != nil {
				log.Warn("worker stopped with an error", zap.String("worker", r.name), zap.Error(r.err))
			}
		case <-t.C:
			hung := make([]string, 0, len(g.running))
			for name := range g.running {
				hung = append(hung, name)
			}
			sort.Strings(hung)
			log.Error("workers did not stop in time; exiting", zap.Strings("workers", hung), zap.Duration("timeout", g.o.WorkerStopTimeout))
			return fmt.Errorf("%w: %v still running %s after leadership ended", ErrWorkersHung, hung, g.o.WorkerStopTimeout)
		}
	}
	return nil
}

// status returns every worker's status at now and refreshes
// edihub_worker_stuck from it.
func (g *group) status(now time.Time) map[string]WorkerStatus {
	g.mu.Lock()
	ws := make(map[string]WorkerStatus, len(g.states))
	for name, w := range g.states {
		ws[name] = WorkerStatus{
			Running:     w.running,
			LastSuccess: w.lastSuccess,
			Restarts:    w.restarts,
			Stuck:       w.stuck(now),
			StuckAfter:  w.stuckAfter.Seconds(),
		}
	}
	g.mu.Unlock()
	for name, w := range ws {
		v := 0.0
		if w.Stuck {
			v = 1
		}
		g.m.workerStuck.WithLabelValues(name).Set(v)
	}
	return ws
}

// healthy returns an error wrapping ErrWorkersStuck naming the stuck
// workers, else nil.
func (g *group) healthy(now time.Time) error {
	var stuck []string
	for name, w := range g.status(now) {
		if w.Stuck {
			stuck = append(stuck, fmt.Sprintf("%s (no progress for %s)", name, time.Duration(w.StuckAfter*float64(time.Second))))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	sort.Strings(stuck)
	return fmt.Errorf("%w: %s", ErrWorkersStuck, strings.Join(stuck, ", "))
}

// supervise runs one worker for the term of ctx. A worker that returns
// while the term lasts, with an error or with nil, is logged, counted in
// edihub_worker_restarts_total and started again after a backoff (the
// retry period, doubling per early return up to the lease duration; reset
// when a run lasted longer than that). supervise returns when ctx ends,
// with the worker's last error, or at once with an error matching
// hub.ErrStaleFence, which ends the term.
func (g *group) supervise(ctx context.Context, log *zap.Logger, name string, w Worker) error {
	log = log.With(zap.String("worker", name))
	g.mu.Lock()
	ws := g.states[name]
	g.mu.Unlock()
	gauge := g.m.workerLastSuccess.WithLabelValues(name)
	pctx := withProgress(ctx, func() {
		gauge.SetToCurrentTime()
		g.mu.Lock()
		ws.lastSuccess = time.Now()
		g.mu.Unlock()
	})
	failures := 0
	for {
		started := time.Now()
		err := w.Run(pctx)
		switch {
		case ctx.Err() != nil:
			return err
		case errors.Is(err, hub.ErrStaleFence):
			return err
		}
		if time.Since(started) > g.o.LeaseDuration {
			failures = 0
		}
		failures++
		backoff := min(g.o.RetryPeriod<<min(failures-1, 10), g.o.LeaseDuration)
		g.m.workerRestarts.WithLabelValues(name).Inc()
		g.mu.Lock()
		ws.restarts++
		g.mu.Unlock()
		if err != nil {
			log.Error("worker failed; restarting it in this term", zap.Error(err), zap.Duration("backoff", backoff), zap.Int("in_a_row", failures))
		} else {
			log.Error("worker returned while this replica leads; restarting it", zap.Duration("backoff", backoff), zap.Int("in_a_row", failures))
		}
		if !Sleep(ctx, backoff) {
			return nil
		}
	}
}
