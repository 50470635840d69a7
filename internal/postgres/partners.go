package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// PartnersChannel is the LISTEN/NOTIFY channel every change of the partner
// set notifies, with the new revision as payload.
const PartnersChannel = "edihub_partners"

// partnersLockID is the transaction advisory lock partner writers take, so
// that revisions commit in the order they were numbered.
const partnersLockID = 0x6564696875620002 // "edihub" + 2

// Partner changes.
const (
	PartnerImport  = "import"
	PartnerCreate  = "create"
	PartnerUpdate  = "update"
	PartnerDelete  = "delete"
	PartnerRestore = "restore"
)

// ErrPartnerNotFound reports a partner (or a version of one) that is not
// stored.
var ErrPartnerNotFound = errors.New("partner not found")

// ErrPartnerConflict reports a change made against a version that is no
// longer the stored one (someone changed the partner meanwhile), or the
// creation of a partner that exists.
var ErrPartnerConflict = errors.New("partner changed meanwhile")

// ErrPartnersStored reports an import into a database that already holds
// partners.
var ErrPartnersStored = errors.New("the database already holds partners")

// StoredPartner is one partner profile as stored.
type StoredPartner struct {
	AS2ID     string
	Version   int64
	Revision  int64
	Spec      string
	UpdatedAt time.Time
	UpdatedBy string
}

// PartnerSet is every stored partner at one revision, with the recorded
// first uses of certificates (partner → fingerprints).
type PartnerSet struct {
	Revision int64
	Partners []StoredPartner
	Uses     map[string]map[string]time.Time
}

// PartnerChange is one change of a partner. Spec nil deletes it. Expect is
// the version the change was made against: 0 for a partner that must not
// exist yet, -1 for whatever is stored.
type PartnerChange struct {
	AS2ID  string
	Op     string
	Spec   *string
	Expect int64
	Diff   string
}

// AnyVersion is the PartnerChange.Expect of a change that applies over
// whatever version is stored.
const AnyVersion = -1

// PartnerHistoryEntry is one recorded change.
type PartnerHistoryEntry struct {
	Revision  int64
	AS2ID     string
	Version   int64
	Op        string
	Spec      *string
	Diff      string
	Actor     string
	ChangedAt time.Time
}

// ReplicaRevision is the revision a replica serves: of the partner set,
// or of the connectors document.
type ReplicaRevision struct {
	Identity  string
	Revision  int64
	AppliedAt time.Time
	SeenAt    time.Time
}

// Partners reads the stored partner set in one snapshot.
func (s *Store) Partners(ctx context.Context) (PartnerSet, error) {
	set := PartnerSet{Uses: map[string]map[string]time.Time{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM partner_history`).Scan(&set.Revision); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT as2_id, version, revision, spec, updated_at, updated_by FROM partners ORDER BY as2_id`)
		if err != nil {
			return err
		}
		set.Partners, err = pgx.CollectRows(rows, scanStoredPartner)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT as2_id, fingerprint, first_used_at FROM partner_certificate_uses`)
		if err != nil {
			return err
		}
		var id, fp string
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&id, &fp, &at}, func() error {
			if set.Uses[id] == nil {
				set.Uses[id] = map[string]time.Time{}
			}
			set.Uses[id][fp] = at
			return nil
		})
		return err
	})
	if err != nil {
		return PartnerSet{}, fmt.Errorf("read partners: %w", err)
	}
	return set, nil
}

func scanStoredPartner(r pgx.CollectableRow) (StoredPartner, error) {
	var p StoredPartner
	err := r.Scan(&p.AS2ID, &p.Version, &p.Revision, &p.Spec, &p.UpdatedAt, &p.UpdatedBy)
	return p, err
}

// PartnerRevision is the revision of the stored partner set: the last
// change's, 0 before the first.
func (s *Store) PartnerRevision(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM partner_history`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read partner revision: %w", err)
	}
	return rev, nil
}

// Partner reads one stored partner; ErrPartnerNotFound when there is none.
func (s *Store) Partner(ctx context.Context, as2ID string) (StoredPartner, error) {
	rows, err := s.pool.Query(ctx, `SELECT as2_id, version, revision, spec, updated_at, updated_by FROM partners WHERE as2_id = $1`, as2ID)
	if err != nil {
		return StoredPartner{}, fmt.Errorf("read partner: %w", err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanStoredPartner)
	if errors.Is(err, pgx.ErrNoRows) {
		return StoredPartner{}, fmt.Errorf("%w: %q", ErrPartnerNotFound, as2ID)
	}
	if err != nil {
		return StoredPartner{}, fmt.Errorf("read partner: %w", err)
	}
	return p, nil
}

// ChangePartners applies changes in one transaction, by actor, and returns
// the revision of the set after them. A change whose Expect does not match
// the stored version (ErrPartnerConflict) or that deletes a partner not
// stored (ErrPartnerNotFound) refuses the whole transaction: nothing is
// changed. Each change is recorded in partner_history, and replicas are
// notified on commit.
func (s *Store) ChangePartners(ctx context.Context, actor string, changes []PartnerChange) (int64, error) {
	var rev int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockPartners(ctx, tx); err != nil {
			return err
		}
		var err error
		rev, err = changePartners(ctx, tx, actor, changes)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrPartnerConflict) || errors.Is(err, ErrPartnerNotFound) {
			return 0, err
		}
		return 0, fmt.Errorf("change partners: %w", err)
	}
	if len(changes) == 0 {
		return s.PartnerRevision(ctx)
	}
	return rev, nil
}

// lockPartners takes the partner writers' transaction lock: revisions
// then commit in the order they are numbered.
func lockPartners(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(partnersLockID))
	return err
}

// changePartners applies changes in tx, notifies the replicas on commit
// when there are any, and returns the last change's revision.
func changePartners(ctx context.Context, tx pgx.Tx, actor string, changes []PartnerChange) (int64, error) {
	var rev int64
	for _, c := range changes {
		var err error
		if rev, err = changePartner(ctx, tx, actor, c); err != nil {
			return 0, err
		}
	}
	if len(changes) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, PartnersChannel, strconv.FormatInt(rev, 10)); err != nil {
			return 0, err
		}
	}
	return rev, nil
}

// changePartner applies one change inside a partner writer's transaction
// and returns its revision.
func changePartner(ctx context.Context, tx pgx.Tx, actor string, c PartnerChange) (int64, error) {
	var stored int64 // 0: not stored
	err := tx.QueryRow(ctx, `SELECT version FROM partners WHERE as2_id = $1 FOR UPDATE`, c.AS2ID).Scan(&stored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	switch {
	case c.Expect != AnyVersion && c.Expect != stored && stored == 0:
		return 0, fmt.Errorf("%w: %q (it was deleted, or never stored; version %d expected)", ErrPartnerNotFound, c.AS2ID, c.Expect)
	case c.Expect != AnyVersion && c.Expect != stored && c.Expect == 0:
		return 0, fmt.Errorf("%w: %q exists already (version %d)", ErrPartnerConflict, c.AS2ID, stored)
	case c.Expect != AnyVersion && c.Expect != stored:
		return 0, fmt.Errorf("%w: %q is at version %d, the change was made against version %d", ErrPartnerConflict, c.AS2ID, stored, c.Expect)
	case c.Spec == nil && stored == 0:
		return 0, fmt.Errorf("%w: %q", ErrPartnerNotFound, c.AS2ID)
	}
	// A partner deleted and created again goes on counting its versions,
	// so that a version names one profile in its history.
	var version, rev int64
	err = tx.QueryRow(ctx, `
SELECT coalesce((SELECT max(version) FROM partner_history WHERE as2_id = $1), 0) + 1, nextval('partner_revisions')`, c.AS2ID).Scan(&version, &rev)
	if err != nil {
		return 0, err
	}
	if c.Spec == nil {
		_, err = tx.Exec(ctx, `DELETE FROM partners WHERE as2_id = $1`, c.AS2ID)
	} else {
		_, err = tx.Exec(ctx, `
INSERT INTO partners (as2_id, version, revision, spec, updated_at, updated_by)
VALUES ($1, $2, $3, $4, now(), $5)
ON CONFLICT (as2_id) DO UPDATE
   SET version = excluded.version, revision = excluded.revision, spec = excluded.spec,
       updated_at = excluded.updated_at, updated_by = excluded.updated_by`, c.AS2ID, version, rev, *c.Spec, actor)
	}
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `
INSERT INTO partner_history (revision, as2_id, version, op, spec, diff, actor) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		rev, c.AS2ID, version, c.Op, c.Spec, c.Diff, actor)
	return rev, err
}

// ImportPartners stores changes (all PartnerImport) when the database has
// never held a partner: the one-time bootstrap from a configuration file,
// safe when several replicas start at once. It returns ErrPartnersStored,
// and changes nothing, when a partner was ever stored.
func (s *Store) ImportPartners(ctx context.Context, actor string, changes []PartnerChange) (int64, error) {
	var rev int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockPartners(ctx, tx); err != nil {
			return err
		}
		var held bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM partner_history)`).Scan(&held); err != nil {
			return err
		}
		if held {
			return ErrPartnersStored
		}
		var err error
		rev, err = changePartners(ctx, tx, actor, changes)
		return err
	})
	if errors.Is(err, ErrPartnersStored) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("import partners: %w", err)
	}
	return rev, nil
}

// PartnerHistory lists the recorded changes of one partner, newest first,
// at most limit of them; every partner's when as2ID is empty.
func (s *Store) PartnerHistory(ctx context.Context, as2ID string, limit int) ([]PartnerHistoryEntry, error) {
	rows, err := s.pool.Query(ctx, `
SELECT revision, as2_id, version, op, spec, diff, actor, changed_at
  FROM partner_history
 WHERE $1 = '' OR as2_id = $1
 ORDER BY revision DESC LIMIT $2`, as2ID, limit)
	return collectHistory(rows, err, "read partner history")
}

// collectHistory reads the rows of a query of partner_history's columns
// (revision, as2_id, version, op, spec, diff, actor, changed_at); what
// names the read in an error.
func collectHistory(rows pgx.Rows, err error, what string) ([]PartnerHistoryEntry, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartnerHistoryEntry, error) {
		var e PartnerHistoryEntry
		err := r.Scan(&e.Revision, &e.AS2ID, &e.Version, &e.Op, &e.Spec, &e.Diff, &e.Actor, &e.ChangedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// DeletedPartners lists the deletions of partners that are not stored
// again, the latest first, at most limit: each row is the deletion, its
// Version the one deleted.
func (s *Store) DeletedPartners(ctx context.Context, limit int) ([]PartnerHistoryEntry, error) {
	rows, err := s.pool.Query(ctx, `
SELECT h.revision, h.as2_id, h.version, h.op, h.spec, h.diff, h.actor, h.changed_at
  FROM partner_history h
 WHERE h.op = 'delete'
   AND NOT EXISTS (SELECT 1 FROM partners p WHERE p.as2_id = h.as2_id)
   AND NOT EXISTS (SELECT 1 FROM partner_history l WHERE l.as2_id = h.as2_id AND l.revision > h.revision)
 ORDER BY h.revision DESC LIMIT $1`, limit)
	return collectHistory(rows, err, "read deleted partners")
}

// PartnerVersion reads the profile of a partner at one version, from its
// history; ErrPartnerNotFound when there is no such version with a profile
// (a delete has none).
func (s *Store) PartnerVersion(ctx context.Context, as2ID string, version int64) (string, error) {
	var spec *string
	err := s.pool.QueryRow(ctx, `SELECT spec FROM partner_history WHERE as2_id = $1 AND version = $2`, as2ID, version).Scan(&spec)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && spec == nil {
		return "", fmt.Errorf("%w: %q has no version %d with a profile", ErrPartnerNotFound, as2ID, version)
	}
	if err != nil {
		return "", fmt.Errorf("read partner version: %w", err)
	}
	return *spec, nil
}

// RecordServedRevision records that replica identity serves revision
// (applied at appliedAt), and drops the rows of replicas not seen for an
// hour.
func (s *Store) RecordServedRevision(ctx context.Context, identity string, revision int64, appliedAt time.Time) error {
	return s.recordServed(ctx, "partner_replicas", identity, revision, appliedAt)
}

// ServedRevisions lists the replicas that recorded the partner set
// revision they serve within the last seenWithin (by the database's
// clock), by identity. A replica that recorded nothing for longer stopped,
// or cannot reach the database; it is left out (its row goes after an
// hour).
func (s *Store) ServedRevisions(ctx context.Context, seenWithin time.Duration) ([]ReplicaRevision, error) {
	return s.served(ctx, "partner_replicas", seenWithin)
}

// recordServed upserts a replica's served revision in table, one of the
// tables of (identity, revision, applied_at, seen_at) replicas report
// what they serve in: partner_replicas, connector_replicas.
func (s *Store) recordServed(ctx context.Context, table, identity string, revision int64, appliedAt time.Time) error {
	_, err := s.pool.Exec(ctx, `
WITH gone AS (DELETE FROM `+table+` WHERE seen_at < now() - interval '1 hour' AND identity <> $1)
INSERT INTO `+table+` (identity, revision, applied_at, seen_at) VALUES ($1, $2, $3, now())
ON CONFLICT (identity) DO UPDATE SET revision = excluded.revision, applied_at = excluded.applied_at, seen_at = now()`,
		identity, revision, appliedAt)
	if err != nil {
		return fmt.Errorf("record served revision (%s): %w", table, err)
	}
	return nil
}

// served lists the rows of table (see recordServed) seen within
// seenWithin, by identity.
func (s *Store) served(ctx context.Context, table string, seenWithin time.Duration) ([]ReplicaRevision, error) {
	rows, err := s.pool.Query(ctx, `
SELECT identity, revision, applied_at, seen_at FROM `+table+`
 WHERE seen_at > now() - make_interval(secs => $1) ORDER BY identity`, seenWithin.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read served revisions (%s): %w", table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplicaRevision, error) {
		var rr ReplicaRevision
		err := r.Scan(&rr.Identity, &rr.Revision, &rr.AppliedAt, &rr.SeenAt)
		return rr, err
	})
	if err != nil {
		return nil, fmt.Errorf("read served revisions (%s): %w", table, err)
	}
	return out, nil
}

// RecordCertificateUse records the first time partner signed with the
// certificate of fingerprint, and notifies the replicas when it is the
// first; it reports whether it was.
func (s *Store) RecordCertificateUse(ctx context.Context, partner, fingerprint string) (bool, error) {
	var first bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
INSERT INTO partner_certificate_uses (as2_id, fingerprint) VALUES ($1, $2) ON CONFLICT DO NOTHING`, partner, fingerprint)
		if err != nil {
			return err
		}
		if first = tag.RowsAffected() == 1; first {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'use')`, PartnersChannel)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record certificate use: %w", err)
	}
	return first, nil
}

// ListenPartners calls wake once listening and after each notification on
// PartnersChannel, until ctx ends (nil) or the connection fails (an error;
// the caller may call again). It holds one pool connection while it runs.
func (s *Store) ListenPartners(ctx context.Context, wake func()) error {
	return s.listen(ctx, PartnersChannel, wake)
}
