package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseReleasedChannel is the LISTEN/NOTIFY channel on which ReleaseLease
// announces a released lease (the payload is the lease name), so followers
// take it at once instead of at their next poll.
const LeaseReleasedChannel = "edihub_leader_released"

// LeaseState is what AcquireLease saw.
type LeaseState struct {
	// Acquired is true when the call took (or re-took) the lease.
	Acquired bool
	// Holder is the lease's holder after the call; "" when released.
	Holder string
	// Token is the lease's token after the call: the new term's fencing
	// token when Acquired.
	Token int64
	// ExpiresIn is how long the lease stays valid by the database clock;
	// zero or negative when it has expired.
	ExpiresIn time.Duration
}

// AcquireLease takes the lease name for holder when it is free (absent,
// released or expired by the database clock) or already held by holder, in
// one statement, and makes it valid for d. Every acquisition increments the
// lease's token, which becomes the new term's fencing token; a lease row
// created (or re-created after a manual delete) starts above the highest
// token its fence has seen, so tokens never go back.
//
// When the lease is held by another replica, it returns Acquired false with
// the holder and the time left by the database clock.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, d time.Duration) (LeaseState, error) {
	if holder == "" {
		return LeaseState{}, errors.New("acquire lease: empty holder")
	}
	var st LeaseState
	var us int64
	err := s.pool.QueryRow(ctx, `
INSERT INTO leader_leases AS l (name, holder, token, acquired_at, renewed_at, expires_at)
VALUES ($1, $2, COALESCE((SELECT token FROM leader_fence WHERE lease = $1), 0) + 1, now(), now(), now() + $3 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder,
       token = GREATEST(l.token, COALESCE((SELECT token FROM leader_fence WHERE lease = $1), 0)) + 1,
       acquired_at = now(), renewed_at = now(), expires_at = EXCLUDED.expires_at
 WHERE l.holder = '' OR l.expires_at <= now() OR l.holder = EXCLUDED.holder
RETURNING token`, name, holder, d.Microseconds()).Scan(&st.Token)
	switch {
	case err == nil:
		st.Acquired, st.Holder, st.ExpiresIn = true, holder, d
		return st, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return LeaseState{}, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	err = s.pool.QueryRow(ctx, `
SELECT holder, token, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000000)::bigint
  FROM leader_leases WHERE name = $1`, name).Scan(&st.Holder, &st.Token, &us)
	if err != nil {
		return LeaseState{}, fmt.Errorf("read lease %s: %w", name, err)
	}
	st.ExpiresIn = time.Duration(us) * time.Microsecond
	return st, nil
}

// ErrLeaseLost reports a renewal or release of a lease the caller no longer
// holds (another replica took it, or it was deleted).
var ErrLeaseLost = errors.New("lease lost")

// RenewLease extends holder's lease to d from now (database clock), only if
// holder still holds it with token. It returns ErrLeaseLost otherwise.
func (s *Store) RenewLease(ctx context.Context, name, holder string, token int64, d time.Duration) error {
	tag, err := s.pool.Exec(ctx, `
UPDATE leader_leases SET renewed_at = now(), expires_at = now() + $4 * interval '1 microsecond'
 WHERE name = $1 AND holder = $2 AND token = $3`, name, holder, token, d.Microseconds())
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease %s: %w", name, ErrLeaseLost)
	}
	return nil
}

// ReleaseLease gives up holder's lease (token) at once: it clears the holder,
// expires the lease now and notifies LeaseReleasedChannel, in one
// statement. It returns ErrLeaseLost when holder no longer held it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, token int64) error {
	var n int
	err := s.pool.QueryRow(ctx, `
WITH r AS (
  UPDATE leader_leases SET holder = '', expires_at = now()
   WHERE name = $1 AND holder = $2 AND token = $3
  RETURNING name)
SELECT count(pg_notify($4, r.name)) FROM r`, name, holder, token, LeaseReleasedChannel).Scan(&n)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("release lease %s: %w", name, ErrLeaseLost)
	}
	return nil
}

// ListenLeaseReleases calls fn (on the calling goroutine) every time a
// lease named name is released, until ctx ends or the connection fails. It
// holds one pooled connection while it runs. It returns nil when ctx ends.
func (s *Store) ListenLeaseReleases(ctx context.Context, name string, fn func()) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen for lease releases: %w", err)
	}
	// The connection ends in LISTEN state: take it out of the pool and
	// close it rather than hand it back.
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{LeaseReleasedChannel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listen for lease releases: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listen for lease releases: %w", err)
		}
		if n.Payload == name {
			fn()
		}
	}
}

// DeleteLeaseForTest removes the lease row, as an operator might by hand.
// Tests of the elector use it to check that tokens keep increasing; edihub
// itself never deletes the row.
func (s *Store) DeleteLeaseForTest(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM leader_leases WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete lease %s: %w", name, err)
	}
	return nil
}
