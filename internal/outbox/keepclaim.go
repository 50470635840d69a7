package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/postgres"
)

// keepClaim extends the claim on it every third of the lease while the
// item is built and sent, so that a large message taking longer than the
// lease is never claimed and posted again by another dispatcher (whose
// attempt would throw away this one's MDN). The returned stop ends it and
// waits. A claim found lost is logged and no longer extended.
func (d *Dispatcher) keepClaim(ctx context.Context, log *zap.Logger, it postgres.OutboxItem) (stop func()) {
	ext := d.o.Store
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d.o.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := ext.ExtendOutboxClaim(ctx, it, d.o.Lease); err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, postgres.ErrClaimLost) {
					log.Warn("outbox claim lost while sending; another dispatcher may send it again", zap.Error(err))
					return
				}
				log.Warn("extend outbox claim", zap.Error(err))
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
