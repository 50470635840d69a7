package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edihub/edihub/internal/postgres"
)

// UserStore is what Users reads and writes; *postgres.Store implements
// it. Every change records its audit entry in its own transaction.
type UserStore interface {
	CreateUser(ctx context.Context, nu postgres.NewUser, audit postgres.AuditEntry) (postgres.User, error)
	User(ctx context.Context, name string) (postgres.User, error)
	Users(ctx context.Context) ([]postgres.User, error)
	SetUserDisabled(ctx context.Context, name string, disabled bool, audit postgres.AuditEntry) (postgres.User, error)
	SetUserRole(ctx context.Context, name, role string, audit postgres.AuditEntry) (postgres.User, error)
	ChangePassword(ctx context.Context, name, hash string, audit postgres.AuditEntry) (postgres.User, error)
	CreateAPIToken(ctx context.Context, nt postgres.NewAPIToken, audit postgres.AuditEntry) (postgres.APIToken, error)
	APITokens(ctx context.Context, userName string) ([]postgres.APIToken, error)
	RevokeAPIToken(ctx context.Context, userName, tokenName string, audit postgres.AuditEntry) (postgres.APIToken, error)
}

// Users manages users and their API tokens, for the command line, the API
// and the console alike: each method checks that its Caller may make the
// change (admins any; a user its own tokens) and records it in the audit
// log in the change's transaction. Errors wrap ErrForbidden,
// ErrInvalidName, ErrUnknownRole, ErrRoleTooHigh, ErrBadExpiry, ErrWeakPassword,
// ErrDisabled, postgres.ErrUserNotFound, postgres.ErrUserExists,
// postgres.ErrTokenNotFound or postgres.ErrTokenExists, or are the store's.
type Users struct {
	Store UserStore
	// Params hash new passwords; zero means DefaultParams.
	Params Params
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (u *Users) params() Params {
	if u.Params == (Params{}) {
		return DefaultParams
	}
	return u.Params
}

func (u *Users) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

// maxNameLen bounds user and token names.
const maxNameLen = 64

// CheckName returns an error wrapping ErrInvalidName unless s is a
// user or token name edihub takes: 1 to 64 letters, digits and . _ - @,
// starting with a letter or digit (an e-mail address is a name).
func CheckName(what, s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("%w: a %s name has 1 to %d characters, got %d", ErrInvalidName, what, maxNameLen, len(s))
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-' && c != '@')) {
			return fmt.Errorf("%w: %s name %q: use letters, digits and . _ - @, starting with a letter or digit", ErrInvalidName, what, s)
		}
	}
	return nil
}

func requireAdmin(c Caller, what string) error {
	if !c.Role.Allows(RoleAdmin) {
		return fmt.Errorf("%w: %s needs the admin role; %s has %s", ErrForbidden, what, c.Actor(), roleName(c.Role))
	}
	return nil
}

// Add creates a user with a role and a password (checked against the
// policy). Admins only.
func (u *Users) Add(ctx context.Context, c Caller, name string, role Role, password string) (postgres.User, error) {
	if err := requireAdmin(c, "adding a user"); err != nil {
		return postgres.User{}, err
	}
	if err := CheckName("user", name); err != nil {
		return postgres.User{}, err
	}
	if role.String() == "" {
		return postgres.User{}, fmt.Errorf("%w: give the user a role: viewer, operator or admin", ErrUnknownRole)
	}
	if err := CheckPasswordPolicy(name, password); err != nil {
		return postgres.User{}, err
	}
	return u.Store.CreateUser(ctx, postgres.NewUser{Name: name, Role: role.String(), PasswordHash: u.params().Hash(password), CreatedBy: c.Actor()},
		c.entry("user.add", name, map[string]any{"role": role.String()}))
}

// List lists every user. Admins only.
func (u *Users) List(ctx context.Context, c Caller) ([]postgres.User, error) {
	if err := requireAdmin(c, "listing users"); err != nil {
		return nil, err
	}
	return u.Store.Users(ctx)
}

// SetDisabled disables a user (its tokens and sessions stop working at
// once; nothing is deleted) or enables it again. Admins only.
func (u *Users) SetDisabled(ctx context.Context, c Caller, name string, disabled bool) (postgres.User, error) {
	action := "user.enable"
	if disabled {
		action = "user.disable"
	}
	if err := requireAdmin(c, "disabling or enabling a user"); err != nil {
		return postgres.User{}, err
	}
	target, err := u.Store.User(ctx, name)
	if err != nil {
		return postgres.User{}, err
	}
	return u.Store.SetUserDisabled(ctx, target.Name, disabled, c.entry(action, target.Name, nil))
}

// SetRole changes a user's role. Its tokens keep their own role but act
// with at most the user's new one; its sessions take the new role with
// their next request. Admins only.
func (u *Users) SetRole(ctx context.Context, c Caller, name string, role Role) (postgres.User, error) {
	if err := requireAdmin(c, "changing a user's role"); err != nil {
		return postgres.User{}, err
	}
	if role.String() == "" {
		return postgres.User{}, fmt.Errorf("%w: give a role: viewer, operator or admin", ErrUnknownRole)
	}
	target, err := u.Store.User(ctx, name)
	if err != nil {
		return postgres.User{}, err
	}
	return u.Store.SetUserRole(ctx, target.Name, role.String(), c.entry("user.role", target.Name, map[string]any{"role": role.String(), "was": target.Role}))
}

// SetPassword sets a user's password (checked against the policy); the
// user's sessions end. Admins, or the user itself signed in (not with a
// token).
func (u *Users) SetPassword(ctx context.Context, c Caller, name, password string) (postgres.User, error) {
	target, err := u.Store.User(ctx, name)
	if err != nil {
		return postgres.User{}, err
	}
	if !c.Role.Allows(RoleAdmin) && !(c.Kind == KindUser && c.self(target.ID)) {
		return postgres.User{}, fmt.Errorf("%w: only an admin or %s signed in may set %s's password", ErrForbidden, target.Name, target.Name)
	}
	if err := CheckPasswordPolicy(target.Name, password); err != nil {
		return postgres.User{}, err
	}
	return u.Store.ChangePassword(ctx, target.Name, u.params().Hash(password), c.entry("user.passwd", target.Name, nil))
}

// TokenRequest is a token to make.
type TokenRequest struct {
	// Name names the token among its user's (unique while it is active).
	Name string
	// Role is the token's role: at most its user's, and for a user making
	// its own token, at most the caller's. Zero: the highest allowed.
	Role Role
	// ExpiresAt, when set, ends the token; it must be in the future.
	ExpiresAt *time.Time
}

// CreateToken makes an API token for a user and returns it (shown once:
// only its hash is stored) with its record. Admins make tokens for any
// enabled user; a user makes its own, with at most the role it acts with.
// A user of an identity provider gets none (ErrProviderUserToken, an
// ErrForbidden): see Bearer.
func (u *Users) CreateToken(ctx context.Context, c Caller, user string, tr TokenRequest) (string, postgres.APIToken, error) {
	target, err := u.authorizeTokens(ctx, c, user)
	if err != nil {
		return "", postgres.APIToken{}, err
	}
	if err := CheckName("token", tr.Name); err != nil {
		return "", postgres.APIToken{}, err
	}
	if target.DisabledAt != nil {
		return "", postgres.APIToken{}, fmt.Errorf("%w: %s: enable the user first (edihub users enable)", ErrDisabled, target.Name)
	}
	if target.OIDCIssuer != "" {
		return "", postgres.APIToken{}, fmt.Errorf("%w: %w: %s signs in with the identity provider; make a local user for automation (edihub users add)",
			ErrForbidden, ErrProviderUserToken, target.Name)
	}
	userRole, err := ParseRole(target.Role)
	if err != nil {
		return "", postgres.APIToken{}, err
	}
	limit := userRole
	if !c.Role.Allows(RoleAdmin) {
		limit = min(limit, c.Role)
	}
	role := tr.Role
	if role == 0 {
		role = limit
	}
	if role > userRole {
		return "", postgres.APIToken{}, fmt.Errorf("%w: a token of %s may have at most the role %s, not %s", ErrRoleTooHigh, target.Name, userRole, role)
	}
	if role > limit {
		return "", postgres.APIToken{}, fmt.Errorf("%w: %s may make tokens of at most the role %s, not %s", ErrForbidden, c.Actor(), limit, role)
	}
	if tr.ExpiresAt != nil && !tr.ExpiresAt.After(u.now()) {
		return "", postgres.APIToken{}, fmt.Errorf("%w: %s is not in the future", ErrBadExpiry, tr.ExpiresAt.UTC().Format(time.RFC3339))
	}
	tok := NewToken()
	detail := map[string]any{"token": tr.Name, "role": role.String()}
	if tr.ExpiresAt != nil {
		detail["expires_at"] = tr.ExpiresAt.UTC().Format(time.RFC3339)
	}
	t, err := u.Store.CreateAPIToken(ctx, postgres.NewAPIToken{
		UserID: target.ID, Name: tr.Name, Hash: HashToken(tok), Role: role.String(), ExpiresAt: tr.ExpiresAt, CreatedBy: c.Actor(),
	}, c.entry("token.create", target.Name, detail))
	if errors.Is(err, postgres.ErrTokenExists) {
		return "", postgres.APIToken{}, fmt.Errorf("%w: choose another name, or revoke that token first", err)
	}
	if err != nil {
		return "", postgres.APIToken{}, err
	}
	return tok, t, nil
}

// Tokens lists a user's tokens, revoked and expired ones too. Admins, or
// the user itself.
func (u *Users) Tokens(ctx context.Context, c Caller, user string) ([]postgres.APIToken, error) {
	target, err := u.authorizeTokens(ctx, c, user)
	if err != nil {
		return nil, err
	}
	return u.Store.APITokens(ctx, target.Name)
}

// RevokeToken revokes a user's active token of a name: it stops working
// at once. Admins, or the user itself.
func (u *Users) RevokeToken(ctx context.Context, c Caller, user, token string) (postgres.APIToken, error) {
	target, err := u.authorizeTokens(ctx, c, user)
	if err != nil {
		return postgres.APIToken{}, err
	}
	return u.Store.RevokeAPIToken(ctx, target.Name, token, c.entry("token.revoke", target.Name, map[string]any{"token": token}))
}

// authorizeTokens reads the user whose tokens c works on and checks that c
// may: an admin, or the user itself.
func (u *Users) authorizeTokens(ctx context.Context, c Caller, user string) (postgres.User, error) {
	if !c.Role.Allows(RoleViewer) {
		return postgres.User{}, fmt.Errorf("%w: %s has no role", ErrForbidden, c.Actor())
	}
	target, err := u.Store.User(ctx, user)
	if err != nil {
		return postgres.User{}, err
	}
	if !c.Role.Allows(RoleAdmin) && !c.self(target.ID) {
		return postgres.User{}, fmt.Errorf("%w: only an admin or %s may manage %s's tokens", ErrForbidden, target.Name, target.Name)
	}
	return target, nil
}
