package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
)

// Step is one cycle of a periodic leader-gated worker, run under the
// term's fence f. It returns nil when the cycle's work is done, an error
// matching hub.ErrStaleFence when a newer term refused it, and any
// other error when it should be tried again.
type Step func(ctx context.Context, f hub.Fence) error

// Loop runs a Step for as long as its term lasts: the loop every periodic
// leader-gated worker has, so that a worker is only its step. See Run.
type Loop struct {
	// Name names the work in log lines ("heartbeat", "MDN poll").
	Name string
	// FailedMsg and RecoveredMsg are the log messages of a failed step
	// and of the first success after failures; default Name+" failed;
	// retrying" and Name+" succeeded again".
	FailedMsg, RecoveredMsg string
	// Step is the cycle. Required.
	Step Step
	// Interval is the time from the start of one successful step to the
	// start of the next. Required unless Next is set.
	Interval time.Duration
	// Next, when set, gives that wait instead of Interval (a schedule).
	Next func() time.Duration
	// Wake, when set, starts a step at once when it delivers (a
	// LISTEN/NOTIFY wakeup).
	Wake <-chan struct{}
	// Retry gives the wait after the n-th failed step in a row (n ≥ 1)
	// that failed with err. Default: 100 ms doubling, at most Interval
	// and 30 s.
	Retry func(n int, err error) time.Duration
	// Failed, when set, is called for each failed step (before the wait)
	// and does the logging; by default the first failure of a run and
	// then every power of two are logged as warnings.
	Failed func(n int, err error, retryIn time.Duration)
	// Sleep waits for d or until ctx ends and reports whether d elapsed;
	// tests replace it. Default: a timer, cut short by Wake.
	Sleep func(ctx context.Context, d time.Duration) bool
	// Logger is required.
	Logger *zap.Logger
}

// Run runs the step at once, then after each wait (Interval, Next, or
// Retry after a failure) until ctx ends, and returns nil then. A step
// that returns nil counts as progress (MarkSuccess); one refused for a
// stale fence ends the loop: Run returns its error, which ends the term.
// Run returns an error at once when ctx carries no fence (it must run as
// a leader-gated worker).
func (l Loop) Run(ctx context.Context) error {
	f, ok := FenceFrom(ctx)
	if !ok {
		return fmt.Errorf("%s: no fence in the context (run it as a leader-gated worker)", l.Name)
	}
	failures := 0
	for {
		start := time.Now()
		err := l.Step(ctx, f)
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, hub.ErrStaleFence):
			return err
		case err != nil:
			failures++
			wait = l.retry(failures, err)
			l.failed(failures, err, wait)
		default:
			if failures > 0 {
				l.Logger.Info(cmp.Or(l.RecoveredMsg, l.Name+" succeeded again"), zap.Int("after_failures", failures))
			}
			failures = 0
			MarkSuccess(ctx)
			wait = l.interval() - time.Since(start)
		}
		if !l.sleep(ctx, max(wait, 0)) {
			return nil
		}
	}
}

func (l Loop) interval() time.Duration {
	if l.Next != nil {
		return l.Next()
	}
	return l.Interval
}

func (l Loop) retry(n int, err error) time.Duration {
	if l.Retry != nil {
		return l.Retry(n, err)
	}
	return Backoff(n, 100*time.Millisecond, min(l.interval(), 30*time.Second))
}

func (l Loop) failed(n int, err error, wait time.Duration) {
	if l.Failed != nil {
		l.Failed(n, err, wait)
		return
	}
	if n&(n-1) == 0 { // 1, 2, 4, 8, …: an outage does not flood the log
		l.Logger.Warn(cmp.Or(l.FailedMsg, l.Name+" failed; retrying"), zap.Error(err), zap.Int("failures", n), zap.Duration("retry_in", wait))
	}
}

func (l Loop) sleep(ctx context.Context, d time.Duration) bool {
	if l.Sleep != nil {
		return l.Sleep(ctx, d)
	}
	return sleepOrWake(ctx, d, l.Wake)
}

// sleepOrWake waits for d, or until wake delivers (nil: never) or ctx
// ends; it reports whether ctx is still going.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// Backoff is the wait after the n-th failure in a row (n ≥ 1): first,
// doubling per failure, at most ceil.
func Backoff(n int, first, ceil time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < ceil; i++ {
		d *= 2
	}
	return min(d, ceil)
}
