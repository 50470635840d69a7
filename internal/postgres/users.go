package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUserNotFound reports a user name or id that is not stored.
var ErrUserNotFound = errors.New("no such user")

// ErrUserExists reports a user name taken, whatever its case.
var ErrUserExists = errors.New("a user of that name exists")

// ErrTokenNotFound reports an API token that is not stored (or, for a
// revoke, not active).
var ErrTokenNotFound = errors.New("no such API token")

// ErrTokenExists reports a token name the user already has an active
// token of.
var ErrTokenExists = errors.New("the user has an active API token of that name")

// User is one stored user. PasswordHash is "" for a user without a
// password (OpenID Connect only).
type User struct {
	ID           int64
	Name         string
	Role         string
	PasswordHash string
	OIDCIssuer   string
	OIDCSubject  string
	DisabledAt   *time.Time
	SessionEpoch int64
	LastLoginAt  *time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
	CreatedBy    string
}

// NewUser is a user to create.
type NewUser struct {
	Name         string
	Role         string
	PasswordHash string
	CreatedBy    string
}

// APIToken is one stored API token: its SHA-256, never the token.
type APIToken struct {
	ID         int64
	UserID     int64
	Name       string
	Hash       []byte
	Role       string
	CreatedAt  time.Time
	CreatedBy  string
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// NewAPIToken is a token to store for a user.
type NewAPIToken struct {
	UserID    int64
	Name      string
	Hash      []byte
	Role      string
	ExpiresAt *time.Time
	CreatedBy string
}

// LoginFailures is the failed-login record of one key ("user:alice",
// "ip:203.0.113.7"). A key without failures has Failures 0 and zero times.
type LoginFailures struct {
	Key         string
	Failures    int
	FirstAt     time.Time
	LastAt      time.Time
	LockedUntil *time.Time
}

const userColumns = `id, name, role, coalesce(password_hash, ''), coalesce(oidc_issuer, ''), coalesce(oidc_subject, ''),
disabled_at, session_epoch, last_login_at, created_at, updated_at, created_by`

func scanUser(r pgx.Row) (User, error) {
	var u User
	err := r.Scan(&u.ID, &u.Name, &u.Role, &u.PasswordHash, &u.OIDCIssuer, &u.OIDCSubject,
		&u.DisabledAt, &u.SessionEpoch, &u.LastLoginAt, &u.CreatedAt, &u.UpdatedAt, &u.CreatedBy)
	return u, err
}

const tokenColumns = `t.id, t.user_id, t.name, t.token_hash, t.role, t.created_at, t.created_by, t.expires_at, t.last_used_at, t.revoked_at`

func scanToken(r pgx.Row) (APIToken, error) {
	var t APIToken
	err := r.Scan(&t.ID, &t.UserID, &t.Name, &t.Hash, &t.Role, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt)
	return t, err
}

// notFound turns pgx.ErrNoRows into want.
func notFound(err, want error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return want
	}
	return err
}

// CreateUser stores a new user and records audit in the same transaction.
// It returns ErrUserExists when the name is taken in any case.
func (s *Store) CreateUser(ctx context.Context, nu NewUser, audit AuditEntry) (User, error) {
	var u User
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `INSERT INTO users (name, role, password_hash, created_by)
VALUES ($1, $2, nullif($3, ''), $4) RETURNING `+userColumns, nu.Name, nu.Role, nu.PasswordHash, nu.CreatedBy))
		if isUniqueViolation(err) {
			return ErrUserExists
		}
		if err != nil {
			return err
		}
		return insertAudit(ctx, tx, audit)
	})
	if err != nil {
		return User{}, fmt.Errorf("create user %q: %w", nu.Name, err)
	}
	return u, nil
}

// User reads the user of a name, whatever its case; ErrUserNotFound when
// there is none.
func (s *Store) User(ctx context.Context, name string) (User, error) {
	u, err := scanUser(s.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE lower(name) = lower($1)`, name))
	if err != nil {
		return User{}, fmt.Errorf("read user %q: %w", name, notFound(err, ErrUserNotFound))
	}
	return u, nil
}

// UserByID reads the user of an id; ErrUserNotFound when there is none.
func (s *Store) UserByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(s.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if err != nil {
		return User{}, fmt.Errorf("read user %d: %w", id, notFound(err, ErrUserNotFound))
	}
	return u, nil
}

// Users lists every user by name.
func (s *Store) Users(ctx context.Context) ([]User, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+userColumns+` FROM users ORDER BY lower(name)`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) { return scanUser(r) })
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

// HasUsers reports whether any user is stored, disabled or not.
func (s *Store) HasUsers(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users)`).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for users: %w", err)
	}
	return ok, nil
}

// SetUserDisabled disables (disabled true: disabled_at now, unless it was
// disabled already, and the session epoch bumped, so that its sessions end)
// or enables a user, and records audit in the same transaction.
func (s *Store) SetUserDisabled(ctx context.Context, name string, disabled bool, audit AuditEntry) (User, error) {
	q := `UPDATE users SET disabled_at = NULL, updated_at = now() WHERE lower(name) = lower($1) RETURNING ` + userColumns
	if disabled {
		q = `UPDATE users SET disabled_at = coalesce(disabled_at, now()), session_epoch = session_epoch + 1, updated_at = now()
WHERE lower(name) = lower($1) RETURNING ` + userColumns
	}
	return s.changeUser(ctx, name, audit, q, name)
}

// SetUserRole changes a user's role and records audit in the same
// transaction. Its tokens keep theirs, but act with at most the user's.
func (s *Store) SetUserRole(ctx context.Context, name, role string, audit AuditEntry) (User, error) {
	return s.changeUser(ctx, name, audit, `UPDATE users SET role = $2, updated_at = now() WHERE lower(name) = lower($1) RETURNING `+userColumns, name, role)
}

// ChangePassword stores a new password hash for a user, bumps its session
// epoch (its sessions end) and records audit in the same transaction.
func (s *Store) ChangePassword(ctx context.Context, name, hash string, audit AuditEntry) (User, error) {
	return s.changeUser(ctx, name, audit, `UPDATE users SET password_hash = $2, session_epoch = session_epoch + 1, updated_at = now()
WHERE lower(name) = lower($1) RETURNING `+userColumns, name, hash)
}

func (s *Store) changeUser(ctx context.Context, name string, audit AuditEntry, q string, args ...any) (User, error) {
	var u User
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if u, err = scanUser(tx.QueryRow(ctx, q, args...)); err != nil {
			return notFound(err, ErrUserNotFound)
		}
		return insertAudit(ctx, tx, audit)
	})
	if err != nil {
		return User{}, fmt.Errorf("%s %q: %w", audit.Action, name, err)
	}
	return u, nil
}

// RehashPassword replaces a user's password hash by the same password
// hashed with stronger parameters, unless the hash changed meanwhile. The
// session epoch stays: the password is the same.
func (s *Store) RehashPassword(ctx context.Context, id int64, old, hash string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE users SET password_hash = $3 WHERE id = $1 AND password_hash = $2`, id, old, hash); err != nil {
		return fmt.Errorf("rehash password of user %d: %w", id, err)
	}
	return nil
}

// RecordLogin notes a user's successful login.
func (s *Store) RecordLogin(ctx context.Context, id int64, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE users SET last_login_at = $2 WHERE id = $1`, id, at); err != nil {
		return fmt.Errorf("record login of user %d: %w", id, err)
	}
	return nil
}

// CreateAPIToken stores a token's hash for a user and records audit in the
// same transaction. It returns ErrTokenExists when the user has an active
// (not revoked) token of that name, whatever its case.
func (s *Store) CreateAPIToken(ctx context.Context, nt NewAPIToken, audit AuditEntry) (APIToken, error) {
	var t APIToken
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `INSERT INTO api_tokens AS t (user_id, name, token_hash, role, expires_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+tokenColumns, nt.UserID, nt.Name, nt.Hash, nt.Role, nt.ExpiresAt, nt.CreatedBy))
		if isUniqueViolation(err) {
			return ErrTokenExists
		}
		if err != nil {
			return err
		}
		return insertAudit(ctx, tx, audit)
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("create API token %q: %w", nt.Name, err)
	}
	return t, nil
}

// APITokenByHash reads the token of a SHA-256 hash and its user, revoked
// or expired alike (the caller decides); ErrTokenNotFound when none.
func (s *Store) APITokenByHash(ctx context.Context, hash []byte) (APIToken, User, error) {
	var t APIToken
	var u User
	err := s.pool.QueryRow(ctx, `SELECT `+tokenColumns+`, u.id, u.name, u.role, coalesce(u.password_hash, ''), coalesce(u.oidc_issuer, ''),
coalesce(u.oidc_subject, ''), u.disabled_at, u.session_epoch, u.last_login_at, u.created_at, u.updated_at, u.created_by
FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1`, hash).Scan(
		&t.ID, &t.UserID, &t.Name, &t.Hash, &t.Role, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt,
		&u.ID, &u.Name, &u.Role, &u.PasswordHash, &u.OIDCIssuer, &u.OIDCSubject, &u.DisabledAt, &u.SessionEpoch, &u.LastLoginAt,
		&u.CreatedAt, &u.UpdatedAt, &u.CreatedBy)
	if err != nil {
		return APIToken{}, User{}, fmt.Errorf("read API token: %w", notFound(err, ErrTokenNotFound))
	}
	return t, u, nil
}

// TouchAPIToken sets a token's last use to at, unless it was set less
// than every before at: a token used many times a second is written at
// most once per every, whichever replica serves it.
func (s *Store) TouchAPIToken(ctx context.Context, id int64, at time.Time, every time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = $2
WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $2::timestamptz - $3::bigint * interval '1 microsecond')`, id, at, every.Microseconds())
	if err != nil {
		return fmt.Errorf("note use of API token %d: %w", id, err)
	}
	return nil
}

// APITokens lists a user's tokens, revoked ones too, oldest first;
// ErrUserNotFound when there is no such user.
func (s *Store) APITokens(ctx context.Context, userName string) ([]APIToken, error) {
	var out []APIToken
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `SELECT id FROM users WHERE lower(name) = lower($1)`, userName).Scan(&id); err != nil {
			return notFound(err, ErrUserNotFound)
		}
		rows, err := tx.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens t WHERE t.user_id = $1 ORDER BY t.created_at, t.id`, id)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIToken, error) { return scanToken(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list API tokens of %q: %w", userName, err)
	}
	return out, nil
}

// RevokeAPIToken revokes a user's active token of a name (any case) and
// records audit in the same transaction; ErrTokenNotFound when the user
// has no such active token.
func (s *Store) RevokeAPIToken(ctx context.Context, userName, tokenName string, audit AuditEntry) (APIToken, error) {
	var t APIToken
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `UPDATE api_tokens t SET revoked_at = now()
WHERE t.user_id = (SELECT id FROM users WHERE lower(name) = lower($1)) AND lower(t.name) = lower($2) AND t.revoked_at IS NULL
RETURNING `+tokenColumns, userName, tokenName))
		if err != nil {
			return notFound(err, ErrTokenNotFound)
		}
		return insertAudit(ctx, tx, audit)
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("revoke API token %q of %q: %w", tokenName, userName, err)
	}
	return t, nil
}

// LoginFailuresOf reads the failed-login records of keys; keys without
// one are left out.
func (s *Store) LoginFailuresOf(ctx context.Context, keys []string) ([]LoginFailures, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, failures, first_at, last_at, locked_until FROM login_failures WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("read login failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanLoginFailures)
	if err != nil {
		return nil, fmt.Errorf("read login failures: %w", err)
	}
	return out, nil
}

func scanLoginFailures(r pgx.CollectableRow) (LoginFailures, error) {
	var f LoginFailures
	err := r.Scan(&f.Key, &f.Failures, &f.FirstAt, &f.LastAt, &f.LockedUntil)
	return f, err
}

// UpdateLoginFailures reads and rewrites the failed-login records of keys
// in one transaction that holds their rows locked, so that attempts
// counted on several replicas at once all count, each seeing those before
// it. next gets the records in the order of keys (a key without one has
// Failures 0 and zero times) and returns the records to store, in the same
// order, or nil to leave them all as they were; a record of Failures 0 is
// deleted. One statement locks the rows, in key order, so that calls over
// overlapping keys never deadlock.
func (s *Store) UpdateLoginFailures(ctx context.Context, keys []string, next func([]LoginFailures) []LoginFailures) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
INSERT INTO login_failures (key, failures, first_at, last_at)
SELECT k, 0, now(), now() FROM unnest($1::text[]) AS k ORDER BY k
ON CONFLICT (key) DO UPDATE SET failures = login_failures.failures
RETURNING key, failures, first_at, last_at, locked_until`, keys)
		if err != nil {
			return err
		}
		cur, err := pgx.CollectRows(rows, scanLoginFailures)
		if err != nil {
			return err
		}
		in := make([]LoginFailures, len(keys))
		for i, k := range keys {
			in[i] = LoginFailures{Key: k}
			for _, f := range cur {
				if f.Key == k && f.Failures > 0 {
					in[i] = f
				}
			}
		}
		out := next(in)
		if out == nil {
			return errUnchanged
		}
		if len(out) != len(keys) {
			return fmt.Errorf("%d records for %d keys", len(out), len(keys))
		}
		for i, f := range out {
			if f.Failures == 0 {
				if _, err := tx.Exec(ctx, `DELETE FROM login_failures WHERE key = $1`, keys[i]); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE login_failures SET failures = $2, first_at = $3, last_at = $4, locked_until = $5 WHERE key = $1`,
				keys[i], f.Failures, f.FirstAt, f.LastAt, f.LockedUntil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return fmt.Errorf("update login failures: %w", err)
	}
	return nil
}

// errUnchanged rolls back a transaction that has nothing to write.
var errUnchanged = errors.New("unchanged")

// ClearLoginFailures forgets the failed logins of key.
func (s *Store) ClearLoginFailures(ctx context.Context, key string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM login_failures WHERE key = $1`, key); err != nil {
		return fmt.Errorf("clear login failures: %w", err)
	}
	return nil
}
