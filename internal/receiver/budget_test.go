package receiver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
)

// gatedStore holds SaveInbound for one partner until open is closed, so
// that requests stay in flight (holding their reservations) as long as
// the test wants; entered reports each one that got there.
type gatedStore struct {
	receiver.Store
	partner string
	open    chan struct{}
	entered chan string
}

func (g *gatedStore) SaveInbound(ctx context.Context, m *postgres.InboundMessage) (int64, error) {
	if m.Partner == g.partner {
		g.entered <- m.MessageID
		<-g.open
	}
	return g.Store.SaveInbound(ctx, m)
}

// TestReceiveInFlightBudget sends compression bombs (tiny bodies that
// inflate past the decompression limit) one after another while the
// earlier ones are still in flight: the replica's reserved bytes never
// pass its budget, bombs that do not fit are answered 503 with
// Retry-After (nothing stored), and another partner's message is still
// processed meanwhile. A partner over its concurrency cap gets 503 before
// its body is read.
func TestReceiveInFlightBudget(t *testing.T) {
	const decompressLimit = 8 << 20
	const limit = decompressLimit*5/2 + 1<<20 // two bombs fit, a third does not
	gate := &gatedStore{partner: partnerACME, open: make(chan struct{}), entered: make(chan string, 64)}
	var once sync.Once
	release := func() { once.Do(func() { close(gate.open) }) }
	t.Cleanup(release)
	e := newEnv(t, envOptions{maxInFlight: limit, perPartner: 16, maxDecompressed: decompressLimit,
		wrap: func(s receiver.Store) receiver.Store { gate.Store = s; return gate }})

	der, err := cms.Compress(make([]byte, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bomb: %d bytes inflating to 16 MiB", len(der))
	bombHeader := func(i int) http.Header {
		h := as2Header(partnerACME, station, fmt.Sprintf("<bomb-%d@x>", i), "sha-256")
		h.Set("Content-Type", "application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z")
		return h
	}
	type answer struct {
		i int
		r reply
	}
	answers := make(chan answer, 16)
	const bombs = 8
	blocked, busy := 0, 0
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	for i := 0; i < bombs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- answer{i, post(t, e.url, bombHeader(i), der, false)}
		}()
		// The bomb either reaches the (held) store or is answered.
		select {
		case <-gate.entered:
			blocked++
		case a := <-answers:
			if a.r.status != http.StatusServiceUnavailable || a.r.header.Get("Retry-After") == "" {
				t.Fatalf("bomb %d answered %d %q, want 503 with Retry-After", a.i, a.r.status, a.r.body)
			}
			busy++
		case <-time.After(60 * time.Second):
			t.Fatalf("bomb %d: no answer and not stored", i)
		}
		in, peak := receiver.InFlight(e.handler)
		t.Logf("after bomb %d: %d blocked, %d busy, %d bytes in flight, peak %d", i, blocked, busy, in, peak)
		if in > limit || peak > limit {
			t.Fatalf("in flight %d, peak %d bytes: over the budget of %d", in, peak, limit)
		}
	}
	t.Logf("%d bombs in flight, %d answered 503", blocked, busy)
	if blocked != 2 || busy != bombs-2 {
		t.Errorf("%d bombs in flight and %d refused, want 2 and %d", blocked, busy, bombs-2)
	}

	// Another partner is still served while the bombs hold their share.
	m := buildOpenSSL(t, build{sign: "sha256"})
	got := parseMDN(t, post(t, e.url, request(as2Header(partnerQuoted, station, "<other@x>", "sha-256"), m), m.body, false))
	if got.Disposition != mdn.Processed() {
		t.Errorf("other partner's message: %q, want processed", got.Disposition)
	}

	release()
	for i := 0; i < blocked; i++ {
		a := <-answers
		if got := parseMDN(t, a.r); got.Disposition != mdn.Errored("decompression-failed") {
			t.Errorf("bomb %d: %q, want decompression-failed", a.i, got.Disposition)
		}
	}
	wg.Wait()
	if in, peak := receiver.InFlight(e.handler); in != 0 || peak > limit {
		t.Errorf("after the bombs: %d bytes in flight (want 0), peak %d (budget %d)", in, peak, limit)
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE partner = $1`, partnerACME); n != blocked {
		t.Errorf("%d bomb messages stored, want %d (a 503 stores nothing)", n, blocked)
	}
	if n := metricValue(e.reg, "edihub_as2_busy_total", map[string]string{"partner": partnerACME, "stage": "decompression"}); n != float64(busy) {
		t.Errorf("edihub_as2_busy_total{stage=decompression} = %v, want %d", n, busy)
	}
}

// TestReceivePartnerConcurrencyCap: with a partner's cap of requests in
// flight reached, the next one is answered 503 with Retry-After from its
// header, before its body is read; other partners are unaffected.
func TestReceivePartnerConcurrencyCap(t *testing.T) {
	gate := &gatedStore{partner: partnerACME, open: make(chan struct{}), entered: make(chan string, 8)}
	var once sync.Once
	release := func() { once.Do(func() { close(gate.open) }) }
	t.Cleanup(release)
	e := newEnv(t, envOptions{perPartner: 2, wrap: func(s receiver.Store) receiver.Store { gate.Store = s; return gate }})
	m := buildOpenSSL(t, build{sign: "sha256"})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, e.url, request(as2Header(partnerACME, station, fmt.Sprintf("<cap-%d@x>", i), "sha-256"), m), m.body, false)
		}()
		select {
		case <-gate.entered:
		case <-time.After(60 * time.Second):
			t.Fatalf("request %d did not reach the store", i)
		}
	}
	// The third announces a body it never sends: only a decision from the
	// header can answer it.
	resp, body := rawRequest(t, e.url, "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <cap-3@x>\r\nContent-Type: application/pkcs7-mime\r\n", 1000, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d %q (Retry-After %q), want 503 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	got := parseMDN(t, post(t, e.url, request(as2Header(partnerQuoted, station, "<cap-other@x>", "sha-256"), m), m.body, false))
	if got.Disposition != mdn.Processed() {
		t.Errorf("other partner: %q, want processed", got.Disposition)
	}
}

// startBody opens a connection that sends a request header declaring
// contentLength body bytes and asking for 100-continue, waits until the
// receiver starts reading the body (the 100 Continue: the request was
// admitted), then sends body and leaves the connection open.
func startBody(t *testing.T, url, header string, contentLength int, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(url, "/as2"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(conn, "POST /as2 HTTP/1.1\r\nHost: x\r\n%sExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", header, contentLength)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the request header: %v", err)
	}
	if resp.StatusCode != http.StatusContinue {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("request header answered %d %q, want 100 Continue", resp.StatusCode, b)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitInFlight waits until the receiver holds at least n bytes.
func waitInFlight(t *testing.T, h *receiver.Handler, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		in, _ := receiver.InFlight(h)
		if in >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes in flight, want at least %d", in, n)
		}
		time.Sleep(10 * time.Millisecond) // stays: bounded poll, the budget signals no change
	}
}

// TestReceiveInFlightBudgetIdleSenders: connections that declare large
// bodies and send them slowly, or not at all, hold only the bytes they
// sent: another partner's small message is still processed although the
// declared lengths add up to the whole budget.
func TestReceiveInFlightBudgetIdleSenders(t *testing.T) {
	const limit = 16 << 20
	e := newEnv(t, envOptions{maxInFlight: limit})
	acme := "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nContent-Type: application/pkcs7-mime\r\n"
	startBody(t, e.url, acme+"Message-ID: <idle@x>\r\n", 8<<20, nil)
	startBody(t, e.url, acme+"Message-ID: <slow@x>\r\n", 8<<20, make([]byte, 4<<10))
	waitInFlight(t, e.handler, 4<<10)
	if in, _ := receiver.InFlight(e.handler); in > 2*receiver.BodyStep {
		t.Errorf("two connections that sent 4 KiB hold %d bytes of the budget, want at most %d", in, 2*receiver.BodyStep)
	}

	m := buildOpenSSL(t, build{sign: "sha256"})
	r := post(t, e.url, request(as2Header(partnerQuoted, station, "<small@x>", "sha-256"), m), m.body, false)
	if r.status != http.StatusOK {
		in, _ := receiver.InFlight(e.handler)
		t.Fatalf("another partner's %d-byte message = %d %q with %d bytes in flight, want its MDN", len(m.body), r.status, r.body, in)
	}
	if got := parseMDN(t, r); got.Disposition != mdn.Processed() {
		t.Errorf("another partner's message: %q, want processed", got.Disposition)
	}
}

// TestReceiveInFlightBudgetCountsArrivedBytes: bytes that arrived count
// against the budget. With most of it held by a body still arriving, a
// body whose Content-Length does not fit what is free is refused from its
// header, a chunked body when it outgrows it (503 with Retry-After,
// nothing stored), and the reserved bytes never pass the budget; a
// message that fits is still processed.
func TestReceiveInFlightBudgetCountsArrivedBytes(t *testing.T) {
	const limit = 12 << 20
	e := newEnv(t, envOptions{maxInFlight: limit})
	acme := "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nContent-Type: application/pkcs7-mime\r\nMessage-ID: <big@x>\r\n"
	conn := startBody(t, e.url, acme, 8<<20, make([]byte, 7<<20))
	waitInFlight(t, e.handler, 7<<20)

	quoted := "AS2-From: \"Q \\\"Quoted\\\" \\\\ Co\"\r\nAS2-To: \"EDIHUB HUB\"\r\nContent-Type: application/pkcs7-mime\r\nMessage-ID: <declared@x>\r\n"
	resp, body := rawRequest(t, e.url, quoted, 8<<20, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("8 MiB declared with under 5 MiB free: %d %q (Retry-After %q), want 503 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}

	h := as2Header(partnerQuoted, station, "<chunked@x>", "sha-256")
	h.Set("Content-Type", "application/pkcs7-mime")
	_, _ = tryPost(e.url, h, make([]byte, 8<<20), true) // the answer may be lost to the reset
	if n := metricValue(e.reg, "edihub_as2_busy_total", map[string]string{"partner": partnerQuoted, "stage": "body"}); n != 1 {
		t.Errorf("edihub_as2_busy_total{stage=body} = %v after a chunked body outgrew the budget, want 1", n)
	}

	m := buildOpenSSL(t, build{sign: "sha256"})
	got := parseMDN(t, post(t, e.url, request(as2Header(partnerQuoted, station, "<fits@x>", "sha-256"), m), m.body, false))
	if got.Disposition != mdn.Processed() {
		t.Errorf("a message that fits: %q, want processed", got.Disposition)
	}
	if _, peak := receiver.InFlight(e.handler); peak > limit {
		t.Errorf("peak %d bytes in flight, over the budget of %d", peak, limit)
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE partner = $1`, partnerQuoted); n != 1 {
		t.Errorf("%d messages of the refused partner stored, want 1 (a 503 stores nothing)", n)
	}

	conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	for in, _ := receiver.InFlight(e.handler); in != 0; in, _ = receiver.InFlight(e.handler) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still in flight after the sender went away, want 0", in)
		}
		time.Sleep(10 * time.Millisecond) // stays: bounded poll, as in waitInFlight
	}
}
