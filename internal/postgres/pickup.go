package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/edihub/edihub/internal/hub"
)

// Pickup claim states (pickup_claims.state, migration 00027).
const (
	// PickupEnqueued: the file's message is queued; the file is still to
	// be archived (or removed) at the source.
	PickupEnqueued = "enqueued"
	// PickupArchived: the file was archived or removed.
	PickupArchived = "archived"
)

// ErrPickupClaimed reports a file version (source, path, size, version)
// that a claim already took: it was queued once and is never queued
// again. Nothing was written.
var ErrPickupClaimed = errors.New("file version already picked up")

// PickupKey identifies one version of a file at a source.
type PickupKey struct {
	Source string
	Path   string
	Size   int64
	// Version is the modification time (RFC 3339, UTC, nanoseconds) or
	// the S3 ETag.
	Version string
}

// PickupClaim is one file version the pickup poller took.
type PickupClaim struct {
	PickupKey
	ID int64
	// Message is the outbound message (messages.id) the file became; 0
	// once that message was purged.
	Message int64
	// Archive is the source's archive directory at the claim; "" means
	// the file is removed instead of archived.
	Archive string
	// Marker is the marker file that made the file stable, archived or
	// removed with it; "" without.
	Marker    string
	State     string
	Fence     int64 // the fencing token of the term that claimed it
	ClaimedAt time.Time
	LastError string
}

// EnqueuePickup queues m, a file picked up from a source, and records the
// claim c in one transaction that commits only under the current term f.
//
// The payload is copied first (m.PayloadOpen, read to its end) with no
// lock on the fence row; only then is the fence checked, in share mode,
// and the claim inserted, so that a term opening waits at most for these
// last statements, not for the copy of a large file. A term that opened
// during the copy makes the check fail: the transaction rolls back and
// nothing of the message is stored, so a leader that was paused or cut off
// mid-copy leaves nothing behind (nor does one that dies: the server
// rolls back its transaction).
//
// It returns an error matching ErrStaleFence when f is not the current
// term, ErrPickupClaimed when the file version was claimed before (by
// this term or an earlier one), ErrDuplicateMessageID as EnqueueOutbound
// does. m must carry no IdempotencyKey: the claim is the pickup's
// idempotency.
func (s *Store) EnqueuePickup(ctx context.Context, f hub.Fence, m NewOutbound, c PickupClaim) (Enqueued, PickupClaim, error) {
	if m.IdempotencyKey != "" {
		return Enqueued{}, PickupClaim{}, fmt.Errorf("enqueue pickup %s: an idempotency key is not allowed", c.Path)
	}
	var e Enqueued
	stale := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A claim already there: nothing to copy.
		var exists bool
		if err := tx.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pickup_claims WHERE source = $1 AND path = $2 AND size = $3 AND version = $4)`,
			c.Source, c.Path, c.Size, c.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return ErrPickupClaimed
		}
		// The long part: the message, its payload (copied from the
		// source as it is read), its outbox row and interchanges.
		if err := enqueueTx(ctx, tx, m, &e); err != nil {
			return err
		}
		// From here on the fence row is held in share mode until the
		// commit: a few short statements.
		if err := lockFence(ctx, tx, f, s.fencedIdleTimeout); err != nil {
			stale = errors.Is(err, hub.ErrStaleFence)
			return err
		}
		c.Message, c.Fence, c.State = e.ID, f.Token, PickupEnqueued
		return tx.QueryRow(ctx, `
INSERT INTO pickup_claims (source, path, size, version, message, archive, marker, fence_token)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id, claimed_at`, c.Source, c.Path, c.Size, c.Version, c.Message, c.Archive, c.Marker, c.Fence).Scan(&c.ID, &c.ClaimedAt)
	})
	if stale {
		s.rejected(ctx, f)
	}
	if err != nil {
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "pickup_claims_version_key":
			err = ErrPickupClaimed
		case errors.As(err, &pe) && pe.Code == "23505":
			err = ErrDuplicateMessageID
		}
		return Enqueued{}, PickupClaim{}, fmt.Errorf("enqueue pickup %s %s: %w", c.Source, c.Path, err)
	}
	return e, c, nil
}

// lockFence is the check every fenced transaction starts with (see
// fenced), for a transaction that does its unfenced work first: it takes
// the fence row of f's lease in share mode, held until the transaction
// ends, and returns ErrStaleFence when f is not the current term. It also
// limits how long the transaction may then sit idle, so that a leader
// paused after the check cannot hold a successor's term opening.
func lockFence(ctx context.Context, tx pgx.Tx, f hub.Fence, idle time.Duration) error {
	var current int64
	err := tx.QueryRow(ctx, `SELECT token FROM leader_fence, set_config('idle_in_transaction_session_timeout', $2, true) WHERE lease = $1 FOR SHARE OF leader_fence`,
		f.Lease, msString(idle)).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && current != f.Token) {
		return hub.ErrStaleFence
	}
	if err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	return nil
}

const pickupClaimColumns = `id, source, path, size, version, coalesce(message, 0), archive, marker, state, fence_token, claimed_at, last_error`

func scanPickupClaim(r pgx.CollectableRow) (PickupClaim, error) {
	var c PickupClaim
	err := r.Scan(&c.ID, &c.Source, &c.Path, &c.Size, &c.Version, &c.Message, &c.Archive, &c.Marker, &c.State, &c.Fence, &c.ClaimedAt, &c.LastError)
	return c, err
}

// PickupClaims returns the claims of the given file versions of source
// that exist, in any state. It reads, it does not lock: the poller uses it
// to skip what was taken before, and EnqueuePickup decides.
func (s *Store) PickupClaims(ctx context.Context, source string, keys []PickupKey) ([]PickupClaim, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	paths, sizes, versions := make([]string, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		paths[i], sizes[i], versions[i] = k.Path, k.Size, k.Version
	}
	rows, err := s.pool.Query(ctx, `
SELECT `+pickupClaimColumns+` FROM pickup_claims
 WHERE source = $1 AND (path, size, version) IN (SELECT * FROM unnest($2::text[], $3::bigint[], $4::text[]))`,
		source, paths, sizes, versions)
	if err != nil {
		return nil, fmt.Errorf("pickup claims of %s: %w", source, err)
	}
	out, err := pgx.CollectRows(rows, scanPickupClaim)
	if err != nil {
		return nil, fmt.Errorf("pickup claims of %s: %w", source, err)
	}
	return out, nil
}

// OpenPickupClaims returns up to limit claims of source still to archive
// (state PickupEnqueued), oldest first.
func (s *Store) OpenPickupClaims(ctx context.Context, source string, limit int) ([]PickupClaim, error) {
	rows, err := s.pool.Query(ctx, `
SELECT `+pickupClaimColumns+` FROM pickup_claims WHERE source = $1 AND state = 'enqueued' ORDER BY id LIMIT $2`, source, limit)
	if err != nil {
		return nil, fmt.Errorf("open pickup claims of %s: %w", source, err)
	}
	out, err := pgx.CollectRows(rows, scanPickupClaim)
	if err != nil {
		return nil, fmt.Errorf("open pickup claims of %s: %w", source, err)
	}
	return out, nil
}

// PickupArchived marks claim id archived, under the current term f. It
// returns an error matching ErrStaleFence when f is not the current term;
// marking a claim archived twice is not an error.
func (s *Store) PickupArchived(ctx context.Context, f hub.Fence, id int64) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
UPDATE pickup_claims SET state = 'archived', archived_at = now(), last_error = '' WHERE id = $1 AND state = 'enqueued'`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark pickup claim %d archived: %w", id, err)
	}
	return nil
}

// PickupArchiveFailed records why archiving claim id failed (reason is
// for operators: no payload bytes, no secrets), under the current term f.
func (s *Store) PickupArchiveFailed(ctx context.Context, f hub.Fence, id int64, reason string) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE pickup_claims SET last_error = left($2, 1000) WHERE id = $1 AND state = 'enqueued'`, id, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("record archive failure of pickup claim %d: %w", id, err)
	}
	return nil
}

// PurgePickupClaims deletes up to limit archived claims archived more than
// olderThan ago (database clock), under the current term f, and returns
// how many it deleted. Until a claim is purged, its file version is never
// taken again; claims still to archive are never purged.
func (s *Store) PurgePickupClaims(ctx context.Context, f hub.Fence, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM pickup_claims WHERE id IN (
    SELECT id FROM pickup_claims
     WHERE state = 'archived' AND archived_at < now() - $1 * interval '1 microsecond'
     ORDER BY archived_at LIMIT $2)`, olderThan.Microseconds(), limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge pickup claims: %w", err)
	}
	return n, nil
}
