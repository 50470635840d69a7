package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// rejections reads edihub_fencing_rejections_total from the store's collector.
func rejections(t *testing.T, st *postgres.Store) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(st.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edihub_fencing_rejections_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("edihub_fencing_rejections_total not exported")
	return 0
}

func TestOpenTerm(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease = "edihub-leader"
	tests := []struct {
		name   string
		token  int64
		holder string
		want   error
	}{
		{"first term", 5, "a", nil},
		{"older token", 3, "b", hub.ErrStaleFence},
		{"same term again, same holder", 5, "a", nil},
		{"same token, other holder", 5, "b", hub.ErrStaleFence},
		{"newer token", 7, "b", nil},
		{"the overtaken leader comes back", 6, "a", hub.ErrStaleFence},
	}
	for _, tt := range tests {
		err := st.OpenTerm(ctx, hub.Fence{Lease: lease, Token: tt.token}, tt.holder)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: OpenTerm(%d, %s) = %v, want %v", tt.name, tt.token, tt.holder, err, tt.want)
		}
	}
	terms, err := st.Terms(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != 2 || terms[0].Token != 5 || terms[0].Holder != "a" || terms[1].Token != 7 || terms[1].Holder != "b" {
		t.Errorf("Terms = %+v, want a@5, b@7", terms)
	}
	if got := rejections(t, st); got != 3 {
		t.Errorf("rejections = %v, want 3", got)
	}
	// A different lease has its own tokens.
	if err := st.OpenTerm(ctx, hub.Fence{Lease: "other", Token: 1}, "c"); err != nil {
		t.Errorf("OpenTerm(other lease) = %v", err)
	}
}

func TestFencedWriteRejectsStaleToken(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	old := hub.Fence{Lease: "edihub-leader", Token: 10}
	next := hub.Fence{Lease: "edihub-leader", Token: 11}

	if err := st.Heartbeat(ctx, old, "a", time.Hour); !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("Heartbeat before any term = %v, want ErrStaleFence", err)
	}
	if err := st.OpenTerm(ctx, old, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, old, "a", time.Hour); err != nil {
		t.Fatalf("Heartbeat(current term) = %v", err)
	}
	if err := st.OpenTerm(ctx, next, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, old, "a", time.Hour); !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("Heartbeat(stale term) = %v, want ErrStaleFence", err)
	}
	if err := st.Heartbeat(ctx, next, "b", time.Hour); err != nil {
		t.Fatalf("Heartbeat(new term) = %v", err)
	}
	beats, err := st.Heartbeats(ctx, "edihub-leader")
	if err != nil {
		t.Fatal(err)
	}
	if len(beats) != 2 || beats[0].Token != 10 || beats[1].Token != 11 {
		t.Errorf("Heartbeats = %+v, want tokens 10, 11", beats)
	}
	if got := rejections(t, st); got != 2 {
		t.Errorf("rejections = %v, want 2", got)
	}
}

// TestHeartbeatDeletesOldBeats: a beat deletes the lease's beats older than
// its retention and keeps the younger ones and itself. Beats are aged with
// AgeHeartbeats instead of sleeping past a short retention, which a loaded
// machine can also overrun between a beat's insert and its delete.
func TestHeartbeatDeletesOldBeats(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease = "edihub-leader"
	const retain = time.Hour
	f := hub.Fence{Lease: lease, Token: 1}
	if err := st.OpenTerm(ctx, f, "a"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := st.Heartbeat(ctx, f, "a", retain); err != nil {
			t.Fatal(err)
		}
	}
	old, err := st.Heartbeats(ctx, lease)
	if err != nil || len(old) != 3 {
		t.Fatalf("Heartbeats after 3 beats = %+v, %v; want 3 beats", old, err)
	}
	if err := st.AgeHeartbeats(ctx, lease, 2*retain, old[0].ID, old[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := st.AgeHeartbeats(ctx, lease, retain/2, old[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(ctx, f, "a", retain); err != nil {
		t.Fatal(err)
	}
	beats, err := st.Heartbeats(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, b := range beats {
		got = append(got, b.ID)
	}
	if len(got) != 2 || got[0] != old[2].ID || got[1] <= old[2].ID {
		t.Errorf("beats after a beat with %v retention = ids %v; want %d (aged %v) and the new one, not %d and %d (aged %v)",
			retain, got, old[2].ID, retain/2, old[0].ID, old[1].ID, 2*retain)
	}
}

// TestTermOpenWaitsForInFlightFencedWrite: a fenced transaction of the old
// term that is still open either commits before the new term opens (the
// opening waits for it), or is rejected.
//
// "Waits" is checked as an invariant: OpenTerm must be seen blocked on a
// lock in pg_stat_activity, and must not have returned, while the old
// transaction is open. On failure the held transaction and both goroutines
// are released before the store closes (cleanups run last in, first out),
// so the failure is reported at once instead of hanging the pool's Close.
func TestTermOpenWaitsForInFlightFencedWrite(t *testing.T) {
	st := pgtest.Store(t)
	// The deadline only bounds a hang; nothing is timed against it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	old := hub.Fence{Lease: "edihub-leader", Token: 1}
	next := hub.Fence{Lease: "edihub-leader", Token: 2}
	if err := st.OpenTerm(ctx, old, "a"); err != nil {
		t.Fatal(err)
	}

	inTx := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	var wg sync.WaitGroup
	t.Cleanup(func() { // before st.Close, registered earlier
		releaseOnce()
		cancel()
		wg.Wait()
	})
	writeDone := make(chan error, 1)
	wg.Go(func() {
		writeDone <- st.FencedInsertBeat(ctx, old, "a", func() {
			close(inTx)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	})
	select {
	case <-inTx:
	case err := <-writeDone:
		t.Fatalf("fenced write of the current term = %v before it held its transaction open", err)
	case <-ctx.Done():
		t.Fatal("the fenced write never reached its transaction")
	}
	openDone := make(chan error, 1)
	wg.Go(func() { openDone <- st.OpenTerm(ctx, next, "b") })
	// Wait until OpenTerm blocks on the fence row's lock; returning first
	// means it did not wait for the open fenced transaction.
	for blocked := false; !blocked; {
		select {
		case err := <-openDone:
			t.Fatalf("OpenTerm returned (%v) while an older term's fenced transaction was open; it must wait for the fence row's share lock", err)
		case <-ctx.Done():
			t.Fatal("OpenTerm neither blocked on a lock nor returned")
		case <-time.After(10 * time.Millisecond):
		}
		n, err := st.LockWaiters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		blocked = n > 0
	}
	select {
	case err := <-openDone:
		t.Fatalf("OpenTerm returned (%v) while an older term's fenced transaction was open", err)
	default:
	}
	releaseOnce()
	if err := <-writeDone; err != nil {
		t.Fatalf("in-flight fenced write of the old term = %v, want commit", err)
	}
	if err := <-openDone; err != nil {
		t.Fatalf("OpenTerm after the old write = %v", err)
	}
	// Now the old term is fenced off.
	if err := st.FencedInsertBeat(ctx, old, "a", func() {}); !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("old term's write after the new term opened = %v, want ErrStaleFence", err)
	}
}

// TestFencedWritesUnderConcurrentTermOpens races writers of several terms
// against term openings and checks the history: tokens never go down in
// commit (id) order, and no accepted beat carries a token other than the
// one current when it committed. Each term opens only after a write of the
// current term was accepted, so the race happens however slow the machine.
func TestFencedWritesUnderConcurrentTermOpens(t *testing.T) {
	st := pgtest.Store(t)
	// The deadline only bounds a hang; nothing is timed against it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	const lease = "edihub-leader"
	const terms = 5
	if err := st.OpenTerm(ctx, hub.Fence{Lease: lease, Token: 1}, "w1"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	t.Cleanup(func() { // before st.Close, registered earlier
		stopOnce()
		cancel()
		wg.Wait()
	})
	var accepted [terms + 1]atomic.Int64 // by token
	var rejected atomic.Int64
	for w := int64(1); w <= terms; w++ {
		wg.Go(func() {
			f := hub.Fence{Lease: lease, Token: w}
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := st.FencedInsertBeat(ctx, f, "w", func() { time.Sleep(time.Millisecond) }) // stays: each write holds its real transaction a moment, so term opens land on writes in flight
				switch {
				case err == nil:
					accepted[w].Add(1)
				case errors.Is(err, hub.ErrStaleFence):
					rejected.Add(1)
				case ctx.Err() != nil:
					return
				default:
					t.Errorf("fenced write = %v", err)
					return
				}
			}
		})
	}
	waitAccepted := func(tok int64) {
		t.Helper()
		for accepted[tok].Load() == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("no write of term %d accepted while it was current", tok)
			case <-time.After(time.Millisecond):
			}
		}
	}
	for tok := int64(2); tok <= terms; tok++ {
		waitAccepted(tok - 1)
		if err := st.OpenTerm(ctx, hub.Fence{Lease: lease, Token: tok}, "w"); err != nil {
			t.Fatalf("OpenTerm(%d) = %v", tok, err)
		}
	}
	waitAccepted(terms)
	stopOnce()
	wg.Wait()
	beats, err := st.Heartbeats(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for tok := range accepted {
		total += accepted[tok].Load()
	}
	t.Logf("accepted %d, rejected %d", total, rejected.Load())
	if rejected.Load() == 0 {
		t.Errorf("no write of an older term was rejected: the race did not happen")
	}
	for i := 1; i < len(beats); i++ {
		if beats[i].Token < beats[i-1].Token {
			t.Fatalf("beat %d has token %d after beat %d with token %d", beats[i].ID, beats[i].Token, beats[i-1].ID, beats[i-1].Token)
		}
	}
	if int64(len(beats)) != total {
		t.Errorf("%d beats stored, %d accepted", len(beats), total)
	}
}

// TestCurrentTerm reads the fence: ErrNoTerm before any term, then the
// highest term opened.
func TestCurrentTerm(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.CurrentTerm(ctx, "l"); !errors.Is(err, postgres.ErrNoTerm) {
		t.Fatalf("CurrentTerm before any term = %v, want ErrNoTerm", err)
	}
	for _, tok := range []int64{7, 9} {
		if err := st.OpenTerm(ctx, hub.Fence{Lease: "l", Token: tok}, "h"); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := st.CurrentTerm(ctx, "l")
	if err != nil || cur.Lease != "l" || cur.Token != 9 || cur.Holder != "h" || cur.OpenedAt.IsZero() {
		t.Errorf("CurrentTerm = %+v, %v; want token 9 held by h", cur, err)
	}
}
