package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConnectorsChannel is the LISTEN/NOTIFY channel every change of the
// connectors document notifies, with the new revision as payload.
const ConnectorsChannel = "edihub_connectors"

// connectorsLockID is the transaction advisory lock connectors writers
// take: the check of the expected revision and the insert of the next
// are one step.
const connectorsLockID = 0x6564696875620025 // "edihub" + migration 25

// AnyRevision is the ConnectorsChange.Expect of a change made over
// whatever revision is stored.
const AnyRevision = -1

// ErrConnectorsConflict reports a change made against a revision that is
// no longer the current one: someone changed the document meanwhile.
var ErrConnectorsConflict = errors.New("connectors changed meanwhile")

// ErrConnectorsRevisionNotFound reports a revision that was never
// stored.
var ErrConnectorsRevisionNotFound = errors.New("connectors revision not found")

// ConnectorsRevision is one stored revision of the connectors document.
type ConnectorsRevision struct {
	// Revision counts the changes from 1; 0 is the empty document
	// before the first.
	Revision int64
	// Document is the YAML text (empty in history listings).
	Document string
	// Summary lists what the revision changed, one line per entry.
	Summary string
	Actor   string
	// RestoredFrom is the revision a restore brought back; 0 otherwise.
	RestoredFrom int64
	CreatedAt    time.Time
}

// ConnectorsChange is a new revision of the connectors document.
type ConnectorsChange struct {
	Document string
	Summary  string
	// Expect is the revision the change was made against (0: none
	// stored yet), or AnyRevision.
	Expect int64
	// RestoredFrom names the revision a restore brings back.
	RestoredFrom int64
	// Audit is recorded in the audit log in the change's transaction,
	// its Detail completed with the revisions; its Actor is the
	// revision's.
	Audit AuditEntry
}

// Connectors reads the current connectors document: the highest
// revision, or Revision 0 and no document when none was ever stored.
func (s *Store) Connectors(ctx context.Context) (ConnectorsRevision, error) {
	rows, err := s.pool.Query(ctx, `
SELECT revision, document, summary, actor, coalesce(restored_from, 0), created_at
  FROM connector_revisions ORDER BY revision DESC LIMIT 1`)
	if err != nil {
		return ConnectorsRevision{}, fmt.Errorf("read connectors: %w", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanConnectorsRevision)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConnectorsRevision{}, nil
	}
	if err != nil {
		return ConnectorsRevision{}, fmt.Errorf("read connectors: %w", err)
	}
	return r, nil
}

func scanConnectorsRevision(r pgx.CollectableRow) (ConnectorsRevision, error) {
	var c ConnectorsRevision
	err := r.Scan(&c.Revision, &c.Document, &c.Summary, &c.Actor, &c.RestoredFrom, &c.CreatedAt)
	return c, err
}

// ConnectorsRevisionNumber is the current revision of the connectors
// document, 0 before the first: what a replica compares at each resync.
func (s *Store) ConnectorsRevisionNumber(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM connector_revisions`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read connectors revision: %w", err)
	}
	return rev, nil
}

// ConnectorsAt reads one stored revision; ErrConnectorsRevisionNotFound
// when there is none of that number.
func (s *Store) ConnectorsAt(ctx context.Context, revision int64) (ConnectorsRevision, error) {
	rows, err := s.pool.Query(ctx, `
SELECT revision, document, summary, actor, coalesce(restored_from, 0), created_at
  FROM connector_revisions WHERE revision = $1`, revision)
	if err != nil {
		return ConnectorsRevision{}, fmt.Errorf("read connectors revision: %w", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanConnectorsRevision)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConnectorsRevision{}, fmt.Errorf("%w: %d", ErrConnectorsRevisionNotFound, revision)
	}
	if err != nil {
		return ConnectorsRevision{}, fmt.Errorf("read connectors revision: %w", err)
	}
	return r, nil
}

// ChangeConnectors stores c as the next revision and returns its number.
// In one transaction it checks that the current revision is c.Expect
// (else ErrConnectorsConflict, and nothing is stored), inserts the
// revision, records c.Audit in the audit log and notifies the replicas
// on ConnectorsChannel at commit.
func (s *Store) ChangeConnectors(ctx context.Context, c ConnectorsChange) (int64, error) {
	var rev int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(connectorsLockID)); err != nil {
			return err
		}
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM connector_revisions`).Scan(&cur); err != nil {
			return err
		}
		if c.Expect != AnyRevision && c.Expect != cur {
			return fmt.Errorf("%w: the document is at revision %d, the change was made against revision %d", ErrConnectorsConflict, cur, c.Expect)
		}
		rev = cur + 1
		var from *int64
		if c.RestoredFrom > 0 {
			from = &c.RestoredFrom
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO connector_revisions (revision, document, summary, actor, restored_from) VALUES ($1, $2, $3, $4, $5)`,
			rev, c.Document, c.Summary, c.Audit.Actor, from); err != nil {
			return err
		}
		a := c.Audit
		a.Detail = maps.Clone(a.Detail)
		if a.Detail == nil {
			a.Detail = map[string]any{}
		}
		a.Detail["revision"], a.Detail["from_revision"] = rev, cur
		if c.RestoredFrom > 0 {
			a.Detail["restored_from"] = c.RestoredFrom
		}
		if err := insertAudit(ctx, tx, a); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ConnectorsChannel, strconv.FormatInt(rev, 10))
		return err
	})
	if errors.Is(err, ErrConnectorsConflict) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("change connectors: %w", err)
	}
	return rev, nil
}

// ConnectorsHistory lists the stored revisions, newest first, at most
// limit of them, only those below before when before > 0; without their
// documents (ConnectorsAt reads one).
func (s *Store) ConnectorsHistory(ctx context.Context, limit int, before int64) ([]ConnectorsRevision, error) {
	rows, err := s.pool.Query(ctx, `
SELECT revision, '', summary, actor, coalesce(restored_from, 0), created_at
  FROM connector_revisions WHERE $2 <= 0 OR revision < $2
 ORDER BY revision DESC LIMIT $1`, limit, before)
	if err != nil {
		return nil, fmt.Errorf("read connectors history: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanConnectorsRevision)
	if err != nil {
		return nil, fmt.Errorf("read connectors history: %w", err)
	}
	return out, nil
}

// ListenConnectors calls wake once listening and after each notification
// on ConnectorsChannel, until ctx ends (nil) or the connection fails (an
// error; the caller may call again). It holds one pool connection while
// it runs.
func (s *Store) ListenConnectors(ctx context.Context, wake func()) error {
	return s.listen(ctx, ConnectorsChannel, wake)
}

// RecordServedConnectors records that replica identity serves revision
// of the connectors document (applied at appliedAt), and drops the rows
// of replicas not seen for an hour.
func (s *Store) RecordServedConnectors(ctx context.Context, identity string, revision int64, appliedAt time.Time) error {
	return s.recordServed(ctx, "connector_replicas", identity, revision, appliedAt)
}

// ServedConnectors lists the replicas that recorded the connectors
// revision they serve within the last seenWithin, by identity.
func (s *Store) ServedConnectors(ctx context.Context, seenWithin time.Duration) ([]ReplicaRevision, error) {
	return s.served(ctx, "connector_replicas", seenWithin)
}
