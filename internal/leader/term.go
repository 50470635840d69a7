package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
)

// term is one leadership term while it is held: it renews the lease,
// confirms the term in PostgreSQL, and ends at the first of: shutdown, a
// lost lease, a stale fence, or the renew deadline passed without a
// renewal (of the lease or of the term in the database).
type term struct {
	e     *Elector
	fence hub.Fence
	log   *zap.Logger

	// lastRenew is the start of the last successful lease renewal,
	// lastTerm that of the last confirmation of the term in PostgreSQL.
	// Leadership ends at the earlier of the two plus the renew deadline.
	lastRenew, lastTerm time.Time
	// dbFailing is true while the term could not be confirmed (logged
	// once per outage).
	dbFailing bool
	deadline  *time.Timer
}

// termEnd says why a term ended and what follows.
type termEnd struct {
	reason string
	// release: the lease is still ours to give back; pause: back off
	// before campaigning again.
	release, pause bool
}

func (e *Elector) newTerm(token int64, acquiredAt time.Time) *term {
	return &term{
		e:         e,
		fence:     hub.Fence{Lease: e.o.LeaseName, Token: token},
		log:       e.log.With(zap.Int64("token", token)),
		lastRenew: acquiredAt,
		lastTerm:  acquiredAt,
	}
}

// open records the term in PostgreSQL before any worker starts. When it
// cannot, the lease is given up (or is no longer ours) and open returns
// false with the outcome for Run.
func (t *term) open(ctx context.Context) (leadOutcome, bool) {
	e := t.e
	octx, cancel := context.WithDeadline(ctx, t.lastRenew.Add(e.o.RenewDeadline))
	err := e.o.Terms.OpenTerm(octx, t.fence, e.o.Identity)
	cancel()
	switch {
	case err == nil:
		return leadOutcome{}, true
	case errors.Is(err, hub.ErrStaleFence):
		// A successor opened a newer term while we were between taking
		// the lease and opening ours: the lease is not ours any more.
		t.log.Warn("stepped down", zap.String("reason", "stale term: a newer term opened before ours"))
		if e.b.kind() == "kubernetes" {
			e.explainStaleTerm(ctx, t.log, t.fence.Token)
		}
		return leadOutcome{pause: true}, false
	case ctx.Err() != nil:
		e.releaseLease(ctx, t.log, t.fence.Token)
		return leadOutcome{}, false
	default:
		t.log.Warn("stepped down", zap.String("reason", "cannot open the term in the database"), zap.Error(err))
		e.releaseLease(ctx, t.log, t.fence.Token)
		return leadOutcome{pause: true}, false
	}
}

// until is when leadership ends without a further renewal.
func (t *term) until() time.Time {
	return minTime(t.lastTerm, t.lastRenew).Add(t.e.o.RenewDeadline)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// hold keeps the term until it ends, renewing every retry period and when
// the watch saw the lease change; workers are g's.
func (t *term) hold(ctx context.Context, g *group) termEnd {
	e := t.e
	t.deadline = time.NewTimer(time.Until(t.until()))
	defer t.deadline.Stop()
	tick := time.NewTicker(e.o.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return termEnd{reason: "shutting down", release: true}
		case r := <-g.results():
			// supervise returns before the term ends only on a stale
			// fence: a newer term opened, the lease is not ours.
			g.exited(r)
			if !errors.Is(r.err, hub.ErrStaleFence) {
				// ctx ended and this worker saw it first
				return termEnd{reason: "shutting down", release: true}
			}
			t.log.Error("worker refused by the fence", zap.String("worker", r.name), zap.Error(r.err))
			return termEnd{reason: "stale fence: worker " + r.name + " was refused, a newer term opened", pause: true}
		case <-t.deadline.C:
			if t.lastTerm.Before(t.lastRenew) {
				// The lease is ours but the database is out of reach:
				// give the lease up (we can still write it), so that a
				// replica that reaches the database takes over now, and
				// campaign again only once the database answers.
				return termEnd{reason: fmt.Sprintf("cannot confirm the term in the database for the renew deadline (%s)", e.o.RenewDeadline), release: true, pause: true}
			}
			return termEnd{reason: fmt.Sprintf("lease not renewed for the renew deadline (%s)", e.o.RenewDeadline)}
		case <-tick.C:
			if end, over := t.renew(ctx); over {
				return end
			}
			g.status(time.Now()) // refresh edihub_worker_stuck
		case <-e.changed:
			// The watch saw the lease change hands or vanish: renew now
			// to find out, rather than at the next tick.
			if end, over := t.renew(ctx); over {
				return end
			}
		}
	}
}

// renew renews the lease once and confirms the term, then moves the
// deadline; over is true when the term ended. While shutting down it
// returns not over: hold sees ctx end next.
func (t *term) renew(ctx context.Context) (end termEnd, over bool) {
	if reason := t.renewLease(ctx); reason != "" {
		return termEnd{reason: reason}, true
	}
	if ctx.Err() != nil {
		return termEnd{}, false
	}
	if end, over := t.confirm(ctx); over {
		return end, true
	}
	t.deadline.Reset(time.Until(t.until()))
	return termEnd{}, false
}

// renewLease renews the lease once; it returns why leadership ended, or "".
func (t *term) renewLease(ctx context.Context) string {
	e := t.e
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx, t.lastRenew.Add(e.o.RenewDeadline))
	err := e.b.renew(rctx, t.fence.Token)
	cancel()
	e.m.renewDuration.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		t.lastRenew = start
	case ctx.Err() != nil:
	case errors.Is(err, errLost):
		e.m.renewFailures.Inc()
		return "lease lost: " + err.Error()
	default:
		e.m.renewFailures.Inc()
		t.log.Warn("lease renewal failed", zap.Error(err), zap.Duration("left", time.Until(t.lastRenew.Add(e.o.RenewDeadline))))
	}
	return ""
}

// confirm confirms the term in PostgreSQL; over is true when a newer term
// opened there.
func (t *term) confirm(ctx context.Context) (end termEnd, over bool) {
	e := t.e
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, t.lastTerm.Add(e.o.RenewDeadline))
	err := e.o.Terms.CheckTerm(cctx, t.fence)
	cancel()
	switch {
	case err == nil:
		t.lastTerm = start
		if t.dbFailing {
			t.log.Info("term confirmed in the database again")
		}
		t.dbFailing = false
	case ctx.Err() != nil:
	case errors.Is(err, hub.ErrStaleFence):
		return termEnd{reason: "stale fence: a newer term opened in the database", pause: true}, true
	default:
		if !t.dbFailing {
			t.log.Warn("cannot confirm the term in the database", zap.Error(err), zap.Duration("left", time.Until(t.lastTerm.Add(e.o.RenewDeadline))))
		}
		t.dbFailing = true
	}
	return termEnd{}, false
}
