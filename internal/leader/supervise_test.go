package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/hub"
)

// journal records events from every party, in order, and signals each
// new event to await.
type journal struct {
	mu      sync.Mutex
	ev      []string
	changed chan struct{} // closed by the next add
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ev = append(j.ev, fmt.Sprintf(format, args...))
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
}

// await blocks until cond holds for the events so far; it fails the test
// when cond does not hold within a bound that only ends a test that would
// otherwise hang (under synctest the bound is virtual time).
func (j *journal) await(t *testing.T, what string, cond func(ev []string) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		j.mu.Lock()
		ok := cond(j.ev)
		if j.changed == nil {
			j.changed = make(chan struct{})
		}
		changed := j.changed
		j.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no %s within 30s; events %v", what, j.events())
		}
	}
}

// awaitEvent blocks until e is in the journal.
func (j *journal) awaitEvent(t *testing.T, e string) {
	t.Helper()
	j.await(t, strconv.Quote(e), func(ev []string) bool { return slices.Contains(ev, e) })
}

// count is the number of events with prefix.
func count(ev []string, prefix string) int {
	n := 0
	for _, e := range ev {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

func (j *journal) events() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.ev)
}

func (j *journal) index(e string) int { return slices.Index(j.events(), e) }

// fakeLease is an in-memory backend: every acquisition succeeds with the
// next token unless held; renewals fail as told.
type fakeLease struct {
	j         *journal
	mu        sync.Mutex
	token     int64
	held      bool
	renewErr  error
	renewHang bool
}

func (f *fakeLease) kind() string { return "fake" }

func (f *fakeLease) preflight(context.Context) {}

func (f *fakeLease) watch(ctx context.Context, _ func()) error { <-ctx.Done(); return nil }

func (f *fakeLease) tryAcquire(context.Context) (attempt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		return attempt{holder: "other", retryIn: 10 * time.Millisecond}, nil
	}
	f.token++
	f.held = true
	f.j.add("acquire %d", f.token)
	return attempt{acquired: true, token: f.token, holder: "me"}, nil
}

func (f *fakeLease) renew(ctx context.Context, token int64) error {
	f.mu.Lock()
	err, hang := f.renewErr, f.renewHang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if err != nil {
		f.mu.Lock()
		if errors.Is(err, errLost) {
			f.held = false
		}
		f.mu.Unlock()
		return err
	}
	return nil
}

func (f *fakeLease) release(_ context.Context, token int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
	f.j.add("release %d", token)
	return nil
}

func (f *fakeLease) set(renewErr error, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewErr, f.renewHang = renewErr, hang
}

// fakeTerms opens terms like postgres.Store.OpenTerm, in memory.
type fakeTerms struct {
	j     *journal
	mu    sync.Mutex
	fence int64
	stale bool // refuse every term as stale
	// dbErr, when set, is what CheckTerm and Ping return: the database
	// is out of reach.
	dbErr error
}

func (t *fakeTerms) CheckTerm(_ context.Context, f hub.Fence) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.dbErr != nil:
		return t.dbErr
	case f.Token != t.fence:
		return fmt.Errorf("check term: %w", hub.ErrStaleFence)
	}
	return nil
}

func (t *fakeTerms) Ping(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.j.add("ping")
	return t.dbErr
}

func (t *fakeTerms) CurrentTerm(context.Context, string) (hub.Term, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return hub.Term{Token: t.fence}, nil
}

func (t *fakeTerms) setDB(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dbErr = err
}

func (t *fakeTerms) OpenTerm(_ context.Context, f hub.Fence, holder string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stale || f.Token <= t.fence {
		t.j.add("stale term %d", f.Token)
		return fmt.Errorf("open term: %w", hub.ErrStaleFence)
	}
	t.fence = f.Token
	t.j.add("open term %d", f.Token)
	return nil
}

// recordingWorker logs its start and stop with its term's token, and
// tracks how many terms have workers running at once.
type recordingWorker struct {
	name    string
	j       *journal
	terms   *termCounter
	fail    chan error    // a value makes Run return it
	ignore  chan struct{} // when non-nil, Run ignores ctx until closed
	started chan int64
}

type termCounter struct {
	mu      sync.Mutex
	running map[int64]int
	maxSeen int
}

func (c *termCounter) enter(tok int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[tok]++
	c.maxSeen = max(c.maxSeen, len(c.running))
}

func (c *termCounter) leave(tok int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[tok]--; c.running[tok] == 0 {
		delete(c.running, tok)
	}
}

func (w *recordingWorker) Run(ctx context.Context) error {
	f, ok := FenceFrom(ctx)
	if !ok {
		return errors.New("no fence")
	}
	w.terms.enter(f.Token)
	defer w.terms.leave(f.Token)
	w.j.add("%s start %d", w.name, f.Token)
	defer w.j.add("%s stop %d", w.name, f.Token)
	if w.started != nil {
		w.started <- f.Token
	}
	if w.ignore != nil {
		<-w.ignore
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-w.fail:
		return err
	}
}

type harness struct {
	j       *journal
	lease   *fakeLease
	terms   *fakeTerms
	counter *termCounter
	a, b    *recordingWorker
	e       *Elector
	reg     *prometheus.Registry
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	j := &journal{}
	h := &harness{j: j, lease: &fakeLease{j: j}, terms: &fakeTerms{j: j}, counter: &termCounter{running: map[int64]int{}}, reg: prometheus.NewRegistry()}
	h.a = &recordingWorker{name: "a", j: j, terms: h.counter, fail: make(chan error, 1), started: make(chan int64, 16)}
	h.b = &recordingWorker{name: "b", j: j, terms: h.counter, fail: make(chan error, 1)}
	o := Options{
		LeaseName: "test", Identity: "me",
		LeaseDuration: 400 * time.Millisecond, RenewDeadline: 200 * time.Millisecond, RetryPeriod: 20 * time.Millisecond,
		WorkerStopTimeout: 150 * time.Millisecond,
		Workers:           map[string]Worker{"a": h.a, "b": h.b},
		Terms:             h.terms, Logger: zaptest.NewLogger(t), Registerer: h.reg,
	}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	e, err := newElector(o, h.lease)
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	return h
}

// start runs the elector; the returned function cancels it and returns
// Run's error.
func (h *harness) start(t *testing.T) (stop func() error, done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	returned := make(chan struct{})
	go func() { ch <- h.e.Run(ctx); close(returned) }()
	// On failure too, Run ends before the test does: it logs to the test.
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return 30s after cancel")
		}
	})
	return func() error {
		cancel()
		select {
		case err := <-ch:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
			return nil
		}
	}, ch
}

func waitStart(t *testing.T, w *recordingWorker) int64 {
	t.Helper()
	select {
	case tok := <-w.started:
		return tok
	case <-time.After(5 * time.Second):
		t.Fatalf("worker %s did not start", w.name)
		return 0
	}
}

func TestShutdownStopsWorkersThenReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stop, _ := h.start(t)
		tok := waitStart(t, h.a)
		if st := h.e.Status(); !st.IsLeader || st.FencingToken != tok || st.Holder != "me" {
			t.Errorf("Status while leading = %+v", st)
		}
		if got := testutil.ToFloat64(h.e.m.isLeader); got != 1 {
			t.Errorf("edihub_leader_is_leader = %v, want 1", got)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
		rel := h.j.index(fmt.Sprintf("release %d", tok))
		for _, w := range []string{"a", "b"} {
			s := h.j.index(fmt.Sprintf("%s stop %d", w, tok))
			if s < 0 || rel < 0 || s > rel {
				t.Errorf("events %v: want %s stopped before the release", h.j.events(), w)
			}
		}
		if st := h.e.Status(); st.IsLeader {
			t.Errorf("Status after shutdown = %+v, want not leader", st)
		}
		if got := testutil.ToFloat64(h.e.m.transitions); got != 2 {
			t.Errorf("transitions = %v, want 2", got)
		}
	})
}

func TestLossStopsWorkersAndCampaignsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stop, _ := h.start(t)
		first := waitStart(t, h.a)
		h.lease.set(fmt.Errorf("%w: taken", errLost), false)
		// The lease is free again at once in the fake: once the term ended,
		// the elector takes it back with a new token and a new term.
		h.j.awaitEvent(t, fmt.Sprintf("a stop %d", first))
		h.lease.set(nil, false)
		second := waitStart(t, h.a)
		if second <= first {
			t.Errorf("second term token %d, want > %d", second, first)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		ev := h.j.events()
		if slices.Contains(ev, fmt.Sprintf("release %d", first)) {
			t.Errorf("events %v: a lost lease was released", ev)
		}
		for _, w := range []string{"a", "b"} {
			s, o := h.j.index(fmt.Sprintf("%s stop %d", w, first)), h.j.index(fmt.Sprintf("open term %d", second))
			if s < 0 || s > o {
				t.Errorf("events %v: worker %s of term %d still running when term %d opened", ev, w, first, second)
			}
		}
		if h.counter.maxSeen != 1 {
			t.Errorf("workers of %d terms ran at once, want 1", h.counter.maxSeen)
		}
	})
}

func TestRenewDeadlineStepsDown(t *testing.T) {
	tests := []struct {
		name string
		err  error
		hang bool
	}{
		{name: "renewals fail", err: errors.New("connection refused")},
		{name: "renewals hang", hang: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				stop, _ := h.start(t)
				tok := waitStart(t, h.a)
				h.lease.set(tt.err, tt.hang)
				cut := time.Now()
				// The workers stop within the renew deadline after the last
				// good renewal, itself at most a jittered retry period before
				// the cut (the clock is synctest's).
				h.j.awaitEvent(t, fmt.Sprintf("a stop %d", tok))
				if took, most := time.Since(cut), h.e.o.RenewDeadline+h.e.o.RetryPeriod*6/5; took > most {
					t.Errorf("workers stopped %s after renewals broke, want at most %s (renew deadline %s)", took, most, h.e.o.RenewDeadline)
				}
				if got := testutil.ToFloat64(h.e.m.renewFailures); got == 0 && !tt.hang {
					t.Error("edihub_leader_renew_failures_total = 0")
				}
				h.lease.set(nil, false)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestWorkerReturnRestartsItInsideTheTerm: a worker's error, or a worker
// returning nil while the replica leads, costs neither the lease nor the
// other workers: the worker starts again in the same term after a backoff.
func TestWorkerReturnRestartsItInsideTheTerm(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{name: "transient error", err: errors.New("connection reset by peer")},
		{name: "early nil return", err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				stop, _ := h.start(t)
				first := waitStart(t, h.a)
				h.a.fail <- tt.err
				second := waitStart(t, h.a)
				if second != first {
					t.Errorf("worker restarted in term %d, want the same term %d", second, first)
				}
				if got := testutil.ToFloat64(h.e.m.workerRestarts.WithLabelValues("a")); got != 1 {
					t.Errorf("edihub_worker_restarts_total{worker=a} = %v, want 1", got)
				}
				st := h.e.Status()
				if !st.IsLeader || st.FencingToken != first || st.Workers["a"].Restarts != 1 || !st.Workers["a"].Running {
					t.Errorf("Status after the restart = %+v", st)
				}
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				ev := h.j.events()
				if n := strings.Count(strings.Join(ev, "\n"), "acquire"); n != 1 {
					t.Errorf("events %v: the lease was acquired %d times, want once", ev, n)
				}
				// b ran on undisturbed until the shutdown released the lease.
				b, rel := h.j.index(fmt.Sprintf("b stop %d", first)), h.j.index(fmt.Sprintf("release %d", first))
				if b < 0 || rel < 0 || b > rel {
					t.Errorf("events %v: want worker b stopped only at shutdown, then the release", ev)
				}
				if strings.Count(strings.Join(ev, "\n"), fmt.Sprintf("b start %d", first)) != 1 {
					t.Errorf("events %v: worker b restarted, want it undisturbed", ev)
				}
			})
		})
	}
}

// TestWorkerRestartBackoff: on synctest's clock, a worker that returns at
// once is started again after the retry period, doubling per return in a
// row up to the lease duration; a run longer than the lease duration
// resets the backoff to the retry period.
func TestWorkerRestartBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t) // retry period 20ms, lease duration 400ms
		var mu sync.Mutex
		var starts []time.Time
		eighth := make(chan struct{})
		h.e.o.Workers["flaky"] = WorkerFunc(func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, time.Now())
			n := len(starts)
			mu.Unlock()
			switch n {
			case 7: // a run longer than the lease duration
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(h.e.o.LeaseDuration + time.Millisecond):
				}
			case 8:
				close(eighth)
				<-ctx.Done()
				return nil
			}
			return errors.New("connection reset by peer")
		})
		stop, _ := h.start(t)
		select {
		case <-eighth:
		case <-time.After(time.Minute):
			t.Fatal("the worker was not started an eighth time within a minute")
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var gaps []time.Duration
		for i := 1; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1]))
		}
		ms := time.Millisecond
		want := []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 400 * ms, 421 * ms}
		if fmt.Sprint(gaps) != fmt.Sprint(want) {
			t.Errorf("gaps between the worker's starts %v, want %v", gaps, want)
		}
	})
}

// TestStaleFenceEndsTheTerm: a worker refused by the fence ends the term
// (a newer term opened); the replica pauses and campaigns again, and does
// not release a lease that is no longer its own.
func TestStaleFenceEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stop, _ := h.start(t)
		first := waitStart(t, h.a)
		// The fake lease stays held; free it as a successor's would be.
		h.lease.mu.Lock()
		h.lease.held = false
		h.lease.mu.Unlock()
		h.a.fail <- fmt.Errorf("heartbeat: %w", hub.ErrStaleFence)
		second := waitStart(t, h.a)
		if second <= first {
			t.Fatalf("token after the stale fence %d, want > %d", second, first)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		ev := h.j.events()
		if slices.Contains(ev, fmt.Sprintf("release %d", first)) {
			t.Errorf("events %v: the stale term released the lease", ev)
		}
		b, o := h.j.index(fmt.Sprintf("b stop %d", first)), h.j.index(fmt.Sprintf("open term %d", second))
		if b < 0 || o < 0 || b > o {
			t.Errorf("events %v: want worker b of term %d stopped before term %d opened", ev, first, second)
		}
		if got := testutil.ToFloat64(h.e.m.workerRestarts.WithLabelValues("a")); got != 0 {
			t.Errorf("edihub_worker_restarts_total{worker=a} = %v, want 0 (the term ended)", got)
		}
	})
}

// TestLeaderCutFromTheDatabaseStepsDown: a leader that still renews its
// lease but cannot confirm its term in the database for the renew deadline
// stops its workers, releases the lease so that a replica that reaches the
// database takes over, and does not campaign again until the database
// answers.
func TestLeaderCutFromTheDatabaseStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stop, _ := h.start(t)
		first := waitStart(t, h.a)
		h.terms.setDB(errors.New("dial tcp: i/o timeout"))
		h.j.awaitEvent(t, fmt.Sprintf("release %d", first))
		for _, w := range []string{"a", "b"} {
			if s := h.j.index(fmt.Sprintf("%s stop %d", w, first)); s < 0 || s > h.j.index(fmt.Sprintf("release %d", first)) {
				t.Errorf("events %v: worker %s not stopped before the release", h.j.events(), w)
			}
		}
		// While the database is away it does not take the lease again, though
		// the lease is free: wait for many pings (each a retry period apart).
		pings := count(h.j.events(), "ping")
		h.j.await(t, "5 more pings of the database (the follower keeps checking it)", func(ev []string) bool { return count(ev, "ping") >= pings+5 })
		if slices.Contains(h.j.events(), fmt.Sprintf("acquire %d", first+1)) {
			t.Fatalf("events %v: the lease was taken again while the database was away", h.j.events())
		}
		h.terms.setDB(nil)
		if second := waitStart(t, h.a); second <= first {
			t.Errorf("term after the database came back %d, want > %d", second, first)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTermCheckSeesAStaleFence: a renewal's term check that finds a newer
// term in the database ends the term at once, without releasing.
func TestTermCheckSeesAStaleFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stop, _ := h.start(t)
		first := waitStart(t, h.a)
		h.lease.mu.Lock()
		h.lease.held = false // a successor took the lease...
		h.lease.token++      // ...with a newer token...
		h.lease.mu.Unlock()
		h.terms.mu.Lock()
		h.terms.fence = first + 1 // ...and opened its term
		h.terms.mu.Unlock()
		second := waitStart(t, h.a)
		if second <= first+1 {
			t.Errorf("next term %d, want > %d", second, first+1)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(h.j.events(), fmt.Sprintf("release %d", first)) {
			t.Errorf("events %v: a stale term released the lease", h.j.events())
		}
	})
}

// daily is a worker that declares it may go without progress for ever.
type daily struct{}

func (daily) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (daily) StuckAfter() time.Duration     { return 0 }

// TestStuckWorkerFailsHealth: a worker that makes no progress for the
// stuck-after time while the replica leads shows in Status, in
// edihub_worker_stuck and in Healthy; one that marks progress, one that
// declares no deadline, and every worker of a follower do not.
func TestStuckWorkerFailsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.e.o.StuckAfter = 300 * time.Millisecond
		h.e.o.Workers["daily"] = daily{}
		h.e.o.Workers["progress"] = WorkerFunc(func(ctx context.Context) error {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				MarkSuccess(ctx)
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		})
		if err := h.e.Healthy(); err != nil {
			t.Fatalf("Healthy before leading = %v", err)
		}
		stop, _ := h.start(t)
		waitStart(t, h.a)
		// The clock is synctest's: the term began when a started. Sleeping
		// advances it to just before and just past the stuck-after time.
		time.Sleep(h.e.o.StuckAfter - time.Millisecond)
		if err := h.e.Healthy(); err != nil {
			t.Fatalf("Healthy %s into the term = %v, want nil (stuck after %s)", h.e.o.StuckAfter-time.Millisecond, err, h.e.o.StuckAfter)
		}
		time.Sleep(2 * time.Millisecond)
		err := h.e.Healthy()
		if !errors.Is(err, ErrWorkersStuck) || !strings.Contains(err.Error(), "a (no progress for 300ms)") || strings.Contains(err.Error(), "progress (") || strings.Contains(err.Error(), "daily") {
			t.Errorf("Healthy = %v, want ErrWorkersStuck naming a and b only", err)
		}
		st := h.e.Status()
		for name, want := range map[string]bool{"a": true, "b": true, "progress": false, "daily": false} {
			if got := st.Workers[name].Stuck; got != want {
				t.Errorf("Status().Workers[%s].Stuck = %v, want %v (%+v)", name, got, want, st.Workers[name])
			}
			v := 0.0
			if want {
				v = 1
			}
			if got := testutil.ToFloat64(h.e.m.workerStuck.WithLabelValues(name)); got != v {
				t.Errorf("edihub_worker_stuck{worker=%s} = %v, want %v", name, got, v)
			}
		}
		if st.Workers["progress"].LastSuccess.IsZero() {
			t.Errorf("Status().Workers[progress].LastSuccess is zero")
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := h.e.Healthy(); err != nil {
			t.Errorf("Healthy after the term ended = %v, want nil", err)
		}
		if got := testutil.ToFloat64(h.e.m.workerStuck.WithLabelValues("a")); got != 0 {
			t.Errorf("edihub_worker_stuck{worker=a} after the term = %v, want 0", got)
		}
	})
}

func TestHungWorkerEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.b.ignore = make(chan struct{})
		defer close(h.b.ignore) // let the hung goroutine end for goleak
		_, done := h.start(t)
		tok := waitStart(t, h.a)
		h.lease.set(fmt.Errorf("%w: taken", errLost), false)
		select {
		case err := <-done:
			if !errors.Is(err, ErrWorkersHung) || !strings.Contains(err.Error(), "[b]") {
				t.Fatalf("Run = %v, want ErrWorkersHung naming b", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("Run did not return with a hung worker")
		}
		if slices.Contains(h.j.events(), fmt.Sprintf("open term %d", tok+1)) {
			t.Errorf("events %v: a new term opened while a worker hung", h.j.events())
		}
	})
}

func TestStaleTermStartsNoWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.terms.stale = true
		stop, _ := h.start(t)
		for n := 1; n <= 2; n++ {
			h.j.await(t, fmt.Sprintf("stale term attempt %d", n), func(ev []string) bool { return count(ev, "stale term") >= n })
			// The fake lease stays held after a stale term (nothing released);
			// free it as a successor's expiry would.
			h.lease.mu.Lock()
			h.lease.held = false
			h.lease.mu.Unlock()
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, e := range h.j.events() {
			if strings.Contains(e, "start") || strings.HasPrefix(e, "release") {
				t.Errorf("event %q after stale terms only", e)
			}
		}
	})
}

func TestValidateTiming(t *testing.T) {
	s := time.Second
	tests := []struct {
		name                        string
		lease, renew, retry, stopTO time.Duration
		wantField                   string
	}{
		{"defaults", 30 * s, 10 * s, 2 * s, 5 * s, ""},
		{"zero lease", 0, 10 * s, 2 * s, 5 * s, "lease-duration"},
		{"negative retry", 30 * s, 10 * s, -s, 5 * s, "retry-period"},
		{"zero stop timeout", 30 * s, 10 * s, 2 * s, 0, "worker-stop-timeout"},
		{"lease not above deadline", 10 * s, 10 * s, 2 * s, 5 * s, "lease-duration"},
		{"deadline within jittered retry", 30 * s, 12 * s, 10 * s, 5 * s, "renew-deadline"},
		{"workers may outlive the lease", 30 * s, 20 * s, 2 * s, 8 * s, "worker-stop-timeout"},
		{"workers stop just in time", 30 * s, 20 * s, 2 * s, 8*s - time.Millisecond, ""},
	}
	for _, tt := range tests {
		err := ValidateTiming(tt.lease, tt.renew, tt.retry, tt.stopTO)
		var te *TimingError
		switch {
		case tt.wantField == "" && err != nil:
			t.Errorf("%s: ValidateTiming = %v, want nil", tt.name, err)
		case tt.wantField != "" && (!errors.As(err, &te) || te.Field != tt.wantField):
			t.Errorf("%s: ValidateTiming = %v, want a TimingError on %s", tt.name, err, tt.wantField)
		}
	}
}

func TestFenceFrom(t *testing.T) {
	if _, ok := FenceFrom(context.Background()); ok {
		t.Error("FenceFrom(Background) ok = true")
	}
	want := hub.Fence{Lease: "l", Token: 7}
	if got, ok := FenceFrom(WithFence(context.Background(), want)); !ok || got != want {
		t.Errorf("FenceFrom = %v, %v; want %v, true", got, ok, want)
	}
}

func TestMarkSuccessSetsTheWorkersGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		MarkSuccess(context.Background()) // outside a worker: no effect, no panic
		h := newHarness(t)
		marked := make(chan struct{})
		h.e.o.Workers["progress"] = WorkerFunc(func(ctx context.Context) error {
			MarkSuccess(ctx)
			close(marked)
			<-ctx.Done()
			return nil
		})
		stop, _ := h.start(t)
		select {
		case <-marked:
		case <-time.After(5 * time.Second):
			t.Fatal("worker did not run")
		}
		if got := testutil.ToFloat64(h.e.m.workerLastSuccess.WithLabelValues("progress")); got < float64(time.Now().Add(-time.Hour).Unix()) {
			t.Errorf("edihub_worker_last_success_timestamp_seconds{worker=progress} = %v, want about now", got)
		}
		if got := testutil.ToFloat64(h.e.m.workerLastSuccess.WithLabelValues("a")); got != 0 {
			t.Errorf("edihub_worker_last_success_timestamp_seconds{worker=a} = %v, want 0 (never marked)", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
