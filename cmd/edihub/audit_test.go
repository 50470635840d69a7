package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestCLIChangesAreAudited: each change made from the command line is one
// row of the audit log, with the action and target the API records and
// the command line's actor, cli:<os user>@<host>.
func TestCLIChangesAreAudited(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	cfg := writeConfig(t, "")
	getenv := env("EDIHUB_DATABASE_URL", dbURL, "EDIHUB_CONFIG", cfg)
	st, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(filepath.Dir(cfg), "changed.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(b), "127.0.0.1:1/as2", "127.0.0.1:2/as2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(t.TempDir(), "order.x12")
	if err := os.WriteFile(doc, []byte("ST*850*0001~\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("correct horse battery\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var msgID string // the id edihub send queued
	tests := []struct {
		give       []string
		wantAction string
		wantTarget string
	}{
		{[]string{"partners", "apply", "-f", cfg}, "partner.create", "ACME CORP"},
		{[]string{"partners", "apply", "-f", changed}, "partner.update", "ACME CORP"},
		{[]string{"partners", "restore", "-version", "1", "ACME CORP"}, "partner.restore", "ACME CORP"},
		{[]string{"send", "-partner", "ACME CORP", doc}, "message.send", "{msg}"},
		{[]string{"cancel", "-reason", "wrong partner", "{msg}"}, "message.cancel", "{msg}"},
		{[]string{"resend", "{msg}"}, "message.resend", "{msg}"},
		{[]string{"partners", "delete", "ACME CORP"}, "partner.delete", "ACME CORP"},
		{[]string{"users", "add", "bob", "-role", "viewer", "-password-file", pw}, "user.add", "bob"},
		{[]string{"users", "role", "bob", "-role", "operator"}, "user.role", "bob"},
		{[]string{"users", "disable", "bob"}, "user.disable", "bob"},
		{[]string{"users", "enable", "bob"}, "user.enable", "bob"},
		{[]string{"users", "passwd", "bob", "-password-file", pw}, "user.passwd", "bob"},
		{[]string{"users", "token", "bob", "-name", "ci"}, "token.create", "bob"},
		{[]string{"users", "revoke", "bob", "ci"}, "token.revoke", "bob"},
	}
	last := int64(0)
	for _, tt := range tests {
		args := make([]string, len(tt.give))
		for i, a := range tt.give {
			args[i] = strings.ReplaceAll(a, "{msg}", msgID)
		}
		out, errOut, err := runCmd(t, getenv, args...)
		if err != nil {
			t.Fatalf("edihub %v = %v: %s", args, err, errOut)
		}
		if args[0] == "send" {
			var q struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal([]byte(out), &q); err != nil || q.ID == 0 {
				t.Fatalf("edihub send printed %s (%v), want the queued message's id", out, err)
			}
			msgID = strconv.FormatInt(q.ID, 10)
		}
		recs, err := st.AuditLog(ctx, postgres.AuditQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var rows []postgres.AuditRecord
		for _, r := range recs {
			if r.ID > last {
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			last = rows[0].ID
		}
		wantTarget := strings.ReplaceAll(tt.wantTarget, "{msg}", msgID)
		if len(rows) != 1 || rows[0].Action != tt.wantAction || rows[0].Target != wantTarget || rows[0].Actor != cliCaller().Actor() || rows[0].Remote != "" {
			t.Errorf("edihub %v wrote audit rows %+v, want one: %s on %q by %s from nowhere", args, rows, tt.wantAction, wantTarget, cliCaller().Actor())
		}
	}
}
