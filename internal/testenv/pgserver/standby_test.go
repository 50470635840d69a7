package pgserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/testenv/pgserver"
)

// TestStandbyFailover runs a primary with a synchronous streaming standby,
// commits a row, kills the primary, promotes the standby and reads the
// row there: the path the chaos harness takes on a database failover.
func TestStandbyFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// t.TempDir's parents are private to root; the postgres user must
	// reach the data directories.
	dir, err := os.MkdirTemp("", "edihub-pgserver-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	primary, err := pgserver.New(pgserver.Options{Dir: filepath.Join(dir, "primary")})
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := pgserver.NewStandby(ctx, primary, pgserver.Options{Dir: filepath.Join(dir, "standby")})
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	pc := connect(ctx, t, primary.URL("postgres"))
	waitReplication(ctx, t, pc, "async")
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_standby_names = '*'",
		"SELECT pg_reload_conf()",
		"CREATE TABLE kept (v int)",
		"INSERT INTO kept VALUES (42)",
	} {
		if _, err := pc.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	waitReplication(ctx, t, pc, "sync")
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	sc := connect(ctx, t, standby.URL("postgres"))
	var v int
	if err := sc.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("promoted standby: SELECT v = %d, %v; want 42", v, err)
	}
	// The promoted server writes and waits for no standby: the primary's
	// synchronous_standby_names was not copied.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if _, err := sc.Exec(wctx, "INSERT INTO kept VALUES (43)"); err != nil {
		t.Fatalf("write on the promoted standby: %v", err)
	}
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// waitReplication waits until one standby streams in mode (sync_state:
// async, sync); a reloaded synchronous_standby_names takes a moment.
func waitReplication(ctx context.Context, t *testing.T, c *pgx.Conn, mode string) {
	t.Helper()
	for {
		var n int
		err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1", mode).Scan(&n)
		if err == nil && n == 1 {
			return
		}
		if err == nil {
			err = errors.New("no streaming standby")
		}
		select {
		case <-ctx.Done():
			t.Fatal(fmt.Errorf("%w: %v", ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
