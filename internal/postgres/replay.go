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

// ClaimSignedContent claims the signed content digest partner sent as
// messageID at now, in one statement, and returns "" when the claim is
// taken, or the Message-ID of the claim that stands: the same content
// received under another Message-ID since since (the start of the
// partner's replay window). Of concurrent claims of one digest exactly
// one is taken. A claim of the same Message-ID (the partner's retry) and
// a claim older than since are taken over; the statement deletes a few of
// the partner's claims older than since on the way.
func (s *Store) ClaimSignedContent(ctx context.Context, partner, messageID, digest string, now, since time.Time) (string, error) {
	var taken string
	err := s.pool.QueryRow(ctx, `
WITH expired AS (
    DELETE FROM replay_guard WHERE (partner, digest) IN (
        SELECT partner, digest FROM replay_guard
         WHERE partner = $1 AND seen_at < $5 AND digest <> $2
         ORDER BY seen_at LIMIT 10 FOR UPDATE SKIP LOCKED)
)
INSERT INTO replay_guard AS g (partner, digest, message_id, seen_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (partner, digest) DO UPDATE SET message_id = EXCLUDED.message_id, seen_at = EXCLUDED.seen_at
 WHERE g.message_id = EXCLUDED.message_id OR g.seen_at < $5
RETURNING message_id`, partner, digest, messageID, now, since).Scan(&taken)
	if err == nil {
		return "", nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("claim signed content: %w", err)
	}
	// Not taken: another Message-ID holds it, committed before the
	// conflict was decided, so a new snapshot sees it.
	var first string
	err = s.pool.QueryRow(ctx, `SELECT message_id FROM replay_guard WHERE partner = $1 AND digest = $2`, partner, digest).Scan(&first)
	if err != nil {
		return "", fmt.Errorf("claim signed content: read the standing claim: %w", err)
	}
	if first == messageID {
		return "", nil
	}
	return first, nil
}
