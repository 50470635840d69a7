package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func pickupMessage(id string, body []byte) postgres.NewOutbound {
	return postgres.NewOutbound{
		Partner: "P", AS2From: "S", AS2To: "P", MessageID: id, ContentType: "text/plain",
		MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3,
		PayloadOpen: func() io.Reader { return bytes.NewReader(body) }, PayloadSize: int64(len(body)),
	}
}

// TestEnqueuePickupClaims: a file version is claimed once; a stale term
// claims nothing; an archived claim is purged after its retention, one
// still to archive never; an archive failure is recorded on the claim.
func TestEnqueuePickupClaims(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	old := hub.Fence{Lease: "l", Token: 1}
	if err := st.OpenTerm(ctx, old, "a"); err != nil {
		t.Fatal(err)
	}
	key := postgres.PickupKey{Source: "s", Path: "a/b.txt", Size: 5, Version: "2026-12-07T10:00:00Z"}
	_, c, err := st.EnqueuePickup(ctx, old, pickupMessage("<1@s>", []byte("hello")), postgres.PickupClaim{PickupKey: key, Archive: "archive/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == 0 || c.Message == 0 || c.State != postgres.PickupEnqueued || c.Fence != 1 {
		t.Errorf("claim = %+v, want an enqueued claim of a message under token 1", c)
	}
	if _, _, err := st.EnqueuePickup(ctx, old, pickupMessage("<2@s>", []byte("hello")), postgres.PickupClaim{PickupKey: key}); !errors.Is(err, postgres.ErrPickupClaimed) {
		t.Errorf("EnqueuePickup(same version) = %v, want ErrPickupClaimed", err)
	}
	next := hub.Fence{Lease: "l", Token: 2}
	if err := st.OpenTerm(ctx, next, "b"); err != nil {
		t.Fatal(err)
	}
	other := key
	other.Path = "c.txt"
	if _, _, err := st.EnqueuePickup(ctx, old, pickupMessage("<3@s>", []byte("hello")), postgres.PickupClaim{PickupKey: other}); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("EnqueuePickup(stale fence) = %v, want ErrStaleFence", err)
	}
	if got, err := st.PickupClaims(ctx, "s", []postgres.PickupKey{key, other}); err != nil || len(got) != 1 || got[0].ID != c.ID {
		t.Fatalf("PickupClaims = %+v, %v; want the first claim only", got, err)
	}

	if err := st.PickupArchiveFailed(ctx, next, c.ID, "permission denied"); err != nil {
		t.Fatal(err)
	}
	open, err := st.OpenPickupClaims(ctx, "s", 10)
	if err != nil || len(open) != 1 || open[0].LastError != "permission denied" || open[0].Archive != "archive/" {
		t.Fatalf("OpenPickupClaims = %+v, %v; want the claim with its archive and error", open, err)
	}
	if n, err := st.PurgePickupClaims(ctx, next, 0, 10); err != nil || n != 0 {
		t.Errorf("PurgePickupClaims before the archive = %d, %v; want 0", n, err)
	}
	if err := st.PickupArchived(ctx, old, c.ID); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("PickupArchived(stale fence) = %v, want ErrStaleFence", err)
	}
	if err := st.PickupArchived(ctx, next, c.ID); err != nil {
		t.Fatal(err)
	}
	if open, _ := st.OpenPickupClaims(ctx, "s", 10); len(open) != 0 {
		t.Errorf("OpenPickupClaims after the archive = %+v, want none", open)
	}
	if n, err := st.PurgePickupClaims(ctx, next, 0, 10); err != nil || n != 1 {
		t.Errorf("PurgePickupClaims after the archive = %d, %v; want 1", n, err)
	}
}
