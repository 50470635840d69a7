package api_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const token = "s3cret-token"

func writeIdentity(t *testing.T, dir, name string) (keyPath, certPath string) {
	t.Helper()
	id, err := devpki.New(name, devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyPath, certPath = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".crt")
	if err := id.WriteFiles(keyPath, certPath); err != nil {
		t.Fatal(err)
	}
	return keyPath, certPath
}

type env struct {
	url   string
	store *postgres.Store
	cfg   *config.File
	dbURL string // the store's database, for rows no API call writes
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup with the API's options changed by opts (nil: none).
func setupWith(t *testing.T, opts func(*api.Options)) *env {
	t.Helper()
	dir := t.TempDir()
	sk, sc := writeIdentity(t, dir, "station")
	_, pc := writeIdentity(t, dir, "partner")
	y := fmt.Sprintf(`station: {as2_id: EDIHUB, private_key: %q, certificate: %q}
partners:
  - {as2_id: "ACME CORP", url: "http://127.0.0.1:1/as2", certificate: %q, mdn: sync, mdn_signed: true, sign: sha-256}
  - {as2_id: "GLOBEX", url: "http://127.0.0.1:1/as2", certificate: %q, mdn: none}
`, sk, sc, pc, pc)
	path := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	reports := &report.Service{Store: st, Location: time.UTC, Now: time.Now,
		Builder: &report.Builder{Source: st, Station: "EDIHUB", Lease: "edihub-leader", Partners: []string{"ACME CORP", "GLOBEX"}, Now: time.Now}}
	o := api.Options{Queue: q, Store: st, Inbox: st, Logger: log, Reports: reports, Certificates: cfg.Certificates,
		Tracer: st, Canceller: st, Reapplier: st, Interchanges: st}
	if opts != nil {
		opts(&o)
	}
	h, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: log, Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 1 << 20, API: h, APIToken: token,
	}))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, store: st, cfg: cfg, dbURL: dbURL}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, method, path, ct string, body []byte, tok string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return send(t, req)
}

// send sends req, reads its answer whole and checks it against the
// API's OpenAPI document (checkAnswer).
func send(t *testing.T, req *http.Request) response {
	t.Helper()
	r, err := roundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer(t, req.Method, req.URL.EscapedPath(), r)
	return r
}

// roundTrip sends req and reads its answer whole.
func roundTrip(req *http.Request) (response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read the answer: %w", req.Method, req.URL.Path, err)
	}
	return response{resp.StatusCode, resp.Header, b}, nil
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("JSON %s: %v", r.body, err)
	}
	return v
}

func TestAuthRequired(t *testing.T) {
	e := setup(t)
	for _, tok := range []string{"", "wrong"} {
		for _, c := range []struct{ method, path string }{{"POST", "/api/v1/messages?partner=GLOBEX"}, {"GET", "/api/v1/messages"}, {"GET", "/api/v1/messages/1"}, {"GET", "/api/v1/messages/1/payload"}} {
			if r := e.do(t, c.method, c.path, "", []byte("x"), tok); r.status != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q = %d, want 401", c.method, c.path, tok, r.status)
			}
		}
	}
}

// TestRoundTrip: enqueue, read the status, the payload and, once the
// dispatcher recorded it, the MDN.
func TestRoundTrip(t *testing.T) {
	e := setup(t)
	doc := []byte("ISA*00*~\nIEA*1*000000001~")
	r := e.do(t, "POST", "/api/v1/messages?partner=ACME+CORP&filename=po+%231.x12", "application/EDI-X12", doc, token)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", r.status, r.body)
	}
	q := decode[api.Queued](t, r)
	if q.ID <= 0 || q.Status != "queued" || !strings.HasPrefix(q.MessageID, "<") || !strings.HasSuffix(q.MessageID, "@EDIHUB>") {
		t.Errorf("queued = %+v", q)
	}
	if loc := r.header.Get("Location"); loc != fmt.Sprintf("/api/v1/messages/%d", q.ID) || q.Location != loc {
		t.Errorf("Location %q, body location %q", loc, q.Location)
	}

	m := decode[api.Message](t, e.do(t, "GET", q.Location, "", nil, token))
	want := api.Message{ID: q.ID, Direction: "outbound", Partner: "ACME CORP", AS2From: "EDIHUB", AS2To: "ACME CORP",
		MessageID: q.MessageID, Status: "queued", ContentType: "application/EDI-X12", Filename: "po #1.x12",
		Size: int64(len(doc)), MDNMode: "sync", MDNSigned: true, Location: q.Location}
	if diff := cmp.Diff(want, m, cmpIgnoreTimes); diff != "" {
		t.Errorf("GET message (-want +got):\n%s", diff)
	}

	p := e.do(t, "GET", q.Location+"/payload", "", nil, token)
	if p.status != 200 || !bytes.Equal(p.body, doc) || p.header.Get("Content-Type") != "application/EDI-X12" ||
		p.header.Get("Content-Disposition") != `attachment; filename="po #1.x12"` {
		t.Errorf("payload = %d %q, headers %v", p.status, p.body, p.header)
	}
	if r := e.do(t, "GET", q.Location+"/mdn", "", nil, token); r.status != 404 {
		t.Errorf("MDN before any = %d, want 404", r.status)
	}

	// Play the dispatcher: claim, build, finish with an MDN.
	ctx := context.Background()
	items, err := e.store.ClaimOutbox(ctx, "test", time.Minute, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("ClaimOutbox = %d items, %v", len(items), err)
	}
	if err := e.store.SaveOutboundBuild(ctx, items[0], postgres.OutboundBuild{Headers: http.Header{"Message-ID": {q.MessageID}}, Body: []byte("built"), MIC: "abc=, sha-256", MICAlg: "sha-256", Signed: true}); err != nil {
		t.Fatal(err)
	}
	rawMDN := []byte("--b\r\nContent-Type: text/plain\r\n\r\nthe MDN\r\n--b--\r\n")
	if err := e.store.FinishOutbox(ctx, items[0], postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
		Message: &postgres.MessageUpdate{Status: "delivered", Disposition: "automatic-action/MDN-sent-automatically; processed", Final: true},
		MDN:     &postgres.NewMDN{ContentType: `multipart/report; boundary="b"`, Body: rawMDN, Signed: true, Disposition: "processed"}}); err != nil {
		t.Fatal(err)
	}
	m = decode[api.Message](t, e.do(t, "GET", q.Location, "", nil, token))
	if m.Status != "delivered" || m.MIC != "abc=, sha-256" || m.Attempts != 1 || m.CompletedAt == nil || !m.Signed {
		t.Errorf("after delivery: %+v", m)
	}
	d := e.do(t, "GET", q.Location+"/mdn", "", nil, token)
	if d.status != 200 || !bytes.Equal(d.body, rawMDN) || d.header.Get("Content-Type") != `multipart/report; boundary="b"` {
		t.Errorf("MDN = %d %q %v", d.status, d.body, d.header)
	}
}

var cmpIgnoreTimes = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".CreatedAt", ".UpdatedAt", ".CompletedAt", ".MDNDueAt":
		return true
	}
	return false
}, cmp.Ignore())

func TestEnqueueErrors(t *testing.T) {
	e := setup(t)
	tests := []struct {
		name, path, ct string
		body           []byte
		wantStatus     int
		wantParam      string
		wantText       string
	}{
		{"no partner", "/api/v1/messages", "", []byte("x"), 400, "partner", "partner"},
		{"unknown partner", "/api/v1/messages?partner=acme+corp", "", []byte("x"), 404, "partner", `unknown partner \"acme corp\"`},
		{"empty body", "/api/v1/messages?partner=GLOBEX", "", nil, 400, "", "empty"},
		{"bad content type", "/api/v1/messages?partner=GLOBEX", "not a type", []byte("x"), 400, "Content-Type", "not a MIME type"},
		{"bad filename", "/api/v1/messages?partner=GLOBEX&filename=..%2Fetc%2Fpasswd", "", []byte("x"), 400, "filename", "filename"},
		{"too large", "/api/v1/messages?partner=GLOBEX", "", bytes.Repeat([]byte("x"), 2<<20), 413, "", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", tt.path, tt.ct, tt.body, token)
			if r.status != tt.wantStatus || !strings.Contains(string(r.body), tt.wantText) {
				t.Fatalf("POST %s = %d %s, want %d mentioning %q", tt.path, r.status, r.body, tt.wantStatus, tt.wantText)
			}
			if tt.wantParam != "" {
				if got := decode[map[string]string](t, r)["parameter"]; got != tt.wantParam {
					t.Errorf("parameter = %q, want %q", got, tt.wantParam)
				}
			}
		})
	}
	// Default content type.
	r := e.do(t, "POST", "/api/v1/messages?partner=GLOBEX", "", []byte("bytes"), token)
	if r.status != 202 {
		t.Fatalf("POST = %d %s", r.status, r.body)
	}
	m := decode[api.Message](t, e.do(t, "GET", decode[api.Queued](t, r).Location, "", nil, token))
	if m.ContentType != "application/octet-stream" || m.MDNMode != "none" {
		t.Errorf("content type %q, mdn %q", m.ContentType, m.MDNMode)
	}
}

func TestListPaginationAndFilters(t *testing.T) {
	e := setup(t)
	var acme, globex []int64
	for i := range 7 {
		partner := "GLOBEX"
		if i%2 == 0 {
			partner = "ACME+CORP"
		}
		r := e.do(t, "POST", "/api/v1/messages?partner="+partner, "text/plain", fmt.Appendf(nil, "doc %d", i), token)
		id := decode[api.Queued](t, r).ID
		if i%2 == 0 {
			acme = append([]int64{id}, acme...)
		} else {
			globex = append([]int64{id}, globex...)
		}
	}
	// Page through ACME CORP, 3 at a time, newest first.
	got := pageIDs(t, e, "/api/v1/messages?partner=ACME+CORP&direction=outbound&limit=3", 3, func(l api.List) ([]int64, string) {
		var ids []int64
		for _, m := range l.Messages {
			ids = append(ids, m.ID)
		}
		return ids, l.NextCursor
	})
	if diff := cmp.Diff(acme, got); diff != "" {
		t.Errorf("ACME CORP pages (-want +got):\n%s", diff)
	}
	l := decode[api.List](t, e.do(t, "GET", "/api/v1/messages", "", nil, token))
	if len(l.Messages) != 7 || l.NextCursor != "" || l.Messages[0].ID != max(acme[0], globex[0]) {
		t.Errorf("unfiltered list: %d messages, cursor %q", len(l.Messages), l.NextCursor)
	}
	for path, want := range map[string]int{
		"/api/v1/messages?direction=inbound":                                              0,
		"/api/v1/messages?status=queued&partner=GLOBEX":                                   3,
		"/api/v1/messages?status=delivered":                                               0,
		"/api/v1/messages?since=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339): 7,
		"/api/v1/messages?until=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339): 0,
	} {
		if l := decode[api.List](t, e.do(t, "GET", path, "", nil, token)); len(l.Messages) != want {
			t.Errorf("GET %s = %d messages, want %d", path, len(l.Messages), want)
		}
	}
	for path, param := range map[string]string{
		"/api/v1/messages?limit=0":            "limit",
		"/api/v1/messages?limit=501":          "limit",
		"/api/v1/messages?limit=ten":          "limit",
		"/api/v1/messages?since=yesterday":    "since",
		"/api/v1/messages?until=2026-13-01":   "until",
		"/api/v1/messages?direction=sideways": "direction",
		"/api/v1/messages?cursor=abc":         "cursor",
		"/api/v1/messages?colour=red":         "colour",
	} {
		r := e.do(t, "GET", path, "", nil, token)
		if r.status != 400 || decode[map[string]string](t, r)["parameter"] != param || !strings.Contains(string(r.body), param) {
			t.Errorf("GET %s = %d %s, want 400 naming %q", path, r.status, r.body, param)
		}
	}
	for _, path := range []string{"/api/v1/messages/999999", "/api/v1/messages/abc", "/api/v1/messages/999999/payload", "/api/v1/messages/999999/mdn"} {
		if r := e.do(t, "GET", path, "", nil, token); r.status != 404 {
			t.Errorf("GET %s = %d, want 404", path, r.status)
		}
	}
}

// pageIDs follows next_cursor from path (which sets limit) to the last
// page and returns the ids of every page in order; ids reads a page of L.
// A page longer than limit, or more pages than the ids could fill, fails.
func pageIDs[L any](t *testing.T, e *env, path string, limit int, ids func(L) ([]int64, string)) []int64 {
	t.Helper()
	var all []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("GET %s: pagination does not end", path)
		}
		p := path
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		got, next := ids(decode[L](t, e.do(t, "GET", p, "", nil, token)))
		if len(got) > limit {
			t.Fatalf("GET %s: page of %d, want at most %d", p, len(got), limit)
		}
		all = append(all, got...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// TestListMDNsPagination pages through the MDN inbox two at a time:
// newest first, each MDN once, and the state filter and its errors.
func TestListMDNsPagination(t *testing.T) {
	e := setup(t)
	var want []int64
	for i := range 5 {
		id, err := e.store.SaveInboxMDN(context.Background(), &postgres.InboxMDN{
			AS2From: "ACME CORP", AS2To: "EDIHUB", OriginalMessageID: fmt.Sprintf("<m%d@x>", i),
			Header: http.Header{"Content-Type": {"multipart/report; report-type=disposition-notification; boundary=b"}},
			Body:   []byte("--b--\r\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]int64{id}, want...)
	}
	got := pageIDs(t, e, "/api/v1/mdns?state=pending&limit=2", 2, func(l api.MDNList) ([]int64, string) {
		var ids []int64
		for _, m := range l.MDNs {
			ids = append(ids, m.ID)
		}
		return ids, l.NextCursor
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MDN pages (-want +got):\n%s", diff)
	}
	if l := decode[api.MDNList](t, e.do(t, "GET", "/api/v1/mdns?state=processed", "", nil, token)); len(l.MDNs) != 0 || l.NextCursor != "" {
		t.Errorf("processed MDNs = %+v, want none", l)
	}
	if r := e.do(t, "GET", "/api/v1/mdns?state=lost", "", nil, token); r.status != 400 || decode[map[string]string](t, r)["parameter"] != "state" {
		t.Errorf("GET /api/v1/mdns?state=lost = %d %s, want 400 naming state", r.status, r.body)
	}
}

// TestPayloadStoredZlib: a payload stored as the zlib stream it arrived
// in (a large compressed receive) comes back inflated, its entity
// header skipped, byte for byte, with the payload's Content-Length; the
// message reports the payload's size.
func TestPayloadStoredZlib(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	payload := bytes.Repeat([]byte("LIN*1*VP*ITEM~\n"), (5<<20)/15)
	const header = "Content-Type: application/EDI-X12\r\nContent-Disposition: attachment; filename=big.x12\r\n\r\n"
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write(append([]byte(header), payload...))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	stage, err := e.store.StageInboundPayload(ctx, "ACME CORP")
	if err != nil {
		t.Fatal(err)
	}
	defer stage.Abort()
	_, _ = stage.Write(z.Bytes())
	id, err := e.store.SaveInbound(ctx, &postgres.InboundMessage{Partner: "ACME CORP", AS2From: "ACME CORP", AS2To: "EDIHUB",
		MessageID: "<zlib@acme>", Status: postgres.InboundProcessed, MDNMode: "none", ContentType: "application/EDI-X12", Filename: "big.x12",
		PayloadSize: int64(len(payload)), Staged: stage, StagedZlib: true, ZlibSkip: int64(len(header))})
	if err != nil {
		t.Fatal(err)
	}
	p := e.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d/payload", id), "", nil, token)
	if p.status != 200 || !bytes.Equal(p.body, payload) || p.header.Get("Content-Length") != strconv.Itoa(len(payload)) {
		t.Errorf("payload = %d, %d bytes, Content-Length %q; want 200, %d bytes", p.status, len(p.body), p.header.Get("Content-Length"), len(payload))
	}
	if m := decode[api.Message](t, e.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", id), "", nil, token)); m.Size != int64(len(payload)) {
		t.Errorf("message size = %d, want %d", m.Size, len(payload))
	}
}

// TestPayloadStreamed: a payload stored in pieces (a large inbound
// message) comes back whole, with its Content-Length.
func TestPayloadStreamed(t *testing.T) {
	e := setup(t)
	payload := bytes.Repeat([]byte("LIN*1*VP*ITEM~\n"), (5<<20)/15)
	id, err := e.store.SaveInbound(context.Background(), &postgres.InboundMessage{Partner: "ACME CORP", AS2From: "ACME CORP", AS2To: "EDIHUB",
		MessageID: "<large@acme>", Status: postgres.InboundProcessed, MDNMode: "none", ContentType: "application/EDI-X12", Filename: "big.x12",
		PayloadSize: int64(len(payload)), PayloadOpen: func() io.Reader { return bytes.NewReader(payload) }})
	if err != nil {
		t.Fatal(err)
	}
	p := e.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d/payload", id), "", nil, token)
	if p.status != 200 || !bytes.Equal(p.body, payload) || p.header.Get("Content-Length") != strconv.Itoa(len(payload)) {
		t.Errorf("payload = %d, %d bytes, Content-Length %q; want 200, %d bytes", p.status, len(p.body), p.header.Get("Content-Length"), len(payload))
	}
}
