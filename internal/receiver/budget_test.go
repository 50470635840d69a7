package receiver_test

import (
	"context"
	"fmt"
	"net/http"
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
