package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExtendOutboxClaim moves the end of the claim on it to lease from now, so
// that a long build or send is not claimed and posted again by another
// dispatcher meanwhile. It returns the new end, or ErrClaimLost when the
// claim is no longer held (expired and taken, or finished).
func (s *Store) ExtendOutboxClaim(ctx context.Context, it OutboxItem, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, `
UPDATE outbox SET claimed_until = now() + $4 * interval '1 microsecond',
                  next_attempt_at = now() + $4 * interval '1 microsecond'
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending' AND claimed_until > now()
RETURNING claimed_until`, it.ID, it.ClaimedBy, it.Attempts, lease.Microseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("extend claim on outbox %d: %w", it.ID, ErrClaimLost)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extend claim on outbox %d: %w", it.ID, err)
	}
	return until, nil
}
