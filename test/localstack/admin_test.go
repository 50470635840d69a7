package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestEnsureAdmin: the stack's first admin is added once with the password
// of state/admin-password, kept across runs, and given the password of a
// new file when the old one was deleted.
func TestEnsureAdmin(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "edihub")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/edihub")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL, state := pgtest.URL(t), t.TempDir()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := auth.New(auth.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	logsIn := func(password string) bool {
		p, err := a.Login(ctx, adminName, password, "")
		return err == nil && p.Role == auth.RoleAdmin
	}

	first, err := ensureAdmin(ctx, bin, state, dbURL)
	if err != nil || len(first) < auth.MinPasswordLength || !logsIn(first) {
		t.Fatalf("first run: %q, %v; want a password admin logs in with", first, err)
	}
	again, err := ensureAdmin(ctx, bin, state, dbURL)
	if err != nil || again != first || !logsIn(first) {
		t.Errorf("second run: %q, %v; want the same password %q", again, err, first)
	}
	if err := os.Remove(filepath.Join(state, "admin-password")); err != nil {
		t.Fatal(err)
	}
	fresh, err := ensureAdmin(ctx, bin, state, dbURL)
	if err != nil || fresh == first || !logsIn(fresh) || logsIn(first) {
		t.Errorf("run after the file was deleted: %q, %v; want a new password that works, the old one not", fresh, err)
	}
}
