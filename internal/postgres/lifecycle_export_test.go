package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ExecSQL runs one statement, for tests that age rows or set states.
func (s *Store) ExecSQL(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// CountSQL runs a count(*) query.
func (s *Store) CountSQL(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// InsertInboundHeld inserts a processed inbound message (the trigger adds
// its received event) and calls hold, when not nil, before committing:
// a test that holds transactions and lets them go in its own order makes
// events commit out of id order.
func (s *Store) InsertInboundHeld(ctx context.Context, partner, messageID string, hold func()) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, completed_at)
VALUES ('inbound', $1, $1, 'S', $2, 'processed', now())`, partner, messageID); err != nil {
			return err
		}
		if hold != nil {
			hold()
		}
		return nil
	})
}
