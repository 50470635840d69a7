package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/edihub/edihub/internal/hub"
)

// SessionDB returns a database/sql handle on the store's pool, for the
// console's session store (github.com/alexedwards/scs/postgresstore,
// which keeps its rows in the sessions table of migration 00010). Closing
// it does not close the pool; close it before the Store.
func (s *Store) SessionDB() *sql.DB { return stdlib.OpenDBFromPool(s.pool) }

// DeleteExpiredSessions deletes the console sessions past their expiry
// (scs no longer finds them) and returns how many it deleted.
func (s *Store) DeleteExpiredSessions(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM sessions WHERE expiry < now()`)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OutboxEntry is one outbox row of a message: the sending of an outbound
// message (kind message) or of the async MDN owed for an inbound one (kind
// mdn), with its latest attempt.
type OutboxEntry struct {
	ID            int64
	Kind          string
	URL           string
	Status        string // pending, done, failed
	Attempts      int
	MaxAttempts   int
	NextAttemptAt time.Time
	LastAttemptAt *time.Time
	// LastStatus is the HTTP status of the latest attempt; nil when it got
	// no answer (or none was made yet).
	LastStatus *int
	LastError  string
	ClaimedBy  string
	// ClaimedUntil is set while a dispatcher holds the row.
	ClaimedUntil *time.Time
	RetryUntil   *time.Time
	CreatedAt    time.Time
	FinishedAt   *time.Time
}

// MessageOutbox returns the outbox rows of one message, oldest first.
func (s *Store) MessageOutbox(ctx context.Context, id int64) ([]OutboxEntry, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, kind, url, status, attempts, max_attempts, next_attempt_at, last_attempt_at, last_status, last_error,
       claimed_by, CASE WHEN claimed_until > now() THEN claimed_until END, retry_until, created_at, finished_at
  FROM outbox WHERE message_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read outbox of message %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxEntry, error) {
		var e OutboxEntry
		err := r.Scan(&e.ID, &e.Kind, &e.URL, &e.Status, &e.Attempts, &e.MaxAttempts, &e.NextAttemptAt, &e.LastAttemptAt,
			&e.LastStatus, &e.LastError, &e.ClaimedBy, &e.ClaimedUntil, &e.RetryUntil, &e.CreatedAt, &e.FinishedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox of message %d: %w", id, err)
	}
	return out, nil
}

// ReportDay is one stored day report, without its content.
type ReportDay struct {
	Day         string
	GeneratedAt time.Time
	MailedAt    *time.Time
	MailError   string
}

// ReportDays lists the stored day reports, newest first, at most limit
// (0 means 31).
func (s *Store) ReportDays(ctx context.Context, limit int) ([]ReportDay, error) {
	if limit <= 0 {
		limit = 31
	}
	rows, err := s.pool.Query(ctx, `SELECT day::text, generated_at, mailed_at, mail_error FROM reports ORDER BY reports.day DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReportDay, error) {
		var d ReportDay
		err := r.Scan(&d.Day, &d.GeneratedAt, &d.MailedAt, &d.MailError)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	return out, nil
}

// HubState is what the database knows of the hub as a whole: the current
// term, the leader's latest heartbeat and the queues.
type HubState struct {
	// Term is the lease's current term (leader_fence); zero Token when no
	// term ever opened.
	Term hub.Term
	// LastBeat is the latest heartbeat of the lease; zero ID when none.
	LastBeat Beat
	// Outbox counts pending outbox rows by kind: due now, waiting for a
	// retry, and claimed by a dispatcher.
	Outbox []OutboxBacklog
	// InboxPending counts async MDNs not processed yet; InboxOrphans those
	// that matched no message.
	InboxPending, InboxOrphans int64
	// OldestPending is when the oldest unprocessed async MDN came; nil
	// when none is pending.
	OldestPending *time.Time
}

// OutboxBacklog is the pending work of one outbox kind.
type OutboxBacklog struct {
	Kind    string
	Due     int64
	Waiting int64
	Claimed int64
}

// HubState reads the hub's state for lease (the leader lease's name).
func (s *Store) HubState(ctx context.Context, lease string) (HubState, error) {
	var h HubState
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT lease, token, holder, opened_at FROM leader_fence WHERE lease = $1`, lease).
			Scan(&h.Term.Lease, &h.Term.Token, &h.Term.Holder, &h.Term.OpenedAt)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT id, lease, token, holder, beat_at FROM leader_heartbeats
 WHERE lease = $1 ORDER BY beat_at DESC LIMIT 1`, lease).Scan(&h.LastBeat.ID, &h.LastBeat.Lease, &h.LastBeat.Token, &h.LastBeat.Holder, &h.LastBeat.At)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rows, err := tx.Query(ctx, `
SELECT kind, count(*) FILTER (WHERE next_attempt_at <= now() AND (claimed_until IS NULL OR claimed_until <= now())),
       count(*) FILTER (WHERE next_attempt_at > now() AND (claimed_until IS NULL OR claimed_until <= now())),
       count(*) FILTER (WHERE claimed_until > now())
  FROM outbox WHERE status = 'pending' GROUP BY kind ORDER BY kind`)
		if err != nil {
			return err
		}
		h.Outbox, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxBacklog, error) {
			var b OutboxBacklog
			err := r.Scan(&b.Kind, &b.Due, &b.Waiting, &b.Claimed)
			return b, err
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
SELECT (SELECT count(*) FROM mdn_inbox WHERE state = 'pending'),
       (SELECT count(*) FROM mdn_inbox WHERE state = 'orphan'),
       (SELECT min(received_at) FROM mdn_inbox WHERE processed_at IS NULL)`).Scan(&h.InboxPending, &h.InboxOrphans, &h.OldestPending)
	})
	if err != nil {
		return HubState{}, fmt.Errorf("read hub state: %w", err)
	}
	return h, nil
}

// OIDCSignIn is a person signed in with an OpenID Connect provider, to
// find or create as a user.
type OIDCSignIn struct {
	Issuer, Subject string
	// Name is the name a new user gets (such as the e-mail address); when
	// taken, a number is added ("alice@example.com-2").
	Name string
	// Role is the role the provider's groups map to: the user's role
	// from this sign-in on.
	Role string
	// Actor names who creates a new user, for created_by and the audit
	// log ("oidc:https://issuer").
	Actor  string
	Remote string
}

// SignInOIDCUser finds the user of (issuer, subject), setting its role to
// in.Role when it differs, or creates it with in.Name (numbered when the
// name is taken) and in.Role, with no password. A creation is recorded in
// the audit log (user.add) and a role change too (user.role), in the same
// transaction. It returns the user as stored after the change and whether
// it was created. A disabled user is returned unchanged.
func (s *Store) SignInOIDCUser(ctx context.Context, in OIDCSignIn) (User, bool, error) {
	u, created, err := s.signInOIDCUser(ctx, in)
	for try := 0; try < 3 && isUniqueViolation(err); try++ {
		// Two first sign-ins at once (of this person, or of two people
		// given the same name): the next try sees the other's row.
		u, created, err = s.signInOIDCUser(ctx, in)
	}
	if err != nil {
		return User{}, false, fmt.Errorf("sign in OIDC user %s: %w", in.Subject, err)
	}
	return u, created, nil
}

func (s *Store) signInOIDCUser(ctx context.Context, in OIDCSignIn) (User, bool, error) {
	var u User
	created := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2 FOR UPDATE`,
			in.Issuer, in.Subject))
		switch {
		case err == nil:
			if u.DisabledAt != nil || u.Role == in.Role {
				return nil
			}
			was := u.Role
			if u, err = scanUser(tx.QueryRow(ctx, `UPDATE users SET role = $2, updated_at = now() WHERE id = $1 RETURNING `+userColumns, u.ID, in.Role)); err != nil {
				return err
			}
			return insertAudit(ctx, tx, AuditEntry{Actor: in.Actor, Action: "user.role", Target: u.Name, Remote: in.Remote,
				Detail: map[string]any{"role": in.Role, "was": was, "via": "oidc"}})
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// A new user: the first free name of in.Name, in.Name-2, ...
		for n := 1; ; n++ {
			name := in.Name
			if n > 1 {
				name = fmt.Sprintf("%s-%d", in.Name, n)
			}
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users WHERE lower(name) = lower($1))`, name).Scan(&taken); err != nil {
				return err
			}
			if taken {
				continue
			}
			u, err = scanUser(tx.QueryRow(ctx, `INSERT INTO users (name, role, oidc_issuer, oidc_subject, created_by)
VALUES ($1, $2, $3, $4, $5) RETURNING `+userColumns, name, in.Role, in.Issuer, in.Subject, in.Actor))
			if err != nil {
				return err
			}
			created = true
			return insertAudit(ctx, tx, AuditEntry{Actor: in.Actor, Action: "user.add", Target: u.Name, Remote: in.Remote,
				Detail: map[string]any{"role": in.Role, "via": "oidc", "issuer": in.Issuer, "subject": in.Subject}})
		}
	})
	return u, created, err
}

// OIDCRefusal is a person their OpenID Connect provider vouched for but
// whose groups map to no role.
type OIDCRefusal struct {
	Issuer, Subject string
	// Who names the person in the audit log when they have no user
	// (the name they gave the provider); the user's name otherwise.
	Who    string
	Reason string
	Remote string
}

// RefuseOIDCUser records a refused OpenID Connect sign-in (login.failed)
// and, when (in.Issuer, in.Subject) has a user that is enabled, disables
// it and bumps its session epoch (its console sessions end; its tokens
// stop with it), recorded as user.disable by "oidc:<issuer>": all in one
// transaction. It returns the user as stored after the change and whether
// it was disabled now; a person without a user gets a zero User and
// nothing but the audit row.
func (s *Store) RefuseOIDCUser(ctx context.Context, in OIDCRefusal) (User, bool, error) {
	var u User
	disabled := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2 FOR UPDATE`,
			in.Issuer, in.Subject))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			u = User{}
		case err != nil:
			return err
		case u.DisabledAt == nil:
			u, err = scanUser(tx.QueryRow(ctx, `UPDATE users SET disabled_at = now(), session_epoch = session_epoch + 1, updated_at = now()
WHERE id = $1 RETURNING `+userColumns, u.ID))
			if err != nil {
				return err
			}
			disabled = true
		}
		who := in.Who
		if u.ID != 0 {
			who = u.Name
		}
		detail := map[string]any{"reason": in.Reason, "via": "oidc", "issuer": in.Issuer, "subject": in.Subject}
		if err := insertAudit(ctx, tx, AuditEntry{Actor: "anonymous", Action: "login.failed", Target: who, Remote: in.Remote, Detail: detail}); err != nil {
			return err
		}
		if !disabled {
			return nil
		}
		return insertAudit(ctx, tx, AuditEntry{Actor: "oidc:" + in.Issuer, Action: "user.disable", Target: u.Name, Remote: in.Remote, Detail: detail})
	})
	if err != nil {
		return User{}, false, fmt.Errorf("refuse OIDC user %s: %w", in.Subject, err)
	}
	return u, disabled, nil
}
