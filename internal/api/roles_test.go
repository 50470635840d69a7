package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// cheap are argon2id parameters that keep the tests fast.
var cheap = auth.Params{Memory: 64, Time: 1, Threads: 1}

// rolesEnv is the API with every route, as edihub serve mounts it (a
// store-backed Authenticator with the bootstrap token, the audit log, the
// users), and a user of each role with a token: carl (viewer), olga
// (operator), alice (admin).
type rolesEnv struct {
	url     string
	dbURL   string
	store   *postgres.Store
	handler http.Handler
	tokens  map[string]string // user -> token "main"
}

func setupRoles(t *testing.T) *rolesEnv {
	t.Helper()
	dir := t.TempDir()
	sk, sc := writeIdentity(t, dir, "station")
	_, pc := writeIdentity(t, dir, "partner")
	path := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `station: {as2_id: EDIHUB, private_key: %q, certificate: %q}
partners:
  - {as2_id: "GLOBEX", url: "http://127.0.0.1:1/as2", certificate: %q, mdn: none}
`, sk, sc, pc), 0o644); err != nil {
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
	users := &auth.Users{Store: st, Params: cheap}
	reports := &report.Service{Store: st, Location: time.UTC, Now: time.Now,
		Builder: &report.Builder{Source: st, Station: "EDIHUB", Lease: "edihub-leader", Partners: []string{"GLOBEX"}, Now: time.Now}}
	h, err := api.New(api.Options{Queue: q, Store: st, Inbox: st, Resender: st, Tracer: st, Canceller: st, Reapplier: st, Interchanges: st, Logger: log, Reports: reports, Certificates: cfg.Certificates,
		Partners: &partners.Service{Store: st, Base: func() *config.File { return cfg }}, PartnerReader: st,
		TestPartner: func(_ context.Context, id string) (any, bool) {
			// A report as probe.Run makes them: at least one step.
			return probe.Report{Partner: id, URL: "http://127.0.0.1:1/as2", Started: time.Now(), OK: id == "GLOBEX",
				Steps: []probe.Step{{Name: probe.StepMessage, OK: id == "GLOBEX", Detail: "built the test message"}}}, id == "GLOBEX" || id == "NEWCO"
		},
		Connectors: &connectors.Service{Store: st}, ConnectorReader: st,
		Auditor: st, Audit: st, Users: users,
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Options{Store: st, BootstrapToken: token, Auditor: st, Params: cheap, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: log, Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 1 << 20, API: h, Authenticate: a.API,
	}))
	t.Cleanup(srv.Close)
	e := &rolesEnv{url: srv.URL, dbURL: dbURL, store: st, handler: h, tokens: map[string]string{}}
	cli := auth.Caller{Principal: auth.CLIPrincipal("root@test")}
	for _, u := range []struct {
		name string
		role auth.Role
	}{{"carl", auth.RoleViewer}, {"olga", auth.RoleOperator}, {"alice", auth.RoleAdmin}} {
		if _, err := users.Add(context.Background(), cli, u.name, u.role, "password of "+u.name); err != nil {
			t.Fatal(err)
		}
		tok, _, err := users.CreateToken(context.Background(), cli, u.name, auth.TokenRequest{Name: "main"})
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[u.name] = tok
	}
	e.tokens["bootstrap"] = token
	return e
}

// do makes a request with a token; body is sent as is.
func (e *rolesEnv) do(t *testing.T, tok, method, path string, body []byte, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

// sql runs statements on the test database directly.
func (e *rolesEnv) sql(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := pgtest.Conn(t, e.dbURL).Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// routeRole is one route of the API and the least role it needs. path
// is what the test requests: {user} is the caller's user name.
type routeRole struct {
	method, pattern string
	need            auth.Role
	path            string
	body            string
}

// routeRoles is every route of the API with its role: the table of
// docs/users.md. TestRouteRoles fails for a route served that is not here.
var routeRoles = []routeRole{
	{"GET", "/messages", auth.RoleViewer, "/messages", ""},
	{"GET", "/messages/{id}", auth.RoleViewer, "/messages/1", ""},
	{"GET", "/messages/{id}/trace", auth.RoleViewer, "/messages/1/trace", ""},
	{"GET", "/mdns", auth.RoleViewer, "/mdns", ""},
	{"GET", "/events", auth.RoleViewer, "/events", ""},
	{"GET", "/reports/{day}", auth.RoleViewer, "/reports/today", ""},
	{"GET", "/certificates", auth.RoleViewer, "/certificates", ""},
	{"GET", "/partners", auth.RoleViewer, "/partners", ""},
	{"GET", "/partners/{as2id}", auth.RoleViewer, "/partners/GLOBEX", ""},
	{"GET", "/partners/{as2id}/history", auth.RoleViewer, "/partners/GLOBEX/history", ""},
	{"GET", "/connectors", auth.RoleViewer, "/connectors", ""},
	{"GET", "/connectors/history", auth.RoleViewer, "/connectors/history", ""},
	{"GET", "/users/{name}/tokens", auth.RoleViewer, "/users/{user}/tokens", ""},
	{"POST", "/users/{name}/tokens", auth.RoleViewer, "/users/{user}/tokens", `{"name": "t-{method}"}`},
	{"DELETE", "/users/{name}/tokens/{token}", auth.RoleViewer, "/users/{user}/tokens/none", ""},
	{"GET", "/openapi.json", auth.RoleViewer, "/openapi.json", ""},

	{"GET", "/messages/{id}/payload", auth.RoleOperator, "/messages/1/payload", ""},
	{"GET", "/messages/{id}/mdn", auth.RoleOperator, "/messages/1/mdn", ""},
	{"POST", "/messages", auth.RoleOperator, "/messages?partner=GLOBEX", "doc"},
	{"POST", "/messages/{id}/resend", auth.RoleOperator, "/messages/1/resend", ""},
	{"POST", "/messages/{id}/cancel", auth.RoleOperator, "/messages/1/cancel", ""},
	{"POST", "/mdns/{id}/reapply", auth.RoleOperator, "/mdns/1/reapply", ""},
	{"POST", "/partners/{as2id}/test", auth.RoleOperator, "/partners/GLOBEX/test", ""},

	{"POST", "/partners", auth.RoleAdmin, "/partners", "{}"},
	{"PUT", "/partners/{as2id}", auth.RoleAdmin, "/partners/GLOBEX", "{}"},
	{"DELETE", "/partners/{as2id}", auth.RoleAdmin, "/partners/NOBODY", ""},
	{"POST", "/partners/{as2id}/restore", auth.RoleAdmin, "/partners/NOBODY/restore?version=1", ""},
	{"PUT", "/connectors", auth.RoleAdmin, "/connectors?dry_run=true", ""},
	{"POST", "/connectors/history/{revision}/restore", auth.RoleAdmin, "/connectors/history/99/restore", ""},
	{"GET", "/audit", auth.RoleAdmin, "/audit", ""},
	{"GET", "/users", auth.RoleAdmin, "/users", ""},
	{"POST", "/users", auth.RoleAdmin, "/users", `{"name": "new-{user}", "role": "viewer"}`},
	{"POST", "/users/{name}/disable", auth.RoleAdmin, "/users/nobody/disable", ""},
	{"POST", "/users/{name}/enable", auth.RoleAdmin, "/users/nobody/enable", ""},
}

// TestRouteRoles walks every route the API serves and checks it is in
// routeRoles, then requests each as a viewer, an operator, an admin and
// with the bootstrap token: a caller below the route's role gets 403
// naming the role, and nothing else reveals the data or makes the change;
// one at or above it is served (whatever the route answers, never 401 or
// 403).
func TestRouteRoles(t *testing.T) {
	e := setupRoles(t)
	var served []string
	err := chi.Walk(e.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range routeRoles {
		listed = append(listed, r.method+" "+r.pattern)
	}
	sort.Strings(served)
	sort.Strings(listed)
	if diff := cmp.Diff(listed, served); diff != "" {
		t.Fatalf("routes served and routes of routeRoles differ (-listed +served): give every new route its role in internal/api and in routeRoles:\n%s", diff)
	}

	// A message to read, and the payload bytes viewers must never get.
	doc := "ISA*00*payload-bytes~"
	if r := e.do(t, token, "POST", "/api/v1/messages?partner=GLOBEX", []byte(doc)); r.status != http.StatusAccepted {
		t.Fatalf("POST /messages = %d %s", r.status, r.body)
	}
	callers := []struct {
		name string
		role auth.Role
	}{{"carl", auth.RoleViewer}, {"olga", auth.RoleOperator}, {"alice", auth.RoleAdmin}, {"bootstrap", auth.RoleAdmin}}
	for _, rr := range routeRoles {
		for _, c := range callers {
			t.Run(rr.method+" "+rr.pattern+" as "+c.name, func(t *testing.T) {
				user := c.name
				if user == "bootstrap" {
					user = "alice"
				}
				fill := strings.NewReplacer("{user}", user, "{method}", strings.ToLower(rr.method)+"-"+c.name)
				r := e.do(t, e.tokens[c.name], rr.method, "/api/v1"+fill.Replace(rr.path), []byte(fill.Replace(rr.body)), "Content-Type", "application/json")
				if !c.role.Allows(rr.need) {
					var body struct{ Error, Role string }
					_ = json.Unmarshal(r.body, &body)
					if r.status != http.StatusForbidden || body.Role != rr.need.String() || !strings.Contains(body.Error, "needs the "+rr.need.String()+" role") {
						t.Errorf("%s %s as %s = %d %s, want 403 naming the role %s", rr.method, rr.path, c.name, r.status, r.body, rr.need)
					}
					if strings.Contains(string(r.body), "payload-bytes") {
						t.Errorf("refused request carries the payload: %s", r.body)
					}
					return
				}
				if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden || r.status == http.StatusInternalServerError {
					t.Errorf("%s %s as %s (%s) = %d %s, want it served", rr.method, rr.path, c.name, c.role, r.status, r.body)
				}
			})
		}
	}
}

// TestViewerGetsNoPayload: a viewer reads a message's status but neither
// its payload nor its raw MDN; an operator reads the payload.
func TestViewerGetsNoPayload(t *testing.T) {
	e := setupRoles(t)
	doc := "UNB+UNOC:3+secret-payload'"
	r := e.do(t, e.tokens["olga"], "POST", "/api/v1/messages?partner=GLOBEX", []byte(doc))
	if r.status != http.StatusAccepted {
		t.Fatalf("POST as operator = %d %s", r.status, r.body)
	}
	id := decode[api.Queued](t, r).ID
	if r := e.do(t, e.tokens["carl"], "GET", fmt.Sprintf("/api/v1/messages/%d", id), nil); r.status != http.StatusOK {
		t.Errorf("viewer GET message = %d, want 200", r.status)
	}
	for _, p := range []string{"payload", "mdn"} {
		if r := e.do(t, e.tokens["carl"], "GET", fmt.Sprintf("/api/v1/messages/%d/%s", id, p), nil); r.status != http.StatusForbidden || bytes.Contains(r.body, []byte("secret-payload")) {
			t.Errorf("viewer GET %s = %d %s, want 403 without the bytes", p, r.status, r.body)
		}
	}
	if r := e.do(t, e.tokens["olga"], "GET", fmt.Sprintf("/api/v1/messages/%d/payload", id), nil); r.status != http.StatusOK || string(r.body) != doc {
		t.Errorf("operator GET payload = %d %q, want 200 with the document", r.status, r.body)
	}
	if r := e.do(t, e.tokens["carl"], "POST", "/api/v1/messages?partner=GLOBEX", []byte(doc)); r.status != http.StatusForbidden {
		t.Errorf("viewer POST message = %d, want 403", r.status)
	}
}

// auditLine is an audit entry as the tests compare it.
type auditLine struct{ Actor, Action, Target, Remote string }

// TestAuditOfEveryChange: every change made through the API is in the
// audit log with its actor, action, target and address, and GET /audit
// lists them to admins only, filtered and paged; the partner history names
// the token.
func TestAuditOfEveryChange(t *testing.T) {
	e := setupRoles(t)
	olga, alice := e.tokens["olga"], e.tokens["alice"]
	must := func(r response, want int) response {
		t.Helper()
		if r.status != want {
			t.Fatalf("= %d %s, want %d", r.status, r.body, want)
		}
		return r
	}
	q := decode[api.Queued](t, must(e.do(t, olga, "POST", "/api/v1/messages?partner=GLOBEX&filename=a.edi", []byte("doc")), http.StatusAccepted))
	e.sql(t, `UPDATE messages SET status = 'failed', completed_at = now() WHERE id = $1`, q.ID)
	e.sql(t, `UPDATE outbox SET status = 'failed', finished_at = now() WHERE message_id = $1`, q.ID)
	must(e.do(t, olga, "POST", fmt.Sprintf("/api/v1/messages/%d/resend", q.ID), nil), http.StatusOK)
	must(e.do(t, olga, "POST", fmt.Sprintf("/api/v1/messages/%d/cancel", q.ID), []byte(`{"reason": "wrong partner"}`)), http.StatusOK)
	e.sql(t, `INSERT INTO mdn_inbox (content_type, body, original_message_id, state, reason, processed_at) VALUES ('multipart/report', 'x', '<gone@x>', 'orphan', 'no such message', now())`)
	orphans := decode[api.MDNList](t, must(e.do(t, olga, "GET", "/api/v1/mdns?state=orphan", nil), http.StatusOK))
	if len(orphans.MDNs) != 1 {
		t.Fatalf("orphans: %+v", orphans)
	}
	orphan := fmt.Sprint(orphans.MDNs[0].ID)
	must(e.do(t, olga, "POST", "/api/v1/mdns/"+orphan+"/reapply", nil), http.StatusOK)
	must(e.do(t, olga, "POST", "/api/v1/partners/GLOBEX/test", nil), http.StatusOK)

	pe := entry(t, "NEWCO", "sha-256")
	must(e.do(t, alice, "POST", "/api/v1/partners", jsonBody(t, pe), "Content-Type", "application/json"), http.StatusCreated)
	pe["sign"] = "sha-512"
	must(e.do(t, alice, "PUT", "/api/v1/partners/NEWCO", jsonBody(t, pe), "Content-Type", "application/json", "If-Match", `"1"`), http.StatusOK)
	must(e.do(t, alice, "POST", "/api/v1/partners/NEWCO/restore?version=1", nil), http.StatusOK)
	must(e.do(t, alice, "DELETE", "/api/v1/partners/NEWCO", nil), http.StatusOK)
	nu := must(e.do(t, alice, "POST", "/api/v1/users", []byte(`{"name": "dora", "role": "operator"}`)), http.StatusCreated)
	if u := decode[api.User](t, nu); u.Name != "dora" || u.Role != "operator" || len(u.Password) < 12 {
		t.Errorf("POST /users without a password = %+v, want dora with a generated password", u)
	}
	nt := must(e.do(t, alice, "POST", "/api/v1/users/dora/tokens", []byte(`{"name": "ci", "role": "viewer", "expires_in": "30d"}`)), http.StatusCreated)
	tok := decode[api.Token](t, nt)
	if !strings.HasPrefix(tok.Token, "edh_") || tok.Role != "viewer" || tok.State != "active" || tok.ExpiresAt == nil ||
		tok.ExpiresAt.Sub(time.Now()) < 29*24*time.Hour {
		t.Errorf("POST /users/dora/tokens = %+v, want a viewer token of 30 days", tok)
	}
	if r := e.do(t, tok.Token, "GET", "/api/v1/messages", nil); r.status != http.StatusOK {
		t.Errorf("the new token: GET /messages = %d, want 200", r.status)
	}
	must(e.do(t, alice, "DELETE", "/api/v1/users/dora/tokens/ci", nil), http.StatusOK)
	if r := e.do(t, tok.Token, "GET", "/api/v1/messages", nil); r.status != http.StatusUnauthorized {
		t.Errorf("the revoked token: GET /messages = %d, want 401", r.status)
	}
	must(e.do(t, alice, "POST", "/api/v1/users/dora/disable", nil), http.StatusOK)
	must(e.do(t, alice, "POST", "/api/v1/users/dora/enable", nil), http.StatusOK)
	// Refused requests change nothing and record nothing.
	must(e.do(t, olga, "DELETE", "/api/v1/partners/GLOBEX", nil), http.StatusForbidden)
	must(e.do(t, e.tokens["carl"], "POST", "/api/v1/users/olga/tokens", []byte(`{"name": "mine"}`)), http.StatusForbidden)

	id := fmt.Sprint(q.ID)
	want := []auditLine{
		{"cli:root@test", "user.add", "carl", ""}, {"cli:root@test", "token.create", "carl", ""},
		{"cli:root@test", "user.add", "olga", ""}, {"cli:root@test", "token.create", "olga", ""},
		{"cli:root@test", "user.add", "alice", ""}, {"cli:root@test", "token.create", "alice", ""},
		{"token:main (olga)", "message.send", id, "127.0.0.1"},
		{"token:main (olga)", "message.resend", id, "127.0.0.1"},
		{"token:main (olga)", "message.cancel", id, "127.0.0.1"},
		{"token:main (olga)", "mdn.reapply", orphan, "127.0.0.1"},
		{"token:main (olga)", "partner.test", "GLOBEX", "127.0.0.1"},
		{"token:main (alice)", "partner.create", "NEWCO", "127.0.0.1"},
		{"token:main (alice)", "partner.update", "NEWCO", "127.0.0.1"},
		{"token:main (alice)", "partner.restore", "NEWCO", "127.0.0.1"},
		{"token:main (alice)", "partner.delete", "NEWCO", "127.0.0.1"},
		{"token:main (alice)", "user.add", "dora", "127.0.0.1"},
		{"token:main (alice)", "token.create", "dora", "127.0.0.1"},
		{"token:main (alice)", "token.revoke", "dora", "127.0.0.1"},
		{"token:main (alice)", "user.disable", "dora", "127.0.0.1"},
		{"token:main (alice)", "user.enable", "dora", "127.0.0.1"},
	}
	var got []auditLine
	var entries []api.AuditEntry
	for cursor := ""; ; {
		r := must(e.do(t, alice, "GET", "/api/v1/audit?limit=5"+cursor, nil), http.StatusOK)
		l := decode[api.AuditList](t, r)
		if len(l.Entries) > 5 {
			t.Fatalf("page of %d entries, want at most 5", len(l.Entries))
		}
		entries = append(entries, l.Entries...)
		if l.NextCursor == "" {
			break
		}
		cursor = "&cursor=" + l.NextCursor
	}
	for _, en := range slices.Backward(entries) {
		got = append(got, auditLine{en.Actor, en.Action, en.Target, en.Remote})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit log, paged (-want +got):\n%s", diff)
	}
	send := entries[len(entries)-7]
	if c := entries[len(entries)-9]; c.Action != "message.cancel" || c.Detail["reason"] != "wrong partner" {
		t.Errorf("message.cancel entry = %+v, want the reason", c)
	}
	if send.Detail["partner"] != "GLOBEX" || send.Detail["filename"] != "a.edi" || send.Detail["message_id"] != q.MessageID {
		t.Errorf("message.send detail = %v, want partner, filename and Message-ID", send.Detail)
	}

	r := must(e.do(t, alice, "GET", "/api/v1/audit?action=partner.update&actor="+strings.ReplaceAll("token:main (alice)", " ", "+"), nil), http.StatusOK)
	if l := decode[api.AuditList](t, r); len(l.Entries) != 1 || l.Entries[0].Target != "NEWCO" || l.Entries[0].Detail["version"] != float64(2) {
		t.Errorf("GET /audit?action=partner.update = %+v, want the one update of NEWCO, version 2", l)
	}
	if r := e.do(t, alice, "GET", "/api/v1/audit?since=yesterday", nil); r.status != http.StatusBadRequest || decode[map[string]string](t, r)["parameter"] != "since" {
		t.Errorf("GET /audit?since=yesterday = %d %s, want 400 naming since", r.status, r.body)
	}
	must(e.do(t, olga, "GET", "/api/v1/audit", nil), http.StatusForbidden)

	hist := must(e.do(t, alice, "GET", "/api/v1/partners/NEWCO/history", nil), http.StatusOK)
	if !strings.Contains(string(hist.body), `"actor": "token:main (alice) from 127.0.0.1"`) {
		t.Errorf("partner history = %s, want the actor token:main (alice) from 127.0.0.1", hist.body)
	}
}

// TestUsersAPI: the answers of the user routes: the list never shows a
// hash; a weak password, a taken name, a role above the user's are
// refused with their status and a message that says what to do.
func TestUsersAPI(t *testing.T) {
	e := setupRoles(t)
	alice, carl := e.tokens["alice"], e.tokens["carl"]
	r := e.do(t, alice, "GET", "/api/v1/users", nil)
	if r.status != http.StatusOK || bytes.Contains(r.body, []byte("argon2")) || bytes.Contains(r.body, []byte("edh_")) {
		t.Fatalf("GET /users = %d %s, want 200 without hashes or tokens", r.status, r.body)
	}
	var list struct{ Users []api.User }
	_ = json.Unmarshal(r.body, &list)
	if len(list.Users) != 3 || list.Users[0].Name != "alice" || !list.Users[0].HasPassword || list.Users[2].Role != "operator" {
		t.Errorf("GET /users = %+v, want alice, carl, olga", list.Users)
	}
	tests := []struct {
		name, tok, method, path, body string
		want                          int
		wantErr                       string
	}{
		{"weak password", alice, "POST", "/users", `{"name": "bob", "role": "viewer", "password": "short"}`, 422, "at least 12"},
		{"taken", alice, "POST", "/users", `{"name": "CARL", "role": "viewer", "password": "long enough password"}`, 409, "exists"},
		{"bad role", alice, "POST", "/users", `{"name": "bob", "role": "root", "password": "long enough password"}`, 400, "want viewer, operator or admin"},
		{"unknown key", alice, "POST", "/users", `{"name": "bob", "role": "viewer", "admin": true}`, 400, "unknown field"},
		{"role above the user", alice, "POST", "/users/carl/tokens", `{"name": "x", "role": "admin"}`, 422, "at most the role viewer"},
		{"own token above own role", carl, "POST", "/users/carl/tokens", `{"name": "x", "role": "operator"}`, 422, "at most the role viewer"},
		{"another's tokens", carl, "GET", "/users/olga/tokens", "", 403, "only an admin or olga"},
		{"bad expiry", carl, "POST", "/users/carl/tokens", `{"name": "x", "expires_in": "soon"}`, 400, "90d"},
		{"unknown user", alice, "POST", "/users/nobody/disable", "", 404, "no such user"},
		{"unknown token", carl, "DELETE", "/users/carl/tokens/nope", "", 404, "no such API token"},
		{"taken token name", carl, "POST", "/users/carl/tokens", `{"name": "MAIN"}`, 409, "revoke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, tt.tok, tt.method, "/api/v1"+tt.path, []byte(tt.body))
			msg := decode[map[string]string](t, r)["error"]
			if r.status != tt.want || !strings.Contains(msg, tt.wantErr) {
				t.Errorf("%s %s = %d %q, want %d saying %q", tt.method, tt.path, r.status, msg, tt.want, tt.wantErr)
			}
		})
	}
}
