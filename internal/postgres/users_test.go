package postgres_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func auditOf(action, target string) postgres.AuditEntry {
	return postgres.AuditEntry{Actor: "cli:t@h", Action: action, Target: target, Remote: "192.0.2.1"}
}

// auditActions lists the audit log's actions and targets, oldest first.
func auditActions(t *testing.T, st *postgres.Store) []string {
	t.Helper()
	recs, err := st.AuditLog(context.Background(), postgres.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		out = append(out, recs[i].Action+" "+recs[i].Target)
	}
	return out
}

func hashOf(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// TestUsers: a user is created with its audit entry in one transaction;
// names are unique whatever their case and found in any case; a refused
// create writes no audit entry; disable bumps the session epoch and
// enable keeps it; a password change bumps it; a rehash keeps it, and
// loses to a change made meanwhile.
func TestUsers(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if ok, err := st.HasUsers(ctx); ok || err != nil {
		t.Fatalf("HasUsers on a new database = %v, %v; want false", ok, err)
	}
	u, err := st.CreateUser(ctx, postgres.NewUser{Name: "Alice", Role: "operator", PasswordHash: "h1", CreatedBy: "cli:t@h"}, auditOf("user.add", "Alice"))
	if err != nil {
		t.Fatal(err)
	}
	if u.ID == 0 || u.Name != "Alice" || u.Role != "operator" || u.PasswordHash != "h1" || u.SessionEpoch != 0 || u.DisabledAt != nil || u.CreatedBy != "cli:t@h" {
		t.Errorf("CreateUser = %+v", u)
	}
	if _, err := st.CreateUser(ctx, postgres.NewUser{Name: "alice", Role: "viewer", CreatedBy: "x"}, auditOf("user.add", "alice")); !errors.Is(err, postgres.ErrUserExists) {
		t.Errorf("CreateUser(alice) after Alice = %v, want ErrUserExists", err)
	}
	if _, err := st.CreateUser(ctx, postgres.NewUser{Name: "bob", Role: "root", CreatedBy: "x"}, auditOf("user.add", "bob")); err == nil {
		t.Error("CreateUser with role root = nil error, want the CHECK's")
	}
	if ok, err := st.HasUsers(ctx); !ok || err != nil {
		t.Fatalf("HasUsers = %v, %v; want true", ok, err)
	}
	for _, name := range []string{"Alice", "alice", "ALICE"} {
		got, err := st.User(ctx, name)
		if err != nil || got.ID != u.ID {
			t.Errorf("User(%q) = %+v, %v; want Alice", name, got, err)
		}
	}
	if _, err := st.User(ctx, "bob"); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("User(bob) = %v, want ErrUserNotFound", err)
	}
	if _, err := st.UserByID(ctx, u.ID+100); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("UserByID(unknown) = %v, want ErrUserNotFound", err)
	}

	d, err := st.SetUserDisabled(ctx, "alice", true, auditOf("user.disable", "Alice"))
	if err != nil || d.DisabledAt == nil || d.SessionEpoch != 1 {
		t.Errorf("SetUserDisabled(true) = %+v, %v; want disabled, epoch 1", d, err)
	}
	e, err := st.SetUserDisabled(ctx, "Alice", false, auditOf("user.enable", "Alice"))
	if err != nil || e.DisabledAt != nil || e.SessionEpoch != 1 {
		t.Errorf("SetUserDisabled(false) = %+v, %v; want enabled, epoch still 1", e, err)
	}
	p, err := st.ChangePassword(ctx, "alice", "h2", auditOf("user.passwd", "Alice"))
	if err != nil || p.PasswordHash != "h2" || p.SessionEpoch != 2 {
		t.Errorf("ChangePassword = %+v, %v; want hash h2, epoch 2", p, err)
	}
	if _, err := st.SetUserDisabled(ctx, "nobody", true, auditOf("user.disable", "nobody")); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("SetUserDisabled(nobody) = %v, want ErrUserNotFound", err)
	}
	// A rehash from a stale hash changes nothing; from the current one it
	// replaces it and keeps the epoch.
	if err := st.RehashPassword(ctx, u.ID, "h1", "stale"); err != nil {
		t.Fatal(err)
	}
	if err := st.RehashPassword(ctx, u.ID, "h2", "h2-stronger"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Microsecond)
	if err := st.RecordLogin(ctx, u.ID, now); err != nil {
		t.Fatal(err)
	}
	got, err := st.UserByID(ctx, u.ID)
	if err != nil || got.PasswordHash != "h2-stronger" || got.SessionEpoch != 2 || got.LastLoginAt == nil || !got.LastLoginAt.Equal(now) {
		t.Errorf("after rehash and login: %+v, %v; want hash h2-stronger, epoch 2, last login %s", got, err, now)
	}
	want := []string{"user.add Alice", "user.disable Alice", "user.enable Alice", "user.passwd Alice"}
	if diff := gocmp.Diff(want, auditActions(t, st)); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
}

// TestAPITokens: a token is found by its hash with its user; names are
// unique among a user's active tokens, whatever their case, and free again
// once revoked; a revoke of an unknown or revoked token fails and records
// nothing; the last use is written at most once per interval.
func TestAPITokens(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	alice, err := st.CreateUser(ctx, postgres.NewUser{Name: "alice", Role: "admin", CreatedBy: "x"}, auditOf("user.add", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	bob, err := st.CreateUser(ctx, postgres.NewUser{Name: "bob", Role: "viewer", CreatedBy: "x"}, auditOf("user.add", "bob"))
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	tok, err := st.CreateAPIToken(ctx, postgres.NewAPIToken{UserID: alice.ID, Name: "CI", Hash: hashOf("t1"), Role: "operator", ExpiresAt: &exp, CreatedBy: "x"},
		auditOf("token.create", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAPIToken(ctx, postgres.NewAPIToken{UserID: alice.ID, Name: "ci", Hash: hashOf("t2"), Role: "viewer", CreatedBy: "x"},
		auditOf("token.create", "alice")); !errors.Is(err, postgres.ErrTokenExists) {
		t.Errorf("second token ci of alice = %v, want ErrTokenExists", err)
	}
	if _, err := st.CreateAPIToken(ctx, postgres.NewAPIToken{UserID: bob.ID, Name: "ci", Hash: hashOf("t3"), Role: "viewer", CreatedBy: "x"},
		auditOf("token.create", "bob")); err != nil {
		t.Errorf("token ci of bob = %v, want it made (names are per user)", err)
	}
	gt, gu, err := st.APITokenByHash(ctx, hashOf("t1"))
	if err != nil || gt.ID != tok.ID || gt.Name != "CI" || gt.Role != "operator" || gt.ExpiresAt == nil || !gt.ExpiresAt.Equal(exp) || gu.ID != alice.ID || gu.Role != "admin" {
		t.Errorf("APITokenByHash(t1) = %+v, %+v, %v; want CI of alice", gt, gu, err)
	}
	if _, _, err := st.APITokenByHash(ctx, hashOf("t2")); !errors.Is(err, postgres.ErrTokenNotFound) {
		t.Errorf("APITokenByHash(never stored) = %v, want ErrTokenNotFound", err)
	}

	// Last use: written, then not again within the interval, then again.
	t0 := time.Now().Truncate(time.Microsecond)
	for _, step := range []struct {
		at   time.Time
		want time.Time
	}{{t0, t0}, {t0.Add(30 * time.Second), t0}, {t0.Add(time.Minute), t0.Add(time.Minute)}} {
		if err := st.TouchAPIToken(ctx, tok.ID, step.at, time.Minute); err != nil {
			t.Fatal(err)
		}
		gt, _, _ := st.APITokenByHash(ctx, hashOf("t1"))
		if gt.LastUsedAt == nil || !gt.LastUsedAt.Equal(step.want) {
			t.Errorf("after TouchAPIToken(%s): last used %v, want %s", step.at, gt.LastUsedAt, step.want)
		}
	}

	if _, err := st.RevokeAPIToken(ctx, "Alice", "ci", auditOf("token.revoke", "alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeAPIToken(ctx, "alice", "ci", auditOf("token.revoke", "alice")); !errors.Is(err, postgres.ErrTokenNotFound) {
		t.Errorf("second revoke = %v, want ErrTokenNotFound", err)
	}
	if _, err := st.RevokeAPIToken(ctx, "nobody", "ci", auditOf("token.revoke", "nobody")); !errors.Is(err, postgres.ErrTokenNotFound) {
		t.Errorf("revoke of nobody's token = %v, want ErrTokenNotFound", err)
	}
	if gt, _, _ := st.APITokenByHash(ctx, hashOf("t1")); gt.RevokedAt == nil {
		t.Error("revoked token has no revoked_at")
	}
	if _, err := st.CreateAPIToken(ctx, postgres.NewAPIToken{UserID: alice.ID, Name: "ci", Hash: hashOf("t4"), Role: "viewer", CreatedBy: "x"},
		auditOf("token.create", "alice")); err != nil {
		t.Errorf("new token ci after the revoke = %v, want it made", err)
	}
	if _, err := st.CreateAPIToken(ctx, postgres.NewAPIToken{UserID: alice.ID, Name: "dup-hash", Hash: hashOf("t4"), Role: "viewer", CreatedBy: "x"},
		auditOf("token.create", "alice")); err == nil {
		t.Error("a token with another's hash = nil error, want a refusal")
	}
	ts, err := st.APITokens(ctx, "ALICE")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ts {
		names = append(names, fmt.Sprintf("%s revoked=%v", x.Name, x.RevokedAt != nil))
	}
	if diff := gocmp.Diff([]string{"CI revoked=true", "ci revoked=false"}, names); diff != "" {
		t.Errorf("APITokens(alice) (-want +got):\n%s", diff)
	}
	if _, err := st.APITokens(ctx, "nobody"); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("APITokens(nobody) = %v, want ErrUserNotFound", err)
	}
	want := []string{"user.add alice", "user.add bob", "token.create alice", "token.create bob", "token.revoke alice", "token.create alice"}
	if diff := gocmp.Diff(want, auditActions(t, st)); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
}

// TestUpdateLoginFailuresCountsEveryReplica: updates of overlapping keys
// made at once, as by several replicas, all count (each sees the one
// before) and never deadlock; an update that returns nil stores nothing,
// not even an empty record.
func TestUpdateLoginFailuresCountsEveryReplica(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const n = 8
	now := time.Now()
	count := func(recs []postgres.LoginFailures) []postgres.LoginFailures {
		out := make([]postgres.LoginFailures, len(recs))
		for i, f := range recs {
			if f.Failures == 0 {
				f.FirstAt = now
			}
			f.Failures++
			f.LastAt = now
			out[i] = f
		}
		return out
	}
	testenv.Together(n, func(i int) {
		// Both orders of the same keys.
		keys := []string{"user:alice", "ip:192.0.2.1"}
		if i%2 == 1 {
			keys = []string{"ip:192.0.2.1", "user:alice"}
		}
		if err := st.UpdateLoginFailures(ctx, keys, count); err != nil {
			t.Error(err)
		}
	})
	if err := st.UpdateLoginFailures(ctx, []string{"user:bob", "user:alice"}, func([]postgres.LoginFailures) []postgres.LoginFailures { return nil }); err != nil {
		t.Fatal(err)
	}
	recs, err := st.LoginFailuresOf(ctx, []string{"user:alice", "ip:192.0.2.1", "user:bob"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range recs {
		got[f.Key] = f.Failures
	}
	if want := map[string]int{"user:alice": n, "ip:192.0.2.1": n}; !maps.Equal(got, want) {
		t.Fatalf("LoginFailuresOf = %v, want %v", got, want)
	}
	if err := st.UpdateLoginFailures(ctx, []string{"ip:192.0.2.1"}, func([]postgres.LoginFailures) []postgres.LoginFailures {
		return []postgres.LoginFailures{{}}
	}); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.LoginFailuresOf(ctx, []string{"ip:192.0.2.1"}); len(recs) != 0 {
		t.Errorf("after an update to no failures: %+v, want no record", recs)
	}
	if err := st.ClearLoginFailures(ctx, "user:alice"); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.LoginFailuresOf(ctx, []string{"user:alice"}); len(recs) != 0 {
		t.Errorf("after ClearLoginFailures: %+v, want none", recs)
	}
}

// TestAuditLog: the filters, time range and paging by id of AuditLog, and
// Record's refusal of an entry without actor or action.
func TestAuditLog(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	for i, e := range []postgres.AuditEntry{
		{Actor: "user:alice", Action: "partner.update", Target: "ACME", Detail: map[string]any{"version": 2}},
		{Actor: "user:bob", Action: "message.send", Target: "1", Remote: "192.0.2.9"},
		{Actor: "user:alice", Action: "message.send", Target: "2"},
		{Actor: "token:ci (alice)", Action: "message.resend", Target: "1"},
		{Actor: "user:alice", Action: "partner.update", Target: "GLOBEX"},
	} {
		if err := st.Record(ctx, e); err != nil {
			t.Fatalf("Record #%d: %v", i, err)
		}
	}
	// The first two an hour ago.
	if _, err := pgtest.Conn(t, url).Exec(ctx, `UPDATE audit_log SET at = now() - interval '1 hour' WHERE id <= (SELECT min(id) + 1 FROM audit_log)`); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []postgres.AuditEntry{{Action: "x"}, {Actor: "x"}} {
		if err := st.Record(ctx, bad); err == nil {
			t.Errorf("Record(%+v) = nil error, want one", bad)
		}
	}
	all, err := st.AuditLog(ctx, postgres.AuditQuery{})
	if err != nil || len(all) != 5 {
		t.Fatalf("AuditLog() = %d entries, %v; want 5", len(all), err)
	}
	if all[4].Detail["version"] != float64(2) || all[3].Remote != "192.0.2.9" || all[0].Target != "GLOBEX" {
		t.Errorf("AuditLog() newest first with detail and remote: %+v", all)
	}
	mid := all[2].At.Add(-time.Minute)
	targets := func(q postgres.AuditQuery) []string {
		t.Helper()
		recs, err := st.AuditLog(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, r := range recs {
			out = append(out, r.Action+" "+r.Target)
		}
		return out
	}
	tests := []struct {
		name string
		give postgres.AuditQuery
		want []string
	}{
		{"actor", postgres.AuditQuery{Actor: "user:alice"}, []string{"partner.update GLOBEX", "message.send 2", "partner.update ACME"}},
		{"action", postgres.AuditQuery{Action: "message.send"}, []string{"message.send 2", "message.send 1"}},
		{"target", postgres.AuditQuery{Target: "1"}, []string{"message.resend 1", "message.send 1"}},
		{"actor and action", postgres.AuditQuery{Actor: "user:alice", Action: "partner.update"}, []string{"partner.update GLOBEX", "partner.update ACME"}},
		{"since", postgres.AuditQuery{Since: mid}, []string{"partner.update GLOBEX", "message.resend 1", "message.send 2"}},
		{"until", postgres.AuditQuery{Until: mid}, []string{"message.send 1", "partner.update ACME"}},
		{"page", postgres.AuditQuery{Before: all[1].ID, Limit: 2}, []string{"message.send 2", "message.send 1"}},
		{"nothing", postgres.AuditQuery{Actor: "user:carol"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := gocmp.Diff(tt.want, targets(tt.give)); diff != "" {
				t.Errorf("AuditLog(%+v) (-want +got):\n%s", tt.give, diff)
			}
		})
	}
}
