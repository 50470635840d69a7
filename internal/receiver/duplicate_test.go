package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/testenv"
)

// mdnHeaders are the MDN response fields a resend must get back unchanged.
var mdnHeaders = []string{"Content-Type", "Mime-Version", "As2-Version", "As2-From", "As2-To", "Message-Id", "Date", "Subject"}

func sameMDN(t *testing.T, got, want reply) {
	t.Helper()
	if !bytes.Equal(got.body, want.body) {
		t.Errorf("resend MDN body differs from the first:\n got %q\nwant %q", got.body, want.body)
	}
	for _, k := range mdnHeaders {
		if got.header.Get(k) != want.header.Get(k) {
			t.Errorf("resend MDN header %s = %q, want %q", k, got.header.Get(k), want.header.Get(k))
		}
	}
}

// TestReceiveDuplicate resends a message: the MDN stored the first time
// comes back byte-identical, and nothing is stored twice.
func TestReceiveDuplicate(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	h := request(as2Header(partnerACME, station, "<dup@partner.example>", "sha-256"), m)
	first := post(t, e.url, h, m.body, false)
	parseMDN(t, first)
	opensslVerifyMDN(t, first)
	second := post(t, e.url, h, m.body, true)
	sameMDN(t, second, first)
	if n := e.count(t, `SELECT count(*) FROM payloads`); n != 1 {
		t.Errorf("%d payloads, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 1 {
		t.Errorf("%d messages, want 1", n)
	}
	if n := e.received(partnerACME, "duplicate"); n != 1 {
		t.Errorf("duplicate count = %v, want 1", n)
	}
	// The end-of-day report counts it on the day the resend came.
	if n := e.count(t, `SELECT count(*) FROM duplicates WHERE answered_at > now() - interval '1 hour'`); n != 1 {
		t.Errorf("%d duplicates rows, want 1", n)
	}
}

// TestReceiveDuplicateOfFailure: a Message-ID is consumed by its first
// receipt even when that failed; the resend gets the stored error MDN.
func TestReceiveDuplicateOfFailure(t *testing.T) {
	e := newEnv(t, envOptions{})
	bad := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idC})
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	first := post(t, e.url, request(as2Header(partnerACME, station, "<again@x>", "sha-256"), bad), bad.body, false)
	if got := parseMDN(t, first); got.Disposition != mdn.Errored("decryption-failed") {
		t.Fatalf("first = %q", got.Disposition)
	}
	// The partner fixes its side and resends under the same Message-ID: a
	// failed receipt is no duplicate, the resend is processed.
	second := post(t, e.url, request(as2Header(partnerACME, station, "<again@x>", "sha-256"), good), good.body, false)
	if got := parseMDN(t, second); !got.Disposition.Successful() || got.Disposition.Modifier != "" {
		t.Fatalf("resend after a failure = %q, want processed", got.Disposition)
	}
	if n := e.count(t, `SELECT count(*) FROM payloads`); n != 1 {
		t.Errorf("%d payloads, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE message_id = '<again@x>'`); n != 1 {
		t.Errorf("%d message rows for the Message-ID, want 1", n)
	}
	// Now it is processed: a third post is a duplicate with the stored MDN.
	third := post(t, e.url, request(as2Header(partnerACME, station, "<again@x>", "sha-256"), good), good.body, false)
	sameMDN(t, third, second)
	if n := e.count(t, `SELECT count(*) FROM payloads`); n != 1 {
		t.Errorf("%d payloads after the duplicate, want 1", n)
	}
}

// TestReceiveDuplicateAfterNoMDN: the first receipt asked for no MDN, the
// resend does: a fresh duplicate-document warning, with the stored MIC.
func TestReceiveDuplicateAfterNoMDN(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256"})
	h := request(as2Header(partnerACME, station, "<quiet@x>", "sha-256"), m)
	h.Del("Disposition-Notification-To")
	if r := post(t, e.url, h, m.body, false); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("first = %d %q", r.status, r.body)
	}
	r := post(t, e.url, request(as2Header(partnerACME, station, "<quiet@x>", "sha-256"), m), m.body, false)
	got := parseMDN(t, r)
	if got.Disposition != mdn.Warned(mdn.DuplicateDocument) || got.MIC != dgst(t, m.micDigest, m.micFile) {
		t.Errorf("resend MDN = %q %q", got.Disposition, got.MIC)
	}
	if !got.Disposition.Successful() {
		t.Errorf("duplicate-document warning is not successful")
	}
}

// TestReceiveConcurrentDuplicates posts the same message from many
// goroutines at once: one is stored, all get the same MDN.
func TestReceiveConcurrentDuplicates(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes128"})
	h := request(as2Header(partnerACME, station, "<race@x>", "sha-256"), m)
	const n = 12
	replies := make([]reply, n)
	errs := make([]error, n)
	testenv.Together(n, func(i int) {
		replies[i], errs[i] = tryPost(e.url, h, m.body, i%2 == 0)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := parseMDN(t, replies[i]); got.Disposition != mdn.Processed() {
			t.Errorf("reply %d: %q", i, got.Disposition)
		}
		sameMDN(t, replies[i], replies[0])
	}
	if c := e.count(t, `SELECT count(*) FROM payloads`); c != 1 {
		t.Errorf("%d payloads, want 1", c)
	}
	if d := e.received(partnerACME, "duplicate"); d != n-1 {
		t.Errorf("duplicates counted %v, want %d", d, n-1)
	}
}

// lookupStore counts the Message-ID lookups.
type lookupStore struct {
	receiver.Store
	lookups atomic.Int64
}

func (s *lookupStore) InboundByMessageID(ctx context.Context, partner, id string) (*postgres.InboundRecord, error) {
	s.lookups.Add(1)
	return s.Store.InboundByMessageID(ctx, partner, id)
}

// TestReceiveDuplicateAtInsert: a new message is stored without a lookup
// first (one statement); a resend is found by the insert's unique
// constraint, and the stored MDN is read back.
func TestReceiveDuplicateAtInsert(t *testing.T) {
	ls := &lookupStore{}
	e := newEnv(t, envOptions{wrap: func(s receiver.Store) receiver.Store { ls.Store = s; return ls }})
	m := buildOpenSSL(t, build{sign: "sha256"})
	h := request(as2Header(partnerACME, station, "<insert-race@x>", "sha-256"), m)
	first := post(t, e.url, h, m.body, false)
	parseMDN(t, first)
	if n := ls.lookups.Load(); n != 0 {
		t.Errorf("first receipt: %d Message-ID lookups, want 0", n)
	}
	second := post(t, e.url, h, m.body, false)
	sameMDN(t, second, first)
	if n := ls.lookups.Load(); n != 1 {
		t.Errorf("resend: %d Message-ID lookups in all, want 1", n)
	}
	if c := e.count(t, `SELECT count(*) FROM messages`); c != 1 {
		t.Errorf("%d messages, want 1", c)
	}
}

// TestReceiveCrashBeforeCommit makes the transaction fail after the
// message row was inserted (a trigger on the MDN insert): the partner gets
// 503, nothing partial remains; the resend after the fault is processed.
// A commit whose answer is lost is then resent and gets the same MDN.
func TestReceiveCrashBeforeCommit(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	if _, err := e.db.Exec(ctx, `
CREATE FUNCTION test_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$;
CREATE TRIGGER test_fail BEFORE INSERT ON mdns FOR EACH ROW EXECUTE FUNCTION test_fail();`); err != nil {
		t.Fatal(err)
	}
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	h := request(as2Header(partnerACME, station, "<crash@x>", "sha-256"), m)
	r := post(t, e.url, h, m.body, false)
	if r.status != http.StatusServiceUnavailable || strings.Contains(string(r.body), "injected") {
		t.Fatalf("reply = %d %q, want 503 without internals", r.status, r.body)
	}
	for _, table := range []string{"messages", "payloads", "mdns", "outbox"} {
		if n := e.count(t, `SELECT count(*) FROM `+table); n != 0 {
			t.Errorf("%d rows in %s after the failed transaction, want 0", n, table)
		}
	}
	if _, err := e.db.Exec(ctx, `DROP TRIGGER test_fail ON mdns`); err != nil {
		t.Fatal(err)
	}
	first := post(t, e.url, h, m.body, false) // the partner retries
	if got := parseMDN(t, first); got.Disposition != mdn.Processed() {
		t.Fatalf("retry = %q", got.Disposition)
	}
	// The answer to that was lost on the way; the partner resends.
	again := post(t, e.url, h, m.body, false)
	sameMDN(t, again, first)
	if n := e.count(t, `SELECT count(*) FROM payloads`); n != 1 {
		t.Errorf("%d payloads, want 1", n)
	}
}

// TestReceiveCancelMidTransaction: the client gives up while the
// transaction is in progress; the request context ends, the transaction
// rolls back, nothing is stored.
func TestReceiveCancelMidTransaction(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	if _, err := e.db.Exec(ctx, `
CREATE FUNCTION test_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$;
CREATE TRIGGER test_slow BEFORE INSERT ON mdns FOR EACH ROW EXECUTE FUNCTION test_slow();`); err != nil {
		t.Fatal(err)
	}
	m := buildOpenSSL(t, build{sign: "sha256"})
	h := request(as2Header(partnerACME, station, "<cancel@x>", "sha-256"), m)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, e.url, bytes.NewReader(m.body))
	req.Header = h
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("POST error = %v, want the client's deadline", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.received(partnerACME, "unavailable") == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // stays: bounded poll of the metric; the handler gives up after the real client went away
	}
	if e.received(partnerACME, "unavailable") != 1 {
		t.Fatalf("the handler did not give up on the cancelled request")
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("%d messages after the cancelled request, want 0", n)
	}
}

// TestReceiveAsyncMDN asks for an async MDN: 200 at once, the MDN queued in
// the outbox in the same transaction, retried as long as the partner's
// messages (max_attempts and the retry window), also when a resend queues
// it again.
func TestReceiveAsyncMDN(t *testing.T) {
	e := newEnv(t, envOptions{retryWindow: 24 * time.Hour})
	var got []*http.Request
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r) }))
	defer listener.Close()
	m := buildOpenSSL(t, build{sign: "sha512", enc: "aes256"})
	h := request(as2Header(partnerACME, station, "<async@x>", "sha-512, sha-256"), m)
	h.Set("Receipt-Delivery-Option", listener.URL+"/mdn")
	r := post(t, e.url, h, m.body, false)
	if r.status != http.StatusOK || len(r.body) != 0 {
		t.Fatalf("reply = %d %q, want 200 without body", r.status, r.body)
	}
	var (
		kind, url, status string
		hdrJSON, body     []byte
	)
	if err := e.db.QueryRow(context.Background(), `
SELECT o.kind, o.url, o.status, o.headers, o.body FROM outbox o JOIN messages m ON m.id = o.message_id
 WHERE m.message_id = '<async@x>' AND o.next_attempt_at <= now()`).Scan(&kind, &url, &status, &hdrJSON, &body); err != nil {
		t.Fatalf("outbox row: %v", err)
	}
	var hdr http.Header
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil {
		t.Fatal(err)
	}
	if kind != "mdn" || url != listener.URL+"/mdn" || status != "pending" {
		t.Errorf("outbox row = %s %s %s", kind, url, status)
	}
	want := map[string]string{"AS2-From": `"EDIHUB HUB"`, "AS2-To": `"ACME CORP"`, "AS2-Version": "1.2", "Mime-Version": "1.0"}
	gotH := map[string]string{}
	for k := range want {
		gotH[k] = hdr.Get(k)
	}
	if diff := cmp.Diff(want, gotH); diff != "" {
		t.Errorf("outbox headers (-want +got):\n%s", diff)
	}
	mr := reply{status: 200, header: hdr, body: body}
	md := parseMDN(t, mr)
	opensslVerifyMDN(t, mr)
	if md.Disposition != mdn.Processed() || md.MIC != dgst(t, m.micDigest, m.micFile) || !strings.Contains(hdr.Get("Content-Type"), "micalg=sha-512") {
		t.Errorf("async MDN = %q %q %q", md.Disposition, md.MIC, hdr.Get("Content-Type"))
	}
	if row, _ := e.row(t, partnerACME, "<async@x>"); row.MDNMode != "async" || row.Payloads != 1 {
		t.Errorf("row = %+v", row)
	}
	// A resend asking for an async MDN queues the stored one again.
	if r := post(t, e.url, h, m.body, false); r.status != 200 {
		t.Fatalf("resend = %d", r.status)
	}
	var bodies [][]byte
	rows, err := e.db.Query(context.Background(), `SELECT body FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Errorf("outbox after the resend: %d rows, identical %v", len(bodies), len(bodies) == 2 && bytes.Equal(bodies[0], bodies[1]))
	}
	// A partner's MDN is retried as long as its messages: 8 attempts
	// (max_attempts unset) and then until the window ends (a partner that
	// cannot take it for a while, a failover of its hub, must still get it).
	rows, err = e.db.Query(context.Background(), `SELECT max_attempts, extract(epoch FROM retry_until - created_at)::float8 FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var attempts int
		var window *float64
		if err := rows.Scan(&attempts, &window); err != nil {
			t.Fatal(err)
		}
		if attempts != 8 || window == nil || *window < 23*3600 || *window > 25*3600 {
			t.Errorf("MDN outbox row: max_attempts %d, retry window %v s; want 8 and about %d s", attempts, window, 24*3600)
		}
	}
}
