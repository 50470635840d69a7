package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicaStatus is what a replica's elector said of itself when it last
// reported (replica_status, migration 00012).
type ReplicaStatus struct {
	Identity string
	IsLeader bool
	// Token is the fencing token of the term it leads; 0 while it follows.
	Token int64
	// Status is the elector's status as GET /leader serves it (JSON).
	Status    json.RawMessage
	Version   string
	StartedAt time.Time
	SeenAt    time.Time
}

// RecordReplicaStatus upserts the status of replica st.Identity (SeenAt
// is the database's now) and drops the rows of replicas not seen for an
// hour.
func (s *Store) RecordReplicaStatus(ctx context.Context, st ReplicaStatus) error {
	_, err := s.pool.Exec(ctx, `
WITH gone AS (DELETE FROM replica_status WHERE seen_at < now() - interval '1 hour' AND identity <> $1)
INSERT INTO replica_status (identity, is_leader, token, status, version, started_at, seen_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (identity) DO UPDATE SET is_leader = excluded.is_leader, token = excluded.token,
  status = excluded.status, version = excluded.version, started_at = excluded.started_at, seen_at = now()`,
		st.Identity, st.IsLeader, st.Token, st.Status, st.Version, st.StartedAt)
	if err != nil {
		return fmt.Errorf("record replica status: %w", err)
	}
	return nil
}

// ReplicaStatuses lists the statuses reported within the last two
// minutes, by identity.
func (s *Store) ReplicaStatuses(ctx context.Context) ([]ReplicaStatus, error) {
	rows, err := s.pool.Query(ctx, `
SELECT identity, is_leader, token, status, version, started_at, seen_at FROM replica_status
 WHERE seen_at > now() - interval '2 minutes' ORDER BY identity`)
	if err != nil {
		return nil, fmt.Errorf("read replica statuses: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplicaStatus, error) {
		var st ReplicaStatus
		err := r.Scan(&st.Identity, &st.IsLeader, &st.Token, &st.Status, &st.Version, &st.StartedAt, &st.SeenAt)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("read replica statuses: %w", err)
	}
	return out, nil
}
