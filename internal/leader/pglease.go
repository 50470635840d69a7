package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edihub/edihub/internal/postgres"
)

// LeaseStore keeps the lease row of the Postgres backend. *postgres.Store
// implements it.
type LeaseStore interface {
	Terms
	AcquireLease(ctx context.Context, name, holder string, d time.Duration) (postgres.LeaseState, error)
	RenewLease(ctx context.Context, name, holder string, token int64, d time.Duration) error
	ReleaseLease(ctx context.Context, name, holder string, token int64) error
	ListenLeaseReleases(ctx context.Context, name string, fn func()) error
}

// NewPostgres returns an Elector on a lease row in PostgreSQL, judged by
// the database clock: replicas' clocks never matter. The row's counter,
// incremented at each acquisition, is the fencing token. Followers poll
// every retry period, try again exactly when the lease expires by the
// database clock, and take a released lease at once (LISTEN/NOTIFY).
// o.Terms defaults to store.
func NewPostgres(store LeaseStore, o Options) (*Elector, error) {
	if store == nil {
		return nil, errors.New("leader: nil lease store")
	}
	if o.Terms == nil {
		o.Terms = store
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return newElector(o, &pgLease{store: store, name: o.LeaseName, identity: o.Identity, duration: o.LeaseDuration, retry: o.RetryPeriod})
}

type pgLease struct {
	store    LeaseStore
	name     string
	identity string
	duration time.Duration
	retry    time.Duration
}

func (l *pgLease) kind() string { return "postgres" }

// preflight has nothing to check: the database answered the term's ping.
func (l *pgLease) preflight(context.Context) {}

func (l *pgLease) watch(ctx context.Context, changed func()) error {
	for {
		err := l.store.ListenLeaseReleases(ctx, l.name, changed)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // the database is away; polling goes on, listen again later
		if !Sleep(ctx, l.retry) {
			return nil
		}
		changed() // a release may have been missed meanwhile
	}
}

func (l *pgLease) tryAcquire(ctx context.Context) (attempt, error) {
	st, err := l.store.AcquireLease(ctx, l.name, l.identity, l.duration)
	if err != nil {
		return attempt{}, err
	}
	return attempt{acquired: st.Acquired, token: st.Token, holder: st.Holder, holderToken: st.Token, retryIn: st.ExpiresIn}, nil
}

func (l *pgLease) renew(ctx context.Context, token int64) error {
	err := l.store.RenewLease(ctx, l.name, l.identity, token, l.duration)
	if errors.Is(err, postgres.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", errLost, err)
	}
	return err
}

func (l *pgLease) release(ctx context.Context, token int64) error {
	err := l.store.ReleaseLease(ctx, l.name, l.identity, token)
	if errors.Is(err, postgres.ErrLeaseLost) {
		return nil // someone else holds it: nothing to give up
	}
	return err
}
