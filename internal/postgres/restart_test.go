package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestBeginRestartLimitsConcurrent: of many transfers begun at once (as
// by three replicas), exactly as many as the limits hold are taken,
// per partner and in all; the others get ErrRestartFull.
func TestBeginRestartLimitsConcurrent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	lim := postgres.RestartLimits{PartnerBytes: 300, TotalBytes: 500}
	const n = 12
	errs := make([]error, n)
	testenv.Together(n, func(i int) {
		partner := []string{"P", "Q"}[i%2]
		_, errs[i] = st.BeginRestart(ctx, partner, fmt.Sprintf("etag-%d", i), []byte(`{}`), 100, lim)
	})
	taken := map[string]int{}
	for i, err := range errs {
		switch {
		case err == nil:
			taken[[]string{"P", "Q"}[i%2]]++
		case !errors.Is(err, postgres.ErrRestartFull):
			t.Fatalf("BeginRestart %d: %v", i, err)
		}
	}
	if taken["P"] > 3 || taken["Q"] > 3 || taken["P"]+taken["Q"] != 5 {
		t.Errorf("transfers taken = %v, want 5 in all and at most 3 per partner", taken)
	}
}

// TestBeginRestartLimits: a new transfer is counted with the bytes open:
// with 200 of a limit of 300 open, 200 more are refused and 100 more
// taken, per partner and in all; another partner's bytes count in all
// only, and the transfer replaced (same partner and ETag) not at all.
func TestBeginRestartLimits(t *testing.T) {
	tests := []struct {
		name    string
		lim     postgres.RestartLimits
		open    map[string]int64 // partner: bytes of a transfer open before
		partner string
		etag    string
		give    int64
		wantErr error
	}{
		{"partner: 200 more of 300", postgres.RestartLimits{PartnerBytes: 300}, map[string]int64{"P": 200}, "P", "new", 200, postgres.ErrRestartFull},
		{"partner: 100 more of 300", postgres.RestartLimits{PartnerBytes: 300}, map[string]int64{"P": 200}, "P", "new", 100, nil},
		{"partner: another's bytes", postgres.RestartLimits{PartnerBytes: 300}, map[string]int64{"Q": 200}, "P", "new", 200, nil},
		{"partner: the one replaced", postgres.RestartLimits{PartnerBytes: 300}, map[string]int64{"P": 200}, "P", "open-P", 300, nil},
		{"in all: 200 more of 300", postgres.RestartLimits{TotalBytes: 300}, map[string]int64{"Q": 200}, "P", "new", 200, postgres.ErrRestartFull},
		{"in all: 100 more of 300", postgres.RestartLimits{TotalBytes: 300}, map[string]int64{"Q": 200}, "P", "new", 100, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := pgtest.Store(t)
			for p, n := range tt.open {
				if _, err := st.BeginRestart(ctx, p, "open-"+p, []byte(`{}`), n, postgres.RestartLimits{}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := st.BeginRestart(ctx, tt.partner, tt.etag, []byte(`{}`), tt.give, tt.lim)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("BeginRestart(%d bytes, %v open, limits %+v) = %v, want %v", tt.give, tt.open, tt.lim, err, tt.wantErr)
			}
		})
	}
}

// TestRestartTransferLifecycle: a transfer is appended to from the
// offset it holds only, read back in order, replaced by a new begin of
// the same partner and ETag (its bytes gone with it), and deleted.
func TestRestartTransferLifecycle(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	tr, err := st.BeginRestart(ctx, "P", "e", []byte(`{"As2-From":["P"]}`), 10, postgres.RestartLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.AppendRestart(ctx, tr.ID, 0, [][]byte{[]byte("abc"), []byte("de")}); err != nil || got != 5 {
		t.Fatalf("AppendRestart(0, 5 bytes) = %d, %v; want 5, nil", got, err)
	}
	for _, at := range []int64{0, 4, 6} {
		if _, err := st.AppendRestart(ctx, tr.ID, at, [][]byte{[]byte("x")}); !errors.Is(err, postgres.ErrRestartConflict) {
			t.Errorf("AppendRestart(%d) on 5 bytes held = %v, want ErrRestartConflict", at, err)
		}
	}
	if _, err := st.AppendRestart(ctx, tr.ID, 5, [][]byte{[]byte("123456")}); !errors.Is(err, postgres.ErrRestartConflict) {
		t.Errorf("AppendRestart past the total = %v, want ErrRestartConflict", err)
	}
	if got, err := st.AppendRestart(ctx, tr.ID, 5, [][]byte{[]byte("fghij")}); err != nil || got != 10 {
		t.Fatalf("AppendRestart(5, 5 bytes) = %d, %v; want 10, nil", got, err)
	}
	var buf bytes.Buffer
	if n, err := st.WriteRestartBody(ctx, tr.ID, &buf); err != nil || n != 10 || buf.String() != "abcdefghij" {
		t.Errorf("WriteRestartBody = %d %q, %v; want 10 \"abcdefghij\"", n, buf.String(), err)
	}
	got, err := st.RestartTransferOf(ctx, "P", "e")
	if err != nil || got.ID != tr.ID || got.Received != 10 || got.Total != 10 || string(got.Header) != `{"As2-From": ["P"]}` {
		t.Errorf("RestartTransferOf = %+v (header %s), %v", got, got.Header, err)
	}
	if _, err := st.RestartTransferOf(ctx, "Q", "e"); !errors.Is(err, postgres.ErrRestartNotFound) {
		t.Errorf("RestartTransferOf(another partner) = %v, want ErrRestartNotFound", err)
	}
	again, err := st.BeginRestart(ctx, "P", "e", []byte(`{}`), 20, postgres.RestartLimits{})
	if err != nil || again.ID == tr.ID {
		t.Fatalf("BeginRestart of the same ETag = %+v, %v; want a new transfer", again, err)
	}
	if _, err := st.AppendRestart(ctx, tr.ID, 10, [][]byte{[]byte("x")}); !errors.Is(err, postgres.ErrRestartConflict) {
		t.Errorf("AppendRestart to the replaced transfer = %v, want ErrRestartConflict", err)
	}
	buf.Reset()
	if n, err := st.WriteRestartBody(ctx, tr.ID, &buf); err != nil || n != 0 {
		t.Errorf("WriteRestartBody of the replaced transfer = %d, %v; want its bytes gone", n, err)
	}
	if err := st.DeleteRestart(ctx, again.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RestartTransferOf(ctx, "P", "e"); !errors.Is(err, postgres.ErrRestartNotFound) {
		t.Errorf("RestartTransferOf after DeleteRestart = %v, want ErrRestartNotFound", err)
	}
}
