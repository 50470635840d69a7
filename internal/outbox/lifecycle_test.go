package outbox_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDispatchRetryWindow: with a retry window, a partner that is down for
// more attempts than max_attempts still gets the message once it is back;
// one that stays down fails only after the window, with more attempts
// than max_attempts.
func TestDispatchRetryWindow(t *testing.T) {
	tests := []struct {
		name      string
		window    time.Duration
		downFor   int // failed answers before 204; -1 for ever
		want      string
		wantError string
	}{
		{name: "back within the window", window: time.Hour, downFor: 6, want: "sent"},
		// The window must outlast two attempts even on a loaded machine (a
		// third comes only inside it), and end so that the message fails.
		{name: "down past the window", window: 3 * time.Second, downFor: -1, want: "failed", wantError: "and the retry window: partner answered HTTP 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			partner := newPartner(t, func(n int, _ request) (int, http.Header, []byte) {
				if tt.downFor < 0 || n <= tt.downFor {
					return 503, nil, nil
				}
				return 204, nil, nil
			})
			cfg := loadConfig(t, partnerYAML{id: "NIGHTLY", url: partner.URL, extra: []string{"mdn: none", "max_attempts: 2"}})
			q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg, RetryWindow: tt.window})
			if err != nil {
				t.Fatal(err)
			}
			m, err := q.Enqueue(context.Background(), outbox.Document{Partner: "NIGHTLY", Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			got := waitStatus(t, st, m.ID, "sent", "failed")
			if got.Status != tt.want || !strings.Contains(got.Error, tt.wantError) {
				t.Fatalf("status %q error %q; want %q with %q", got.Status, got.Error, tt.want, tt.wantError)
			}
			if got.Attempts <= 2 {
				t.Errorf("%d attempts; want more than max_attempts 2", got.Attempts)
			}
			if tt.downFor > 0 && got.Attempts != tt.downFor+1 {
				t.Errorf("%d attempts; want %d", got.Attempts, tt.downFor+1)
			}
		})
	}
}

// TestPartnerRetryWindowOverrides: a partner's retry_window replaces the
// queue's default.
func TestPartnerRetryWindowOverrides(t *testing.T) {
	st := pgtest.Store(t)
	cfg := loadConfig(t, partnerYAML{id: "A", url: "http://127.0.0.1:1/as2", extra: []string{"max_attempts: 1", "retry_window: 90m"}},
		partnerYAML{id: "B", url: "http://127.0.0.1:1/as2", extra: []string{"max_attempts: 1"}})
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg, RetryWindow: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"A", "B"} {
		if _, err := q.Enqueue(context.Background(), outbox.Document{Partner: p, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	items, err := st.ClaimOutbox(context.Background(), "t", time.Minute, 10)
	if err != nil || len(items) != 2 {
		t.Fatalf("claim = %d items, %v", len(items), err)
	}
	want := map[string]time.Duration{"A": 90 * time.Minute, "B": 24 * time.Hour}
	for _, it := range items {
		if w := want[it.Partner]; it.RetryWindowLeft > w || it.RetryWindowLeft < w-time.Minute {
			t.Errorf("partner %s: window left %s, want about %s", it.Partner, it.RetryWindowLeft, w)
		}
	}
}

// TestQueueIdempotencyKey: the queue's fingerprint covers content type,
// filename and payload; the same document replays, any change is refused.
func TestQueueIdempotencyKey(t *testing.T) {
	st := pgtest.Store(t)
	cfg := loadConfig(t, partnerYAML{id: "A", url: "http://127.0.0.1:1/as2"})
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	doc := outbox.Document{Partner: "A", ContentType: "application/edi-x12", Filename: "po.edi", Payload: []byte("ISA*00"), IdempotencyKey: "k"}
	first, err := q.Enqueue(context.Background(), doc)
	if err != nil || first.Replayed {
		t.Fatalf("first = %+v, %v", first, err)
	}
	again, err := q.Enqueue(context.Background(), doc)
	if err != nil || !again.Replayed || again.ID != first.ID || again.MessageID != first.MessageID {
		t.Errorf("repeat = %+v, %v; want replay of %+v", again, err, first)
	}
	for name, change := range map[string]func(*outbox.Document){
		"payload":      func(d *outbox.Document) { d.Payload = []byte("ISA*01") },
		"filename":     func(d *outbox.Document) { d.Filename = "po2.edi" },
		"content type": func(d *outbox.Document) { d.ContentType = "text/plain" },
	} {
		d := doc
		change(&d)
		if _, err := q.Enqueue(context.Background(), d); !errors.Is(err, postgres.ErrIdempotencyKeyReused) {
			t.Errorf("key reused with another %s = %v, want ErrIdempotencyKeyReused", name, err)
		}
	}
}

// hookServer is a webhook receiver on a real listener: it checks each
// delivery as docs/sending.md tells receivers to (the signature over the
// timestamp, the event id and the body, and the timestamp within five
// minutes) and answers 503 to the first delivery of each event.
type hookServer struct {
	*httptest.Server
	secret []byte
	mu     sync.Mutex
	tries  map[int64]int
	got    map[int64]outbox.Event
	bad    []string
}

func newHookServer(t *testing.T, secret []byte) *hookServer {
	h := &hookServer{secret: secret, tries: map[int64]int{}, got: map[int64]outbox.Event{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		ts := r.Header.Get("X-Edihub-Timestamp")
		if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			h.bad = append(h.bad, fmt.Sprintf("timestamp %q not within 5 minutes of now", ts))
			http.Error(w, "stale", http.StatusUnauthorized)
			return
		}
		mac := hmac.New(sha256.New, h.secret)
		mac.Write([]byte(ts + "." + r.Header.Get("X-Edihub-Event-Id") + "."))
		mac.Write(body)
		if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(r.Header.Get("X-Edihub-Signature")), []byte(want)) {
			h.bad = append(h.bad, "bad signature "+r.Header.Get("X-Edihub-Signature"))
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e outbox.Event
		if err := json.Unmarshal(body, &e); err != nil {
			h.bad = append(h.bad, "body: "+err.Error())
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-Edihub-Event-Id") != strconv.FormatInt(e.ID, 10) || r.Header.Get("X-Edihub-Event-Type") != e.Type ||
			r.Header.Get("Content-Type") != "application/json" {
			h.bad = append(h.bad, fmt.Sprintf("headers %v for event %d %s", r.Header, e.ID, e.Type))
		}
		h.tries[e.ID]++
		if h.tries[e.ID] == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		h.got[e.ID] = e
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

// TestWebhookEndToEnd: two replicas' forwarders and dispatchers deliver
// every event written while they run to a real HTTP listener, signed,
// with the event id in a header, after a 503 on the first try of each.
func TestWebhookEndToEnd(t *testing.T) {
	ctx := context.Background()
	db := openPurgeDB(t)
	st := db.st
	secret := []byte("webhook-secret-for-the-test")
	hook := newHookServer(t, secret)
	cfg := loadConfig(t, partnerYAML{id: "P", url: "http://127.0.0.1:1/as2"})
	reg := prometheus.NewRegistry()
	metrics := outbox.NewMetrics(reg, nil)
	for _, name := range []string{"r1", "r2"} {
		o := dispatcherOpts(t, st, cfg, name)
		o.Metrics = metrics
		o.WebhookSecret = secret
		startDispatcher(t, o)
		f, err := outbox.NewForwarder(outbox.ForwarderOptions{Store: st, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
			URL: hook.URL + "/events", Interval: 50 * time.Millisecond, MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.Run(fctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("forwarder Run = %v", err)
			}
		})
	}
	// Events written before the first forward are not the webhook's: wait
	// for the forwarders to take their place in the feed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cursors int
		if err := db.conn.QueryRow(ctx, `SELECT count(*) FROM event_cursors WHERE name = 'webhook'`).Scan(&cursors); err != nil {
			t.Fatal(err)
		}
		if cursors == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("forwarder cursor not set up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	const n = 30
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := st.SaveInbound(ctx, &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S",
				MessageID: fmt.Sprintf("<%d@p>", i), Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte("x")}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// The feed hands out an event once no transaction begun before it is
	// still open (its snapshot horizon): another session's transaction
	// (a dispatcher's poll, a forwarder's claim) can hold the last
	// receipts back for a moment after they committed.
	var all []postgres.Event
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if all, err = st.Events(ctx, postgres.EventCursor{}, 1000); err != nil {
			t.Fatal(err)
		}
		if len(all) >= n || time.Now().After(deadline) {
			break
		}
	}
	if len(all) != n {
		t.Fatalf("%d events in the feed; want %d", len(all), n)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		hook.mu.Lock()
		got := len(hook.got)
		hook.mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook got %d of %d events", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hook.mu.Lock()
	for _, b := range hook.bad {
		t.Error(b)
	}
	for _, e := range all {
		g, ok := hook.got[e.ID]
		if !ok {
			t.Errorf("event %d not delivered", e.ID)
			continue
		}
		if g.Type != "received" || g.Message != e.Message || g.Partner != "P" || g.Direction != "inbound" || g.Cursor != e.Cursor.String() {
			t.Errorf("event %d delivered as %+v", e.ID, g)
		}
		if hook.tries[e.ID] != 2 {
			t.Errorf("event %d delivered in %d tries, want 2 (one 503, one success): queued more than once?", e.ID, hook.tries[e.ID])
		}
	}
	hook.mu.Unlock()
	// The last outcome is counted after its record commits, just after the
	// webhook answered: wait for it.
	for deadline := time.Now().Add(30 * time.Second); counterValue(t, reg, "edihub_webhook_deliveries_total", "result", "delivered") < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	for result, want := range map[string]float64{"delivered": n, "retry": n, "failed": 0} {
		if got := counterValue(t, reg, "edihub_webhook_deliveries_total", "result", result); got != want {
			t.Errorf("edihub_webhook_deliveries_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestSign: the signature header value is the hex HMAC-SHA256 of
// "<timestamp>.<event id>.<body>": another timestamp, event id or body
// gives another signature.
func TestSign(t *testing.T) {
	secret, body := []byte("Jefe"), []byte("what do ya want for nothing?")
	// Computed apart: HMAC-SHA256("Jefe", "1796000000.17.what do ya want for nothing?").
	want := "sha256=a94df0559c292922a8bcf956a2c52397564d78714be81aee8eb147de9dfeaa6e"
	if got := outbox.Sign(secret, "1796000000", "17", body); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
	for _, tt := range []struct{ ts, id, body string }{
		{"1796000001", "17", string(body)},
		{"1796000000", "18", string(body)},
		{"1796000000", "17", string(body) + " "},
	} {
		if got := outbox.Sign(secret, tt.ts, tt.id, []byte(tt.body)); got == want {
			t.Errorf("Sign(%q, %q, %q) = the signature of another delivery", tt.ts, tt.id, tt.body)
		}
	}
}

// TestWebhookNeedsSecret: a dispatcher without the webhook secret (a
// replica not yet configured, during a rolling change) sends messages but
// does not claim webhook deliveries: they keep every attempt for a
// replica with the secret, which delivers them signed.
func TestWebhookNeedsSecret(t *testing.T) {
	ctx := context.Background()
	db := openPurgeDB(t)
	st := db.st
	hook := newHookServer(t, []byte("s"))
	forward := func() int {
		n, err := st.ForwardEvents(ctx, postgres.WebhookForward{Cursor: outbox.WebhookCursor, URL: hook.URL, MaxAttempts: 3, RetryWindow: time.Hour,
			Build: func(e postgres.Event) (postgres.WebhookDelivery, error) {
				id := strconv.FormatInt(e.ID, 10)
				h := http.Header{"X-Edihub-Event-Id": {id}, "X-Edihub-Event-Type": {e.Type}, "Content-Type": {"application/json"}}
				return postgres.WebhookDelivery{Header: h, Body: []byte(`{"id": ` + id + `, "type": "` + e.Type + `"}`)}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	forward() // the cursor starts at the end of the feed
	if _, err := st.SaveInbound(ctx, &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<1@p>",
		Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if n := forward(); n != 1 {
		t.Fatalf("forwarded %d events, want 1", n)
	}
	if n := forward(); n != 0 {
		t.Fatalf("forwarded %d events again, want 0", n)
	}
	attempts := func() int {
		t.Helper()
		var n int
		if err := db.conn.QueryRow(ctx, `SELECT attempts FROM outbox WHERE kind = 'webhook'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A message to a partner that refuses connections: the dispatcher
	// without the secret claims it again and again meanwhile.
	cfg := loadConfig(t, partnerYAML{id: "P", url: "http://127.0.0.1:1/as2"})
	msg := enqueue(t, st, cfg, "P", []byte("ISA*00"), "application/edi-x12", "po.edi")
	reg := prometheus.NewRegistry()
	o := dispatcherOpts(t, st, cfg, "no-secret")
	o.Metrics = outbox.NewMetrics(reg, nil)
	stop := startDispatcher(t, o)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := st.Message(ctx, msg.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Attempts >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message was tried %d times, want 3", m.Attempts)
		}
	}
	stop()
	if n := attempts(); n != 0 {
		t.Errorf("the webhook delivery used %d attempts on a replica without the secret, want 0", n)
	}
	for _, result := range []string{"retry", "failed", "delivered"} {
		if got := counterValue(t, reg, "edihub_webhook_deliveries_total", "result", result); got != 0 {
			t.Errorf("edihub_webhook_deliveries_total{result=%q} = %v on the replica without the secret, want 0", result, got)
		}
	}
	hook.mu.Lock()
	if len(hook.tries) != 0 || len(hook.bad) != 0 {
		t.Errorf("the webhook got requests from a replica without the secret: %v %v", hook.tries, hook.bad)
	}
	hook.mu.Unlock()

	// A replica with the secret delivers it: one 503, then delivered, in
	// the delivery's first two attempts.
	reg = prometheus.NewRegistry()
	o = dispatcherOpts(t, st, cfg, "with-secret")
	o.Metrics = outbox.NewMetrics(reg, nil)
	o.WebhookSecret = []byte("s")
	startDispatcher(t, o)
	for deadline := time.Now().Add(30 * time.Second); counterValue(t, reg, "edihub_webhook_deliveries_total", "result", "delivered") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delivery was not delivered by the replica with the secret")
		}
	}
	if n := attempts(); n != 2 {
		t.Errorf("delivered in attempt %d, want 2 (a 503, then delivered)", n)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	for _, b := range hook.bad {
		t.Error(b)
	}
}

// TestQueueContentTypeFromEnvelope: a document queued without a content
// type goes as what its envelope says (partners route by it), anything
// else as application/octet-stream; a given content type is kept.
func TestQueueContentTypeFromEnvelope(t *testing.T) {
	st := pgtest.Store(t)
	cfg := loadConfig(t, partnerYAML{id: "A", url: "http://127.0.0.1:1/as2"})
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	const x12 = "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*A              *261201*0930*U*00401*000000101*0*T*>~\n" +
		"GS*PO*EDIHUB*A*20261201*0930*101*X*004010~\nST*850*0001~\nBEG*00*SA*PO-1**20261201~\nSE*3*0001~\nGE*1*101~\nIEA*1*000000101~\n"
	const edifact = "UNA:+.? '\nUNB+UNOC:3+EDIHUB+A+261201:0930+7'\nUNH+1+ORDERS:D:96A:UN'\nBGM+220+PO-1'\nUNT+3+1'\nUNZ+1+7'\n"
	tests := []struct {
		name        string
		give        string // the payload
		contentType string
		want        string
	}{
		{"X12", x12, "", "application/EDI-X12"},
		{"X12 after a byte-order mark and blank lines", "\xef\xbb\xbf\n\n" + x12, "", "application/EDI-X12"},
		{"EDIFACT", edifact, "", "application/EDIFACT"},
		{"not EDI", "<order/>", "", "application/octet-stream"},
		{"X12 with a content type given", x12, "text/plain", "text/plain"},
	}
	for _, tt := range tests {
		res, err := q.Enqueue(context.Background(), outbox.Document{Partner: "A", ContentType: tt.contentType, Payload: []byte(tt.give)})
		if err != nil {
			t.Fatalf("%s: Enqueue: %v", tt.name, err)
		}
		m, err := st.Message(context.Background(), res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.ContentType != tt.want {
			t.Errorf("%s: Enqueue(content type %q) stored %q, want %q", tt.name, tt.contentType, m.ContentType, tt.want)
		}
	}
}
