package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
)

// client is an HTTP client that does not follow redirects, so that a
// test sees the console's answer itself.
var client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// answer is a response of the console, its body read.
type answer struct {
	status int
	header http.Header
	body   string
}

// post sends a form to the console path with the session cookie (none
// when nil) and the extra headers.
func (e *env) post(t *testing.T, path string, form url.Values, session *http.Cookie, header http.Header) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.page(path), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, vs := range header {
		req.Header[k] = vs
	}
	return e.do(t, req, session)
}

func (e *env) do(t *testing.T, req *http.Request, session *http.Cookie) answer {
	t.Helper()
	if session != nil {
		req.AddCookie(session)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// session signs name in through the sign-in form and returns its session
// cookie (Secure, so no cookie jar sends it over the test's plain HTTP).
func (e *env) session(t *testing.T, name string) *http.Cookie {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.page("/login"),
		strings.NewReader(url.Values{"name": {name}, "password": {password}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in as %s = %d, want 303", name, resp.StatusCode)
	}
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("sign in as %s: no session cookie", name)
	return nil
}

// TestUserAdminRoutesNeedAdmin: the user-admin routes answer 403 to an
// operator and a viewer, whatever the service would say, and change
// nothing; an admin's requests go through.
func TestUserAdminRoutesNeedAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	e.addUser("olga", auth.RoleOperator)
	e.addUser("vera", auth.RoleViewer)
	e.addUser("bob", auth.RoleViewer)
	if _, _, err := e.users.CreateToken(e.ctx, auth.Caller{Principal: auth.CLIPrincipal("test@host")}, "bob", auth.TokenRequest{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	routes := []struct {
		method, path string
		form         url.Values
	}{
		{http.MethodGet, "/users", nil},
		{http.MethodPost, "/users", url.Values{"name": {"mallory"}, "role": {"admin"}}},
		{http.MethodPost, "/users/bob/disable", nil},
		{http.MethodPost, "/users/bob/enable", nil},
		{http.MethodPost, "/users/bob/role", url.Values{"role": {"admin"}}},
		{http.MethodGet, "/users/bob/tokens", nil},
		{http.MethodPost, "/users/bob/tokens", url.Values{"name": {"stolen"}}},
		{http.MethodPost, "/users/bob/tokens/ci/revoke", nil},
		{http.MethodGet, "/audit", nil},
	}
	for _, who := range []string{"olga", "vera"} {
		session := e.session(t, who)
		for _, rt := range routes {
			req, err := http.NewRequestWithContext(e.ctx, rt.method, e.page(rt.path), strings.NewReader(rt.form.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			got := e.do(t, req, session)
			if got.status != http.StatusForbidden {
				t.Errorf("%s %s as %s = %d, want 403", rt.method, rt.path, who, got.status)
			} else if !strings.Contains(got.body, "This needs the admin role") {
				t.Errorf("%s %s as %s: the 403 page does not say the admin role is needed", rt.method, rt.path, who)
			}
		}
	}
	bob, err := e.st.User(e.ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	toks, err := e.st.APITokens(e.ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if bob.DisabledAt != nil || bob.Role != "viewer" || len(toks) != 1 || toks[0].RevokedAt != nil {
		t.Errorf("bob after the refused requests: %+v, tokens %+v; want an enabled viewer with its token", bob, toks)
	}
	if _, err := e.st.User(e.ctx, "mallory"); err == nil {
		t.Error("a refused request added mallory")
	}

	// An admin's disable goes through.
	if got := e.post(t, "/users/bob/disable", nil, e.session(t, "ada"), nil); got.status != http.StatusSeeOther {
		t.Errorf("POST /users/bob/disable as an admin = %d, want 303", got.status)
	}
	if bob, _ := e.st.User(e.ctx, "bob"); bob.DisabledAt == nil {
		t.Error("bob is not disabled after an admin's disable")
	}
}

// TestCrossOriginPostRefusedHTTP: a signed-in admin's state-changing
// request that comes from another origin (as its browser sends it: the
// Origin and Sec-Fetch-Site headers) is refused with 403 and changes
// nothing; the same request from the console's own page goes through.
func TestCrossOriginPostRefusedHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	e.addUser("bob", auth.RoleViewer)
	session := e.session(t, "ada")
	tests := []struct {
		name   string
		header http.Header
	}{
		{"another site", http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}},
		{"another port of the host", http.Header{"Origin": {"http://127.0.0.1:1"}, "Sec-Fetch-Site": {"same-site"}}},
		{"Origin only", http.Header{"Origin": {"https://evil.example"}}},
	}
	for _, tt := range tests {
		got := e.post(t, "/users/bob/disable", nil, session, tt.header)
		if got.status != http.StatusForbidden || !strings.Contains(got.body, "came from another site") {
			t.Errorf("%s: POST /users/bob/disable = %d, want 403 (came from another site)", tt.name, got.status)
		}
	}
	if bob, _ := e.st.User(e.ctx, "bob"); bob.DisabledAt != nil {
		t.Fatal("a cross-origin request disabled bob")
	}
	same := http.Header{"Origin": {e.url}, "Sec-Fetch-Site": {"same-origin"}}
	if got := e.post(t, "/users/bob/disable", nil, session, same); got.status != http.StatusSeeOther {
		t.Errorf("same origin: POST /users/bob/disable = %d, want 303", got.status)
	}
	if bob, _ := e.st.User(e.ctx, "bob"); bob.DisabledAt == nil {
		t.Error("bob is not disabled after the same-origin request")
	}
}

// busyAuth is an Authenticator whose Login finds every password check of
// the replica taken.
type busyAuth struct{ console.Authenticator }

func (busyAuth) Login(context.Context, string, string, string) (auth.Principal, error) {
	return auth.Principal{}, fmt.Errorf("%w: 4 password checks running", auth.ErrBusy)
}

// TestLoginBusy: a sign-in refused because the replica checks as many
// passwords as it may at once gets 429 with Retry-After and says so.
func TestLoginBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *console.Options, _ string) { o.Auth = busyAuth{o.Auth} })
	e.addUser("olga", auth.RoleOperator)
	got := e.post(t, "/login", url.Values{"name": {"olga"}, "password": {password}}, nil, nil)
	if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") != "1" || !strings.Contains(got.body, "Too many sign-ins at once") {
		t.Errorf("POST /login while busy = %d, Retry-After %q; want 429, Retry-After 1 and the page saying so\n%s", got.status, got.header.Get("Retry-After"), got.body)
	}
}
