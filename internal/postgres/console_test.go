package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// seedVolume fills a database with the traffic of a busy hub: 200,000
// messages of 50 partners over 100 days (most delivered or processed, some
// failed, a few still retrying or awaiting an MDN), their events, outbox
// rows and MDNs, audit entries, async MDNs and an hour of heartbeats; then ANALYZE, so that the
// planner sees the volume.
func seedVolume(t *testing.T, c *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, filename, payload_size, created_at, updated_at, completed_at, mdn_overdue)
SELECT CASE WHEN i % 2 = 0 THEN 'inbound' ELSE 'outbound' END, 'P' || (i % 50), 'A', 'B', '<m' || i || '@x>',
       CASE WHEN i % 2 = 0 THEN (CASE WHEN i % 500 = 0 THEN 'error' ELSE 'processed' END)
            WHEN i % 997 = 1 THEN 'retrying' WHEN i % 991 = 1 THEN 'awaiting-mdn' WHEN i % 101 = 1 THEN 'failed' ELSE 'delivered' END,
       'f' || i || '.edi', 1000, now() - (200000 - i) * interval '43 seconds', now(), now() - (200000 - i) * interval '43 seconds',
       i % 1993 = 1
  FROM generate_series(1, 200000) i`,
		`INSERT INTO events (type, message, partner, direction, created_at)
SELECT CASE WHEN direction = 'inbound' THEN 'received' ELSE 'delivered' END, id, partner, direction, created_at FROM messages`,
		`INSERT INTO outbox (kind, message_id, partner, url, status, attempts, finished_at, next_attempt_at)
SELECT 'message', id, partner, 'http://x', CASE WHEN status IN ('retrying', 'awaiting-mdn') THEN 'pending' ELSE 'done' END, 1,
       CASE WHEN status IN ('retrying', 'awaiting-mdn') THEN NULL ELSE created_at END, created_at
  FROM messages WHERE direction = 'outbound'`,
		`INSERT INTO mdns (message_id, content_type, body, disposition, created_at)
SELECT id, 'multipart/report', 'x', 'automatic-action/MDN-sent-automatically; processed', created_at FROM messages WHERE status IN ('delivered', 'processed')`,
		`INSERT INTO audit_log (at, actor, action, target)
SELECT now() - i * interval '1 minute', 'user:u' || (i % 20), (ARRAY['login', 'message.resend', 'partner.update', 'message.send'])[i % 4 + 1], 'T' || (i % 300)
  FROM generate_series(1, 100000) i`,
		`INSERT INTO mdn_inbox (content_type, body, state, received_at, processed_at)
SELECT 'multipart/report', 'x', CASE WHEN i % 200 = 0 THEN 'orphan' WHEN i % 1000 = 1 THEN 'pending' ELSE 'processed' END, now(),
       CASE WHEN i % 1000 = 1 THEN NULL ELSE now() END
  FROM generate_series(1, 50000) i`,
		`INSERT INTO leader_heartbeats (lease, token, holder, beat_at)
SELECT 'edihub-leader', 7, 'replica-1', now() - i * interval '1 second' FROM generate_series(1, 3600) i`,
		`ANALYZE`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
}

// bigTables are the tables that grow with the traffic: a plan must not
// read them whole.
var bigTables = []string{"messages", "events", "outbox", "audit_log", "mdn_inbox", "payloads", "mdns", "leader_heartbeats"}

// TestConsoleQueriesUseIndexes runs every read of the console's pages on
// a database of 200,000 messages, records each statement the store sends,
// and EXPLAINs it: no statement may scan a table that grows with the
// traffic sequentially.
func TestConsoleQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	seedVolume(t, conn)
	var rec postgres.Recorder
	st, err := postgres.OpenRecorded(ctx, url, &rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	var mid int64 = 150001
	since := time.Now().Add(-48 * time.Hour)
	pages := []struct {
		name string
		run  func() error
	}{
		{"messages, newest", func() error { _, err := st.Messages(ctx, postgres.MessageQuery{Limit: 51}); return err }},
		{"messages, next page", func() error { _, err := st.Messages(ctx, postgres.MessageQuery{Limit: 51, Before: 120000}); return err }},
		{"messages of a partner", func() error { _, err := st.Messages(ctx, postgres.MessageQuery{Partner: "P7", Limit: 51}); return err }},
		{"failed messages of a partner", func() error {
			_, err := st.Messages(ctx, postgres.MessageQuery{Partner: "P7", Status: "failed", Limit: 51})
			return err
		}},
		{"failed outbound messages", func() error {
			_, err := st.Messages(ctx, postgres.MessageQuery{Direction: "outbound", Status: "failed", Limit: 51})
			return err
		}},
		{"messages of two days", func() error {
			_, err := st.Messages(ctx, postgres.MessageQuery{Since: since, Until: since.Add(24 * time.Hour), Limit: 51})
			return err
		}},
		{"trace", func() error {
			if _, err := st.Message(ctx, mid); err != nil {
				return err
			}
			if _, err := st.MessageOutbox(ctx, mid); err != nil {
				return err
			}
			if _, err := st.MessageMDN(ctx, mid); err != nil && !errors.Is(err, postgres.ErrNoMDN) {
				return err
			}
			_, err := st.MessageEvents(ctx, mid, 100)
			return err
		}},
		{"partners", func() error {
			names := make([]string, 50)
			for i := range names {
				names[i] = fmt.Sprintf("P%d", i)
			}
			_, err := st.PartnerHealth(ctx, names)
			return err
		}},
		{"hub", func() error {
			if _, err := st.HubState(ctx, "edihub-leader"); err != nil {
				return err
			}
			_, err := st.ReportDays(ctx, 14)
			return err
		}},
		{"audit, newest", func() error { _, err := st.AuditLog(ctx, postgres.AuditQuery{Limit: 51}); return err }},
		{"audit of a user", func() error { _, err := st.AuditLog(ctx, postgres.AuditQuery{Actor: "user:u3", Limit: 51}); return err }},
		{"audit of a target", func() error { _, err := st.AuditLog(ctx, postgres.AuditQuery{Target: "T42", Limit: 51}); return err }},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			rec.Take()
			if err := p.run(); err != nil {
				t.Fatal(err)
			}
			stmts := rec.Take()
			if len(stmts) == 0 {
				t.Fatal("no statement recorded")
			}
			for _, s := range stmts {
				q := strings.TrimSpace(s.SQL)
				if !strings.HasPrefix(strings.ToUpper(q), "SELECT") && !strings.HasPrefix(strings.ToUpper(q), "WITH") {
					continue // begin, commit
				}
				rows, err := conn.Query(ctx, "EXPLAIN "+q, s.Args...)
				if err != nil {
					t.Fatalf("EXPLAIN %s: %v", q, err)
				}
				var plan []string
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						t.Fatal(err)
					}
					plan = append(plan, line)
				}
				rows.Close()
				text := strings.Join(plan, "\n")
				for _, tb := range bigTables {
					if strings.Contains(text, "Seq Scan on "+tb+" ") || strings.HasSuffix(text, "Seq Scan on "+tb) {
						t.Errorf("%s reads %s whole:\n%s\n%s", p.name, tb, q, text)
					}
				}
				t.Logf("%s\n%s", firstLine(q), text)
			}
		})
	}
}

func firstLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

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

// TestPartnerHealth counts each partner's last success, retrying,
// unfinished and overdue messages.
func TestPartnerHealth(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	c := pgtest.Conn(t, url)
	if _, err := c.Exec(ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, completed_at, mdn_overdue) VALUES
 ('outbound', 'A', 'H', 'A', '<1>', 'delivered', '2026-03-01 10:00Z', false),
 ('inbound',  'A', 'A', 'H', '<2>', 'processed', '2026-03-02 09:00Z', false),
 ('outbound', 'A', 'H', 'A', '<3>', 'failed',    '2026-03-03 09:00Z', false),
 ('outbound', 'A', 'H', 'A', '<4>', 'retrying',  NULL, false),
 ('outbound', 'A', 'H', 'A', '<5>', 'awaiting-mdn', NULL, true),
 ('outbound', 'B', 'H', 'B', '<6>', 'queued', NULL, false)`); err != nil {
		t.Fatal(err)
	}
	hs, err := st.PartnerHealth(ctx, []string{"B", "A", "C"})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(hs))
	for i, h := range hs {
		last := "-"
		if h.LastSuccess != nil {
			last = h.LastSuccess.UTC().Format(time.RFC3339)
		}
		got[i] = fmt.Sprintf("%s %s %d %d %d", h.Partner, last, h.Retrying, h.Active, h.Overdue)
	}
	want := []string{"B - 0 1 0", "A 2026-03-02T09:00:00Z 1 2 1", "C - 0 0 0"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("PartnerHealth = %q, want %q", got, want)
	}
}
