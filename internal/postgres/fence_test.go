package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/postgres/pgtest"
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
		{"older token", 3, "b", postgres.ErrStaleFence},
		{"same term again, same holder", 5, "a", nil},
		{"same token, other holder", 5, "b", postgres.ErrStaleFence},
		{"newer token", 7, "b", nil},
		{"the overtaken leader comes back", 6, "a", postgres.ErrStaleFence},
	}
	for _, tt := range tests {
		err := st.OpenTerm(ctx, postgres.Fence{Lease: lease, Token: tt.token}, tt.holder)
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
	if err := st.OpenTerm(ctx, postgres.Fence{Lease: "other", Token: 1}, "c"); err != nil {
		t.Errorf("OpenTerm(other lease) = %v", err)
	}
}

func TestFencedWriteRejectsStaleToken(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	old := postgres.Fence{Lease: "edihub-leader", Token: 10}
	next := postgres.Fence{Lease: "edihub-leader", Token: 11}

	if err := st.Heartbeat(ctx, old, "a", time.Hour); !errors.Is(err, postgres.ErrStaleFence) {
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
	if err := st.Heartbeat(ctx, old, "a", time.Hour); !errors.Is(err, postgres.ErrStaleFence) {
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

func TestHeartbeatDeletesOldBeats(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	f := postgres.Fence{Lease: "edihub-leader", Token: 1}
	if err := st.OpenTerm(ctx, f, "a"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := st.Heartbeat(ctx, f, "a", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := st.Heartbeat(ctx, f, "a", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	beats, err := st.Heartbeats(ctx, "edihub-leader")
	if err != nil {
		t.Fatal(err)
	}
	if len(beats) != 1 {
		t.Errorf("after a beat with 10ms retention: %d beats, want 1", len(beats))
	}
}

// TestTermOpenWaitsForInFlightFencedWrite: a fenced transaction of the old
// term that is still open either commits before the new term opens (the
// opening waits for it), or is rejected.
func TestTermOpenWaitsForInFlightFencedWrite(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	old := postgres.Fence{Lease: "edihub-leader", Token: 1}
	next := postgres.Fence{Lease: "edihub-leader", Token: 2}
	if err := st.OpenTerm(ctx, old, "a"); err != nil {
		t.Fatal(err)
	}

	inTx := make(chan struct{})
	release := make(chan struct{})
	writeDone := make(chan error, 1)
	go func() {
		writeDone <- st.FencedInsertBeat(ctx, old, "a", func() { close(inTx); <-release })
	}()
	<-inTx
	openDone := make(chan error, 1)
	var openedAt atomic.Int64
	go func() {
		err := st.OpenTerm(ctx, next, "b")
		openedAt.Store(time.Now().UnixNano())
		openDone <- err
	}()
	select {
	case err := <-openDone:
		t.Fatalf("OpenTerm returned (%v) while an older term's fenced transaction was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	committedAt := time.Now().UnixNano()
	close(release)
	if err := <-writeDone; err != nil {
		t.Fatalf("in-flight fenced write of the old term = %v, want commit", err)
	}
	if err := <-openDone; err != nil {
		t.Fatalf("OpenTerm after the old write = %v", err)
	}
	if openedAt.Load() < committedAt {
		t.Error("OpenTerm completed before the old term's write committed")
	}
	// Now the old term is fenced off.
	if err := st.FencedInsertBeat(ctx, old, "a", func() {}); !errors.Is(err, postgres.ErrStaleFence) {
		t.Fatalf("old term's write after the new term opened = %v, want ErrStaleFence", err)
	}
}

// TestFencedWritesUnderConcurrentTermOpens races writers of several terms
// against term openings and checks the history: tokens never go down in
// commit (id) order, and no accepted beat carries a token other than the
// one current when it committed.
func TestFencedWritesUnderConcurrentTermOpens(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const lease = "edihub-leader"
	if err := st.OpenTerm(ctx, postgres.Fence{Lease: lease, Token: 1}, "w1"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var accepted, rejected atomic.Int64
	for w := int64(1); w <= 5; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := postgres.Fence{Lease: lease, Token: w}
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := st.FencedInsertBeat(ctx, f, "w", func() { time.Sleep(time.Millisecond) })
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, postgres.ErrStaleFence):
					rejected.Add(1)
				default:
					t.Errorf("fenced write = %v", err)
					return
				}
			}
		}()
	}
	for tok := int64(2); tok <= 5; tok++ {
		time.Sleep(50 * time.Millisecond)
		if err := st.OpenTerm(ctx, postgres.Fence{Lease: lease, Token: tok}, "w"); err != nil {
			t.Fatalf("OpenTerm(%d) = %v", tok, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	beats, err := st.Heartbeats(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if accepted.Load() == 0 || rejected.Load() == 0 {
		t.Fatalf("accepted %d, rejected %d: the race did not happen", accepted.Load(), rejected.Load())
	}
	for i := 1; i < len(beats); i++ {
		if beats[i].Token < beats[i-1].Token {
			t.Fatalf("beat %d has token %d after beat %d with token %d", beats[i].ID, beats[i].Token, beats[i-1].ID, beats[i-1].Token)
		}
	}
	if int64(len(beats)) != accepted.Load() {
		t.Errorf("%d beats stored, %d accepted", len(beats), accepted.Load())
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
		if err := st.OpenTerm(ctx, postgres.Fence{Lease: "l", Token: tok}, "h"); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := st.CurrentTerm(ctx, "l")
	if err != nil || cur.Lease != "l" || cur.Token != 9 || cur.Holder != "h" || cur.OpenedAt.IsZero() {
		t.Errorf("CurrentTerm = %+v, %v; want token 9 held by h", cur, err)
	}
}
