package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/hub"
)

// FencedInsertBeat runs a fenced transaction that inserts a heartbeat row
// and then calls hold before committing, so tests can keep it open.
func (s *Store) FencedInsertBeat(ctx context.Context, f hub.Fence, holder string, hold func()) error {
	return s.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO leader_heartbeats (lease, token, holder) VALUES ($1, $2, $3)`, f.Lease, f.Token, holder); err != nil {
			return err
		}
		hold()
		return nil
	})
}

// DeleteLease removes a lease row, as an operator might.
func (s *Store) DeleteLease(ctx context.Context, name string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM leader_leases WHERE name = $1`, name)
	return err
}

// ExpireLease moves a lease's expiry into the past.
func (s *Store) ExpireLease(ctx context.Context, name string) error {
	_, err := s.pool.Exec(ctx, `UPDATE leader_leases SET expires_at = now() - interval '1 second' WHERE name = $1`, name)
	return err
}

// AgeHeartbeats moves the beat time of the lease's beats with the given ids
// back by d, so retention can be tested without sleeping.
func (s *Store) AgeHeartbeats(ctx context.Context, lease string, d time.Duration, ids ...int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE leader_heartbeats SET beat_at = beat_at - $2 * interval '1 microsecond' WHERE lease = $1 AND id = ANY($3)`,
		lease, d.Microseconds(), ids)
	return err
}

// LockWaiters counts the sessions of this database waiting for a lock.
func (s *Store) LockWaiters(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	return n, err
}

// Show returns a setting as a pooled connection's server session sees it.
func (s *Store) Show(ctx context.Context, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
