package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	yaml "go.yaml.in/yaml/v3"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// servedRevision is what the partners API's ServedRevision answers: the
// revision GET /partners reports this replica serves.
const servedRevision = 42

// The partner's certificate is made once per test binary: RSA key
// generation is slow under the race detector.
var (
	partnerCertOnce sync.Once
	partnerCert     string
	partnerCertErr  error
)

func partnerCertPEM(t *testing.T) string {
	t.Helper()
	partnerCertOnce.Do(func() {
		var id *devpki.Identity
		if id, partnerCertErr = devpki.New("partner", devpki.Options{}); partnerCertErr == nil {
			partnerCert = string(id.CertPEM())
		}
	})
	if partnerCertErr != nil {
		t.Fatalf("devpki: %v", partnerCertErr)
	}
	return partnerCert
}

// setupPartners is the API with the partner routes, as edihub serve mounts
// it (bearer token, the body limit of -max-body-bytes' default, which is
// far above the partner routes' own), over a real partners.Service on a
// fresh database. Profiles are checked against a station file without
// partners.
func setupPartners(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	sk, sc := writeIdentity(t, dir, "station")
	path := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "station: {as2_id: EDIHUB, private_key: %q, certificate: %q}\n", sk, sc), 0o644); err != nil {
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
	svc := &partners.Service{Store: st, Base: func() *config.File { return cfg }}
	h, err := api.New(api.Options{Queue: q, Store: st, Logger: log, Partners: svc, PartnerReader: st,
		ServedRevision: func() int64 { return servedRevision }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: log, Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 100 << 20, API: h, APIToken: token,
	}))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, store: st, cfg: cfg, dbURL: dbURL}
}

// call makes an API request with the token and the header fields given
// as name, value pairs.
func (e *env) call(t *testing.T, method, path string, body []byte, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

// entry is a partner entry as a client sends it: the certificate as PEM
// text. Only strings and booleans, so that it compares with the JSON the
// API answers.
func entry(t *testing.T, as2ID, sign string) map[string]any {
	t.Helper()
	return map[string]any{
		"as2_id": as2ID, "url": "https://as2.partner.example/as2", "certificate": partnerCertPEM(t),
		"sign": sign, "encrypt": "aes256-cbc", "mdn": "sync", "mdn_signed": true,
	}
}

func jsonBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func yamlBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// partnerPath is the API path of a partner, its AS2 ID percent-encoded.
func partnerPath(as2ID string) string { return "/api/v1/partners/" + url.PathEscape(as2ID) }

// partnerState is everything stored about partners: what a refused
// request must leave as it was.
type partnerState struct {
	Set     postgres.PartnerSet
	History []postgres.PartnerHistoryEntry
}

func (e *env) partnerState(t *testing.T) partnerState {
	t.Helper()
	ctx := context.Background()
	set, err := e.store.Partners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.store.PartnerHistory(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return partnerState{Set: set, History: h}
}

// apiErr is every error body of the partner routes: the API's
// {error, parameter} and the profile errors' {error, field, line, fix}.
type apiErr struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter"`
	Field     string `json:"field"`
	Line      int    `json:"line"`
	Fix       string `json:"fix"`
}

// create POSTs the entry as JSON and fails the test unless it is created.
func (e *env) create(t *testing.T, ent map[string]any) api.Partner {
	t.Helper()
	r := e.call(t, http.MethodPost, "/api/v1/partners", jsonBody(t, ent), "Content-Type", "application/json")
	if r.status != http.StatusCreated {
		t.Fatalf("POST /api/v1/partners %s = %d %s, want 201", ent["as2_id"], r.status, r.body)
	}
	return decode[api.Partner](t, r)
}

// TestPartnersAPIRequiresToken: every partner route, mounted as edihub
// serve mounts the API, answers 401 without the bearer token or with a
// wrong one, and changes nothing.
func TestPartnersAPIRequiresToken(t *testing.T) {
	e := setupPartners(t)
	e.create(t, entry(t, "GLOBEX", "sha-256"))
	before := e.partnerState(t)
	body := jsonBody(t, entry(t, "GLOBEX", "sha-512"))
	routes := []struct{ method, path string }{
		{http.MethodGet, "/api/v1/partners"},
		{http.MethodPost, "/api/v1/partners"},
		{http.MethodGet, "/api/v1/partners/GLOBEX"},
		{http.MethodPut, "/api/v1/partners/GLOBEX"},
		{http.MethodDelete, "/api/v1/partners/GLOBEX"},
		{http.MethodGet, "/api/v1/partners/GLOBEX/history"},
		{http.MethodPost, "/api/v1/partners/GLOBEX/restore?version=1"},
	}
	for _, tok := range []string{"", "wrong"} {
		for _, rt := range routes {
			r := e.do(t, rt.method, rt.path, "application/json", body, tok)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q = %d %s, want 401", rt.method, rt.path, tok, r.status, r.body)
			}
		}
	}
	if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
		t.Errorf("requests without the token changed the partners (-before +after):\n%s", diff)
	}
}

// TestPartnersAPICreate: POST /partners stores an entry sent as JSON or as
// YAML: 201 with the partner's Location and ETag "1", its profile echoed
// with the keys sent, unchanged; the Location reads it back, its AS2 ID
// percent-encoded; the change is recorded with the API's actor.
func TestPartnersAPICreate(t *testing.T) {
	e := setupPartners(t)
	tests := []struct {
		name string
		give map[string]any
		body func(*testing.T, any) []byte
		ct   string
	}{
		{"json", entry(t, "GLOBEX", "sha-256"), jsonBody, "application/json"},
		{"yaml, AS2 ID with a space", entry(t, "ACME CORP", "sha-512"), yamlBody, "application/yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.give["as2_id"].(string)
			r := e.call(t, http.MethodPost, "/api/v1/partners", tt.body(t, tt.give), "Content-Type", tt.ct)
			if r.status != http.StatusCreated {
				t.Fatalf("POST /api/v1/partners = %d %s, want 201", r.status, r.body)
			}
			p := decode[api.Partner](t, r)
			if loc := r.header.Get("Location"); loc != partnerPath(id) || p.Location != loc {
				t.Errorf("Location %q, body location %q, want %q", loc, p.Location, partnerPath(id))
			}
			if et := r.header.Get("ETag"); et != `"1"` {
				t.Errorf("ETag = %s, want \"1\"", et)
			}
			if p.AS2ID != id || p.Version != 1 || p.Revision < 1 || p.UpdatedBy != "bootstrap-token from 127.0.0.1" || time.Since(p.UpdatedAt) > time.Minute {
				t.Errorf("created %+v, want %s version 1 by bootstrap-token from 127.0.0.1, just now", p, id)
			}
			if diff := cmp.Diff(tt.give, p.Spec); diff != "" {
				t.Errorf("spec echoed (-sent +answered):\n%s", diff)
			}

			got := e.call(t, http.MethodGet, r.header.Get("Location"), nil)
			if got.status != http.StatusOK || got.header.Get("ETag") != `"1"` {
				t.Fatalf("GET %s = %d %s (ETag %s), want 200 with ETag \"1\"", r.header.Get("Location"), got.status, got.body, got.header.Get("ETag"))
			}
			if diff := cmp.Diff(p, decode[api.Partner](t, got)); diff != "" {
				t.Errorf("GET %s differs from the POST's answer (-POST +GET):\n%s", r.header.Get("Location"), diff)
			}
		})
	}
}

// TestPartnersAPICreateRefused: a create of a partner that exists (409),
// of a profile that does not validate (422 naming the field, with the
// fix), of an empty or oversized body stores nothing.
func TestPartnersAPICreateRefused(t *testing.T) {
	e := setupPartners(t)
	e.create(t, entry(t, "GLOBEX", "sha-256"))
	before := e.partnerState(t)

	md5 := entry(t, "INITECH", "md5")
	unknownKey := entry(t, "INITECH", "sha-256")
	unknownKey["colour"] = "blue"
	notPEM := entry(t, "INITECH", "sha-256")
	notPEM["certificate"] = "initech.crt"
	serverPath := entry(t, "INITECH", "sha-256")
	serverPath["certificate"] = "station.crt" // beside the station file
	noURL := entry(t, "INITECH", "sha-256")
	delete(noURL, "url")
	tests := []struct {
		name       string
		give       []byte
		wantStatus int
		wantField  string // of a 422
		wantText   string
	}{
		{"exists", jsonBody(t, entry(t, "GLOBEX", "sha-512")), http.StatusConflict, "", `"GLOBEX" exists already (version 1)`},
		{"sign md5", jsonBody(t, md5), http.StatusUnprocessableEntity, "sign", `"md5"`},
		{"sign md5 in YAML", yamlBody(t, md5), http.StatusUnprocessableEntity, "sign", `"md5"`},
		{"unknown key", jsonBody(t, unknownKey), http.StatusUnprocessableEntity, "colour", "colour"},
		{"certificate neither PEM nor a file", jsonBody(t, notPEM), http.StatusUnprocessableEntity, "certificate", "not PEM text"},
		// A path is never read on the server, not even one that exists
		// there: the API would otherwise tell which files exist.
		{"certificate a path on the server", jsonBody(t, serverPath), http.StatusUnprocessableEntity, "certificate", "not PEM text"},
		{"no url", jsonBody(t, noURL), http.StatusUnprocessableEntity, "url", "missing"},
		{"not YAML", []byte("as2_id: [unclosed"), http.StatusUnprocessableEntity, "", ""},
		{"empty", []byte(" \n"), http.StatusBadRequest, "", "empty body"},
		// Above the partner routes' own limit, far below the router's.
		{"over 1 MiB", append(jsonBody(t, md5), bytes.Repeat([]byte(" "), 1<<20)...), http.StatusRequestEntityTooLarge, "", "larger than 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(t, http.MethodPost, "/api/v1/partners", tt.give)
			got := decode[apiErr](t, r)
			if r.status != tt.wantStatus || !strings.Contains(got.Error, tt.wantText) {
				t.Fatalf("POST /api/v1/partners = %d %s, want %d mentioning %q", r.status, r.body, tt.wantStatus, tt.wantText)
			}
			if tt.wantStatus == http.StatusUnprocessableEntity && (got.Field != tt.wantField || got.Fix == "") {
				t.Errorf("POST /api/v1/partners = %s, want field %q and a fix", r.body, tt.wantField)
			}
			if strings.Contains(string(r.body), "BEGIN CERTIFICATE") {
				t.Errorf("error answer quotes the certificate: %s", r.body)
			}
			if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
				t.Errorf("a refused create changed the partners (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPartnersAPIPathEscaping: partners whose AS2 IDs hold characters
// that are special in a URL path are read, updated, listed in their
// history and deleted at the path their Location gives (the AS2 ID
// percent-encoded), and at no other partner's.
func TestPartnersAPIPathEscaping(t *testing.T) {
	e := setupPartners(t)
	ids := []string{"ACME CORP", "ACME/EU", "50%41", "ACME/EU%41", "Q?x=1#y", "a+b"}
	for _, id := range ids {
		e.create(t, entry(t, id, "sha-256"))
	}
	// A partner that a path decoded twice would find instead of "50%41".
	e.create(t, entry(t, "50A", "sha-256"))
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			path := partnerPath(id)
			r := e.call(t, http.MethodGet, path, nil)
			if r.status != http.StatusOK || decode[api.Partner](t, r).AS2ID != id {
				t.Fatalf("GET %s = %d %s, want partner %q", path, r.status, r.body, id)
			}
			r = e.call(t, http.MethodPut, path, jsonBody(t, entry(t, id, "sha-512")), "If-Match", `"1"`)
			if r.status != http.StatusOK || r.header.Get("ETag") != `"2"` {
				t.Fatalf("PUT %s = %d %s, want 200 with ETag \"2\"", path, r.status, r.body)
			}
			r = e.call(t, http.MethodGet, path+"/history", nil)
			h := decode[struct{ History []api.HistoryEntry }](t, r)
			if r.status != http.StatusOK || len(h.History) != 2 || h.History[0].AS2ID != id {
				t.Errorf("GET %s/history = %d %s, want %q's two changes", path, r.status, r.body, id)
			}
			if r := e.call(t, http.MethodDelete, path, nil, "If-Match", `"2"`); r.status != http.StatusOK {
				t.Errorf("DELETE %s = %d %s, want 200", path, r.status, r.body)
			}
			if r := e.call(t, http.MethodGet, path, nil); r.status != http.StatusNotFound {
				t.Errorf("GET %s after the delete = %d, want 404", path, r.status)
			}
		})
	}
	r := e.call(t, http.MethodGet, "/api/v1/partners/50A", nil)
	if p := decode[api.Partner](t, r); r.status != http.StatusOK || p.Version != 1 {
		t.Errorf("GET /api/v1/partners/50A = %d %s, want it untouched at version 1", r.status, r.body)
	}
}

// TestPartnersAPIGetYAML: ?format=yaml answers the stored entry as YAML
// with the ETag; it decodes to the keys sent, and PUT back unchanged it
// makes no new version.
func TestPartnersAPIGetYAML(t *testing.T) {
	e := setupPartners(t)
	sent := entry(t, "ACME CORP", "sha-256")
	e.create(t, sent)
	r := e.call(t, http.MethodGet, partnerPath("ACME CORP")+"?format=yaml", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/yaml" || r.header.Get("ETag") != `"1"` {
		t.Fatalf("GET ?format=yaml = %d, Content-Type %q, ETag %s; want 200 application/yaml \"1\"\n%s", r.status, r.header.Get("Content-Type"), r.header.Get("ETag"), r.body)
	}
	var got map[string]any
	if err := yaml.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("GET ?format=yaml answered %q: %v", r.body, err)
	}
	if diff := cmp.Diff(sent, got); diff != "" {
		t.Errorf("GET ?format=yaml (-sent +answered):\n%s", diff)
	}
	if _, err := config.DecodeSpec("answer", string(r.body)); err != nil {
		t.Errorf("the YAML answer is not a partner entry: %v", err)
	}
	before := e.partnerState(t)
	put := e.call(t, http.MethodPut, partnerPath("ACME CORP"), r.body, "If-Match", r.header.Get("ETag"), "Content-Type", "application/yaml")
	if put.status != http.StatusOK || put.header.Get("ETag") != `"1"` {
		t.Errorf("PUT of the YAML as read = %d %s (ETag %s), want 200 with ETag \"1\"", put.status, put.body, put.header.Get("ETag"))
	}
	if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
		t.Errorf("PUT of an unchanged profile changed the partners (-before +after):\n%s", diff)
	}
}

// TestPartnersAPIUpdate: PUT needs If-Match with the version read (428
// without, 400 unparsable); the body's as2_id must be the URL's (400);
// a profile that does not validate is a 422; an unknown partner a 404.
// None of these changes anything. With the current version it updates
// (200, ETag "2"); the old version then is stale (412) and changes
// nothing.
func TestPartnersAPIUpdate(t *testing.T) {
	e := setupPartners(t)
	e.create(t, entry(t, "GLOBEX", "sha-256"))
	path := partnerPath("GLOBEX")
	before := e.partnerState(t)

	bad := entry(t, "GLOBEX", "sha-256")
	bad["mdn"] = "sometimes"
	refused := []struct {
		name       string
		path       string
		give       map[string]any
		ifMatch    string
		wantStatus int
		wantParam  string // parameter of a 4xx, or field of a 422
	}{
		{"no If-Match", path, entry(t, "GLOBEX", "sha-512"), "", http.StatusPreconditionRequired, "If-Match"},
		{"If-Match not a version", path, entry(t, "GLOBEX", "sha-512"), `"v1"`, http.StatusBadRequest, "If-Match"},
		{"other as2_id in the body", path, entry(t, "INITECH", "sha-512"), `"1"`, http.StatusBadRequest, "as2_id"},
		{"mdn sometimes", path, bad, `"1"`, http.StatusUnprocessableEntity, "mdn"},
		{"unknown partner", partnerPath("NOBODY"), entry(t, "NOBODY", "sha-512"), `"1"`, http.StatusNotFound, ""},
		{"future version", path, entry(t, "GLOBEX", "sha-512"), `"2"`, http.StatusPreconditionFailed, "If-Match"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.ifMatch != "" {
				hdr = []string{"If-Match", tt.ifMatch}
			}
			r := e.call(t, http.MethodPut, tt.path, jsonBody(t, tt.give), hdr...)
			got := decode[apiErr](t, r)
			if param := got.Parameter + got.Field; r.status != tt.wantStatus || param != tt.wantParam || got.Error == "" {
				t.Errorf("PUT %s = %d %s, want %d naming %q", tt.path, r.status, r.body, tt.wantStatus, tt.wantParam)
			}
			if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
				t.Errorf("a refused PUT changed the partners (-before +after):\n%s", diff)
			}
		})
	}

	want := entry(t, "GLOBEX", "sha-512")
	r := e.call(t, http.MethodPut, path, jsonBody(t, want), "If-Match", `"1"`)
	if r.status != http.StatusOK || r.header.Get("ETag") != `"2"` || r.header.Get("Location") != path {
		t.Fatalf("PUT with If-Match \"1\" = %d %s (ETag %s, Location %s), want 200, ETag \"2\"", r.status, r.body, r.header.Get("ETag"), r.header.Get("Location"))
	}
	p := decode[api.Partner](t, r)
	if diff := cmp.Diff(want, p.Spec); p.Version != 2 || diff != "" {
		t.Errorf("updated partner version %d, spec (-sent +answered):\n%s", p.Version, diff)
	}
	after := e.partnerState(t)

	r = e.call(t, http.MethodPut, path, jsonBody(t, entry(t, "GLOBEX", "sha-384")), "If-Match", `"1"`)
	if got := decode[apiErr](t, r); r.status != http.StatusPreconditionFailed || got.Parameter != "If-Match" || !strings.Contains(got.Error, "is at version 2") {
		t.Errorf("PUT with the stale If-Match \"1\" = %d %s, want 412 saying it is at version 2", r.status, r.body)
	}
	if diff := cmp.Diff(after, e.partnerState(t)); diff != "" {
		t.Errorf("a stale PUT changed the partners (-before +after):\n%s", diff)
	}
	if got := decode[api.Partner](t, e.call(t, http.MethodGet, path, nil)); got.Version != 2 || got.Spec["sign"] != "sha-512" {
		t.Errorf("after the stale PUT: version %d, sign %v; want version 2, sha-512", got.Version, got.Spec["sign"])
	}
	r = e.call(t, http.MethodPut, path, append(jsonBody(t, want), bytes.Repeat([]byte(" "), 1<<20)...), "If-Match", `"2"`)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT of over 1 MiB = %d %s, want 413", r.status, r.body)
	}
}

// TestPartnersAPIHistoryRestoreDelete: the history lists each change
// newest first with its version, operation, actor and diff (certificates
// described, never as PEM); restore makes version 1 current again as
// version 3; a delete against a stale version is refused (412) and
// changes nothing; a delete removes the partner (then 404), keeps its
// history, and a restore brings it back.
func TestPartnersAPIHistoryRestoreDelete(t *testing.T) {
	e := setupPartners(t)
	const id = "ACME CORP"
	path := partnerPath(id)
	v1 := e.create(t, entry(t, id, "sha-256"))
	if r := e.call(t, http.MethodPut, path, jsonBody(t, entry(t, id, "sha-512")), "If-Match", `"1"`); r.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}

	const actor = "bootstrap-token from 127.0.0.1"
	history := func(t *testing.T) []api.HistoryEntry {
		t.Helper()
		r := e.call(t, http.MethodGet, path+"/history", nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s/history = %d %s", path, r.status, r.body)
		}
		h := decode[struct {
			History []api.HistoryEntry `json:"history"`
		}](t, r).History
		for _, he := range h {
			if he.Actor != actor || he.AS2ID != id || time.Since(he.ChangedAt) > time.Minute {
				t.Errorf("history entry %+v, want %s changed just now by %q", he, id, actor)
			}
			if strings.Contains(strings.Join(he.Diff, "\n"), "BEGIN CERTIFICATE") {
				t.Errorf("history diff of version %d shows PEM: %q", he.Version, he.Diff)
			}
		}
		return h
	}
	h := history(t)
	if len(h) != 2 {
		t.Fatalf("history has %d entries, want 2: %+v", len(h), h)
	}
	if got := h[0]; got.Op != "update" || got.Version != 2 || !cmp.Equal(got.Diff, []string{`~ sign: "sha-256" → "sha-512"`}) {
		t.Errorf("history[0] = %+v, want the update to version 2 with diff [~ sign: \"sha-256\" → \"sha-512\"]", got)
	}
	create := h[1]
	if create.Op != "create" || create.Version != 1 || create.Revision >= h[0].Revision {
		t.Errorf("history[1] = %+v, want the create of version 1 before the update", create)
	}
	for _, want := range []string{`+ as2_id: "ACME CORP"`, `+ sign: "sha-256"`, `+ mdn_signed: true`, `+ certificate: [certificate "partner" serial `} {
		if !strings.Contains(strings.Join(create.Diff, "\n"), want) {
			t.Errorf("create diff %q lacks %q", create.Diff, want)
		}
	}

	// Restore.
	for _, tt := range []struct {
		name, query, ifMatch string
		wantStatus           int
	}{
		{"no version", "", "", http.StatusBadRequest},
		{"version not a number", "?version=first", "", http.StatusBadRequest},
		{"version never stored", "?version=9", "", http.StatusNotFound},
		{"stale If-Match", "?version=1", `"1"`, http.StatusPreconditionFailed},
	} {
		t.Run("restore "+tt.name, func(t *testing.T) {
			before := e.partnerState(t)
			var hdr []string
			if tt.ifMatch != "" {
				hdr = []string{"If-Match", tt.ifMatch}
			}
			if r := e.call(t, http.MethodPost, path+"/restore"+tt.query, nil, hdr...); r.status != tt.wantStatus {
				t.Errorf("POST %s/restore%s = %d %s, want %d", path, tt.query, r.status, r.body, tt.wantStatus)
			}
			if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
				t.Errorf("a refused restore changed the partners (-before +after):\n%s", diff)
			}
		})
	}
	r := e.call(t, http.MethodPost, path+"/restore?version=1", nil)
	if r.status != http.StatusOK || r.header.Get("ETag") != `"3"` {
		t.Fatalf("POST restore?version=1 = %d %s (ETag %s), want 200 with ETag \"3\"", r.status, r.body, r.header.Get("ETag"))
	}
	if p := decode[api.Partner](t, r); p.Version != 3 || !cmp.Equal(p.Spec, v1.Spec) {
		t.Errorf("restored: version %d, spec %v; want version 3 with version 1's spec %v", p.Version, p.Spec, v1.Spec)
	}
	if got := history(t)[0]; got.Op != "restore" || got.Version != 3 || !cmp.Equal(got.Diff, []string{`~ sign: "sha-512" → "sha-256"`}) {
		t.Errorf("history[0] after the restore = %+v, want restore of version 3, sign back to sha-256", got)
	}

	// Delete.
	before := e.partnerState(t)
	r = e.call(t, http.MethodDelete, path, nil, "If-Match", `"2"`)
	if got := decode[apiErr](t, r); r.status != http.StatusPreconditionFailed || got.Parameter != "If-Match" {
		t.Errorf("DELETE with the stale If-Match \"2\" = %d %s, want 412 naming If-Match", r.status, r.body)
	}
	if diff := cmp.Diff(before, e.partnerState(t)); diff != "" {
		t.Errorf("a stale DELETE changed the partners (-before +after):\n%s", diff)
	}
	r = e.call(t, http.MethodDelete, path, nil)
	del := decode[struct {
		Deleted  string `json:"deleted"`
		Revision int64  `json:"revision"`
	}](t, r)
	if r.status != http.StatusOK || del.Deleted != id || del.Revision <= before.Set.Revision {
		t.Fatalf("DELETE %s = %d %s, want 200 naming %q with a new revision", path, r.status, r.body, id)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, path}, {http.MethodGet, path + "?format=yaml"}, {http.MethodDelete, path},
	} {
		if r := e.call(t, c.method, c.path, nil); r.status != http.StatusNotFound {
			t.Errorf("%s %s after the delete = %d %s, want 404", c.method, c.path, r.status, r.body)
		}
	}
	if r := e.call(t, http.MethodPut, path, jsonBody(t, entry(t, id, "sha-256")), "If-Match", `"3"`); r.status != http.StatusNotFound {
		t.Errorf("PUT %s after the delete = %d %s, want 404", path, r.status, r.body)
	}
	h = history(t)
	if len(h) != 4 || h[0].Op != "delete" || h[0].Version != 4 || !strings.Contains(strings.Join(h[0].Diff, "\n"), `- as2_id: "ACME CORP"`) || h[0].Spec != nil {
		t.Errorf("history after the delete = %+v, want 4 entries, the delete (version 4, every key removed, no spec) first", h)
	}
	r = e.call(t, http.MethodPost, path+"/restore?version=2", nil)
	if p := decode[api.Partner](t, r); r.status != http.StatusOK || p.Version != 5 || p.Spec["sign"] != "sha-512" {
		t.Errorf("restore of a deleted partner = %d %s, want version 5 with version 2's sign sha-512", r.status, r.body)
	}
}

// TestPartnersAPIUnknown: every route of a partner never stored is a 404.
func TestPartnersAPIUnknown(t *testing.T) {
	e := setupPartners(t)
	path := partnerPath("NOBODY")
	for _, c := range []struct {
		method, path string
		body         []byte
		ifMatch      string
	}{
		{http.MethodGet, path, nil, ""},
		{http.MethodGet, path + "?format=yaml", nil, ""},
		{http.MethodPut, path, jsonBody(t, entry(t, "NOBODY", "sha-256")), `"1"`},
		{http.MethodDelete, path, nil, ""},
		{http.MethodDelete, path, nil, `"1"`},
		{http.MethodGet, path + "/history", nil, ""},
		{http.MethodPost, path + "/restore?version=1", nil, ""},
	} {
		var hdr []string
		if c.ifMatch != "" {
			hdr = []string{"If-Match", c.ifMatch}
		}
		r := e.call(t, c.method, c.path, c.body, hdr...)
		if r.status != http.StatusNotFound || !strings.Contains(decode[apiErr](t, r).Error, "NOBODY") {
			t.Errorf("%s %s (If-Match %s) = %d %s, want 404 naming NOBODY", c.method, c.path, c.ifMatch, r.status, r.body)
		}
	}
	if s := e.partnerState(t); len(s.History) != 0 {
		t.Errorf("requests for an unknown partner recorded %+v", s.History)
	}
}

// TestPartnersAPIList: GET /partners lists the partners by AS2 ID with
// their locations, the set's revision, the revision this replica serves
// and every replica seen lately, marked behind when it serves an older
// revision than the stored one.
func TestPartnersAPIList(t *testing.T) {
	e := setupPartners(t)
	r := e.call(t, http.MethodGet, "/api/v1/partners", nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), "null") {
		t.Fatalf("GET /api/v1/partners with none stored = %d %s, want 200 with empty lists", r.status, r.body)
	}
	if l := decode[api.PartnerList](t, r); l.Revision != 0 || l.ServedRevision != servedRevision || len(l.Partners) != 0 || len(l.Replicas) != 0 {
		t.Errorf("GET /api/v1/partners with none stored = %+v", l)
	}

	e.create(t, entry(t, "GLOBEX", "sha-256"))
	e.create(t, entry(t, "ACME CORP", "sha-256"))
	if r := e.call(t, http.MethodPut, partnerPath("GLOBEX"), jsonBody(t, entry(t, "GLOBEX", "sha-512")), "If-Match", `"1"`); r.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	ctx := context.Background()
	rev, err := e.store.PartnerRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	for identity, served := range map[string]int64{"replica-a": rev, "replica-b": rev - 1} {
		if err := e.store.RecordServedRevision(ctx, identity, served, applied); err != nil {
			t.Fatal(err)
		}
	}

	l := decode[api.PartnerList](t, e.call(t, http.MethodGet, "/api/v1/partners", nil))
	if l.Revision != rev || rev != 3 || l.ServedRevision != servedRevision {
		t.Errorf("revision %d, served_revision %d; want %d (three changes) and %d", l.Revision, l.ServedRevision, rev, servedRevision)
	}
	wantReplicas := []api.ReplicaServing{
		{Identity: "replica-a", Revision: rev, AppliedAt: applied, Behind: false},
		{Identity: "replica-b", Revision: rev - 1, AppliedAt: applied, Behind: true},
	}
	if diff := cmp.Diff(wantReplicas, l.Replicas, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
	var got []string
	for _, p := range l.Partners {
		got = append(got, fmt.Sprintf("%s v%d %s %v", p.AS2ID, p.Version, p.Location, p.Spec["sign"]))
	}
	want := []string{"ACME CORP v1 /api/v1/partners/ACME%20CORP sha-256", "GLOBEX v2 /api/v1/partners/GLOBEX sha-512"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partners (-want +got):\n%s", diff)
	}
}

// TestPartnersAPIListStoppedReplica: a replica that stopped recording its
// revision (killed) longer than partners.StoppedAfter ago is not listed
// and not counted as behind, though it served an older revision; the
// replica that records on time is listed.
func TestPartnersAPIListStoppedReplica(t *testing.T) {
	e := setupPartners(t)
	e.create(t, entry(t, "GLOBEX", "sha-256"))
	ctx := context.Background()
	rev, err := e.store.PartnerRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	for identity, served := range map[string]int64{"replica-live": rev, "replica-killed": rev - 1} {
		if err := e.store.RecordServedRevision(ctx, identity, served, applied); err != nil {
			t.Fatal(err)
		}
	}
	// Its last record a little over three heartbeats ago, by the
	// database's clock (the one ServedRevisions compares with).
	c := pgtest.Conn(t, e.dbURL)
	if _, err := c.Exec(ctx, `UPDATE partner_replicas SET seen_at = now() - make_interval(secs => $1) WHERE identity = 'replica-killed'`,
		(partners.StoppedAfter + 10*time.Second).Seconds()); err != nil {
		t.Fatal(err)
	}
	l := decode[api.PartnerList](t, e.call(t, http.MethodGet, "/api/v1/partners", nil))
	want := []api.ReplicaServing{{Identity: "replica-live", Revision: rev, AppliedAt: applied, Behind: false}}
	if diff := cmp.Diff(want, l.Replicas, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("GET /api/v1/partners replicas (-want +got):\n%s", diff)
	}
}

// TestPartnersAPIErrorLine: the line of a 422 is the line of the request
// body, for YAML and for JSON written over several lines.
func TestPartnersAPIErrorLine(t *testing.T) {
	e := setupPartners(t)
	tests := []struct {
		name string
		give string
		want int
	}{
		{"yaml, line 3", "as2_id: INITECH\nurl: https://as2.initech.example/as2\nsign: md5\ncertificate: |\n  " +
			strings.ReplaceAll(strings.TrimSpace(partnerCertPEM(t)), "\n", "\n  ") + "\n", 3},
		{"json, line 4", "{\n  \"as2_id\": \"INITECH\",\n  \"url\": \"https://as2.initech.example/as2\",\n  \"sign\": \"md5\",\n  \"certificate\": " +
			strconv.Quote(partnerCertPEM(t)) + "\n}\n", 4},
		{"yaml, unknown key on line 2", "as2_id: INITECH\ncolour: blue\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(t, http.MethodPost, "/api/v1/partners", []byte(tt.give))
			var got struct {
				Line int `json:"line"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusUnprocessableEntity || got.Line != tt.want {
				t.Errorf("POST /api/v1/partners = %d %s, want 422 at line %d", r.status, r.body, tt.want)
			}
		})
	}
}
