package mdn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// TestOverdueFlag: without resend_overdue an overdue message is flagged,
// counted in edihub_mdn_overdue and still delivered by a late MDN.
func TestOverdueFlag(t *testing.T) {
	e := newEnv(t, envOptions{asyncMDNWait: time.Millisecond})
	m := e.send(signedPartner)
	reg := prometheus.NewRegistry()
	e.runPoller(e.poller(pollerOptions{reg: reg}), e.openTerm(1))
	waitFor(t, "the message flagged overdue", func() bool { return e.message(m.ID).MDNOverdue })
	overdue := map[string]string{"partner": signedPartner}
	waitFor(t, "edihub_mdn_overdue to count it", func() bool { return gaugeValue(t, reg, "edihub_mdn_overdue", overdue) == 1 })
	if got := e.message(m.ID); got.Status != outbox.StatusAwaitingMDN || got.MDNResends != 0 {
		t.Errorf("overdue message: status %q, resends %d; want awaiting-mdn, 0 (resend_overdue is 0)", got.Status, got.MDNResends)
	}
	if n := len(e.station.requestsFor(m.MessageID)); n != 1 {
		t.Errorf("partner received the message %d times, want 1", n)
	}
	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	got := e.waitStatus(m.ID, "delivered")
	if got.MDNOverdue {
		t.Error("delivered message still flagged overdue")
	}
	waitFor(t, "edihub_mdn_overdue back to 0", func() bool { return gaugeValue(t, reg, "edihub_mdn_overdue", overdue) == 0 })
}

// TestResendOnOverdue: resend_overdue: 2 resends the same bytes with the
// same Message-ID twice, then fails the message with "no MDN".
func TestResendOnOverdue(t *testing.T) {
	e := newEnv(t, envOptions{asyncMDNWait: time.Millisecond, extra: []string{"resend_overdue: 2"}})
	m := e.send(signedPartner)
	e.runPoller(e.poller(pollerOptions{}), e.openTerm(1))
	got := e.waitStatus(m.ID, "failed")
	if got.Error != "no MDN" || got.MDNResends != 2 || !got.MDNOverdue || got.MessageID != m.MessageID {
		t.Errorf("given-up message = {error %q, resends %d, overdue %v, Message-ID %q}, want no MDN, 2, true, %q", got.Error, got.MDNResends, got.MDNOverdue, got.MessageID, m.MessageID)
	}
	reqs := e.station.requestsFor(m.MessageID)
	if len(reqs) != 3 {
		t.Fatalf("partner received Message-ID %s %d times, want 3 (the send and 2 resends)", m.MessageID, len(reqs))
	}
	for i, r := range reqs[1:] {
		if !bytes.Equal(r.body, reqs[0].body) || r.header.Get("Content-Type") != reqs[0].header.Get("Content-Type") {
			t.Errorf("resend %d: body or Content-Type differs from the first send", i+1)
		}
	}
	if got.MIC != m.MIC {
		t.Errorf("MIC after resends %q, want the one of the first build %q", got.MIC, m.MIC)
	}
}

// apiClient calls the REST API handler on a real listener.
type apiClient struct {
	t   testing.TB
	url string
}

func newAPI(t testing.TB, e *env) *apiClient {
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: e.st, Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Queue: q, Store: e.st, Logger: zaptest.NewLogger(t), Resender: e.st, Inbox: e.st})
	if err != nil {
		t.Fatal(err)
	}
	// The caller is the bootstrap admin, as the router's authentication
	// would make it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), auth.BootstrapPrincipal)))
	}))
	t.Cleanup(srv.Close)
	return &apiClient{t: t, url: srv.URL}
}

func (c *apiClient) do(method, path string, out any) int {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// TestResendAPI: POST /messages/{id}/resend answers 404 for an unknown
// message, 409 for one that is neither failed nor overdue, and queues a
// failed one again with the same Message-ID and bytes; GET /mdns lists the
// inbox by state.
func TestResendAPI(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := newAPI(t, e)
	e.runPoller(e.poller(pollerOptions{}), e.openTerm(1))

	var apiErr struct{ Error string }
	if got := c.do("POST", "/messages/999999/resend", &apiErr); got != http.StatusNotFound {
		t.Errorf("resend unknown: HTTP %d, want 404", got)
	}
	m := e.send(signedPartner)
	path := fmt.Sprintf("/messages/%d/resend", m.ID)
	if got := c.do("POST", path, &apiErr); got != http.StatusConflict || !strings.Contains(apiErr.Error, "awaiting-mdn") {
		t.Errorf("resend awaiting-mdn: HTTP %d %q, want 409 naming the status", got, apiErr.Error)
	}

	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, disp: mdn.Errored(as2.DispositionDecryptionFailed), signer: e.ids.A})
	e.waitStatus(m.ID, "failed")
	var view api.Message
	if got := c.do("POST", path, &view); got != http.StatusOK || view.Status != postgres.StatusQueued || view.MessageID != m.MessageID || view.Error != "" {
		t.Fatalf("resend failed: HTTP %d %+v, want 200, queued, same Message-ID", got, view)
	}
	e.waitStatus(m.ID, outbox.StatusAwaitingMDN)
	reqs := e.station.requestsFor(m.MessageID)
	if len(reqs) != 2 || !bytes.Equal(reqs[0].body, reqs[1].body) {
		t.Fatalf("partner got Message-ID %s %d times (bodies equal: %v), want 2 identical", m.MessageID, len(reqs), len(reqs) == 2 && bytes.Equal(reqs[0].body, reqs[1].body))
	}
	if got := c.do("POST", path, &apiErr); got != http.StatusConflict {
		t.Errorf("resend while awaiting the MDN again: HTTP %d, want 409", got)
	}
	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	e.waitStatus(m.ID, "delivered")
	if got := c.do("POST", path, &apiErr); got != http.StatusConflict || !strings.Contains(apiErr.Error, "delivered") {
		t.Errorf("resend delivered: HTTP %d %q, want 409 naming the status", got, apiErr.Error)
	}
	if got := c.do("GET", fmt.Sprintf("/messages/%d", m.ID), &view); got != http.StatusOK || view.MICVerified == nil || !*view.MICVerified || view.MDNOverdue {
		t.Errorf("GET message: HTTP %d, mic_verified %v, overdue %v; want 200, true, false", got, view.MICVerified, view.MDNOverdue)
	}

	// The inbox by state, with paging.
	e.storeMDN(mdnOpts{from: signedPartner, id: "<unknown-1@x>", signer: e.ids.A})
	e.storeMDN(mdnOpts{from: signedPartner, id: "<unknown-2@x>", signer: e.ids.A})
	waitFor(t, "MDNs decided", func() bool { return e.pending() == 0 })
	var list api.MDNList
	if got := c.do("GET", "/mdns?state=orphan&limit=1", &list); got != http.StatusOK || len(list.MDNs) != 1 || list.NextCursor == "" ||
		list.MDNs[0].OriginalMessageID != "<unknown-2@x>" || !strings.Contains(list.MDNs[0].Reason, "no outbound message") {
		t.Fatalf("GET /mdns?state=orphan&limit=1: HTTP %d %+v, want the newest orphan and a cursor", got, list)
	}
	cursor := list.NextCursor
	list = api.MDNList{}
	if got := c.do("GET", "/mdns?state=orphan&limit=1&cursor="+cursor, &list); got != http.StatusOK || len(list.MDNs) != 1 || list.MDNs[0].OriginalMessageID != "<unknown-1@x>" || list.NextCursor != "" {
		t.Errorf("second page: HTTP %d %+v, want the older orphan and no cursor", got, list)
	}
	list = api.MDNList{}
	if got := c.do("GET", "/mdns?state=processed", &list); got != http.StatusOK || len(list.MDNs) != 2 {
		t.Errorf("GET /mdns?state=processed: HTTP %d, %d MDNs, want 2", got, len(list.MDNs))
	}
	for _, v := range list.MDNs {
		if v.Message == nil || *v.Message != m.ID || v.Fence == nil || *v.Fence != 1 {
			t.Errorf("processed MDN %d: message %v, fence %v; want message %d, fence 1", v.ID, v.Message, v.Fence, m.ID)
		}
	}
	if got := c.do("GET", "/mdns?state=lost", &apiErr); got != http.StatusBadRequest {
		t.Errorf("GET /mdns?state=lost: HTTP %d, want 400", got)
	}
}

// signalListener reports when the poller's LISTEN is in place.
type signalListener struct {
	st        *postgres.Store
	once      sync.Once
	listening chan struct{}
}

func (l *signalListener) ListenMDNInbox(ctx context.Context, wake func()) error {
	return l.st.ListenMDNInbox(ctx, func() {
		wake()
		l.once.Do(func() { close(l.listening) })
	})
}

// countingStore counts finished polls (MDNGauges is their last step).
type countingStore struct {
	*postgres.Store
	polls atomic.Int32
}

func (c *countingStore) MDNGauges(ctx context.Context) (postgres.MDNGauges, error) {
	defer c.polls.Add(1)
	return c.Store.MDNGauges(ctx)
}

// TestListenWakeup: with a fallback poll interval of an hour, an MDN
// stored after the poller settled is applied: only the notification can
// have woken it.
func TestListenWakeup(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	l := &signalListener{st: e.st, listening: make(chan struct{})}
	cs := &countingStore{Store: e.st}
	e.runPoller(e.poller(pollerOptions{store: cs, listener: l, interval: time.Hour}), e.openTerm(1))
	select {
	case <-l.listening:
	case <-time.After(30 * time.Second):
		t.Fatal("the poller never listened")
	}
	// The first poll (at start) and the one the listener's first wakeup
	// asks for; after them the poller sleeps for an hour.
	waitFor(t, "the two start-up polls", func() bool { return cs.polls.Load() >= 2 })
	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	e.waitStatus(m.ID, "delivered")
	if n := cs.polls.Load(); n != 3 {
		t.Logf("polls: %d", n)
	}
}

// flakyStore fails the first reads like a database blip and refuses the
// apply of one inbox row as the database refuses bad data.
type flakyStore struct {
	*postgres.Store
	failReads atomic.Int32
	reject    atomic.Int64
}

func (f *flakyStore) PendingInboxMDNs(ctx context.Context, after int64, limit int) ([]postgres.PendingMDNRef, error) {
	if f.failReads.Add(-1) >= 0 {
		return nil, errors.New("read pending MDNs: connection reset by peer (injected)")
	}
	return f.Store.PendingInboxMDNs(ctx, after, limit)
}

func (f *flakyStore) ApplyMDNs(ctx context.Context, fe hub.Fence, outs []postgres.MDNOutcome) ([]postgres.AppliedMDN, error) {
	for _, o := range outs {
		if o.InboxID == f.reject.Load() && o.Message != nil {
			return nil, fmt.Errorf("apply MDNs: inbox MDN %d: %w: invalid byte sequence (injected)", o.InboxID, postgres.ErrRowRejected)
		}
	}
	return f.Store.ApplyMDNs(ctx, fe, outs)
}

// TestTransientErrors: failed reads are retried with backoff and a row the
// database refuses becomes an orphan without holding back its batch; Run
// keeps running through both (background checks it returns nil at the end).
func TestTransientErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	var ms []hub.MessageInfo
	var ids []int64
	for range 3 {
		m := e.send(signedPartner)
		ms = append(ms, m)
		ids = append(ids, e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A}))
	}
	fs := &flakyStore{Store: e.st}
	fs.failReads.Store(3)
	fs.reject.Store(ids[1])
	e.runPoller(e.poller(pollerOptions{store: fs}), e.openTerm(1))
	e.waitStatus(ms[0].ID, "delivered")
	e.waitStatus(ms[2].ID, "delivered")
	if fs.failReads.Load() >= 0 {
		t.Errorf("failed reads left: %d, want all 3 injected failures used", fs.failReads.Load()+1)
	}
	waitFor(t, "the refused row decided", func() bool { return e.pending() == 0 })
	row := e.inbox()[ids[1]]
	if row.State != postgres.InboxOrphan || !strings.Contains(row.Reason, "could not be applied") {
		t.Errorf("refused row = {state %q, reason %q}, want orphan, could not be applied", row.State, row.Reason)
	}
	if got := e.message(ms[1].ID); got.Status != outbox.StatusAwaitingMDN {
		t.Errorf("message of the refused row: %q, want awaiting-mdn", got.Status)
	}
}

// TestDatabaseBlip: every connection of the database is terminated under a
// running poller (its LISTEN connection and its pool's); Run goes on,
// reconnects, and applies the MDN stored afterwards.
func TestDatabaseBlip(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	cs := &countingStore{Store: e.st}
	e.runPoller(e.poller(pollerOptions{store: cs}), e.openTerm(1))
	waitFor(t, "a first poll", func() bool { return cs.polls.Load() >= 1 })
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var killed int
	err = conn.QueryRow(context.Background(), `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminated %d connections (%v), want the store's", killed, err)
	}
	// The test itself goes on with a fresh pool: a receiver would answer
	// 503 to the MDN that met a dead connection, and the partner resend it.
	st2, err := postgres.Open(context.Background(), e.url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	e.st = st2
	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	e.waitStatus(m.ID, "delivered")
}
