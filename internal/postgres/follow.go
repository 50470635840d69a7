package postgres

import (
	"context"
	"time"
)

// KeepListening runs listen (one of the Store's Listen methods, which
// return when their connection fails) again and again until ctx ends,
// waiting retry between two runs; failed is told of each failure. wake
// is called as listen calls it: once listening, and on each
// notification. It returns when ctx ends. A replica's views of what
// the database holds (partners, connectors) run it beside their
// periodic resync, which catches what a lost connection missed.
func KeepListening(ctx context.Context, listen func(ctx context.Context, wake func()) error, wake func(), retry time.Duration, failed func(error)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for ctx.Err() == nil {
		if err := listen(ctx, wake); err != nil && ctx.Err() == nil {
			failed(err)
		}
		t.Reset(retry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Follow runs KeepListening in a goroutine of its own and returns the
// wake-ups as a channel that holds at most one (a burst of notifications
// is one reload), and a function that waits for the goroutine to end once
// ctx has. It is the listening half of a replica's live view; the view
// selects on the channel beside its resync ticker.
func Follow(ctx context.Context, listen func(ctx context.Context, wake func()) error, retry time.Duration, failed func(error)) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		KeepListening(ctx, listen, notify, retry, failed)
	}()
	return wake, func() { <-done }
}
