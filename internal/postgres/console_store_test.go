package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestSignInOIDCUser: the first sign-in makes the user (a number added to
// a name taken), later ones find it by issuer and subject and set its role
// from the groups; a disabled user is returned unchanged; each creation
// and role change is in the audit log.
func TestSignInOIDCUser(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.CreateUser(ctx, postgres.NewUser{Name: "olga@example.com", Role: "viewer", PasswordHash: "x", CreatedBy: "cli:test"},
		postgres.AuditEntry{Actor: "cli:test", Action: "user.add", Target: "olga@example.com"}); err != nil {
		t.Fatal(err)
	}
	in := postgres.OIDCSignIn{Issuer: "https://idp.example", Subject: "u-1", Name: "olga@example.com", Role: "operator", Actor: "oidc:https://idp.example", Remote: "192.0.2.1"}
	u, created, err := st.SignInOIDCUser(ctx, in)
	if err != nil || !created || u.Name != "olga@example.com-2" || u.Role != "operator" || u.OIDCSubject != "u-1" || u.PasswordHash != "" {
		t.Fatalf("first sign-in = %+v, %v, %v; want olga@example.com-2, an operator, made", u, created, err)
	}
	in.Role = "admin"
	again, created, err := st.SignInOIDCUser(ctx, in)
	if err != nil || created || again.ID != u.ID || again.Role != "admin" {
		t.Fatalf("second sign-in = %+v, %v, %v; want the same user, now an admin", again, created, err)
	}
	if _, err := st.SetUserDisabled(ctx, again.Name, true, postgres.AuditEntry{Actor: "cli:test", Action: "user.disable", Target: again.Name}); err != nil {
		t.Fatal(err)
	}
	in.Role = "viewer"
	off, _, err := st.SignInOIDCUser(ctx, in)
	if err != nil || off.DisabledAt == nil || off.Role != "admin" {
		t.Fatalf("sign-in of a disabled user = %+v, %v; want it unchanged, disabled", off, err)
	}
	recs, err := st.AuditLog(ctx, postgres.AuditQuery{Actor: "oidc:https://idp.example"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+" "+r.Target+" "+fmt.Sprint(r.Detail["role"]))
	}
	want := []string{"user.role olga@example.com-2 admin", "user.add olga@example.com-2 operator"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("audit = %q, want %q", got, want)
	}
}

// TestRefuseOIDCUser: a refused sign-in of a person with a user disables it
// and bumps its session epoch, with the login.failed and user.disable rows,
// once; a person without a user gets the login.failed row only.
func TestRefuseOIDCUser(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	in := postgres.OIDCSignIn{Issuer: "https://idp.example", Subject: "u-1", Name: "ada@example.com", Role: "admin", Actor: "oidc:https://idp.example"}
	u, _, err := st.SignInOIDCUser(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give         postgres.OIDCRefusal
		wantDisabled bool
		wantEpoch    int64
	}{
		{give: postgres.OIDCRefusal{Issuer: "https://idp.example", Subject: "u-1", Who: "x", Reason: "no group maps to a role"}, wantDisabled: true, wantEpoch: u.SessionEpoch + 1},
		{give: postgres.OIDCRefusal{Issuer: "https://idp.example", Subject: "u-1", Who: "x", Reason: "no group maps to a role"}, wantDisabled: false, wantEpoch: u.SessionEpoch + 1},
		{give: postgres.OIDCRefusal{Issuer: "https://idp.example", Subject: "u-2", Who: "nobody@example.com", Reason: "no group maps to a role"}},
	}
	for _, tt := range tests {
		got, disabled, err := st.RefuseOIDCUser(ctx, tt.give)
		if err != nil || disabled != tt.wantDisabled || got.SessionEpoch != tt.wantEpoch || (got.ID != 0) != (tt.give.Subject == "u-1") || (got.ID != 0 && got.DisabledAt == nil) {
			t.Errorf("RefuseOIDCUser(%s) = %+v, %v, %v; want disabled now %v, epoch %d", tt.give.Subject, got, disabled, err, tt.wantDisabled, tt.wantEpoch)
		}
	}
	recs, err := st.AuditLog(ctx, postgres.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+" "+r.Target+" "+fmt.Sprint(r.Detail["subject"]))
	}
	want := []string{"login.failed nobody@example.com u-2", "login.failed ada@example.com u-1", "user.disable ada@example.com u-1", "login.failed ada@example.com u-1", "user.add ada@example.com u-1"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("audit = %q, want %q", got, want)
	}
}

// TestDeleteExpiredSessions deletes the sessions past their expiry only.
func TestDeleteExpiredSessions(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	c := pgtest.Conn(t, url)
	if _, err := c.Exec(ctx, `INSERT INTO sessions (token, data, expiry) VALUES ('old', 'x', now() - interval '1 minute'), ('live', 'x', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	n, err := st.DeleteExpiredSessions(ctx)
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpiredSessions = %d, %v; want 1", n, err)
	}
	var left string
	if err := c.QueryRow(ctx, `SELECT string_agg(token, ',') FROM sessions`).Scan(&left); err != nil || left != "live" {
		t.Errorf("sessions left: %q, %v", left, err)
	}
}
