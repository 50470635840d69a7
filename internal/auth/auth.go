// Package auth is who may do what in edihub: users and their roles
// (viewer < operator < admin), passwords (argon2id), per-user API tokens
// and the bootstrap token, login throttling shared by every replica, the
// HTTP middleware that resolves and authorises the caller of the REST API,
// and the entries of the audit log.
//
// The rules are in docs/users.md. Storage is internal/postgres, behind the
// small interfaces declared here.
package auth

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Role is what a user or token may do. Roles are ordered: each allows what
// the ones below it allow.
type Role int

// The roles, lowest first. The zero Role allows nothing.
const (
	// RoleViewer reads messages, MDNs, events, reports, certificates and
	// partners, but never payload bytes.
	RoleViewer Role = iota + 1
	// RoleOperator also reads payloads and raw MDNs, sends, resends and
	// tests partners.
	RoleOperator
	// RoleAdmin also changes partners, users and tokens, and reads the
	// audit log.
	RoleAdmin
)

// Roles lists the roles, lowest first.
func Roles() []Role { return []Role{RoleViewer, RoleOperator, RoleAdmin} }

// String is the role's name as stored and typed: viewer, operator, admin;
// "" for the zero Role.
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return ""
}

// ParseRole reads a role's name (viewer, operator or admin, lower case);
// anything else is an error wrapping ErrUnknownRole.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w %q: want viewer, operator or admin", ErrUnknownRole, s)
}

// Allows reports whether r may do what needs need: r is need or above.
// The zero Role allows nothing.
func (r Role) Allows(need Role) bool { return r != 0 && r >= need }

// Kinds of Principal.
const (
	// KindUser is a user signed in with a password or OpenID Connect.
	KindUser = "user"
	// KindToken is a user's API token.
	KindToken = "token"
	// KindBootstrap is the shared EDIHUB_API_TOKEN: an admin of no user.
	KindBootstrap = "bootstrap"
	// KindCLI is edihub's command line on a machine with the database's
	// credentials: an admin named by the operating system user and host.
	KindCLI = "cli"
)

// Principal is who makes a request: a user, a user's token, the bootstrap
// token or the command line, with the role it has now.
type Principal struct {
	Kind string
	// User is the user's name; for KindCLI, "osuser@host".
	User   string
	UserID int64
	// TokenName names the token of a KindToken principal.
	TokenName string
	// Role is the effective role: for a token, the lesser of the token's
	// role and its user's current one.
	Role Role
	// Epoch is the user's session epoch when it signed in (KindUser): a
	// session is valid while the user's epoch is the same.
	Epoch int64
	// Issuer and Subject identify a user of an OpenID Connect provider
	// there; "" for others. Audit entries carry them (AuditFromRequest).
	Issuer, Subject string
}

// BootstrapPrincipal is the principal of the bootstrap token.
var BootstrapPrincipal = Principal{Kind: KindBootstrap, Role: RoleAdmin}

// CLIPrincipal is the command line run by who ("osuser@host"): an admin.
func CLIPrincipal(who string) Principal { return Principal{Kind: KindCLI, User: who, Role: RoleAdmin} }

// Actor names p in the audit log and partner history: "user:alice",
// "token:ci (alice)", "bootstrap-token", "cli:root@host"; "anonymous"
// for the zero Principal.
func (p Principal) Actor() string {
	switch p.Kind {
	case KindUser:
		return "user:" + p.User
	case KindToken:
		return "token:" + p.TokenName + " (" + p.User + ")"
	case KindBootstrap:
		return "bootstrap-token"
	case KindCLI:
		return "cli:" + p.User
	}
	return "anonymous"
}

// self reports whether p acts as the user of id: signed in as it or with
// one of its tokens.
func (p Principal) self(id int64) bool {
	return (p.Kind == KindUser || p.Kind == KindToken) && p.UserID != 0 && p.UserID == id
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries; false when none.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Errors of this package; match them with errors.Is. The HTTP middleware
// maps them to statuses in one place (see API and Require).
var (
	// ErrUnauthenticated: no credentials, or credentials that name no one
	// (wrong password, unknown, revoked or expired token). 401.
	ErrUnauthenticated = errors.New("not authenticated")
	// ErrDisabled: the credentials are right but their user is disabled.
	// It is also an ErrUnauthenticated. 401.
	ErrDisabled = errors.New("the user is disabled")
	// ErrThrottled: too many failed logins for the user or the address;
	// a *ThrottledError says for how long. 429.
	ErrThrottled = errors.New("too many failed logins")
	// ErrBusy: too many password checks running at once on this replica
	// (Options.MaxPasswordChecks); try again after BusyRetryAfter. 429.
	ErrBusy = errors.New("too many logins at once")
	// ErrProviderUserToken: an API token of a user of an identity
	// provider, which the hub does not accept (see Bearer). It is also an
	// ErrUnauthenticated when Bearer returns it, and an ErrForbidden when
	// a token is asked for such a user. 401 or 403.
	ErrProviderUserToken = errors.New("users of the identity provider have no API tokens")
	// ErrForbidden: authenticated, but the role or the user does not
	// allow it. 403.
	ErrForbidden = errors.New("forbidden")
	// ErrUnknownRole: a role name that is not viewer, operator or admin.
	ErrUnknownRole = errors.New("unknown role")
	// ErrRoleTooHigh: a token asked for a role above its user's.
	ErrRoleTooHigh = errors.New("role above the user's")
	// ErrBadExpiry: a token's expiry that is not in the future.
	ErrBadExpiry = errors.New("invalid token expiry")
	// ErrInvalidName: a user or token name edihub does not take.
	ErrInvalidName = errors.New("invalid name")
	// ErrWeakPassword: a password the policy refuses.
	ErrWeakPassword = errors.New("password refused")
)

// ThrottledError is the error of a login refused for too many failures:
// it is an ErrThrottled, and RetryAfter says when to try again.
type ThrottledError struct {
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%s: try again in %s", ErrThrottled, e.RetryAfter.Round(time.Second))
}

// Unwrap makes a *ThrottledError match ErrThrottled.
func (e *ThrottledError) Unwrap() error { return ErrThrottled }
