package outbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// slowBuildStore makes building take longer than a claim lasts, as a
// very large message does.
type slowBuildStore struct {
	*postgres.Store
	delay time.Duration
}

func (s slowBuildStore) OutboundSource(ctx context.Context, id int64) (postgres.OutboundSource, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return postgres.OutboundSource{}, ctx.Err()
	}
	return s.Store.OutboundSource(ctx, id)
}

// TestDispatchKeepsClaim: a build and send lasting several leases keeps
// its claim: a second dispatcher polling all the while never claims the
// row, the partner gets the message once, in one attempt.
func TestDispatchKeepsClaim(t *testing.T) {
	st := pgtest.Store(t)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: []string{"mdn: none", "timeout: 1s"}})
	const lease = 3 * time.Second
	slow := slowBuildStore{Store: st, delay: 3 * lease}
	o1 := dispatcherOpts(t, st, cfg, "d1")
	o1.Store, o1.Lease = slow, lease
	q := enqueue(t, st, cfg, partnerID, []byte("large"), "application/EDIFACT", "")
	startDispatcher(t, o1)
	// d1 holds the row once it counted an attempt; d2 competes from then on.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := st.Message(context.Background(), q.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Attempts > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("d1 never claimed the row")
		}
	}
	o2 := dispatcherOpts(t, st, cfg, "d2")
	o2.Store, o2.Lease = slow, lease
	startDispatcher(t, o2)
	m := waitStatus(t, st, q.ID, "sent", "failed")
	if m.Status != "sent" || m.Attempts != 1 {
		t.Errorf("status %q after %d attempts (error %q), want sent in 1", m.Status, m.Attempts, m.Error)
	}
	if n := len(partner.requests()); n != 1 {
		t.Errorf("partner got %d posts, want 1", n)
	}
}
