package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// postDocument posts body to GLOBEX with key, chunked (no length) or
// with its Content-Length.
func (e *env) postDocument(t *testing.T, key string, body []byte, chunked bool) response {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // hides the length: net/http sends chunked
	}
	req, err := http.NewRequest("POST", e.url+"/api/v1/messages?partner=GLOBEX&filename=big.edi", r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/EDI-X12")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return send(t, req)
}

// TestPostSpooledDocument: a document above the spool threshold, or of
// unknown length, goes through the spool into payload_chunks; it is
// stored byte-exact, an Idempotency-Key replays it (whether it comes
// chunked or with a length) and refuses another document, and the spool
// is empty after every request.
func TestPostSpooledDocument(t *testing.T) {
	sp, err := spool.New(t.TempDir(), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	e := setupWith(t, func(o *api.Options) { o.Spool, o.SpoolFromBytes = sp, 64<<10 })
	doc := bytes.Repeat([]byte("LIN*1*VP*0123456789*PRICE*42~\n"), 17000) // 510 KB
	conn := pgtest.Conn(t, e.dbURL)

	first := e.postDocument(t, "big-1", doc, true)
	if first.status != http.StatusAccepted {
		t.Fatalf("POST of %d bytes chunked = %d %s, want 202", len(doc), first.status, first.body)
	}
	q := decode[api.Queued](t, first)
	var chunked bool
	var pieces int
	if err := conn.QueryRow(context.Background(), `SELECT p.chunked, (SELECT count(*) FROM payload_chunks c WHERE c.message_id = p.message_id)
  FROM payloads p WHERE message_id = $1`, q.ID).Scan(&chunked, &pieces); err != nil {
		t.Fatal(err)
	}
	if !chunked || pieces == 0 {
		t.Errorf("payload stored chunked = %v in %d pieces, want in pieces", chunked, pieces)
	}
	if r := e.do(t, "GET", q.Location+"/payload", "", nil, token); r.status != 200 || !bytes.Equal(r.body, doc) {
		t.Errorf("GET payload = %d, %d bytes, want 200 and the %d bytes posted", r.status, len(r.body), len(doc))
	}
	if m, err := e.store.Message(context.Background(), q.ID); err != nil || m.Size != int64(len(doc)) {
		t.Errorf("message size = %d, %v; want %d", m.Size, err, len(doc))
	}
	checkSpoolEmpty(t, sp, "after the first POST")

	again := e.postDocument(t, "big-1", doc, false)
	if q2 := decode[api.Queued](t, again); again.status != http.StatusOK || q2.ID != q.ID || !q2.Replayed {
		t.Errorf("same key and document with a Content-Length = %d %+v, want 200 replaying message %d", again.status, q2, q.ID)
	}
	other := append(bytes.Clone(doc[:len(doc)-1]), '!')
	if r := e.postDocument(t, "big-1", other, true); r.status != http.StatusUnprocessableEntity {
		t.Errorf("same key, another document = %d %s, want 422", r.status, r.body)
	}
	checkSpoolEmpty(t, sp, "after the replays")
	if r := e.postDocument(t, "", make([]byte, 2<<20), true); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked document past the body limit = %d %s, want 413", r.status, r.body)
	}
	checkSpoolEmpty(t, sp, "after the refused document")
}

// TestPostSpoolFull: without room in the spool a large document is
// refused with 503 and Retry-After, known length or not, and nothing is
// left behind.
func TestPostSpoolFull(t *testing.T) {
	sp, err := spool.New(t.TempDir(), 200<<10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	e := setupWith(t, func(o *api.Options) { o.Spool, o.SpoolFromBytes = sp, 64<<10 })
	doc := bytes.Repeat([]byte("x"), 512<<10)
	for _, chunked := range []bool{false, true} {
		r := e.postDocument(t, "", doc, chunked)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("chunked %v: POST past the spool's room = %d (Retry-After %q), want 503 with Retry-After", chunked, r.status, r.header.Get("Retry-After"))
		}
		checkSpoolEmpty(t, sp, "after the refusal")
	}
}

func checkSpoolEmpty(t *testing.T, sp *spool.Spool, when string) {
	t.Helper()
	if sp.Used() != 0 {
		t.Errorf("%s: the spool holds %d bytes, want 0", when, sp.Used())
	}
}
