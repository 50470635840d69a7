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

func TestLeaseLifecycle(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const name = "edihub-leader"
	d := 30 * time.Second

	a, err := st.AcquireLease(ctx, name, "a", d)
	if err != nil || !a.Acquired || a.Token != 1 {
		t.Fatalf("AcquireLease(a) = %+v, %v; want acquired with token 1", a, err)
	}
	b, err := st.AcquireLease(ctx, name, "b", d)
	if err != nil || b.Acquired || b.Holder != "a" || b.ExpiresIn <= 25*time.Second || b.ExpiresIn > d {
		t.Fatalf("AcquireLease(b) while a holds it = %+v, %v; want not acquired, holder a, ~30s left", b, err)
	}
	if err := st.RenewLease(ctx, name, "a", a.Token, d); err != nil {
		t.Fatalf("RenewLease(a) = %v", err)
	}
	if err := st.RenewLease(ctx, name, "b", a.Token, d); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("RenewLease(b) = %v, want ErrLeaseLost", err)
	}
	// Re-taking one's own lease is a new term with a new token.
	a2, err := st.AcquireLease(ctx, name, "a", d)
	if err != nil || !a2.Acquired || a2.Token != 2 {
		t.Fatalf("AcquireLease(a) again = %+v, %v; want token 2", a2, err)
	}
	if err := st.RenewLease(ctx, name, "a", a.Token, d); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("RenewLease(a, old token) = %v, want ErrLeaseLost", err)
	}

	// Expiry by the database clock.
	if err := st.ExpireLease(ctx, name); err != nil {
		t.Fatal(err)
	}
	b, err = st.AcquireLease(ctx, name, "b", d)
	if err != nil || !b.Acquired || b.Token != 3 {
		t.Fatalf("AcquireLease(b) after expiry = %+v, %v; want token 3", b, err)
	}
	if err := st.RenewLease(ctx, name, "a", a2.Token, d); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("RenewLease(a) after b took over = %v, want ErrLeaseLost", err)
	}
	if err := st.ReleaseLease(ctx, name, "a", a2.Token); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("ReleaseLease(a) after b took over = %v, want ErrLeaseLost", err)
	}

	// Release: the next replica takes it at once.
	if err := st.ReleaseLease(ctx, name, "b", b.Token); err != nil {
		t.Fatalf("ReleaseLease(b) = %v", err)
	}
	c, err := st.AcquireLease(ctx, name, "c", d)
	if err != nil || !c.Acquired || c.Token != 4 {
		t.Fatalf("AcquireLease(c) after release = %+v, %v; want token 4", c, err)
	}
}

func TestLeaseRecreatedKeepsTokensIncreasing(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const name = "edihub-leader"
	var last int64
	for i := range 3 {
		s, err := st.AcquireLease(ctx, name, "a", time.Minute)
		if err != nil || !s.Acquired {
			t.Fatalf("AcquireLease = %+v, %v", s, err)
		}
		if s.Token <= last {
			t.Fatalf("round %d: token %d after %d", i, s.Token, last)
		}
		if err := st.OpenTerm(ctx, hub.Fence{Lease: name, Token: s.Token}, "a"); err != nil {
			t.Fatalf("OpenTerm(%d) = %v", s.Token, err)
		}
		last = s.Token
		if err := st.DeleteLease(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListenLeaseReleases(t *testing.T) {
	st := pgtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	const name = "edihub-leader"
	got := make(chan struct{}, 1)
	done := make(chan error, 1)
	listening := make(chan struct{})
	t.Cleanup(func() { // before st.Close, registered earlier: the listener holds a connection
		cancel()
		<-listening
	})
	go func() {
		defer close(listening)
		done <- st.ListenLeaseReleases(ctx, name, func() {
			select {
			case got <- struct{}{}:
			default:
			}
		})
	}()
	s, err := st.AcquireLease(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The listener may not be listening yet: release until notified.
	deadline := time.After(10 * time.Second)
	for notified := false; !notified; {
		if err := st.ReleaseLease(ctx, name, "a", s.Token); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			notified = true
		case <-time.After(100 * time.Millisecond):
			if s, err = st.AcquireLease(ctx, name, "a", time.Minute); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no notification of the release")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ListenLeaseReleases after cancel = %v, want nil", err)
	}
}
