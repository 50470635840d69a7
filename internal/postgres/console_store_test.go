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
