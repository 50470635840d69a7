package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func openStore(t *testing.T, url string, o postgres.Options) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// holdFenced starts a fenced transaction of f on st that stays open, as in
// a leader paused (SIGSTOP) between two statements, until the returned
// release is called; done gets its result.
func holdFenced(t *testing.T, st *postgres.Store, f hub.Fence) (release func(), done <-chan error) {
	t.Helper()
	inTx, hold := make(chan struct{}), make(chan struct{})
	ch := make(chan error, 1)
	go func() {
		ch <- st.FencedInsertBeat(context.Background(), f, "paused", func() { close(inTx); <-hold })
	}()
	select {
	case <-inTx:
	case err := <-ch:
		t.Fatalf("fenced transaction = %v before holding", err)
	}
	var released bool
	release = func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release)
	return release, ch
}

// TestPausedFencedTransactionDoesNotBlockTheNextTerm: a fenced transaction
// left open by a paused leader holds the fence row's share lock; the server
// ends it after the fenced idle timeout, so the successor's term opens
// instead of waiting until the old leader resumes. The old transaction never
// commits.
func TestPausedFencedTransactionDoesNotBlockTheNextTerm(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	o := postgres.Options{FencedIdleTimeout: 500 * time.Millisecond}
	old, next := openStore(t, url, o), openStore(t, url, o)
	f1, f2 := hub.Fence{Lease: "edihub-leader", Token: 1}, hub.Fence{Lease: "edihub-leader", Token: 2}
	if err := old.OpenTerm(ctx, f1, "paused"); err != nil {
		t.Fatal(err)
	}
	release, done := holdFenced(t, old, f1)

	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	began := time.Now()
	if err := next.OpenTerm(octx, f2, "successor"); err != nil {
		t.Fatalf("successor's OpenTerm behind a paused fenced transaction = %v, want it opened once the server ended the idle transaction", err)
	}
	t.Logf("successor's term opened %s after it started waiting (fenced idle timeout 500ms)", time.Since(began).Round(time.Millisecond))

	release() // the old leader resumes
	if err := <-done; err == nil {
		t.Fatal("the paused leader's fenced transaction committed after the successor's term opened")
	}
	beats, err := next.Heartbeats(ctx, "edihub-leader")
	if err != nil {
		t.Fatal(err)
	}
	if len(beats) != 0 {
		t.Errorf("beats %v, want none (the paused transaction never committed)", beats)
	}
	// The old leader's pool goes on working, and is fenced off.
	if err := old.FencedInsertBeat(ctx, f1, "paused", func() {}); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("old term's next write = %v, want ErrStaleFence", err)
	}
}

// TestTermOpeningHasALockTimeout: a term opening waits for the fence row's
// lock at most the term lock timeout, then fails with ErrTermLockTimeout
// (the elector tries again), and succeeds once the lock is free.
func TestTermOpeningHasALockTimeout(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	old := openStore(t, url, postgres.Options{FencedIdleTimeout: time.Minute})
	next := openStore(t, url, postgres.Options{TermLockTimeout: 300 * time.Millisecond})
	f1, f2 := hub.Fence{Lease: "edihub-leader", Token: 1}, hub.Fence{Lease: "edihub-leader", Token: 2}
	if err := old.OpenTerm(ctx, f1, "slow"); err != nil {
		t.Fatal(err)
	}
	release, done := holdFenced(t, old, f1)
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := next.OpenTerm(octx, f2, "successor")
	if !errors.Is(err, postgres.ErrTermLockTimeout) {
		t.Fatalf("OpenTerm behind a held fence lock = %v, want ErrTermLockTimeout", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the old term's transaction = %v, want committed (its term was still current)", err)
	}
	if err := next.OpenTerm(octx, f2, "successor"); err != nil {
		t.Fatalf("OpenTerm once the lock is free = %v", err)
	}
}

// TestConnectionsDetectDeadPeers: the server side of every connection
// probes a silent client and drops one whose data stays unacknowledged,
// within seconds, not the kernel's two hours.
func TestConnectionsDetectDeadPeers(t *testing.T) {
	st := openStore(t, pgtest.URL(t), postgres.Options{DeadPeerTimeout: 9 * time.Second})
	for name, want := range map[string]string{
		"tcp_user_timeout":        "9000", // ms
		"tcp_keepalives_idle":     "3",    // s
		"tcp_keepalives_interval": "1",
		"tcp_keepalives_count":    "3",
	} {
		got, err := st.Show(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("server's %s = %q, want %q", name, got, want)
		}
	}
}

func TestCheckTerm(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := openStore(t, url, postgres.Options{})
	f1, f2 := hub.Fence{Lease: "edihub-leader", Token: 1}, hub.Fence{Lease: "edihub-leader", Token: 2}
	if err := st.CheckTerm(ctx, f1); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("CheckTerm before any term = %v, want ErrStaleFence", err)
	}
	if err := st.OpenTerm(ctx, f1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckTerm(ctx, f1); err != nil {
		t.Errorf("CheckTerm of the current term = %v", err)
	}
	if err := st.OpenTerm(ctx, f2, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckTerm(ctx, f1); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("CheckTerm of an older term = %v, want ErrStaleFence", err)
	}
	closed := openStore(t, url, postgres.Options{})
	closed.Close()
	if err := closed.CheckTerm(ctx, f2); err == nil || errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("CheckTerm without a database = %v, want an error that is not ErrStaleFence", err)
	}
}
