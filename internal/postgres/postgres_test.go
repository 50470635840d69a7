package postgres_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func TestMigrateFromScratch(t *testing.T) {
	ctx := context.Background()
	st := open(t, pgtest.EmptyURL(t))

	if err := st.CheckSchema(ctx); !errors.Is(err, postgres.ErrSchemaOutdated) {
		t.Fatalf("CheckSchema(empty) = %v, want ErrSchemaOutdated", err)
	}
	applied, err := st.Migrate(ctx)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if len(applied) == 0 {
		t.Fatal("Migrate applied nothing on an empty database")
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate = %v, want nil", err)
	}
	again, err := st.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %d applied, %v; want 0, nil", len(again), err)
	}
	for _, table := range []string{"messages", "payloads", "mdns", "mdn_inbox", "outbox", "reports", "leader_fence", "leader_terms"} {
		if !st.TableExists(ctx, table) {
			t.Errorf("table %s missing after Migrate", table)
		}
	}
}

func TestConcurrentMigrate(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	const replicas = 3
	var wg sync.WaitGroup
	counts := make([]int, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := postgres.Open(ctx, url, postgres.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			defer st.Close()
			applied, err := st.Migrate(ctx)
			counts[i], errs[i] = len(applied), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Errorf("replica %d: Migrate = %v", i, errs[i])
		}
		total += counts[i]
	}
	st := open(t, url)
	current, want, err := st.SchemaVersion(ctx)
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}
	if current != want {
		t.Errorf("SchemaVersion = %d, want %d", current, want)
	}
	if n := postgres.MigrationCount(); total != n {
		t.Errorf("migrations applied across replicas = %d, want %d (each exactly once)", total, n)
	}
	if n, wantRows := st.MigrationRows(ctx), postgres.MigrationCount(); n != wantRows {
		t.Errorf("applied migration rows = %d, want %d", n, wantRows)
	}
}

func TestSchemaNewerThanBinary(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if err := st.ForceSchemaVersion(ctx, 9999); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); !errors.Is(err, postgres.ErrSchemaNewer) {
		t.Fatalf("CheckSchema = %v, want ErrSchemaNewer", err)
	}
}

func TestOpenRedactsPassword(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://u:s3cret@host:notaport/db", postgres.Options{})
	if err == nil {
		t.Fatal("Open(bad URL) = nil error")
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Errorf("Open error leaks the password: %q", got)
	}
}
