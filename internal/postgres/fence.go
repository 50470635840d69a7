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

// OpenTerm opens the term f for holder: it records f.Token as the lease's
// current token, unless a term with the same or a higher token has already
// opened, and appends the term to leader_terms, in one transaction.
//
// It returns hub.ErrStaleFence when a newer term has opened (the caller won the
// lease but was overtaken before it could open its term: it must not start
// leader-gated work). Opening the same term again for the same holder is a
// no-op, so a retry after a lost reply is safe.
//
// The UPDATE takes the fence row's lock, which every fenced transaction holds
// in share mode: no transaction checked against an older token can commit
// after a newer term opened.
func (s *Store) OpenTerm(ctx context.Context, f hub.Fence, holder string) error {
	if f.Lease == "" || f.Token <= 0 {
		return fmt.Errorf("open term %s: invalid fence", f)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Wait for the fence row's lock (held in share mode by in-flight
		// fenced transactions) no longer than the lock timeout.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, msString(s.termLockTimeout)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
INSERT INTO leader_fence (lease, token, holder, opened_at) VALUES ($1, $2, $3, now())
ON CONFLICT (lease) DO UPDATE
   SET token = EXCLUDED.token, holder = EXCLUDED.holder, opened_at = EXCLUDED.opened_at
 WHERE leader_fence.token < EXCLUDED.token
    OR (leader_fence.token = EXCLUDED.token AND leader_fence.holder = EXCLUDED.holder)`,
			f.Lease, f.Token, holder)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return hub.ErrStaleFence
		}
		// opened_at is taken now, after the UPDATE got the fence row's
		// lock, not at the start of the transaction: every fenced write
		// of an older term committed before it, so an audit may call any
		// older-token write stamped later than opened_at stale.
		_, err = tx.Exec(ctx, `
INSERT INTO leader_terms (lease, token, holder, opened_at) VALUES ($1, $2, $3, clock_timestamp())
ON CONFLICT (lease, token) DO NOTHING`, f.Lease, f.Token, holder)
		return err
	})
	if errors.Is(err, hub.ErrStaleFence) {
		s.rejected(ctx, f)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return fmt.Errorf("%w: open term %s: the fence row stayed locked by an older term's transaction for %s (lock_timeout)", ErrTermLockTimeout, f, s.termLockTimeout)
	}
	if err != nil {
		return fmt.Errorf("open term %s: %w", f, err)
	}
	return nil
}

// ErrTermLockTimeout reports a term opening that waited for the fence row's
// lock longer than Options.TermLockTimeout: an older term's fenced
// transaction still held it. The caller may try again.
var ErrTermLockTimeout = errors.New("timed out waiting for the fence row's lock")

// msString formats d for a PostgreSQL time setting.
func msString(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// CheckTerm confirms that f is still the lease's current term: it returns
// nil when it is, an error matching hub.ErrStaleFence when another term has
// opened (or none has), and another error when the database cannot say.
// The elector calls it at every renewal, so that a leader that cannot reach
// the database steps down.
func (s *Store) CheckTerm(ctx context.Context, f hub.Fence) error {
	var current int64
	err := s.pool.QueryRow(ctx, `SELECT token FROM leader_fence WHERE lease = $1`, f.Lease).Scan(&current)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && current != f.Token:
		return fmt.Errorf("check term %s: %w", f, hub.ErrStaleFence)
	case err != nil:
		return fmt.Errorf("check term %s: %w", f, err)
	}
	return nil
}

// fenced runs fn in a transaction that commits only if f is still the
// lease's current term: it first takes the fence row in share mode and
// compares tokens. It returns hub.ErrStaleFence (counted in
// edihub_fencing_rejections_total) without running fn when f is stale.
//
// It is the only way to write leader state. Every leader-gated method of
// Store takes a Fence and goes through here; fn must not call out to the
// network.
func (s *Store) fenced(ctx context.Context, f hub.Fence, fn func(pgx.Tx) error) error {
	stale := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The same statement limits how long this transaction may sit
		// idle: a paused or cut-off leader cannot hold the share lock
		// (and so a successor's term opening) past it.
		var current int64
		err := tx.QueryRow(ctx, `SELECT token FROM leader_fence, set_config('idle_in_transaction_session_timeout', $2, true) WHERE lease = $1 FOR SHARE OF leader_fence`,
			f.Lease, msString(s.fencedIdleTimeout)).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && current != f.Token) {
			stale = true
			return hub.ErrStaleFence
		}
		if err != nil {
			return fmt.Errorf("check fence: %w", err)
		}
		return fn(tx)
	})
	if stale {
		s.rejected(ctx, f)
	}
	return err
}

// rejected counts a refusal for f: in edihub_fencing_rejections_total and,
// after the refused transaction ended, as a row of fencing_rejections (the
// hub's history, which the end-of-day report counts). The row is best
// effort: a database that cannot take it has refused the write anyway, and
// the process counter still counts it.
func (s *Store) rejected(ctx context.Context, f hub.Fence) {
	s.fenceRejections.Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = s.pool.Exec(ctx, `INSERT INTO fencing_rejections (lease, token) VALUES ($1, $2)`, f.Lease, f.Token)
}

// Heartbeat records one beat of the leader's heartbeat in
// leader_heartbeats, through the fenced path, and deletes the lease's
// beats older than retain in the same transaction. It returns
// hub.ErrStaleFence when f is no longer the current term.
func (s *Store) Heartbeat(ctx context.Context, f hub.Fence, holder string, retain time.Duration) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO leader_heartbeats (lease, token, holder) VALUES ($1, $2, $3)`, f.Lease, f.Token, holder); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM leader_heartbeats WHERE lease = $1 AND beat_at < clock_timestamp() - $2 * interval '1 microsecond'`, f.Lease, retain.Microseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", f, err)
	}
	return nil
}

// Beat is one accepted heartbeat.
type Beat struct {
	ID     int64
	Lease  string
	Token  int64
	Holder string
	At     time.Time
}

// Heartbeats returns the lease's recorded beats in id order (the order
// they committed in, for one lease written only by its leader).
func (s *Store) Heartbeats(ctx context.Context, lease string) ([]Beat, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, lease, token, holder, beat_at FROM leader_heartbeats WHERE lease = $1 ORDER BY id`, lease)
	if err != nil {
		return nil, fmt.Errorf("read heartbeats: %w", err)
	}
	beats, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Beat, error) {
		var b Beat
		err := r.Scan(&b.ID, &b.Lease, &b.Token, &b.Holder, &b.At)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read heartbeats: %w", err)
	}
	return beats, nil
}

// Terms returns the lease's opened terms in token order.
func (s *Store) Terms(ctx context.Context, lease string) ([]hub.Term, error) {
	rows, err := s.pool.Query(ctx, `SELECT lease, token, holder, opened_at FROM leader_terms WHERE lease = $1 ORDER BY token`, lease)
	if err != nil {
		return nil, fmt.Errorf("read terms: %w", err)
	}
	terms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hub.Term, error) {
		var t hub.Term
		err := r.Scan(&t.Lease, &t.Token, &t.Holder, &t.OpenedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read terms: %w", err)
	}
	return terms, nil
}

// ErrNoTerm reports a lease for which no term has opened (no leader_fence
// row).
var ErrNoTerm = errors.New("no leadership term has opened")

// CurrentTerm returns the lease's current term as the fence records it
// (leader_fence: the highest token opened, its holder and when), or
// ErrNoTerm. It is for diagnostics; fenced writes check the fence
// themselves.
func (s *Store) CurrentTerm(ctx context.Context, lease string) (hub.Term, error) {
	t := hub.Term{Lease: lease}
	err := s.pool.QueryRow(ctx, `SELECT token, holder, opened_at FROM leader_fence WHERE lease = $1`, lease).Scan(&t.Token, &t.Holder, &t.OpenedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return hub.Term{}, fmt.Errorf("read fence of %s: %w", lease, ErrNoTerm)
	}
	if err != nil {
		return hub.Term{}, fmt.Errorf("read fence of %s: %w", lease, err)
	}
	return t, nil
}

// IdleTransaction is a database session idle inside a transaction.
type IdleTransaction struct {
	PID             int32
	ApplicationName string
	// Idle is how long it has been idle, by the database clock.
	Idle time.Duration
	// Query is the last statement it ran.
	Query string
}

// IdleTransactions lists the sessions of this database that are idle in a
// transaction for at least min, longest first. For diagnostics: a fenced
// transaction left open by a paused leader shows here until the server
// ends it (Options.FencedIdleTimeout).
func (s *Store) IdleTransactions(ctx context.Context, min time.Duration) ([]IdleTransaction, error) {
	rows, err := s.pool.Query(ctx, `
SELECT pid, application_name, (extract(epoch FROM clock_timestamp() - state_change) * 1000000)::bigint, query
  FROM pg_stat_activity
 WHERE datname = current_database() AND state = 'idle in transaction'
   AND clock_timestamp() - state_change >= $1 * interval '1 microsecond'
 ORDER BY state_change`, min.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("idle transactions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IdleTransaction, error) {
		var it IdleTransaction
		var us int64
		err := r.Scan(&it.PID, &it.ApplicationName, &us, &it.Query)
		it.Idle = time.Duration(us) * time.Microsecond
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("idle transactions: %w", err)
	}
	return out, nil
}
