package auth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestBearer: the bootstrap token is an admin of no user; a user's token
// is its user with the lesser of the two roles; a wrong, truncated,
// missing, revoked or expired token, or one of a disabled user, is
// refused with ErrUnauthenticated (and ErrDisabled for the disabled user).
func TestBearer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	alice := e.addUser(t, "alice", auth.RoleAdmin)
	e.addUser(t, "olga", auth.RoleOperator)
	e.addUser(t, "carl", auth.RoleViewer)
	soon := e.clock.Now().Add(time.Hour)
	tokens := map[string]string{
		"alice-admin":    e.token(t, "alice", "full", 0, nil),
		"alice-viewer":   e.token(t, "alice", "read", auth.RoleViewer, nil),
		"olga":           e.token(t, "olga", "ci", 0, nil),
		"olga-soon":      e.token(t, "olga", "soon", 0, &soon),
		"olga-revoked":   e.token(t, "olga", "old", 0, nil),
		"carl":           e.token(t, "carl", "ci", 0, nil),
		"carl-disabled":  "",
		"olga-to-demote": e.token(t, "olga", "demoted", auth.RoleOperator, nil),
	}
	if _, err := e.users.RevokeToken(ctx, admin, "olga", "old"); err != nil {
		t.Fatal(err)
	}

	ok := func(kind, user, token string, role auth.Role) auth.Principal {
		p := auth.Principal{Kind: kind, User: user, TokenName: token, Role: role}
		if user == "alice" {
			p.UserID = alice.ID
		}
		return p
	}
	tests := []struct {
		name  string
		token string
		want  auth.Principal
		// wantErr, when set, is what the error must match.
		wantErr error
	}{
		{"bootstrap", bootstrap, auth.BootstrapPrincipal, nil},
		{"admin token", tokens["alice-admin"], ok(auth.KindToken, "alice", "full", auth.RoleAdmin), nil},
		{"viewer token of an admin", tokens["alice-viewer"], ok(auth.KindToken, "alice", "read", auth.RoleViewer), nil},
		{"operator", tokens["olga"], ok(auth.KindToken, "olga", "ci", auth.RoleOperator), nil},
		{"viewer", tokens["carl"], ok(auth.KindToken, "carl", "ci", auth.RoleViewer), nil},
		{"missing", "", auth.Principal{}, auth.ErrUnauthenticated},
		{"wrong", "nope", auth.Principal{}, auth.ErrUnauthenticated},
		{"bootstrap truncated", bootstrap[:len(bootstrap)-1], auth.Principal{}, auth.ErrUnauthenticated},
		{"bootstrap longer", bootstrap + "x", auth.Principal{}, auth.ErrUnauthenticated},
		{"token unknown", auth.NewToken(), auth.Principal{}, auth.ErrUnauthenticated},
		{"token truncated", tokens["olga"][:len(tokens["olga"])-1], auth.Principal{}, auth.ErrUnauthenticated},
		{"revoked", tokens["olga-revoked"], auth.Principal{}, auth.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.auth.Bearer(request(tt.token))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Bearer = %+v, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			got.UserID, tt.want.UserID = 0, 0 // ids are the database's
			if err != nil || got != tt.want {
				t.Errorf("Bearer = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}

	// Expiry: the token works until its expiry, not at it.
	e.clock.Advance(time.Hour - time.Second)
	if _, err := e.auth.Bearer(request(tokens["olga-soon"])); err != nil {
		t.Errorf("Bearer(token a second before its expiry) = %v, want it accepted", err)
	}
	e.clock.Advance(time.Second)
	if _, err := e.auth.Bearer(request(tokens["olga-soon"])); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Bearer(token at its expiry) = %v, want ErrUnauthenticated", err)
	}

	// Disabled: every token of the user is refused; enabled again, they work.
	if _, err := e.users.SetDisabled(ctx, admin, "carl", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.auth.Bearer(request(tokens["carl"])); !errors.Is(err, auth.ErrDisabled) || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Bearer(token of a disabled user) = %v, want ErrDisabled and ErrUnauthenticated", err)
	}
	if _, err := e.users.SetDisabled(ctx, admin, "carl", false); err != nil {
		t.Fatal(err)
	}
	if p, err := e.auth.Bearer(request(tokens["carl"])); err != nil || p.Role != auth.RoleViewer {
		t.Errorf("Bearer(token of the user enabled again) = %+v, %v; want viewer", p, err)
	}

	// The effective role is the lesser of the token's and the user's now:
	// an operator token of a user demoted to viewer reads only; promoted
	// to admin, the token stays operator.
	if _, err := e.users.SetRole(ctx, admin, "olga", auth.RoleViewer); err != nil {
		t.Fatal(err)
	}
	if p, err := e.auth.Bearer(request(tokens["olga-to-demote"])); err != nil || p.Role != auth.RoleViewer {
		t.Errorf("operator token of a user now viewer = %+v, %v; want role viewer", p, err)
	}
	if _, err := e.users.SetRole(ctx, admin, "olga", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if p, err := e.auth.Bearer(request(tokens["olga-to-demote"])); err != nil || p.Role != auth.RoleOperator {
		t.Errorf("operator token of a user now admin = %+v, %v; want role operator", p, err)
	}
}

// TestBearerWithoutStore: an Authenticator without users accepts the
// bootstrap token only, and none when it is empty.
func TestBearerWithoutStore(t *testing.T) {
	a, err := auth.New(auth.Options{BootstrapToken: bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Bearer(request(bootstrap)); err != nil || p != auth.BootstrapPrincipal {
		t.Errorf("Bearer(bootstrap) = %+v, %v", p, err)
	}
	if _, err := a.Bearer(request(auth.NewToken())); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Bearer(a user token) without a store = %v, want ErrUnauthenticated", err)
	}
	none, _ := auth.New(auth.Options{})
	for _, tok := range []string{"", "x"} {
		if _, err := none.Bearer(request(tok)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("Bearer(%q) with no bootstrap token = %v, want ErrUnauthenticated", tok, err)
		}
	}
}

// TestBearerLastUse: a token's last use is written on first use, then not
// again within a minute however often it is used, then again.
func TestBearerLastUse(t *testing.T) {
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	tok := e.token(t, "alice", "ci", 0, nil)
	lastUsed := func() *time.Time {
		t.Helper()
		tt, _, err := e.store.APITokenByHash(context.Background(), auth.HashToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		return tt.LastUsedAt
	}
	if lu := lastUsed(); lu != nil {
		t.Fatalf("last use of a new token = %v, want none", lu)
	}
	t0 := e.clock.Now()
	for i, step := range []struct {
		advance time.Duration
		want    time.Time
	}{{0, t0}, {time.Second, t0}, {58 * time.Second, t0}, {time.Second, t0.Add(time.Minute)}, {30 * time.Second, t0.Add(time.Minute)}} {
		e.clock.Advance(step.advance)
		if _, err := e.auth.Bearer(request(tok)); err != nil {
			t.Fatal(err)
		}
		if lu := lastUsed(); lu == nil || !lu.Equal(step.want) {
			t.Errorf("use %d at +%s: last use %v, want %s", i, e.clock.Now().Sub(t0), lu, step.want.Sub(t0))
		}
	}
}

// login is a login attempt of a test: name, password (right or wrong)
// and address.
func (e *env) login(name string, right bool, remote string) error {
	p := "a wrong password"
	if right {
		p = pw(name)
	}
	_, err := e.auth.Login(context.Background(), name, p, remote)
	return err
}

// retryAfter is the RetryAfter of a *auth.ThrottledError, or -1.
func retryAfter(err error) time.Duration {
	var te *auth.ThrottledError
	if errors.As(err, &te) {
		return te.RetryAfter
	}
	return -1
}

// TestLoginThrottlesUser: five failures for a user lock it for a minute,
// whatever the address and even with the right password; the lock doubles
// with each failure after it, up to an hour; after the lock, the right
// password works and clears the count.
func TestLoginThrottlesUser(t *testing.T) {
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	for i := range auth.UserFailureLimit {
		if err := e.login("alice", false, "192.0.2.1"); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("failure %d = %v, want ErrUnauthenticated", i+1, err)
		}
	}
	for _, remote := range []string{"192.0.2.1", "198.51.100.2", ""} {
		err := e.login("alice", true, remote)
		if !errors.Is(err, auth.ErrThrottled) || retryAfter(err) != time.Minute {
			t.Errorf("right password from %q after 5 failures = %v (retry after %s), want ErrThrottled for 1m", remote, err, retryAfter(err))
		}
	}
	// Names are counted whatever their case.
	if err := e.login("ALICE", true, "192.0.2.1"); !errors.Is(err, auth.ErrThrottled) {
		t.Errorf("ALICE while alice is locked = %v, want ErrThrottled", err)
	}
	e.clock.Advance(30 * time.Second)
	if err := e.login("alice", true, "192.0.2.1"); retryAfter(err) != 30*time.Second {
		t.Errorf("30s into the lock: %v, want 30s left", err)
	}

	// Each failure right after a lock doubles it, up to an hour.
	var locks []time.Duration
	for range 9 {
		e.clock.Advance(locksLeft(t, e) + time.Second)
		if err := e.login("alice", false, "192.0.2.1"); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("failure after the lock = %v, want ErrUnauthenticated", err)
		}
		locks = append(locks, retryAfter(e.login("alice", true, "192.0.2.1")))
	}
	want := []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour, time.Hour}
	if !slices.Equal(locks, want) {
		t.Errorf("locks after each further failure = %v, want %v", locks, want)
	}

	// After the lock, the right password works and clears the count.
	e.clock.Advance(time.Hour + time.Second)
	if err := e.login("alice", true, "192.0.2.1"); err != nil {
		t.Fatalf("right password after the lock = %v, want a login", err)
	}
	for i := range auth.UserFailureLimit - 1 {
		if err := e.login("alice", false, "192.0.2.1"); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("failure %d after the success = %v, want ErrUnauthenticated (the count was cleared)", i+1, err)
		}
	}
	if err := e.login("alice", true, "192.0.2.1"); err != nil {
		t.Errorf("right password after 4 new failures = %v, want a login", err)
	}
}

// locksLeft is how long the lock of user:alice has to run.
func locksLeft(t *testing.T, e *env) time.Duration {
	t.Helper()
	recs, err := e.store.LoginFailuresOf(context.Background(), []string{"user:alice"})
	if err != nil || len(recs) != 1 || recs[0].LockedUntil == nil {
		t.Fatalf("LoginFailuresOf(user:alice) = %+v, %v; want a lock", recs, err)
	}
	return recs[0].LockedUntil.Sub(e.clock.Now())
}

// TestLoginSuccessClearsCount: four failures, a success, four failures: no
// lock (the success cleared the count).
func TestLoginSuccessClearsCount(t *testing.T) {
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	for round := range 3 {
		for range auth.UserFailureLimit - 1 {
			if err := e.login("alice", false, "192.0.2.1"); !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("round %d: failure = %v", round, err)
			}
		}
		if err := e.login("alice", true, "192.0.2.1"); err != nil {
			t.Fatalf("round %d: right password after %d failures = %v, want a login", round, auth.UserFailureLimit-1, err)
		}
	}
}

// TestLoginWindow: failures further apart than the window do not add up.
func TestLoginWindow(t *testing.T) {
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	for range auth.UserFailureLimit - 1 {
		_ = e.login("alice", false, "192.0.2.1")
	}
	e.clock.Advance(auth.FailureWindow + time.Second)
	for range auth.UserFailureLimit - 1 {
		_ = e.login("alice", false, "192.0.2.1")
	}
	if err := e.login("alice", true, "192.0.2.1"); err != nil {
		t.Errorf("after 4 failures, a pause past the window and 4 more: %v, want a login", err)
	}
	// Within the window they do.
	for range auth.UserFailureLimit - 1 {
		_ = e.login("alice", false, "192.0.2.1")
	}
	e.clock.Advance(auth.FailureWindow - time.Second)
	_ = e.login("alice", false, "192.0.2.1")
	if err := e.login("alice", true, "192.0.2.1"); !errors.Is(err, auth.ErrThrottled) {
		t.Errorf("after 5 failures, each within the window of the last: %v, want ErrThrottled", err)
	}
}

// TestLoginThrottlesAddress: twenty failures from one address lock it,
// across users (none of them locked) and across replicas; other addresses
// are not locked. An IPv6 address counts by its /64.
func TestLoginThrottlesAddress(t *testing.T) {
	tests := []struct {
		name      string
		attackers []string // failures come from these in turn
		locked    string   // an address the lock covers
		free      []string // addresses it does not
	}{
		{"IPv4", []string{"203.0.113.7"}, "203.0.113.7", []string{"203.0.113.8", "2001:db8::1"}},
		{"IPv6 /64", []string{"2001:db8:1:2::a", "2001:db8:1:2:ffff::b"}, "2001:db8:1:2::c", []string{"2001:db8:1:3::a", "203.0.113.7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			replica2 := e.authenticator(t, "")
			for _, n := range []string{"u1", "u2", "u3", "u4", "u5", "eve"} {
				e.addUser(t, n, auth.RoleViewer)
			}
			names := []string{"u1", "u2", "u3", "u4", "u5"}
			for i := range auth.IPFailureLimit {
				a := e.auth
				if i%2 == 1 {
					a = replica2
				}
				name := names[i%len(names)] // 4 failures each: no user is locked
				if _, err := a.Login(context.Background(), name, "wrong password!", tt.attackers[i%len(tt.attackers)]); !errors.Is(err, auth.ErrUnauthenticated) {
					t.Fatalf("failure %d = %v, want ErrUnauthenticated", i+1, err)
				}
			}
			if err := e.login("eve", true, tt.locked); !errors.Is(err, auth.ErrThrottled) || retryAfter(err) != time.Minute {
				t.Errorf("right password of another user from %s = %v, want ErrThrottled for 1m", tt.locked, err)
			}
			for i, n := range names {
				if err := e.login(n, true, tt.free[i%len(tt.free)]); err != nil {
					t.Errorf("%s from %s = %v, want a login (no user is locked)", n, tt.free[i%len(tt.free)], err)
				}
			}
		})
	}
}

// TestLoginUnknownAndDisabled: unknown names are refused and throttled
// like known ones (the answer does not tell whether a name exists); a
// user without a password cannot log in with any; a disabled user's right
// password is refused with ErrDisabled and counts as a failure.
func TestLoginUnknownAndDisabled(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addUser(t, "dora", auth.RoleViewer)
	for i := range auth.UserFailureLimit {
		err := e.login("nobody", true, "192.0.2.1")
		if !errors.Is(err, auth.ErrUnauthenticated) || err.Error() != "not authenticated: wrong name or password" {
			t.Fatalf("unknown name, attempt %d = %v, want the answer of a wrong password", i+1, err)
		}
	}
	if err := e.login("nobody", true, "192.0.2.1"); !errors.Is(err, auth.ErrThrottled) {
		t.Errorf("unknown name after 5 attempts = %v, want ErrThrottled like a known one", err)
	}

	if _, err := e.store.CreateUser(ctx, postgres.NewUser{Name: "oidc-only", Role: "viewer", CreatedBy: "test"},
		postgres.AuditEntry{Actor: "test", Action: "user.add"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "password of oidc-only"} {
		if _, err := e.auth.Login(ctx, "oidc-only", p, "192.0.2.1"); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("Login(user without password, %q) = %v, want ErrUnauthenticated", p, err)
		}
	}

	if _, err := e.users.SetDisabled(ctx, admin, "dora", true); err != nil {
		t.Fatal(err)
	}
	if err := e.login("dora", true, "192.0.2.1"); !errors.Is(err, auth.ErrDisabled) || !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("disabled user, right password = %v, want ErrDisabled", err)
	}
	if err := e.login("dora", false, "192.0.2.1"); errors.Is(err, auth.ErrDisabled) {
		t.Errorf("disabled user, wrong password = %v: tells the user is disabled to someone without its password", err)
	}
	recs, _ := e.store.LoginFailuresOf(ctx, []string{"user:dora"})
	if len(recs) != 1 || recs[0].Failures != 2 {
		t.Errorf("failures of the disabled user = %+v, want 2", recs)
	}
}

// TestLoginSuccess: the principal of a login, its time, the audit entries
// of logins and failures; a hash of weaker parameters is replaced by one of
// the current parameters, the session epoch kept.
func TestLoginSuccess(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	weak := auth.Params{Memory: 32, Time: 1, Threads: 1}
	u, err := e.store.CreateUser(ctx, postgres.NewUser{Name: "Alice", Role: "operator", PasswordHash: weak.Hash("password of Alice"), CreatedBy: "test"},
		postgres.AuditEntry{Actor: "test", Action: "user.add", Target: "Alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.auth.Login(ctx, "alice", "wrong password!", "192.0.2.1"); err == nil {
		t.Fatal("wrong password logged in")
	}
	p, err := e.auth.Login(ctx, "alice", "password of Alice", "192.0.2.1")
	want := auth.Principal{Kind: auth.KindUser, User: "Alice", UserID: u.ID, Role: auth.RoleOperator}
	if err != nil || p != want {
		t.Fatalf("Login = %+v, %v; want %+v", p, err, want)
	}
	got, err := e.store.UserByID(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastLoginAt == nil || !got.LastLoginAt.Equal(e.clock.Now()) {
		t.Errorf("last login = %v, want %s", got.LastLoginAt, e.clock.Now())
	}
	if auth.NeedsRehash(got.PasswordHash, cheap) || got.SessionEpoch != 0 {
		t.Errorf("hash after login = %s (epoch %d), want one of %+v, epoch 0", got.PasswordHash, got.SessionEpoch, cheap)
	}
	if _, err := e.auth.Login(ctx, "alice", "password of Alice", "192.0.2.1"); err != nil {
		t.Errorf("login with the rehashed password = %v", err)
	}
	wantAudit := []string{"test user.add Alice ", "anonymous login.failed alice 192.0.2.1", "user:Alice login Alice 192.0.2.1", "user:Alice login Alice 192.0.2.1"}
	if got := e.audit(t); !slices.Equal(got, wantAudit) {
		t.Errorf("audit = %q, want %q", got, wantAudit)
	}
}

// TestSessionPrincipal: a session holds while its user is enabled and its
// epoch unchanged; a password change or a disable ends it.
func TestSessionPrincipal(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleAdmin)
	p, err := e.auth.Login(ctx, "alice", pw("alice"), "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.auth.SessionPrincipal(ctx, p.UserID, p.Epoch); err != nil || got != p {
		t.Errorf("SessionPrincipal = %+v, %v; want %+v", got, err, p)
	}
	if _, err := e.users.SetPassword(ctx, admin, "alice", "a new password of alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.auth.SessionPrincipal(ctx, p.UserID, p.Epoch); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("session after a password change = %v, want ErrUnauthenticated", err)
	}
	p2, err := e.auth.Login(ctx, "alice", "a new password of alice", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	// The login's principal carries the epoch the change bumped: a
	// session made from it holds.
	u, err := e.store.User(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.SessionEpoch == 0 || p2.Epoch != u.SessionEpoch {
		t.Errorf("Login after a password change: epoch %d, want the user's %d (not 0)", p2.Epoch, u.SessionEpoch)
	}
	if got, err := e.auth.SessionPrincipal(ctx, p2.UserID, p2.Epoch); err != nil || got != p2 {
		t.Errorf("SessionPrincipal of the login after a password change = %+v, %v; want %+v", got, err, p2)
	}
	if _, err := e.users.SetDisabled(ctx, admin, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.auth.SessionPrincipal(ctx, p2.UserID, p2.Epoch); !errors.Is(err, auth.ErrDisabled) {
		t.Errorf("session of a disabled user = %v, want ErrDisabled", err)
	}
	if _, err := e.auth.SessionPrincipal(ctx, p2.UserID+1000, 0); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("session of an unknown user = %v, want ErrUnauthenticated", err)
	}
}

// TestLoginTimeHidesNames: a login for a name that does not exist takes
// about as long as one for a name that does (a dummy hash is checked), with
// the product's argon2id parameters. Without the dummy check it would take
// a few database round trips against tens of milliseconds.
func TestLoginTimeHidesNames(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	a, err := auth.New(auth.Options{Store: st, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	users := &auth.Users{Store: st}
	if _, err := users.Add(ctx, admin, "alice", auth.RoleViewer, "password of alice"); err != nil {
		t.Fatal(err)
	}
	// The attempts alternate between the names, so that a burst of load
	// on the machine slows both alike; each from its own address, and at
	// most 3 per name: no lock interferes.
	var byName [2][]time.Duration
	for i := range 3 {
		for n, name := range []string{"alice", "nobody"} {
			start := time.Now()
			_, _ = a.Login(ctx, name, "wrong password!", "192.0.2."+string(rune('1'+i)))
			byName[n] = append(byName[n], time.Since(start))
		}
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[1] }
	known, unknown := median(byName[0]), median(byName[1])
	if unknown < known/2 {
		t.Errorf("failed login of an unknown name took %s, of a known one %s: the time tells which names exist", unknown, known)
	}
}

// heldChecks is a password check for auth.SetCheck that counts the checks
// of wrong passwords and holds each until release is closed, after
// telling entered; a right password (want) is checked at once.
type heldChecks struct {
	want    string
	entered chan struct{}
	release chan struct{}
	held    atomic.Int32
}

func newHeldChecks(want string) *heldChecks {
	return &heldChecks{want: want, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldChecks) check(hash, password string) (bool, error) {
	if password != h.want {
		h.held.Add(1)
		h.entered <- struct{}{}
		<-h.release
	}
	return auth.CheckPassword(hash, password)
}

// TestLoginConcurrentGuesses: guesses sent at the same time count against
// the limits as if sent one after the other: of 30 wrong passwords at
// once for one name (or from one address), only the limit's worth are
// checked, the others are refused at once, and the right password sent
// while those checks run is refused too.
func TestLoginConcurrentGuesses(t *testing.T) {
	const n = 30
	tests := []struct {
		name  string
		limit int
		// guess is the name and address of the i-th wrong guess.
		guess func(i int) (name, remote string)
		// right is the name and address of the right password.
		right, rightFrom string
	}{
		{"one name", auth.UserFailureLimit, func(i int) (string, string) { return "alice", fmt.Sprintf("192.0.2.%d", i+1) }, "alice", "198.51.100.1"},
		{"one address", auth.IPFailureLimit, func(i int) (string, string) { return fmt.Sprintf("u%d", i), "203.0.113.7" }, "alice", "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			e.addUser(t, "alice", auth.RoleViewer)
			// Room for every guess to be checked at once: only the
			// throttle may refuse them.
			a, err := auth.New(auth.Options{Store: e.store, Params: cheap, Now: e.clock.Now, MaxPasswordChecks: n + 1, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			h := newHeldChecks(pw("alice"))
			auth.SetCheck(a, h.check)
			results := make(chan error, n)
			for i := range n {
				name, remote := tt.guess(i)
				go func() {
					_, err := a.Login(ctx, name, "a wrong password", remote)
					results <- err
				}()
			}
			// Every guess is either being checked (held) or answered.
			var checking int
			var errs []error
			for range n {
				select {
				case <-h.entered:
					checking++
				case err := <-results:
					errs = append(errs, err)
				}
			}
			_, rightErr := a.Login(ctx, tt.right, pw(tt.right), tt.rightFrom)
			close(h.release)
			for range checking {
				errs = append(errs, <-results)
			}

			if got := int(h.held.Load()); got > tt.limit {
				t.Errorf("%d concurrent wrong guesses: %d passwords checked, want at most %d", n, got, tt.limit)
			}
			if !errors.Is(rightErr, auth.ErrThrottled) {
				t.Errorf("right password while %d guesses are checked = %v, want ErrThrottled", checking, rightErr)
			}
			var wrong, throttled int
			for _, err := range errs {
				switch {
				case errors.Is(err, auth.ErrThrottled):
					throttled++
				case errors.Is(err, auth.ErrUnauthenticated):
					wrong++
				default:
					t.Errorf("a wrong guess = %v, want ErrUnauthenticated or ErrThrottled", err)
				}
			}
			if wrong != tt.limit || throttled != n-tt.limit {
				t.Errorf("%d concurrent wrong guesses: %d refused as wrong, %d throttled; want %d and %d", n, wrong, throttled, tt.limit, n-tt.limit)
			}
			// Still locked once they are done.
			if _, err := a.Login(ctx, tt.right, pw(tt.right), tt.rightFrom); !errors.Is(err, auth.ErrThrottled) {
				t.Errorf("right password after the guesses = %v, want ErrThrottled", err)
			}
		})
	}
}

// TestLoginBoundsPasswordChecks: while MaxPasswordChecks logins check a
// password, one more is refused at once with ErrBusy, its password not
// checked and its attempt not counted; once the checks end, a login is
// checked again.
func TestLoginBoundsPasswordChecks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	a, err := auth.New(auth.Options{Store: e.store, Params: cheap, Now: e.clock.Now, MaxPasswordChecks: 2, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	h := newHeldChecks(pw("alice"))
	auth.SetCheck(a, h.check)
	results := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := a.Login(ctx, fmt.Sprintf("u%d", i), "a wrong password", fmt.Sprintf("192.0.2.%d", i+1))
			results <- err
		}()
	}
	for range 2 {
		<-h.entered
	}
	_, busy := a.Login(ctx, "alice", pw("alice"), "198.51.100.1")
	close(h.release)
	for range 2 {
		if err := <-results; !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("a held wrong guess = %v, want ErrUnauthenticated", err)
		}
	}
	if !errors.Is(busy, auth.ErrBusy) {
		t.Errorf("Login while 2 of 2 password checks run = %v, want ErrBusy", busy)
	}
	if recs, err := e.store.LoginFailuresOf(ctx, []string{"user:alice", "ip:198.51.100.1"}); err != nil || len(recs) != 0 {
		t.Errorf("attempts counted for the busy login: %+v, %v; want none", recs, err)
	}
	if _, err := a.Login(ctx, "alice", pw("alice"), "198.51.100.1"); err != nil {
		t.Errorf("Login after the checks ended = %v, want a login", err)
	}
	if got := h.held.Load(); got != 2 {
		t.Errorf("wrong passwords checked = %d, want 2", got)
	}
}

// TestLoginTakesBackAddressAttempt: a success undoes its count of the
// address, and its lock: 19 failures from an address, a success that was
// counted as its 20th attempt (locking it while its check ran), then one
// more failure: the address is locked only now.
func TestLoginTakesBackAddressAttempt(t *testing.T) {
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleViewer)
	for i := range auth.IPFailureLimit - 1 {
		if err := e.login(fmt.Sprintf("u%d", i), false, "203.0.113.7"); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("failure %d = %v", i+1, err)
		}
	}
	if err := e.login("alice", true, "203.0.113.7"); err != nil {
		t.Fatalf("right password after %d failures from the address = %v, want a login", auth.IPFailureLimit-1, err)
	}
	if err := e.login("alice", true, "203.0.113.7"); err != nil {
		t.Errorf("right password again = %v, want a login (a success does not count)", err)
	}
	if err := e.login("bob", false, "203.0.113.7"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("failure %d = %v, want ErrUnauthenticated", auth.IPFailureLimit, err)
	}
	if err := e.login("alice", true, "203.0.113.7"); !errors.Is(err, auth.ErrThrottled) || retryAfter(err) != time.Minute {
		t.Errorf("right password after %d failures = %v, want ErrThrottled for 1m", auth.IPFailureLimit, err)
	}
}
