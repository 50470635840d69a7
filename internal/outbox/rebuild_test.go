package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// wantFrozenInputs checks that the outbox row of message id holds the
// inputs of its streamed build, the body's size and SHA-256, and no
// byte of the body.
func wantFrozenInputs(t *testing.T, conn *pgx.Conn, id int64) {
	t.Helper()
	var chunked, inputs bool
	var pieces int
	err := conn.QueryRow(context.Background(), `
SELECT o.body_chunked, o.build_inputs IS NOT NULL AND octet_length(o.body_sha256) = 32 AND o.body_size > 0,
       (SELECT count(*) FROM outbox_body_chunks c WHERE c.outbox_id = o.id)
  FROM outbox o WHERE o.message_id = $1`, id).Scan(&chunked, &inputs, &pieces)
	if err != nil || !chunked || !inputs || pieces != 0 {
		t.Fatalf("outbox row: body_chunked %v, inputs with size and SHA-256 %v, %d pieces of body (%v); want built as a stream, its inputs frozen, no piece of its body",
			chunked, inputs, pieces, err)
	}
}

// retried is a large message whose first attempt the partner answered
// with 503: built as a stream, its inputs frozen, waiting for its retry.
type retried struct {
	st     *postgres.Store
	conn   *pgx.Conn
	sink   *bodySink
	o      outbox.Options
	sp     *spool.Spool
	id     int64
	logs   *observer.ObservedLogs
	outbox int64
}

// firstAttemptFails queues a 3 MiB message for a partner that signs,
// compresses and encrypts with cipher, has its first attempt fail with
// 503 and returns it.
func firstAttemptFails(t *testing.T, name, cipher string) *retried {
	t.Helper()
	return firstAttemptFailsWith(t, name, "sign: sha-256", "encrypt: "+cipher, "compress: true")
}

// firstAttemptFailsWith is firstAttemptFails for a partner with the
// profile lines profile (and no MDN, three attempts).
func firstAttemptFailsWith(t *testing.T, name string, profile ...string) *retried {
	t.Helper()
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := &retried{st: st, conn: pgtest.Conn(t, dbURL)}
	r.sink = newBodySink(t, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: r.sink.URL,
		extra: append(profile, "mdn: none", "max_attempts: 3")})
	if r.sp, err = spool.New(t.TempDir(), 64<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sp.Close() })
	r.o = dispatcherOpts(t, st, cfg, name)
	core, logs := observer.New(zap.WarnLevel)
	r.o.Logger, r.logs = zap.New(core), logs
	r.o.Spool, r.o.SpoolFromBytes = r.sp, 1<<20
	r.o.BackoffBase, r.o.BackoffMax = time.Hour, time.Hour // one attempt until the test moves the retry
	r.o.Jitter = func() float64 { return 0.5 }
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	path, _ := writeLargePayload(t, t.TempDir(), 3<<20)
	r.id = enqueueFile(t, q, "BIG PARTNER", path).ID
	stop := startDispatcher(t, r.o)
	waitStatus(t, st, r.id, "retrying")
	stop()
	if err := r.conn.QueryRow(context.Background(), `SELECT id FROM outbox WHERE message_id = $1`, r.id).Scan(&r.outbox); err != nil {
		t.Fatal(err)
	}
	return r
}

// retry makes the retry due, runs it and returns the message once sent.
func (r *retried) retry(t *testing.T) hub.MessageInfo {
	t.Helper()
	if _, err := r.conn.Exec(context.Background(), `UPDATE outbox SET next_attempt_at = now(), claimed_until = NULL, claimed_by = '' WHERE id = $1`, r.outbox); err != nil {
		t.Fatal(err)
	}
	stop := startDispatcher(t, r.o)
	m := waitStatus(t, r.st, r.id, "sent", "failed")
	stop()
	if m.Status != "sent" {
		t.Fatalf("status %q (error %q), want sent", m.Status, m.Error)
	}
	if used, left := r.sp.Used(), spoolFiles(t, r.sp); used != 0 || len(left) > 0 {
		t.Errorf("after the retry the spool holds %d bytes in %v, want nothing", used, left)
	}
	return m
}

// wantSameBytesTwice checks that the partner got two requests of the
// same bytes and that no rebuild was logged as differing; it returns
// the second.
func (r *retried) wantSameBytesTwice(t *testing.T) sunk {
	t.Helper()
	reqs := r.sink.requests()
	if len(reqs) != 2 || reqs[0].sha256 != reqs[1].sha256 || reqs[0].size != reqs[1].size {
		t.Fatalf("partner got %d requests; want 2 with the same bytes", len(reqs))
	}
	if n := r.logs.FilterMessageSnippet("differs").Len(); n != 0 {
		t.Errorf("%d warnings of a rebuild that differs, want none", n)
	}
	return reqs[1]
}

// TestSendLargeRetryRebuildsSameBytes: for each cipher (CBC, and GCM
// whose nonce and tag are in the body), the retry after a 503 builds the
// message again from its payload and frozen inputs, and the partner gets
// the same bytes twice; nothing is logged as differing.
func TestSendLargeRetryRebuildsSameBytes(t *testing.T) {
	for _, cipher := range []string{"aes256-cbc", "aes128-gcm"} {
		t.Run(cipher, func(t *testing.T) {
			r := firstAttemptFails(t, "rebuild-"+cipher, cipher)
			wantFrozenInputs(t, r.conn, r.id)
			r.retry(t)
			r.wantSameBytesTwice(t)
		})
	}
}

// TestSendLargeFrozenBeforeUpgrade: a row frozen before migration 00020
// (its body in outbox_body_chunks, no inputs) is posted from its pieces:
// the test turns the row of a first attempt into one (the pieces are the
// bytes the partner got) and deletes the payload, which a rebuild would
// need; the retry posts the same bytes.
func TestSendLargeFrozenBeforeUpgrade(t *testing.T) {
	r := firstAttemptFails(t, "frozen-before", "aes256-cbc")
	first := r.sink.requests()[0]
	body, err := os.ReadFile(first.path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	for seq, p := 1, body; len(p) > 0; seq++ {
		n := min(len(p), 1<<20)
		rows = append(rows, []any{r.outbox, int32(seq), p[:n]})
		p = p[n:]
	}
	ctx := context.Background()
	if _, err := r.conn.CopyFrom(ctx, pgx.Identifier{"outbox_body_chunks"}, []string{"outbox_id", "seq", "data"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.conn.Exec(ctx, `UPDATE outbox SET build_inputs = NULL, body_sha256 = NULL WHERE id = $1`, r.outbox); err != nil {
		t.Fatal(err)
	}
	if _, err := r.conn.Exec(ctx, `DELETE FROM payloads WHERE message_id = $1`, r.id); err != nil {
		t.Fatal(err)
	}
	r.retry(t)
	reqs := r.sink.requests()
	if len(reqs) != 2 || reqs[1].sha256 != first.sha256 || reqs[1].length != int64(len(body)) {
		t.Fatalf("partner got %d requests; want 2, the second the %d frozen bytes with their Content-Length", len(reqs), len(body))
	}
}

// TestSendLargeRebuildDiffers: a rebuild that comes out other than the
// first build (simulated by changing the frozen profile: uncompressed,
// the signed content and its MIC differ, as after a compressor upgrade)
// is still posted, a message the partner can read; the row records the
// rebuilt body's size and SHA-256 and adds its MIC to the first build's,
// and a warning says so without a byte of the key or payload.
func TestSendLargeRebuildDiffers(t *testing.T) {
	r := firstAttemptFails(t, "rebuild-differs", "aes256-cbc")
	ctx := context.Background()
	var raw []byte
	var mics []string
	if err := r.conn.QueryRow(ctx, `SELECT build_inputs, mics FROM outbox WHERE id = $1`, r.outbox).Scan(&raw, &mics); err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	delete(in["profile"].(map[string]any), "compress")
	changed, _ := json.Marshal(in)
	if _, err := r.conn.Exec(ctx, `UPDATE outbox SET build_inputs = $2 WHERE id = $1`, r.outbox, changed); err != nil {
		t.Fatal(err)
	}
	m := r.retry(t)
	reqs := r.sink.requests()
	if len(reqs) != 2 || reqs[0].sha256 == reqs[1].sha256 {
		t.Fatalf("partner got %d requests; want 2 with other bytes the second time", len(reqs))
	}
	var size int64
	var sum []byte
	var after []string
	if err := r.conn.QueryRow(ctx, `SELECT body_size, body_sha256, mics FROM outbox WHERE id = $1`, r.outbox).Scan(&size, &sum, &after); err != nil {
		t.Fatal(err)
	}
	if size != reqs[1].size || !bytes.Equal(sum, reqs[1].sha256[:]) {
		t.Errorf("row's body size %d, SHA-256 %x; want the rebuilt body's %d, %x", size, sum, reqs[1].size, reqs[1].sha256)
	}
	if len(after) != len(mics)+1 || after[0] != mics[0] || m.MIC != mics[0] {
		t.Errorf("row's MICs %v, message MIC %q; want the first build's %v and one more", after, m.MIC, mics)
	}
	warned := r.logs.FilterMessageSnippet("differs").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings of a rebuild that differs, want 1", len(warned))
	}
	line, _ := json.Marshal(warned[0].ContextMap())
	if key := in["key"].(map[string]any)["cek"].(string); strings.Contains(string(line), key) {
		t.Errorf("the warning %s holds the content key", line)
	}
	if mic := checkReadable(t, reqs[1]); !slices.Contains(after, mic) || mic == mics[0] {
		t.Errorf("openssl's MIC of the rebuilt body %q; want it among the row's MICs %v, other than the first build's", mic, after)
	}
}

// checkReadable has openssl decrypt the body r received and verify its
// signature, and returns its SHA-256 MIC of the signed entity.
func checkReadable(t *testing.T, r sunk) string {
	t.Helper()
	_, mic := openSigned(t, keys(t), r)
	return mic
}

// openSigned has openssl decrypt the body r received and verify its
// signature, and returns the signed entity and openssl's SHA-256 MIC of
// it.
func openSigned(t *testing.T, k map[string]*identity, r sunk) (entity []byte, mic string) {
	t.Helper()
	dir := t.TempDir()
	dec := filepath.Join(dir, "signed.mime")
	opensslRun(t, nil, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", r.path, "-recip", k["partner"].certPath, "-inkey", k["partner"].keyPath, "-out", dec)
	raw, err := os.ReadFile(dec)
	if err != nil {
		t.Fatal(err)
	}
	e := splitEntity(t, raw)
	_, params, err := mime.ParseMediaType(e.header["content-type"])
	if err != nil {
		t.Fatal(err)
	}
	part1, sig := splitSigned(t, e.body, params["boundary"])
	if err := verifyDetached(t, dir, part1, sig, k["station"].certPath); err != nil {
		t.Fatal(err)
	}
	return part1, opensslMIC(t, dir, part1, "sha-256") + ", sha-256"
}
