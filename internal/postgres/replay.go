package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SignedMICAlgs returns the MIC algorithms of the signed inbound messages
// partner sent since, other than messageID: a new message's content
// digests are computed in these only (see SignedByMIC).
func (s *Store) SignedMICAlgs(ctx context.Context, partner, messageID string, since time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT mic_alg FROM messages
 WHERE partner = $1 AND direction = 'inbound' AND signed AND mic <> '' AND created_at >= $2 AND message_id <> $3`,
		partner, since, messageID)
	if err != nil {
		return nil, fmt.Errorf("signed MIC algorithms: %w", err)
	}
	algs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("signed MIC algorithms: %w", err)
	}
	return algs, nil
}

// SignedByMIC returns the Message-ID of a signed inbound message partner
// sent since, other than messageID, whose MIC is one of mics, or "".
func (s *Store) SignedByMIC(ctx context.Context, partner, messageID string, mics []string, since time.Time) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `
SELECT message_id FROM messages
 WHERE partner = $1 AND direction = 'inbound' AND signed AND mic = ANY($2) AND created_at >= $3 AND message_id <> $4
 ORDER BY created_at LIMIT 1`, partner, mics, since, messageID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("signed message by MIC: %w", err)
	}
	return id, nil
}
