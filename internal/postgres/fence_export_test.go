package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// FencedInsertBeat runs a fenced transaction that inserts a heartbeat row
// and then calls hold before committing, so tests can keep it open.
func (s *Store) FencedInsertBeat(ctx context.Context, f Fence, holder string, hold func()) error {
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

// Show returns a setting as a pooled connection's server session sees it.
func (s *Store) Show(ctx context.Context, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
