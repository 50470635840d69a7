package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestClaimSignedContentConcurrent: of many claims of one signed content
// under different Message-IDs at once, exactly one is taken; every other
// one names it.
func TestClaimSignedContentConcurrent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 16
	got := make([]string, n)
	errs := make([]error, n)
	testenv.Together(n, func(i int) {
		got[i], errs[i] = st.ClaimSignedContent(ctx, "P", fmt.Sprintf("<%d@p>", i), "digest", now, now.Add(-24*time.Hour))
	})
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if got[i] == "" {
			if winner >= 0 {
				t.Fatalf("claims %d and %d both taken", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no claim taken: %v", got)
	}
	for i := range n {
		if want := fmt.Sprintf("<%d@p>", winner); i != winner && got[i] != want {
			t.Errorf("claim %d = %q, want the taken claim %s", i, got[i], want)
		}
	}
}

// TestClaimSignedContent: a claim stands for its partner within the
// window; the same Message-ID (a retry) takes it again, another partner
// has claims of its own, an expired claim is taken over, and expired
// claims of the partner are deleted by later claims.
func TestClaimSignedContent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const window = 24 * time.Hour
	tests := []struct {
		name                string
		partner, id, digest string
		at                  time.Time
		want                string
	}{
		{"first", "P", "<1@p>", "d1", t0, ""},
		{"replay", "P", "<2@p>", "d1", t0.Add(time.Hour), "<1@p>"},
		{"retry of the first", "P", "<1@p>", "d1", t0.Add(2 * time.Hour), ""},
		{"other partner", "Q", "<2@q>", "d1", t0.Add(2 * time.Hour), ""},
		{"other content", "P", "<3@p>", "d2", t0.Add(3 * time.Hour), ""},
		{"replay at the window's end", "P", "<4@p>", "d1", t0.Add(2*time.Hour + window - time.Second), "<1@p>"},
		{"after the window", "P", "<5@p>", "d1", t0.Add(2*time.Hour + window + time.Second), ""},
		{"the old one again", "P", "<1@p>", "d1", t0.Add(2*time.Hour + window + 2*time.Second), "<5@p>"},
		{"later content", "P", "<6@p>", "d3", t0.Add(4*time.Hour + window), ""},
	}
	for _, tt := range tests {
		got, err := st.ClaimSignedContent(ctx, tt.partner, tt.id, tt.digest, tt.at, tt.at.Add(-window))
		if err != nil || got != tt.want {
			t.Errorf("%s: ClaimSignedContent(%s, %s, %s) = %q, %v; want %q", tt.name, tt.partner, tt.id, tt.digest, got, err, tt.want)
		}
	}
	// d2 of P (claimed at 3h) expired before the last claim: deleted; Q's
	// claim is Q's.
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM replay_guard WHERE partner = 'P' AND digest = 'd2'`); err != nil || n != 0 {
		t.Errorf("%d expired claims of P left, %v; want them deleted", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM replay_guard WHERE partner = 'Q'`); err != nil || n != 1 {
		t.Errorf("%d claims of Q, %v; want 1 (another partner's claims are not P's to delete)", n, err)
	}
}
