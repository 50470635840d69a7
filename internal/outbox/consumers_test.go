package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func openStore(t testing.TB, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestCompetingConsumers runs three dispatchers, each with its own pool,
// over one database and checks that each of 200 messages reaches the
// partner exactly once.
func TestCompetingConsumers(t *testing.T) {
	url := pgtest.URL(t)
	var mu sync.Mutex
	perID := map[string]int{}
	partner := newPartner(t, func(_ int, r request) (int, http.Header, []byte) {
		mu.Lock()
		perID[r.header.Get("Message-ID")]++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // stays: the partner's answer takes real time, so the replicas' claims overlap
		return 200, nil, nil
	})
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"sign: sha-256", "mdn: none"}})
	stores := []*postgres.Store{openStore(t, url), openStore(t, url), openStore(t, url)}
	var stops []func()
	for i, st := range stores {
		stops = append(stops, startDispatcher(t, dispatcherOpts(t, st, cfg, fmt.Sprintf("replica-%d", i))))
	}
	const n = 200
	ids := make([]int64, 0, n)
	msgIDs := map[string]bool{}
	for i := range n {
		q := enqueue(t, stores[i%3], cfg, partnerID, fmt.Appendf(nil, "document %d", i), "application/EDI-X12", "")
		ids = append(ids, q.ID)
		msgIDs[q.MessageID] = true
	}
	for _, id := range ids {
		if m := waitStatus(t, stores[0], id, "sent", "failed"); m.Status != "sent" {
			t.Fatalf("message %d: status %q (%s)", id, m.Status, m.Error)
		}
	}
	// A stopped dispatcher has no request in flight: what the partner
	// counted now is all it will ever get.
	for _, stop := range stops {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(perID) != n {
		t.Errorf("partner saw %d distinct Message-IDs, want %d", len(perID), n)
	}
	for id, c := range perID {
		if c != 1 || !msgIDs[id] {
			t.Errorf("Message-ID %s: %d requests (ours: %v), want exactly 1", id, c, msgIDs[id])
		}
	}
	due, claimed, err := stores[0].OutboxStats(context.Background())
	if err != nil || due != 0 || claimed != 0 {
		t.Errorf("OutboxStats = %d due, %d claimed, %v; want 0, 0", due, claimed, err)
	}
}

// TestAbandonedClaimReturns stops a dispatcher in the middle of a send: its
// claim is left behind, and once it expires another dispatcher sends the
// message again with the same Message-ID and bytes (at-least-once; the
// partner deduplicates by Message-ID).
func TestAbandonedClaimReturns(t *testing.T) {
	url := pgtest.URL(t)
	arrived := make(chan struct{}, 4)
	partner := newPartner(t, func(n int, _ request) (int, http.Header, []byte) {
		arrived <- struct{}{}
		if n == 1 {
			return -1, nil, nil // hang: the dispatcher is stopped meanwhile
		}
		return 200, nil, nil
	})
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn: none", "timeout: 1s"}})
	stA, stB := openStore(t, url), openStore(t, url)
	const lease = 2 * time.Second
	oa := dispatcherOpts(t, stA, cfg, "replica-a")
	oa.Lease, oa.ShutdownTimeout = lease, 10*time.Millisecond
	stopA := startDispatcher(t, oa)
	q := enqueue(t, stA, cfg, partnerID, []byte("crash me"), "", "")
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt never reached the partner")
	}
	claimedAt := time.Now()
	stopA() // SIGTERM-like: gives up after 10ms and abandons the send
	if m, _ := stA.Message(context.Background(), q.ID); m.Status == "sent" || m.Status == "failed" {
		t.Fatalf("status %q after abandon, want still pending", m.Status)
	}

	ob := dispatcherOpts(t, stB, cfg, "replica-b")
	ob.Lease = lease
	startDispatcher(t, ob)
	m := waitStatus(t, stB, q.ID, "sent", "failed")
	if m.Status != "sent" {
		t.Fatalf("status %q (%s), want sent", m.Status, m.Error)
	}
	if waited := time.Since(claimedAt); waited < lease-500*time.Millisecond {
		t.Errorf("resent after %s, before the %s claim expired", waited, lease)
	}
	reqs := partner.requests()
	if len(reqs) != 2 {
		t.Fatalf("partner got %d requests, want 2", len(reqs))
	}
	if reqs[0].header.Get("Message-ID") != q.MessageID || reqs[1].header.Get("Message-ID") != q.MessageID || !bytes.Equal(reqs[0].body, reqs[1].body) {
		t.Error("the resend differs from the abandoned attempt (Message-ID or bytes)")
	}
	if m.Attempts != 2 {
		t.Errorf("attempts %d, want 2", m.Attempts)
	}
}

// TestWakeup: a message queued while the dispatcher idles leaves well
// within a second although the poll interval is long (LISTEN/NOTIFY).
func TestWakeup(t *testing.T) {
	st := pgtest.Store(t)
	got := make(chan time.Time, 1)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) {
		got <- time.Now()
		return 200, nil, nil
	})
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"mdn: none"}})
	o := dispatcherOpts(t, st, cfg, "d1")
	o.PollInterval = time.Minute
	listening := make(chan struct{})
	o.Listener = listenerFunc(func(ctx context.Context, wake func()) error {
		var once sync.Once
		return st.ListenOutbox(ctx, func() {
			once.Do(func() { close(listening) }) // ListenOutbox wakes first once LISTEN took effect
			wake()
		})
	})
	startDispatcher(t, o)
	<-listening
	start := time.Now()
	enqueue(t, st, cfg, partnerID, []byte("now"), "", "")
	select {
	case at := <-got:
		t.Logf("sent %s after enqueue (poll interval one minute)", at.Sub(start))
	case <-time.After(10 * time.Second):
		t.Fatal("not sent within 10s with a one-minute poll interval: no wakeup")
	}
}

// listenerFunc is an outbox.Listener from a function, for a test that
// wraps the store's to see when it listens.
type listenerFunc func(ctx context.Context, wake func()) error

func (f listenerFunc) ListenOutbox(ctx context.Context, wake func()) error { return f(ctx, wake) }
