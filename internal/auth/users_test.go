package auth_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
)

// callerOf is the Caller of a user's token (as the API makes it) from
// 192.0.2.5.
func (e *env) callerOf(t *testing.T, token string) auth.Caller {
	t.Helper()
	p, err := e.auth.Bearer(request(token))
	if err != nil {
		t.Fatal(err)
	}
	return auth.Caller{Principal: p, Remote: "192.0.2.5"}
}

// TestUsersAdd: only admins add users; names, roles and passwords are
// checked; names are unique whatever their case.
func TestUsersAdd(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addUser(t, "olga", auth.RoleOperator)
	olga := e.callerOf(t, e.token(t, "olga", "ci", 0, nil))
	tests := []struct {
		name     string
		by       auth.Caller
		user     string
		role     auth.Role
		password string
		want     error
	}{
		{"operator", olga, "bob", auth.RoleViewer, "long enough password", auth.ErrForbidden},
		{"no role", admin, "bob", 0, "long enough password", auth.ErrUnknownRole},
		{"short password", admin, "bob", auth.RoleViewer, "short", auth.ErrWeakPassword},
		{"password is the name", admin, "bob.the.builder", auth.RoleViewer, "BOB.the.builder", auth.ErrWeakPassword},
		{"empty name", admin, "", auth.RoleViewer, "long enough password", auth.ErrInvalidName},
		{"space in name", admin, "bob smith", auth.RoleViewer, "long enough password", auth.ErrInvalidName},
		{"name starts with a dot", admin, ".bob", auth.RoleViewer, "long enough password", auth.ErrInvalidName},
		{"name too long", admin, "b23456789012345678901234567890123456789012345678901234567890abcde", auth.RoleViewer, "long enough password", auth.ErrInvalidName},
		{"taken in another case", admin, "OLGA", auth.RoleViewer, "long enough password", postgres.ErrUserExists},
		{"e-mail address", admin, "bob.smith@example.com", auth.RoleViewer, "long enough password", nil},
		{"bootstrap token", auth.Caller{Principal: auth.BootstrapPrincipal, Remote: "192.0.2.9"}, "dora_2", auth.RoleAdmin, "long enough password", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := e.users.Add(ctx, tt.by, tt.user, tt.role, tt.password)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Add(%q, %s) by %s = %v, want %v", tt.user, tt.role, tt.by.Actor(), err, tt.want)
			}
			if err == nil {
				if ok, _ := auth.CheckPassword(u.PasswordHash, tt.password); !ok || u.CreatedBy != tt.by.Actor() {
					t.Errorf("added %+v: the password does not check, or created_by is not %s", u, tt.by.Actor())
				}
			}
		})
	}
	want := []string{"cli:root@test user.add olga ", "cli:root@test token.create olga ", "cli:root@test user.add bob.smith@example.com ", "bootstrap-token user.add dora_2 192.0.2.9"}
	if got := e.audit(t); !slices.Equal(got, want) {
		t.Errorf("audit = %q, want %q (refused changes record nothing)", got, want)
	}
}

// TestUsersTokens: who may make, list and revoke which tokens with which
// role: admins any user's, up to that user's role; a user its own, up to
// the role it acts with; never for another user.
func TestUsersTokens(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addUser(t, "alice", auth.RoleAdmin)
	e.addUser(t, "olga", auth.RoleOperator)
	e.addUser(t, "carl", auth.RoleViewer)
	e.addUser(t, "dora", auth.RoleOperator)
	if _, err := e.users.SetDisabled(ctx, admin, "dora", true); err != nil {
		t.Fatal(err)
	}
	alice := e.callerOf(t, e.token(t, "alice", "full", 0, nil))
	olga := e.callerOf(t, e.token(t, "olga", "ci", 0, nil))
	olgaRead := e.callerOf(t, e.token(t, "olga", "read", auth.RoleViewer, nil))
	carl := e.callerOf(t, e.token(t, "carl", "ci", 0, nil))
	past := e.clock.Now().Add(-time.Second)
	future := e.clock.Now().Add(24 * time.Hour)
	tests := []struct {
		name     string
		by       auth.Caller
		user     string
		req      auth.TokenRequest
		want     error
		wantRole string
	}{
		{"own, default role", olga, "olga", auth.TokenRequest{Name: "t1"}, nil, "operator"},
		{"own, lower role", olga, "olga", auth.TokenRequest{Name: "t2", Role: auth.RoleViewer, ExpiresAt: &future}, nil, "viewer"},
		{"own, above the user", olga, "olga", auth.TokenRequest{Name: "t3", Role: auth.RoleAdmin}, auth.ErrRoleTooHigh, ""},
		{"own, above the token acting", olgaRead, "olga", auth.TokenRequest{Name: "t4", Role: auth.RoleOperator}, auth.ErrForbidden, ""},
		{"own, default of a viewer token", olgaRead, "olga", auth.TokenRequest{Name: "t5"}, nil, "viewer"},
		{"viewer's own", carl, "carl", auth.TokenRequest{Name: "t6"}, nil, "viewer"},
		{"another user's", carl, "olga", auth.TokenRequest{Name: "t7"}, auth.ErrForbidden, ""},
		{"operator for another", olga, "carl", auth.TokenRequest{Name: "t8"}, auth.ErrForbidden, ""},
		{"admin for another", alice, "olga", auth.TokenRequest{Name: "t9"}, nil, "operator"},
		{"admin above the user", alice, "carl", auth.TokenRequest{Name: "t10", Role: auth.RoleAdmin}, auth.ErrRoleTooHigh, ""},
		{"disabled user", admin, "dora", auth.TokenRequest{Name: "t11"}, auth.ErrDisabled, ""},
		{"expiry in the past", admin, "olga", auth.TokenRequest{Name: "t12", ExpiresAt: &past}, auth.ErrBadExpiry, ""},
		{"bad name", admin, "olga", auth.TokenRequest{Name: "my token"}, auth.ErrInvalidName, ""},
		{"name taken", admin, "olga", auth.TokenRequest{Name: "T1"}, postgres.ErrTokenExists, ""},
		{"unknown user", admin, "nobody", auth.TokenRequest{Name: "t13"}, postgres.ErrUserNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, rec, err := e.users.CreateToken(ctx, tt.by, tt.user, tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("CreateToken(%s, %+v) by %s = %v, want %v", tt.user, tt.req, tt.by.Actor(), err, tt.want)
			}
			if err != nil {
				return
			}
			if rec.Role != tt.wantRole || rec.CreatedBy != tt.by.Actor() {
				t.Errorf("token role %s, created by %s; want %s by %s", rec.Role, rec.CreatedBy, tt.wantRole, tt.by.Actor())
			}
			p, err := e.auth.Bearer(request(tok))
			if err != nil || p.User != tt.user || p.TokenName != tt.req.Name || p.Role.String() != tt.wantRole {
				t.Errorf("the token authenticates as %+v, %v; want %s's %s as %s", p, err, tt.user, tt.req.Name, tt.wantRole)
			}
		})
	}

	// Listing and revoking: the user itself or an admin.
	if _, err := e.users.Tokens(ctx, carl, "olga"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("carl lists olga's tokens: %v, want ErrForbidden", err)
	}
	if _, err := e.users.RevokeToken(ctx, carl, "olga", "t1"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("carl revokes olga's token: %v, want ErrForbidden", err)
	}
	if _, err := e.users.RevokeToken(ctx, olga, "olga", "t1"); err != nil {
		t.Errorf("olga revokes her token: %v", err)
	}
	if _, err := e.users.RevokeToken(ctx, alice, "olga", "t2"); err != nil {
		t.Errorf("an admin revokes olga's token: %v", err)
	}
	ts, err := e.users.Tokens(ctx, olga, "olga")
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, x := range ts {
		states = append(states, x.Name+" "+x.Role+" "+map[bool]string{true: "revoked", false: "active"}[x.RevokedAt != nil])
	}
	want := []string{"ci operator active", "read viewer active", "t1 operator revoked", "t2 viewer revoked", "t5 viewer active", "t9 operator active"}
	if !slices.Equal(states, want) {
		t.Errorf("olga's tokens = %q, want %q", states, want)
	}
}

// TestUsersPasswordAndRole: a password is set by an admin or the user
// signed in, never with a token; roles and disabling are for admins.
func TestUsersPasswordAndRole(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	u := e.addUser(t, "olga", auth.RoleOperator)
	olgaToken := e.callerOf(t, e.token(t, "olga", "ci", 0, nil))
	olgaSignedIn := auth.Caller{Principal: auth.Principal{Kind: auth.KindUser, User: "olga", UserID: u.ID, Role: auth.RoleOperator}, Remote: "192.0.2.5"}
	if _, err := e.users.SetPassword(ctx, olgaToken, "olga", "another long password"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("password set with a token = %v, want ErrForbidden", err)
	}
	if _, err := e.users.SetPassword(ctx, olgaSignedIn, "olga", "short"); !errors.Is(err, auth.ErrWeakPassword) {
		t.Errorf("short password = %v, want ErrWeakPassword", err)
	}
	if _, err := e.users.SetPassword(ctx, olgaSignedIn, "olga", "another long password"); err != nil {
		t.Errorf("password set by the user signed in = %v", err)
	}
	if _, err := e.users.SetRole(ctx, olgaSignedIn, "olga", auth.RoleAdmin); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("operator makes itself admin = %v, want ErrForbidden", err)
	}
	if _, err := e.users.SetDisabled(ctx, olgaToken, "olga", true); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("operator disables a user = %v, want ErrForbidden", err)
	}
	if _, err := e.users.List(ctx, olgaToken); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("operator lists users = %v, want ErrForbidden", err)
	}
	if _, err := e.users.SetRole(ctx, admin, "olga", 0); !errors.Is(err, auth.ErrUnknownRole) {
		t.Errorf("SetRole(0) = %v, want ErrUnknownRole", err)
	}
	if _, err := e.users.SetRole(ctx, admin, "nobody", auth.RoleViewer); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("SetRole(nobody) = %v, want ErrUserNotFound", err)
	}
	want := []string{"cli:root@test user.add olga ", "cli:root@test token.create olga ", "user:olga user.passwd olga 192.0.2.5"}
	if got := e.audit(t); !slices.Equal(got, want) {
		t.Errorf("audit = %q, want %q", got, want)
	}
}
