package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestBodyFreezer freezes a body of 2.5 MiB, written to a file in pieces
// of odd sizes and read back from it by the COPY as it goes: the rows
// are 1 MiB each but the last, WriteOutboxBody gives the bytes back, and
// the row carries the build. A freeze given up (Abort), or whose file
// cannot be read, stores nothing and leaves the row as it was.
func TestBodyFreezer(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	body := make([]byte, 5<<19)
	rand.NewChaCha8([32]byte{3}).Read(body)
	claim := func(id string) postgres.OutboxItem {
		t.Helper()
		if _, err := st.EnqueueOutbound(ctx, outbound("P", id, "", nil)); err != nil {
			t.Fatal(err)
		}
		items, err := st.ClaimOutbox(ctx, "d", time.Minute, 1)
		if err != nil || len(items) != 1 {
			t.Fatalf("claim = %d items, %v", len(items), err)
		}
		return items[0]
	}
	// freeze writes body to a file and to the freezer in pieces of
	// piece bytes, and returns the freezer.
	freeze := func(it postgres.OutboxItem, piece int) *postgres.BodyFreezer {
		t.Helper()
		f, fr := openFreezer(t, st, it)
		for p := body; len(p) > 0; {
			n := min(piece, len(p))
			if _, err := f.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			if _, err := fr.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		return fr
	}
	build := postgres.OutboundBuild{Headers: http.Header{"Content-Type": {"application/pkcs7-mime"}}, MIC: "x, sha-256", MICAlg: "sha-256", MICs: []string{"x, sha-256"}}

	it := claim("<frozen@s>")
	if err := freeze(it, 100_003).Commit(ctx, build); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	sizes, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox_body_chunks WHERE outbox_id = $1 AND octet_length(data) = 1048576`, it.ID)
	if err != nil || sizes != 2 {
		t.Errorf("rows of 1 MiB = %d, %v; want 2", sizes, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox_body_chunks WHERE outbox_id = $1 AND seq = 3 AND octet_length(data) = 524288`, it.ID); err != nil || n != 1 {
		t.Errorf("last row of 512 KiB (seq 3) = %d, %v; want 1", n, err)
	}
	it.BodyChunked, it.BodySize = true, int64(len(body))
	var got bytes.Buffer
	if err := st.WriteOutboxBody(ctx, it, &got); err != nil || !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("WriteOutboxBody = %d bytes, %v; want the %d frozen", got.Len(), err, len(body))
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE id = $1 AND body_chunked AND body_size = $2 AND mic = 'x, sha-256'`, it.ID, len(body)); err != nil || n != 1 {
		t.Errorf("outbox row with the build = %d, %v; want 1", n, err)
	}
	if err := st.FinishOutbox(ctx, it, postgres.OutboxResult{State: postgres.OutboxDone}); err != nil {
		t.Fatal(err)
	}

	given := claim("<given-up@s>")
	fr := freeze(given, 1<<20)
	fr.Abort()
	fr.Abort()
	if err := fr.Commit(ctx, build); err == nil {
		t.Error("Commit after Abort: no error, want one (nothing left to commit)")
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox_body_chunks WHERE outbox_id = $1`, given.ID); err != nil || n != 0 {
		t.Errorf("rows after Abort = %d, %v; want 0", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE id = $1 AND NOT body_chunked AND body IS NULL`, given.ID); err != nil || n != 1 {
		t.Errorf("outbox row after Abort = %d, %v; want it as it was", n, err)
	}

	// The file cannot be read back: the COPY fails, Commit says so.
	broken, err := st.FreezeOutboundBody(ctx, given, failingReaderAt{})
	if err != nil {
		t.Fatal(err)
	}
	broken.Write(body) // nothing in the file to read back
	if err := broken.Commit(ctx, build); err == nil {
		t.Fatal("Commit of a body the COPY could not read: no error")
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox_body_chunks WHERE outbox_id = $1`, given.ID); err != nil || n != 0 {
		t.Errorf("rows after a failed COPY = %d, %v; want 0", n, err)
	}
}

type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk gone") }

// TestBodyFreezerHoldsTheBuildBack freezes a body of eight times
// FreezeAhead, written to the file far faster than PostgreSQL stores it:
// no Write returns while the COPY is more than FreezeAhead (and the
// piece just written) behind, and the body is frozen whole.
func TestBodyFreezerHoldsTheBuildBack(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.EnqueueOutbound(ctx, outbound("P", "<paced@s>", "", nil)); err != nil {
		t.Fatal(err)
	}
	items, err := st.ClaimOutbox(ctx, "d", time.Minute, 1)
	if err != nil || len(items) != 1 {
		t.Fatalf("claim = %d items, %v", len(items), err)
	}
	it := items[0]
	f, fr := openFreezer(t, st, it)
	piece := make([]byte, 256<<10)
	rand.NewChaCha8([32]byte{5}).Read(piece)
	var maxLag int64
	for range 8 * postgres.FreezeAhead / len(piece) {
		if _, err := f.Write(piece); err != nil {
			t.Fatal(err)
		}
		if _, err := fr.Write(piece); err != nil {
			t.Fatal(err)
		}
		maxLag = max(maxLag, fr.Lag())
	}
	if limit := int64(postgres.FreezeAhead + len(piece)); maxLag > limit {
		t.Errorf("the build ran %d bytes ahead of the COPY, want at most %d", maxLag, limit)
	}
	if err := fr.Commit(ctx, postgres.OutboundBuild{MIC: "x, sha-256", MICAlg: "sha-256"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	want := int64(8 * postgres.FreezeAhead)
	if n, err := st.CountSQL(ctx, `SELECT sum(octet_length(data)) FROM outbox_body_chunks WHERE outbox_id = $1`, it.ID); err != nil || n != want {
		t.Errorf("bytes frozen = %d, %v; want %d", n, err, want)
	}
}

// openFreezer starts freezing the built body of it, written to a spool
// file of the test (closed at its end), as a streamed build does.
func openFreezer(t *testing.T, st *postgres.Store, it postgres.OutboxItem) (*os.File, *postgres.BodyFreezer) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "body"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fr, err := st.FreezeOutboundBody(context.Background(), it, f)
	if err != nil {
		t.Fatal(err)
	}
	return f, fr
}
