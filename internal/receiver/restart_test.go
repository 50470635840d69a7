package receiver_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/peakrss"
)

// restartMessage is an openssl-built message sent with AS2 restart.
type restartMessage struct {
	header http.Header // AS2 and MIME fields, EDIINT-Features, ETag
	body   []byte
	mic    string // openssl's MIC, as the MDN must return it
	// payloadSHA256 is the digest of the payload; nil for small messages
	// (their payload is doc).
	payloadSHA256 []byte
}

// smallRestartMessage is a signed, encrypted, compressed message of doc.
func smallRestartMessage(t *testing.T, from, messageID, etag string) restartMessage {
	t.Helper()
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", comp: "before"})
	h := request(as2Header(from, station, messageID, "sha-256"), m)
	restartFields(h, etag)
	return restartMessage{header: h, body: m.body, mic: dgst(t, m.micDigest, m.micFile)}
}

// largeRestartMessage is a signed, encrypted message of size payload
// bytes, built by openssl from files.
func largeRestartMessage(t *testing.T, size int64, messageID, etag string) restartMessage {
	t.Helper()
	ids := openssltest.Keys(t)
	m, err := openssltest.BuildLarge(t.TempDir(), openssltest.LargeSpec{Size: size, Signer: ids.A, Recipient: ids.B})
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(m.BodyPath)
	if err != nil {
		t.Fatal(err)
	}
	h := request(as2Header(partnerACME, station, messageID, "sha-256"), opensslMessage{header: m.Header})
	restartFields(h, etag)
	return restartMessage{header: h, body: body, mic: m.MIC, payloadSHA256: m.PayloadSHA256}
}

func restartFields(h http.Header, etag string) {
	h.Set("EDIINT-Features", "multiple-attachments, AS2-Restart")
	h.Set("ETag", `"`+etag+`"`)
}

// cutPost sends the header of a POST of body and its first n bytes, then
// closes its side of the connection (the sender's line breaks), and
// returns the status the receiver answers once it has stored what
// arrived.
func cutPost(t *testing.T, url string, h http.Header, body []byte, n int) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(url, "/as2"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n", len(body))
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\r\n")
	b.Write(body[:n])
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a POST cut off after %d of %d bytes: %v", n, len(body), err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// head asks how much of transfer etag the receiver at url holds for the
// partner from.
func head(t *testing.T, url, from, etag string) (int, int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodHead, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = as2Header(from, station, "", "")
	req.Header.Del("Message-ID")
	req.Header.Set("EDIINT-Features", "AS2-Restart")
	req.Header.Set("If-Match", `"`+etag+`"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if f := resp.Header.Get("EDIINT-Features"); !strings.Contains(f, "AS2-Restart") {
		t.Errorf("HEAD answer EDIINT-Features = %q, want AS2-Restart listed", f)
	}
	return resp.StatusCode, resp.ContentLength
}

// resume POSTs body[from:] of transfer etag with If-Match and
// Content-Range bytes from-(len-1)/total.
func resume(t *testing.T, url string, h http.Header, etag string, body []byte, from, total int) reply {
	t.Helper()
	h = h.Clone()
	h.Del("ETag")
	h.Set("If-Match", `"`+etag+`"`)
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(body)-1, total))
	return post(t, url, h, body[from:], false)
}

// wantHead checks that HEAD reports want bytes of etag.
func wantHead(t *testing.T, url, from, etag string, want int64) {
	t.Helper()
	if status, got := head(t, url, from, etag); status != http.StatusOK || got != want {
		t.Errorf("HEAD %s of %q = %d, Content-Length %d; want 200, %d", etag, from, status, got, want)
	}
}

// wantStoredOnce checks that the message was processed with the MIC m
// says, stored once, and that no transfer is left.
func wantStoredOnce(t *testing.T, e *env, r reply, m restartMessage, messageID string) {
	t.Helper()
	got := parseMDN(t, r)
	if got.Disposition != mdn.Processed() || got.MIC != m.mic {
		t.Errorf("MDN = %s, MIC %q; want processed, %q (openssl)", got.Disposition, got.MIC, m.mic)
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE direction = 'inbound' AND message_id = $1`, messageID); n != 1 {
		t.Errorf("%d messages %s stored, want 1", n, messageID)
	}
	row, ok := e.row(t, partnerACME, messageID)
	if !ok || row.Status != "processed" || row.MIC != m.mic {
		t.Errorf("stored %+v (found %v), want processed with MIC %q", row, ok, m.mic)
	}
	payload := e.payload(t, partnerACME, messageID)
	if m.payloadSHA256 != nil {
		if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], m.payloadSHA256) {
			t.Error("stored payload differs from the payload sent")
		}
	} else if string(payload) != doc {
		t.Errorf("stored payload = %q, want the document sent", payload)
	}
	if n := e.count(t, `SELECT count(*) FROM restart_transfers`) + e.count(t, `SELECT count(*) FROM restart_chunks`); n != 0 {
		t.Errorf("%d restart rows left after the message was processed, want none", n)
	}
}

// TestRestartResume cuts a sender off part way, asks with HEAD how much
// arrived, and sends the rest, on the same receiver and on a second one
// sharing the database (another replica): the message is processed once,
// with openssl's MIC, and the transfer is gone. A large message crosses
// several commits; the cut falls between two. Sending it all again from
// the first byte (a sender that lost the MDN) is a duplicate.
func TestRestartResume(t *testing.T) {
	tests := []struct {
		name    string
		size    int64 // payload of a large message; 0: a small one
		replica bool  // HEAD and the rest go to the second receiver
	}{
		{name: "same receiver"},
		{name: "other replica", replica: true},
		{name: "large, other replica", size: 9 << 20, replica: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newEnv(t, envOptions{spool: true, restart: true})
			b := a
			if tt.replica {
				b = newEnv(t, envOptions{spool: true, restart: true, dbURL: a.dbURL})
			}
			id, etag := "<restart-"+strings.ReplaceAll(tt.name, " ", "-")+"@x>", "transfer-1"
			m := smallRestartMessage(t, partnerACME, id, etag)
			cut := len(m.body) / 2
			if tt.size > 0 {
				m = largeRestartMessage(t, tt.size, id, etag)
				cut = 6<<20 + 5
			}
			if status := cutPost(t, a.url, m.header, m.body, cut); status != http.StatusBadRequest {
				t.Errorf("cut POST answered %d, want 400", status)
			}
			wantHead(t, b.url, partnerACME, etag, int64(cut))
			if n := a.count(t, `SELECT coalesce(sum(length(data)), 0)::int FROM restart_chunks`); n != cut {
				t.Errorf("restart_chunks hold %d bytes, want the %d that arrived", n, cut)
			}
			r := resume(t, b.url, m.header, etag, m.body, cut, len(m.body))
			wantStoredOnce(t, a, r, m, id)
			wantHead(t, b.url, partnerACME, etag, 0)

			again := post(t, a.url, m.header, m.body, false)
			if got := parseMDN(t, again); got.Disposition != mdn.Processed() {
				t.Errorf("whole resend answered %s, want the stored MDN (processed)", got.Disposition)
			}
			if got := a.received(partnerACME, "duplicate"); got != 1 {
				t.Errorf("duplicates counted = %v, want 1", got)
			}
			wantStoredOnce(t, a, again, m, id)
		})
	}
}

// TestRestartRefusesWrongResume: a resume that does not start at the
// bytes held (before or after), that does not run to the end of the
// transfer, that names another length than the transfer began with
// (longer or shorter), or that names a transfer not held is refused and
// changes nothing; the right one then completes the message. A stale
// append (a writer that lost the race) stores nothing.
func TestRestartRefusesWrongResume(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, restart: true})
	const id, etag = "<wrong-offset@x>", "t-wrong"
	m := smallRestartMessage(t, partnerACME, id, etag)
	cut, total := len(m.body)/2, len(m.body)
	cutPost(t, e.url, m.header, m.body, cut)
	wantHead(t, e.url, partnerACME, etag, int64(cut))

	for _, tt := range []struct {
		name       string
		etag       string
		from       int
		end        int // the range sent ends before byte end
		total      int
		wantStatus int
	}{
		{"before the bytes held", etag, cut - 1, total, total, http.StatusRequestedRangeNotSatisfiable},
		{"after the bytes held", etag, cut + 1, total, total, http.StatusRequestedRangeNotSatisfiable},
		{"not to the end", etag, cut, total - 1, total, http.StatusBadRequest},
		{"a longer length", etag, cut, total + 1, total + 1, http.StatusPreconditionFailed},
		{"a shorter length", etag, cut, total - 1, total - 1, http.StatusPreconditionFailed},
		{"unknown transfer", "t-unknown", cut, total, total, http.StatusPreconditionFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := append(bytes.Clone(m.body), 'x')[:tt.end]
			r := resume(t, e.url, m.header, tt.etag, body, tt.from, tt.total)
			wantStatus(t, r.status, tt.wantStatus)
			if tt.wantStatus == http.StatusRequestedRangeNotSatisfiable {
				if got, want := r.header.Get("Content-Range"), fmt.Sprintf("bytes */%d", total); got != want {
					t.Errorf("Content-Range = %q, want %q", got, want)
				}
			}
			wantHead(t, e.url, partnerACME, etag, int64(cut))
		})
	}
	tr, err := e.store.RestartTransferOf(context.Background(), partnerACME, etag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AppendRestart(context.Background(), tr.ID, int64(cut-1), [][]byte{{'x'}}); !errors.Is(err, postgres.ErrRestartConflict) {
		t.Errorf("AppendRestart at a stale offset: error = %v, want ErrRestartConflict", err)
	}
	if _, err := e.store.AppendRestart(context.Background(), tr.ID, int64(cut), [][]byte{make([]byte, total-cut+1)}); !errors.Is(err, postgres.ErrRestartConflict) {
		t.Errorf("AppendRestart past the total: error = %v, want ErrRestartConflict", err)
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("%d messages stored from refused resumes, want 0", n)
	}
	wantStoredOnce(t, e, resume(t, e.url, m.header, etag, m.body, cut, total), m, id)
}

// TestRestartExpiry: the purger deletes a transfer that got no byte for
// longer than the expiry, with its bytes, and keeps a recent one; the
// expired one is then unknown (HEAD 0, resume refused).
func TestRestartExpiry(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, restart: true})
	old := smallRestartMessage(t, partnerACME, "<old@x>", "t-old")
	recent := smallRestartMessage(t, partnerACME, "<recent@x>", "t-recent")
	cut := len(old.body) / 2
	cutPost(t, e.url, old.header, old.body, cut)
	cutPost(t, e.url, recent.header, recent.body, cut)
	if _, err := e.db.Exec(context.Background(), `UPDATE restart_transfers SET updated_at = now() - interval '25 hours' WHERE etag = 't-old'`); err != nil {
		t.Fatal(err)
	}
	f := hub.Fence{Lease: "restart-test", Token: 1}
	if err := e.store.OpenTerm(context.Background(), f, "purger"); err != nil {
		t.Fatal(err)
	}
	n, err := e.store.PurgeBatch(context.Background(), f, postgres.PurgeRestarts, 24*time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("PurgeBatch(restarts, 24h) = %d, %v; want 1, nil", n, err)
	}
	wantHead(t, e.url, partnerACME, "t-old", 0)
	wantHead(t, e.url, partnerACME, "t-recent", int64(cut))
	if got := e.count(t, `SELECT count(*) FROM restart_chunks c JOIN restart_transfers r ON r.id = c.transfer_id WHERE r.etag = 't-recent'`); got == 0 {
		t.Error("the recent transfer's bytes were deleted")
	}
	if got := e.count(t, `SELECT count(*) FROM restart_chunks`) - e.count(t, `SELECT count(*) FROM restart_chunks c JOIN restart_transfers r ON r.id = c.transfer_id WHERE r.etag = 't-recent'`); got != 0 {
		t.Errorf("%d chunks of the expired transfer left", got)
	}
	wantStatus(t, resume(t, e.url, old.header, "t-old", old.body, cut, len(old.body)).status, http.StatusPreconditionFailed)
}

// TestRestartPartnerIsolation: another partner naming the same ETag
// neither sees nor extends the first partner's transfer.
func TestRestartPartnerIsolation(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, restart: true})
	const etag = "shared-etag"
	m := smallRestartMessage(t, partnerACME, "<isolated@x>", etag)
	cut := len(m.body) / 2
	cutPost(t, e.url, m.header, m.body, cut)

	wantHead(t, e.url, partnerQuoted, etag, 0)
	other := smallRestartMessage(t, partnerQuoted, "<isolated@x>", etag)
	wantStatus(t, resume(t, e.url, other.header, etag, m.body, cut, len(m.body)).status, http.StatusPreconditionFailed)
	wantHead(t, e.url, partnerACME, etag, int64(cut))
	wantStoredOnce(t, e, resume(t, e.url, m.header, etag, m.body, cut, len(m.body)), m, "<isolated@x>")
	if n := e.count(t, `SELECT count(*) FROM messages WHERE partner = $1`, partnerQuoted); n != 0 {
		t.Errorf("%d messages stored for the other partner, want 0", n)
	}
}

// TestRestartNotKept: without restart (the sender does not ask for it,
// the partner's profile turns it off, or the limits are reached) a cut
// transfer keeps nothing (HEAD 0), and a whole message is received as
// before.
func TestRestartNotKept(t *testing.T) {
	tests := []struct {
		name    string
		from    string
		feature bool
		limits  postgres.RestartLimits
	}{
		{name: "not asked", from: partnerACME},
		{name: "profile off", from: partnerNoRestart, feature: true},
		{name: "partner limit", from: partnerACME, feature: true, limits: postgres.RestartLimits{PartnerBytes: 100}},
		{name: "total limit", from: partnerACME, feature: true, limits: postgres.RestartLimits{TotalBytes: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{spool: true, restart: true, restartLimits: tt.limits})
			m := smallRestartMessage(t, tt.from, "<not-kept@x>", "t-not-kept")
			if !tt.feature {
				m.header.Del("EDIINT-Features")
			}
			if len(m.body) <= 100 {
				t.Fatalf("message of %d bytes fits the test's limits", len(m.body))
			}
			cutPost(t, e.url, m.header, m.body, len(m.body)/2)
			wantHead(t, e.url, tt.from, "t-not-kept", 0)
			r := post(t, e.url, m.header, m.body, false)
			if got := parseMDN(t, r); got.Disposition != mdn.Processed() || got.MIC != m.mic {
				t.Errorf("whole message: MDN %s MIC %q, want processed, %q", got.Disposition, got.MIC, m.mic)
			}
			if n := e.count(t, `SELECT count(*) FROM restart_transfers`); n != 0 {
				t.Errorf("%d restart transfers kept, want none", n)
			}
		})
	}
}

// TestRestartHeadUnknownPartner: HEAD names a configured relationship.
func TestRestartHeadUnknownPartner(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, restart: true})
	if status, _ := head(t, e.url, "NOBODY", "x"); status != http.StatusForbidden {
		t.Errorf("HEAD from an unknown partner = %d, want 403", status)
	}
	req, _ := http.NewRequest(http.MethodHead, e.url, nil)
	req.Header = as2Header(partnerACME, station, "", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wantStatus(t, resp.StatusCode, http.StatusBadRequest) // no If-Match nor ETag
}

// TestRestartLargeMessageInConstantMemory cuts off a message whose body
// is larger than the Go memory limit the test sets (openssl-built,
// signed and encrypted) half way and resumes it, both streamed from its
// file:
// the bytes go to the database as they arrive and come back through the
// spool, so the process's peak resident memory stays within 64 MiB of
// what it was before (issue 22's target), and the MDN carries openssl's
// MIC.
func TestRestartLargeMessageInConstantMemory(t *testing.T) {
	const size = 96 << 20
	e := newEnv(t, envOptions{spool: true, restart: true, spoolBytes: 4 * size, maxBody: 2 * size})
	ids := openssltest.Keys(t)
	m, err := openssltest.BuildLarge(t.TempDir(), openssltest.LargeSpec{Size: size, Signer: ids.A, Recipient: ids.B})
	if err != nil {
		t.Fatal(err)
	}
	if m.BodySize <= largeMemLimit {
		t.Fatalf("body of %d MiB, want more than the %d MiB memory limit", m.BodySize>>20, largeMemLimit>>20)
	}
	const etag = "large-restart"
	h := request(as2Header(partnerACME, station, "<large-restart@x>", "sha-256"), opensslMessage{header: m.Header})
	restartFields(h, etag)
	f, err := os.Open(m.BodyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(largeMemLimit))
	runtime.GC()
	before := peakrss.Reset(t)

	cut := m.BodySize / 2
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(e.url, "/as2"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n", m.BodySize)
	h.Write(&hdr)
	hdr.WriteString("\r\n")
	if _, err := conn.Write(hdr.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(conn, io.NewSectionReader(f, 0, cut)); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("cut POST: %v, %v; want 400", resp, err)
	}
	wantHead(t, e.url, partnerACME, etag, cut)

	req, err := http.NewRequest(http.MethodPost, e.url, io.NewSectionReader(f, cut, m.BodySize-cut))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	req.Header.Del("ETag")
	req.Header.Set("If-Match", `"`+etag+`"`)
	req.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", cut, m.BodySize-1, m.BodySize))
	req.ContentLength = m.BodySize - cut
	r := do(t, req)
	peak := peakrss.Peak(t)
	got := parseMDN(t, r)
	if got.Disposition != mdn.Processed() || got.MIC != m.MIC {
		t.Fatalf("MDN = %s MIC %q, want processed, %q (openssl dgst)", got.Disposition, got.MIC, m.MIC)
	}
	t.Logf("body %d MiB, cut at %d MiB", m.BodySize>>20, cut>>20)
	peakrss.WantAboveIdle(t, before, peak, maxAboveIdle, "")
	if n := e.count(t, `SELECT count(*) FROM restart_transfers`); n != 0 {
		t.Errorf("%d restart transfers left, want none", n)
	}
}
