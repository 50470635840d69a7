package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/postgres"
)

// Store is what an Authenticator reads and writes; *postgres.Store
// implements it.
type Store interface {
	User(ctx context.Context, name string) (postgres.User, error)
	UserByID(ctx context.Context, id int64) (postgres.User, error)
	HasUsers(ctx context.Context) (bool, error)
	RecordLogin(ctx context.Context, id int64, at time.Time) error
	RehashPassword(ctx context.Context, id int64, old, hash string) error
	APITokenByHash(ctx context.Context, hash []byte) (postgres.APIToken, postgres.User, error)
	TouchAPIToken(ctx context.Context, id int64, at time.Time, every time.Duration) error
	UpdateLoginFailures(ctx context.Context, keys []string, next func([]postgres.LoginFailures) []postgres.LoginFailures) error
	ClearLoginFailures(ctx context.Context, key string) error
	SignInOIDCUser(ctx context.Context, in postgres.OIDCSignIn) (postgres.User, bool, error)
	RefuseOIDCUser(ctx context.Context, in postgres.OIDCRefusal) (postgres.User, bool, error)
}

// Login throttling (see Login) and token bookkeeping.
const (
	// UserFailureLimit failed logins for one user name lock it.
	UserFailureLimit = 5
	// IPFailureLimit failed logins from one address, whatever the names,
	// lock the address.
	IPFailureLimit = 20
	// FailureWindow: a key's failures are forgotten once it had none for
	// this long (counted from its last failure or the end of its lock).
	FailureWindow = 15 * time.Minute
	// FirstLock is the first lock; each further failure right after a
	// lock doubles it, up to MaxLock.
	FirstLock = time.Minute
	// MaxLock is the longest lock.
	MaxLock = time.Hour
	// DefaultMaxPasswordChecks is Options.MaxPasswordChecks's default:
	// four checks of DefaultParams take 76 MiB.
	DefaultMaxPasswordChecks = 4
	// BusyRetryAfter is when to try again after ErrBusy: a check takes
	// tens of milliseconds.
	BusyRetryAfter = time.Second
	// TouchEvery bounds the writes of a token's last use: at most one per
	// token in this time, however often it is used.
	TouchEvery = time.Minute
)

// Options configure New.
type Options struct {
	// Store holds users and tokens; nil accepts the bootstrap token only.
	Store Store
	// BootstrapToken is the shared EDIHUB_API_TOKEN: it authenticates
	// as an admin of no user (KindBootstrap). Empty: none.
	BootstrapToken string
	// Auditor, when set, records logins and failed logins.
	Auditor Auditor
	// Params hash passwords (rehash at login, the dummy hash checked for
	// unknown users); zero means DefaultParams.
	Params Params
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger logs refused tokens and logins (never a secret); nil logs
	// nothing.
	Logger *zap.Logger
	// MaxPasswordChecks bounds the logins that check a password at once
	// (each takes Params.Memory while it runs); 0 means
	// DefaultMaxPasswordChecks.
	MaxPasswordChecks int
}

// Authenticator resolves who makes a request: the bearer token of an API
// request (Bearer), a name and password (Login), a console session
// (SessionPrincipal). It is safe for concurrent use.
type Authenticator struct {
	o         Options
	log       *zap.Logger
	bootstrap [sha256.Size]byte
	// dummy is checked for a name without a password, so that a login
	// takes as long whether the name exists or not.
	dummy string
	// users is set once a user was seen: users are never deleted, so the
	// API stays enabled from then on without asking the database.
	users atomic.Bool
	// check checks a password against a hash: CheckPassword, or a test's
	// fake that counts or holds the checks.
	check func(hash, password string) (bool, error)
	// checks holds a token per login checking a password: its capacity
	// is Options.MaxPasswordChecks.
	checks chan struct{}
}

// New validates o and returns an Authenticator. It refuses Params that
// are set but incomplete.
func New(o Options) (*Authenticator, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Params == (Params{}) {
		o.Params = DefaultParams
	}
	if err := o.Params.validate(); err != nil {
		return nil, err
	}
	if o.MaxPasswordChecks < 0 {
		return nil, fmt.Errorf("auth: MaxPasswordChecks %d: want 1 or more, or 0 for %d", o.MaxPasswordChecks, DefaultMaxPasswordChecks)
	}
	if o.MaxPasswordChecks == 0 {
		o.MaxPasswordChecks = DefaultMaxPasswordChecks
	}
	a := &Authenticator{o: o, log: o.Logger.Named("auth"), bootstrap: sha256.Sum256([]byte(o.BootstrapToken)), check: CheckPassword,
		checks: make(chan struct{}, o.MaxPasswordChecks)}
	if o.Store != nil {
		a.dummy = o.Params.Hash(GeneratePassword())
	}
	return a, nil
}

// bearerToken returns the token of "Authorization: Bearer <token>".
func bearerToken(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok, ok && tok != ""
}

// Bearer resolves the principal of a request's bearer token: the
// bootstrap token (compared in constant time over SHA-256 digests, so that
// neither its content nor its length shows in the time taken) is an admin
// of no user; a user's token is looked up by its hash and refused when
// revoked, expired or its user disabled, and its role is the lesser of the
// token's and the user's. A token's last use is written at most once per
// TouchEvery. A token of a user of an identity provider is refused: the
// hub learns of the person's standing at the provider only when they sign
// in, so a token could outlive their access there (docs/oidc.md).
//
// Errors wrap ErrUnauthenticated (no token, unknown, revoked, expired, of
// a provider's user; also ErrDisabled for a disabled user) with a reason
// fit for the caller, or are the store's (the database did not answer).
func (a *Authenticator) Bearer(r *http.Request) (Principal, error) {
	tok, ok := bearerToken(r)
	if !ok {
		return Principal{}, fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	if a.o.BootstrapToken != "" {
		sum := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(sum[:], a.bootstrap[:]) == 1 {
			return BootstrapPrincipal, nil
		}
	}
	if a.o.Store == nil || !looksLikeToken(tok) {
		return Principal{}, fmt.Errorf("%w: invalid bearer token", ErrUnauthenticated)
	}
	ctx := r.Context()
	t, u, err := a.o.Store.APITokenByHash(ctx, HashToken(tok))
	if errors.Is(err, postgres.ErrTokenNotFound) {
		return Principal{}, fmt.Errorf("%w: invalid bearer token", ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	a.users.Store(true)
	now := a.o.Now()
	switch {
	case t.RevokedAt != nil:
		a.log.Info("revoked API token used", zap.String("user", u.Name), zap.String("token", t.Name), zap.String("remote", RemoteIP(r)))
		return Principal{}, fmt.Errorf("%w: the API token %q of %s was revoked: ask for a new one", ErrUnauthenticated, t.Name, u.Name)
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		a.log.Info("expired API token used", zap.String("user", u.Name), zap.String("token", t.Name), zap.String("remote", RemoteIP(r)))
		return Principal{}, fmt.Errorf("%w: the API token %q of %s expired at %s: make a new one (edihub users token)", ErrUnauthenticated,
			t.Name, u.Name, t.ExpiresAt.UTC().Format(time.RFC3339))
	case u.DisabledAt != nil:
		a.log.Info("API token of a disabled user used", zap.String("user", u.Name), zap.String("token", t.Name), zap.String("remote", RemoteIP(r)))
		return Principal{}, fmt.Errorf("%w: %w: %s", ErrUnauthenticated, ErrDisabled, u.Name)
	case u.OIDCIssuer != "":
		a.log.Info("API token of a user of the identity provider used", zap.String("user", u.Name), zap.String("token", t.Name), zap.String("remote", RemoteIP(r)))
		return Principal{}, fmt.Errorf("%w: %w: the API token %q of %s", ErrUnauthenticated, ErrProviderUserToken, t.Name, u.Name)
	}
	tokenRole, err := ParseRole(t.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("API token %d: %w", t.ID, err)
	}
	userRole, err := ParseRole(u.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("user %d: %w", u.ID, err)
	}
	if t.LastUsedAt == nil || now.Sub(*t.LastUsedAt) >= TouchEvery {
		if err := a.o.Store.TouchAPIToken(ctx, t.ID, now, TouchEvery); err != nil {
			a.log.Warn("last use of an API token not written", zap.String("user", u.Name), zap.String("token", t.Name), zap.Error(err))
		}
	}
	return Principal{Kind: KindToken, User: u.Name, UserID: u.ID, TokenName: t.Name, Role: min(tokenRole, userRole)}, nil
}

// enabled reports whether anyone can authenticate: a bootstrap token is
// set, or users exist. Errors are the store's.
func (a *Authenticator) enabled(ctx context.Context) (bool, error) {
	if a.o.BootstrapToken != "" || a.users.Load() {
		return true, nil
	}
	if a.o.Store == nil {
		return false, nil
	}
	ok, err := a.o.Store.HasUsers(ctx)
	if ok {
		a.users.Store(true)
	}
	return ok, err
}

// throttleKeys are the keys a login attempt counts against: the user name
// (lower case, as names are unique whatever their case) and the address;
// an IPv6 address by its /64, as one host commonly has a whole /64.
func throttleKeys(name, remote string) (user, ip string) {
	user = "user:" + strings.ToLower(name)
	if len(user) > 200 {
		user = user[:200]
	}
	if remote != "" {
		if a, err := netip.ParseAddr(remote); err == nil && a.Is6() && !a.Is4In6() {
			remote = netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
		}
		ip = "ip:" + remote
	}
	return user, ip
}

// Login checks a user's name and password, from remote (the client's IP;
// "" when unknown). Attempts are counted per user name and per address in
// the store, so that the count holds across replicas: after
// UserFailureLimit failures for a name, or IPFailureLimit from an address
// (an IPv6 address's /64), with no pause of FailureWindow between them,
// further attempts are refused without checking the password (a
// *ThrottledError, ErrThrottled) for FirstLock, doubling with each further
// failure up to MaxLock. An attempt is counted as a failure before its
// password is checked, in the same transaction that decides whether the
// name or the address is locked, so that attempts sent at the same time
// (to any replicas) get no more checks than the limits allow; a success
// takes its attempt back: it clears the name's count and undoes its count
// of the address. Names that do not exist are counted alike, and a dummy
// hash is checked for them, so that neither the answer nor its time tells
// whether a name exists.
//
// At most Options.MaxPasswordChecks logins of this Authenticator check a
// password at once (each check takes Params.Memory): a login past that is
// refused at once with ErrBusy, counting nothing; try again after
// BusyRetryAfter.
//
// It returns the user's Principal, or an error wrapping ErrUnauthenticated
// (also ErrDisabled for a disabled user whose password was right),
// ErrThrottled, ErrBusy, or the store's.
func (a *Authenticator) Login(ctx context.Context, name, password, remote string) (Principal, error) {
	if a.o.Store == nil {
		return Principal{}, fmt.Errorf("%w: no users", ErrUnauthenticated)
	}
	select {
	case a.checks <- struct{}{}:
		defer func() { <-a.checks }()
	default:
		a.log.Info("login refused: too many password checks at once", zap.String("user", name), zap.String("remote", remote))
		return Principal{}, fmt.Errorf("%w: %d password checks running", ErrBusy, cap(a.checks))
	}
	now := a.o.Now()
	userKey, ipKey := throttleKeys(name, remote)
	keys := []string{userKey}
	if ipKey != "" {
		keys = append(keys, ipKey)
	}
	before, after, until, err := a.countAttempt(ctx, keys, ipKey, now)
	if err != nil {
		return Principal{}, err
	}
	if until.After(now) {
		a.log.Info("login throttled", zap.String("user", name), zap.String("remote", remote), zap.Time("until", until))
		return Principal{}, &ThrottledError{RetryAfter: until.Sub(now)}
	}

	u, err := a.o.Store.User(ctx, name)
	if err != nil && !errors.Is(err, postgres.ErrUserNotFound) {
		return Principal{}, err
	}
	hash := u.PasswordHash
	if err != nil || hash == "" {
		hash = a.dummy
	}
	ok, herr := a.check(hash, password)
	if herr != nil {
		a.log.Error("stored password hash unreadable", zap.String("user", u.Name), zap.Error(herr))
	}
	ok = ok && err == nil && u.PasswordHash != ""
	if !ok || u.DisabledAt != nil {
		// The attempt was counted as a failure: it stays one.
		reason := "wrong name or password"
		if ok {
			reason = "user disabled"
		}
		a.log.Info("login failed", zap.String("user", name), zap.String("remote", remote), zap.String("reason", reason))
		a.audit(ctx, Entry{Actor: "anonymous", Action: "login.failed", Target: name, Remote: remote, Detail: map[string]any{"reason": reason}})
		if ok {
			return Principal{}, fmt.Errorf("%w: %w: %s", ErrUnauthenticated, ErrDisabled, u.Name)
		}
		return Principal{}, fmt.Errorf("%w: wrong name or password", ErrUnauthenticated)
	}
	role, err := ParseRole(u.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("user %d: %w", u.ID, err)
	}
	a.takeBack(ctx, userKey, ipKey, before, after)
	if err := a.o.Store.RecordLogin(ctx, u.ID, now); err != nil {
		a.log.Warn("login time not written", zap.Error(err))
	}
	if NeedsRehash(u.PasswordHash, a.o.Params) {
		if err := a.o.Store.RehashPassword(ctx, u.ID, u.PasswordHash, a.o.Params.Hash(password)); err != nil {
			a.log.Warn("password not rehashed with the current parameters", zap.String("user", u.Name), zap.Error(err))
		}
	}
	p := Principal{Kind: KindUser, User: u.Name, UserID: u.ID, Role: role, Epoch: u.SessionEpoch}
	a.log.Info("login", zap.String("user", u.Name), zap.String("remote", remote))
	a.audit(ctx, Entry{Actor: p.Actor(), Action: "login", Target: u.Name, Remote: remote})
	return p, nil
}

// countAttempt counts a login attempt at now as a failure of each key, in
// one transaction of the store that first checks the keys' locks: when a
// key is locked, nothing is counted and until is the end of the longest
// lock. Otherwise before and after are the keys' records before and after
// the count (in the order of keys), and until is zero or past.
func (a *Authenticator) countAttempt(ctx context.Context, keys []string, ipKey string, now time.Time) (before, after []postgres.LoginFailures, until time.Time, err error) {
	err = a.o.Store.UpdateLoginFailures(ctx, keys, func(recs []postgres.LoginFailures) []postgres.LoginFailures {
		until = time.Time{}
		for _, f := range recs {
			if f.LockedUntil != nil && f.LockedUntil.After(until) {
				until = *f.LockedUntil
			}
		}
		if until.After(now) {
			return nil
		}
		before = recs
		after = make([]postgres.LoginFailures, len(recs))
		for i, f := range recs {
			limit := UserFailureLimit
			if f.Key == ipKey {
				limit = IPFailureLimit
			}
			after[i] = failure(now, limit)(f)
		}
		return after
	})
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("count login attempt: %w", err)
	}
	return before, after, until, nil
}

// takeBack undoes the count of a login attempt that succeeded: the name's
// failures are cleared; the address's record gets back what it was before
// the attempt when nothing counted on it since, else one failure less, and
// no lock below IPFailureLimit. A failure to write is logged: the attempt
// then stays counted, which errs on the safe side. before and after are
// countAttempt's.
func (a *Authenticator) takeBack(ctx context.Context, userKey, ipKey string, before, after []postgres.LoginFailures) {
	// A client that goes away must not leave its success counted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.o.Store.ClearLoginFailures(ctx, userKey); err != nil {
		a.log.Warn("failed logins not cleared", zap.Error(err))
	}
	if ipKey == "" {
		return
	}
	i := slices.IndexFunc(after, func(f postgres.LoginFailures) bool { return f.Key == ipKey })
	if i < 0 {
		return
	}
	err := a.o.Store.UpdateLoginFailures(ctx, []string{ipKey}, func(recs []postgres.LoginFailures) []postgres.LoginFailures {
		f := recs[0]
		if sameFailures(f, after[i]) {
			return []postgres.LoginFailures{before[i]}
		}
		if f.Failures > 0 {
			f.Failures--
		}
		if f.Failures < IPFailureLimit {
			f.LockedUntil = nil
		}
		return []postgres.LoginFailures{f}
	})
	if err != nil {
		a.log.Warn("login attempt of a success not taken back from its address", zap.Error(err))
	}
}

// sameFailures reports whether a and b are the same record.
func sameFailures(a, b postgres.LoginFailures) bool {
	sameLock := a.LockedUntil == nil && b.LockedUntil == nil ||
		a.LockedUntil != nil && b.LockedUntil != nil && a.LockedUntil.Equal(*b.LockedUntil)
	return a.Key == b.Key && a.Failures == b.Failures && a.FirstAt.Equal(b.FirstAt) && a.LastAt.Equal(b.LastAt) && sameLock
}

// failure is the next record of a key after a failed login at now: the
// count starts again after FailureWindow without failures (from the last
// failure or the lock's end); from limit failures on, the key is locked
// for FirstLock, doubled for each failure past limit, at most MaxLock.
func failure(now time.Time, limit int) func(postgres.LoginFailures) postgres.LoginFailures {
	return func(f postgres.LoginFailures) postgres.LoginFailures {
		quiet := f.LastAt
		if f.LockedUntil != nil && f.LockedUntil.After(quiet) {
			quiet = *f.LockedUntil
		}
		if f.Failures == 0 || now.Sub(quiet) > FailureWindow {
			f = postgres.LoginFailures{Key: f.Key, FirstAt: now}
		}
		f.Failures++
		f.LastAt = now
		if f.Failures >= limit {
			lock := MaxLock
			if over := f.Failures - limit; over < 16 {
				lock = min(FirstLock<<over, MaxLock)
			}
			until := now.Add(lock)
			f.LockedUntil = &until
		}
		return f
	}
}

// SessionPrincipal resolves the user of a console session that recorded
// the user's id and session epoch at login: the session holds while the
// user exists, is enabled and its epoch is the same (a password change or
// a disable bumps it). Errors wrap ErrUnauthenticated (ErrDisabled) or are
// the store's.
func (a *Authenticator) SessionPrincipal(ctx context.Context, userID, epoch int64) (Principal, error) {
	if a.o.Store == nil {
		return Principal{}, fmt.Errorf("%w: no users", ErrUnauthenticated)
	}
	u, err := a.o.Store.UserByID(ctx, userID)
	if errors.Is(err, postgres.ErrUserNotFound) {
		return Principal{}, fmt.Errorf("%w: the session's user is gone", ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	if u.DisabledAt != nil {
		return Principal{}, fmt.Errorf("%w: %w: %s", ErrUnauthenticated, ErrDisabled, u.Name)
	}
	if u.SessionEpoch != epoch {
		return Principal{}, fmt.Errorf("%w: the session ended (password changed or user disabled): sign in again", ErrUnauthenticated)
	}
	role, err := ParseRole(u.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("user %d: %w", u.ID, err)
	}
	return Principal{Kind: KindUser, User: u.Name, UserID: u.ID, Role: role, Epoch: u.SessionEpoch, Issuer: u.OIDCIssuer, Subject: u.OIDCSubject}, nil
}

// ExternalIdentity is a person an identity provider (OpenID Connect)
// signed in: who they are there (Issuer and Subject, together), a name
// for a new user (an e-mail address the provider verified; "" names the
// user after the subject), and the role their groups map to.
type ExternalIdentity struct {
	Issuer, Subject string
	Name            string
	Role            Role
}

// ExternalLogin signs in the user of an identity its provider vouched for:
// the user of (Issuer, Subject), whose role becomes id.Role (the provider's
// groups decide it at every sign-in), or a new user without a password
// named after id.Name. A disabled user is refused (ErrDisabled, recorded as
// a failed login). Logins are recorded in the audit log with "via": "oidc";
// a new user and a changed role with it. Errors wrap ErrUnauthenticated or
// are the store's.
func (a *Authenticator) ExternalLogin(ctx context.Context, id ExternalIdentity, remote string) (Principal, error) {
	if a.o.Store == nil {
		return Principal{}, fmt.Errorf("%w: no users", ErrUnauthenticated)
	}
	if id.Issuer == "" || id.Subject == "" || id.Role.String() == "" {
		return Principal{}, fmt.Errorf("%w: an external identity needs an issuer, a subject and a role", ErrUnauthenticated)
	}
	u, created, err := a.o.Store.SignInOIDCUser(ctx, postgres.OIDCSignIn{
		Issuer: id.Issuer, Subject: id.Subject, Name: externalName(id), Role: id.Role.String(),
		Actor: "oidc:" + id.Issuer, Remote: remote,
	})
	if err != nil {
		return Principal{}, err
	}
	a.users.Store(true)
	if u.DisabledAt != nil {
		a.log.Info("login failed", zap.String("user", u.Name), zap.String("remote", remote), zap.String("reason", "user disabled"), zap.String("via", "oidc"))
		a.audit(ctx, Entry{Actor: "anonymous", Action: "login.failed", Target: u.Name, Remote: remote,
			Detail: map[string]any{"reason": "user disabled", "via": "oidc"}})
		return Principal{}, fmt.Errorf("%w: %w: %s", ErrUnauthenticated, ErrDisabled, u.Name)
	}
	role, err := ParseRole(u.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("user %d: %w", u.ID, err)
	}
	if err := a.o.Store.RecordLogin(ctx, u.ID, a.o.Now()); err != nil {
		a.log.Warn("login time not written", zap.Error(err))
	}
	p := Principal{Kind: KindUser, User: u.Name, UserID: u.ID, Role: role, Epoch: u.SessionEpoch, Issuer: u.OIDCIssuer, Subject: u.OIDCSubject}
	a.log.Info("login", zap.String("user", u.Name), zap.String("remote", remote), zap.String("via", "oidc"), zap.Bool("new_user", created))
	a.audit(ctx, Entry{Actor: p.Actor(), Action: "login", Target: u.Name, Remote: remote, ActorIssuer: p.Issuer, ActorSubject: p.Subject,
		Detail: map[string]any{"via": "oidc", "issuer": id.Issuer, "role": u.Role}})
	return p, nil
}

// ExternalLoginRefused records a sign-in its provider vouched for but the
// hub refuses (no group maps to a role), with why: a failed login, and,
// when id has a user, the user disabled and its sessions ended (its
// tokens are refused with it), in one transaction. The provider's word is
// the person's standing: whoever is taken out of every mapped group loses
// access at the hub with their next sign-in, not only their role. An
// administrator enables the user again. Errors are the store's.
func (a *Authenticator) ExternalLoginRefused(ctx context.Context, id ExternalIdentity, reason, remote string) error {
	if a.o.Store == nil {
		return nil
	}
	// A client that goes away must not cancel the refusal.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	u, disabled, err := a.o.Store.RefuseOIDCUser(ctx, postgres.OIDCRefusal{
		Issuer: id.Issuer, Subject: id.Subject, Who: id.Name, Reason: reason, Remote: remote,
	})
	if err != nil {
		return err
	}
	name := id.Name
	if u.ID != 0 {
		name = u.Name
	}
	a.log.Info("login failed", zap.String("user", name), zap.String("remote", remote), zap.String("reason", reason), zap.String("via", "oidc"),
		zap.Bool("user_disabled", disabled))
	return nil
}

// externalName is the name a new user of id gets: id.Name made into a name
// CheckName takes (other characters become "-"), or "oidc-" and the
// start of the subject.
func externalName(id ExternalIdentity) string {
	clean := func(s string) string {
		b := []rune{}
		for _, c := range s {
			alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
			switch {
			case alnum:
				b = append(b, c)
			case len(b) > 0 && (c == '.' || c == '_' || c == '-' || c == '@'):
				b = append(b, c)
			case len(b) > 0:
				b = append(b, '-')
			}
		}
		// Room for a "-NN" the store adds to a name taken.
		if len(b) > maxNameLen-4 {
			b = b[:maxNameLen-4]
		}
		return string(b)
	}
	if n := clean(id.Name); n != "" {
		return n
	}
	return clean("oidc-" + id.Subject)
}

// audit records e when an Auditor is set; a failure is logged, not
// returned: the login it records happened.
func (a *Authenticator) audit(ctx context.Context, e Entry) {
	if a.o.Auditor == nil {
		return
	}
	// A client that goes away must not cancel the record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.o.Auditor.Record(ctx, e); err != nil {
		a.log.Error("audit entry not written", zap.String("action", e.Action), zap.Error(err))
	}
}
