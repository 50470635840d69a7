package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/hub"
)

// TestLoop: the step runs at once under the term's fence, a success marks
// progress and waits the interval, a failure waits the retry (and is
// logged as the first of its run), a wakeup cuts a wait short, a stale
// fence ends the loop with its error, and ctx's end ends it with nil.
func TestLoop(t *testing.T) {
	fence := hub.Fence{Lease: "l", Token: 7}
	transient := errors.New("database away")
	var mu sync.Mutex
	var steps []string
	var waits []time.Duration
	marks := 0
	results := []error{nil, transient, transient, nil, nil, fmt.Errorf("write: %w", hub.ErrStaleFence)}
	wake := make(chan struct{}, 1)
	core, logs := observer.New(zap.InfoLevel)
	l := Loop{
		Name:     "test step",
		Interval: time.Hour,
		Wake:     wake,
		Step: func(_ context.Context, f hub.Fence) error {
			mu.Lock()
			defer mu.Unlock()
			steps = append(steps, f.String())
			err := results[0]
			results = results[1:]
			return err
		},
		Logger: zap.New(core),
	}
	// Sleep records the waits; the fourth step's wait is cut short by a
	// wakeup through the default sleep.
	l.Sleep = func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		waits = append(waits, d.Round(time.Hour/2))
		n := len(waits)
		mu.Unlock()
		if n == 4 {
			wake <- struct{}{}
			return Loop{Wake: wake}.sleep(ctx, d)
		}
		return true
	}
	ctx := withProgress(WithFence(context.Background(), fence), func() { marks++ })
	err := l.Run(ctx)
	if !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("Run = %v, want the stale fence's error", err)
	}
	if len(steps) != 6 || steps[0] != fence.String() {
		t.Errorf("steps %v, want 6 under %s", steps, fence)
	}
	if marks != 3 {
		t.Errorf("MarkSuccess called %d times, want 3 (one per successful step)", marks)
	}
	want := []time.Duration{time.Hour, 0, 0, time.Hour, time.Hour}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits (rounded to half hours) %v, want %v: the interval after a success, the 100 ms and 200 ms retries after the failures", waits, want)
	}
	if n := logs.FilterMessage("test step failed; retrying").Len(); n != 2 {
		t.Errorf("%d failure lines, want 2 (the first and the second of the run)", n)
	}
	if n := logs.FilterMessage("test step succeeded again").Len(); n != 1 {
		t.Errorf("%d recovery lines, want 1", n)
	}

	// The end of ctx ends the loop with nil, in a wait or in a step.
	cctx, cancel := context.WithCancel(WithFence(context.Background(), fence))
	err = Loop{Name: "x", Interval: time.Hour, Logger: zap.NewNop(), Step: func(context.Context, hub.Fence) error {
		cancel()
		return transient
	}}.Run(cctx)
	if err != nil {
		t.Errorf("Run after ctx ended = %v, want nil", err)
	}
	if err := (Loop{Name: "x", Logger: zap.NewNop()}).Run(context.Background()); err == nil {
		t.Error("Run without a fence in ctx = nil, want an error")
	}
}

// TestLoopTiming: with the default sleep, on synctest's clock, a
// successful step starts the next one the interval after it started (its
// own duration included), failed steps in a row wait 100 ms, 200 ms,
// 400 ms, and a wakeup starts the next step at once.
func TestLoopTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		transient := errors.New("database away")
		results := []error{nil, transient, transient, transient, nil, nil, nil}
		wake := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(WithFence(context.Background(), hub.Fence{Lease: "l", Token: 1}))
		defer cancel()
		begin := time.Now()
		var starts []time.Duration
		err := Loop{
			Name: "timed", Interval: time.Second, Wake: wake, Logger: zap.NewNop(),
			Step: func(context.Context, hub.Fence) error {
				n := len(starts)
				starts = append(starts, time.Since(begin))
				time.Sleep(300 * time.Millisecond) // the step's work, on the virtual clock
				switch n {
				case 5:
					wake <- struct{}{} // a NOTIFY arrives during the step
				case 6:
					cancel()
				}
				return results[n]
			},
		}.Run(ctx)
		if err != nil {
			t.Fatalf("Run = %v, want nil after ctx ended", err)
		}
		ms := time.Millisecond
		want := []time.Duration{0, 1000 * ms, 1400 * ms, 1900 * ms, 2600 * ms, 3600 * ms, 3900 * ms}
		if fmt.Sprint(starts) != fmt.Sprint(want) {
			t.Errorf("step starts %v, want %v", starts, want)
		}
	})
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {60, time.Second}}
	for _, tt := range tests {
		if got := Backoff(tt.n, 100*time.Millisecond, time.Second); got != tt.want {
			t.Errorf("Backoff(%d, 100ms, 1s) = %s, want %s", tt.n, got, tt.want)
		}
	}
}
