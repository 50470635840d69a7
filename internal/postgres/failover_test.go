package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgserver"
)

// TestPoolFollowsPromotedStandby is issue 21's regression test for the
// database failover: a Store opened on a libpq multi-host URL listing a
// synchronous standby before its primary, with
// target_session_attrs=read-write, writes to the primary; once the
// primary is killed and the standby promoted, the same Store (its pool's
// connections to the dead primary broken) writes to the promoted standby,
// which has every write committed before the kill.
func TestPoolFollowsPromotedStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	primary, standby := startPair(ctx, t)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		standby.Port(), primary.Port())
	st, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 4, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("Open(multi-host URL): %v", err)
	}
	defer st.Close()
	for _, q := range []string{"CREATE TABLE probe (v int)", "INSERT INTO probe VALUES (1)"} {
		if _, err := st.ExecSQL(ctx, q); err != nil {
			t.Fatalf("%s before the failover: %v", q, err)
		}
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// The first statements may meet connections to the dead primary; the
	// pool drops those and dials again, past the dead host.
	var lastErr error
	for attempt := 0; attempt < 60; attempt++ {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, lastErr = st.ExecSQL(wctx, "INSERT INTO probe VALUES (2)")
		wcancel()
		if lastErr == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("no write accepted after the promotion: %v", lastErr)
	}
	n, err := st.CountSQL(ctx, "SELECT count(*) FROM probe")
	if err != nil || n != 2 {
		t.Fatalf("rows on the promoted standby = %d, %v; want 2 (the row committed before the kill and the one after)", n, err)
	}
}

// startPair starts a primary and a synchronous streaming standby.
func startPair(ctx context.Context, t *testing.T) (primary, standby *pgserver.Server) {
	t.Helper()
	// The postgres user must reach the data directories when running as
	// root; t.TempDir's parents are private.
	dir, err := os.MkdirTemp("", "edihub-pgha-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if primary, err = pgserver.New(pgserver.Options{Dir: filepath.Join(dir, "primary")}); err != nil {
		t.Fatal(err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	if standby, err = pgserver.NewStandby(ctx, primary, pgserver.Options{Dir: filepath.Join(dir, "standby")}); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	admin, err := postgres.Open(ctx, primary.URL("postgres"), postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
		if _, err := admin.ExecSQL(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for {
		n, err := admin.CountSQL(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'")
		if err == nil && n == 1 {
			return primary, standby
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no synchronous standby: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestReplayWaitsForTheStandby: a document the API accepted survives a
// failover to the synchronous standby, also when it was accepted as the
// replay of an earlier request with the same idempotency key whose
// commit never reached the standby. The earlier request's client gave up
// while its commit waited for the standby (the wait is cancelled and the
// commit stands on the primary alone, visible to everyone); the replay
// finds it, and must not answer before the standby has it too.
func TestReplayWaitsForTheStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	primary, standby := startPair(ctx, t)
	st, err := postgres.Open(ctx, primary.URL("postgres"), postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	doc := postgres.NewOutbound{Partner: "ACME", AS2From: "EDIHUB", AS2To: "ACME", MessageID: "<first@edihub>", ContentType: "text/plain",
		MDNMode: "none", URL: "http://127.0.0.1:1/as2", MaxAttempts: 1, Payload: []byte("doc"),
		IdempotencyKey: "order-1", IdempotencyHash: []byte("h")}
	// The standby stops: commits wait for it.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, time.Second)
	_, err = st.EnqueueOutbound(actx, doc)
	acancel()
	if err == nil {
		t.Fatal("EnqueueOutbound committed with its synchronous standby down")
	}
	var n int64
	for range 50 {
		if n, _ = st.CountSQL(ctx, "SELECT count(*) FROM messages WHERE idempotency_key = 'order-1'"); n == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n != 1 {
		t.Fatalf("%d messages with the key on the primary after the cancelled commit, want 1 (committed locally)", n)
	}
	// The client asks again: the replay must wait for the standby.
	retry := doc
	retry.MessageID = "<second@edihub>"
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	e, err := st.EnqueueOutbound(bctx, retry)
	bcancel()
	if err == nil {
		t.Fatalf("the replay answered %+v while its message is on the primary alone: a failover now loses a document the API accepted", e)
	}
	// The standby is back: the replay answers, with the first message.
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 100 {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		e, lastErr = st.EnqueueOutbound(cctx, retry)
		ccancel()
		if lastErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastErr != nil || !e.Replayed || e.MessageID != "<first@edihub>" {
		t.Fatalf("replay with the standby back = %+v, %v; want the first message, replayed", e, lastErr)
	}
}
