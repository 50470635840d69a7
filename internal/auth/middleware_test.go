package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/auth"
)

// serveAPI answers a request through a.API and Require(need), the handler
// saying who it served.
func serveAPI(a *auth.Authenticator, need auth.Role, r *http.Request) *httptest.ResponseRecorder {
	h := a.API(auth.Require(need)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		fmt.Fprintf(w, "served %s as %s", p.Actor(), p.Role)
	})))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func errorOf(t *testing.T, w *httptest.ResponseRecorder) (msg, role string) {
	t.Helper()
	var body struct{ Error, Role string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return body.Error, body.Role
}

// TestAPIMiddleware: the answers of API and Require: 503 saying how to
// create the first admin while no one can authenticate; 401 with a
// challenge once users exist; the handler with the principal; 403 naming
// the role a route needs; 503 when the database does not answer.
func TestAPIMiddleware(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	noBootstrap := e.authenticator(t, "")

	w := serveAPI(noBootstrap, auth.RoleViewer, request(""))
	if msg, _ := errorOf(t, w); w.Code != http.StatusServiceUnavailable || !strings.Contains(msg, "edihub users add NAME -role admin") {
		t.Errorf("no users, no bootstrap token: %d %q, want 503 saying how to add the first admin", w.Code, msg)
	}
	if w := serveAPI(e.auth, auth.RoleViewer, request("")); w.Code != http.StatusUnauthorized {
		t.Errorf("no users, bootstrap token set, no token: %d, want 401", w.Code)
	}

	e.addUser(t, "carl", auth.RoleViewer)
	carl := e.token(t, "carl", "ci", 0, nil)
	e.addUser(t, "olga", auth.RoleOperator)
	olga := e.token(t, "olga", "ci", 0, nil)
	if _, err := e.users.RevokeToken(ctx, admin, "olga", "ci"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		token     string
		need      auth.Role
		wantCode  int
		wantBody  string
		challenge string
	}{
		{"no token", "", auth.RoleViewer, 401, "missing or invalid bearer token", `Bearer realm="edihub"`},
		{"wrong token", "nope", auth.RoleViewer, 401, "missing or invalid bearer token", `Bearer realm="edihub", error="invalid_token"`},
		{"revoked token", olga, auth.RoleViewer, 401, `the API token "ci" of olga was revoked`, `Bearer realm="edihub", error="invalid_token"`},
		{"viewer on a viewer route", carl, auth.RoleViewer, 200, "served token:ci (carl) as viewer", ""},
		{"viewer on an operator route", carl, auth.RoleOperator, 403, "this needs the operator role; token:ci (carl) has viewer", ""},
		{"bootstrap on an admin route", bootstrap, auth.RoleAdmin, 200, "served bootstrap-token as admin", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serveAPI(noBootstrap, tt.need, request(tt.token))
			if tt.token == bootstrap {
				w = serveAPI(e.auth, tt.need, request(tt.token))
			}
			body := w.Body.String()
			if w.Code != 200 {
				body, _ = errorOf(t, w)
			}
			if w.Code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("= %d %s, want %d with %q", w.Code, w.Body, tt.wantCode, tt.wantBody)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.challenge)
			}
			if w.Code == 403 {
				if _, role := errorOf(t, w); role != tt.need.String() {
					t.Errorf("403 role = %q, want %q", role, tt.need)
				}
			}
		})
	}

	// A route mounted without API serves no one.
	rr := httptest.NewRecorder()
	auth.Require(auth.RoleViewer)(http.NotFoundHandler()).ServeHTTP(rr, request(carl))
	if rr.Code != http.StatusUnauthorized {
		t.Errorf("Require without API = %d, want 401", rr.Code)
	}

	// The database gone: 503, not 401 (the token may well be good).
	e.store.Close()
	w = serveAPI(noBootstrap, auth.RoleViewer, request(carl))
	if msg, _ := errorOf(t, w); w.Code != http.StatusServiceUnavailable || !strings.Contains(msg, "retry later") {
		t.Errorf("database closed: %d %q, want 503 saying to retry", w.Code, msg)
	}
}

// TestRemoteIP: the address is RemoteAddr's; forwarding headers are not
// trusted.
func TestRemoteIP(t *testing.T) {
	tests := []struct{ remoteAddr, forwarded, want string }{
		{"192.0.2.1:40000", "", "192.0.2.1"},
		{"[2001:db8::1]:443", "", "2001:db8::1"},
		{"192.0.2.1:40000", "203.0.113.9", "192.0.2.1"},
		{"@", "", "@"}, // a unix socket: as it is
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remoteAddr
		if tt.forwarded != "" {
			r.Header.Set("X-Forwarded-For", tt.forwarded)
			r.Header.Set("Forwarded", "for="+tt.forwarded)
		}
		if got := auth.RemoteIP(r); got != tt.want {
			t.Errorf("RemoteIP(%s, X-Forwarded-For %q) = %q, want %q", tt.remoteAddr, tt.forwarded, got, tt.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r = r.WithContext(auth.WithPrincipal(r.Context(), auth.Principal{Kind: auth.KindUser, User: "alice"}))
	if got := auth.AuditFromRequest(r); got.Actor != "user:alice" || got.Remote != "192.0.2.1" {
		t.Errorf("AuditFromRequest = %+v, want actor user:alice, remote 192.0.2.1", got)
	}
}
