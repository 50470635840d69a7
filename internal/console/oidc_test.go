package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/oidc"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/oidcprovider"
)

// withOIDC starts a real OpenID provider (testenv/oidcprovider) with
// users and registers the console as its client; the provider is stored
// in *prov. The console's sign-in with it is ready when the test starts.
func withOIDC(t *testing.T, prov **oidcprovider.Provider, users ...oidcprovider.User) option {
	return withProvider(t, prov, nil, oidcprovider.Options{Users: users})
}

// withProvider is withOIDC with the provider's options, and the console's
// side of the sign-in stored in *lazy (when not nil). A provider started
// Down is left to be discovered when it comes up; otherwise the console
// starts once it was.
func withProvider(t *testing.T, prov **oidcprovider.Provider, lazy **oidc.Lazy, po oidcprovider.Options) option {
	return func(o *console.Options, url string) {
		callback := url + console.Prefix + "/oidc/callback"
		po.Clients = []oidcprovider.Client{{ID: "edihub", Secret: "client-secret", RedirectURIs: []string{callback}}}
		p := oidcprovider.Start(t, po)
		roles, err := oidc.ParseRoles("edi-admins=admin,edi-ops=operator,edi-viewers=viewer")
		if err != nil {
			t.Fatal(err)
		}
		// failed hears of the first request that found the provider down:
		// a provider started Down is then known to have failed a discovery.
		failed := make(chan struct{})
		var once sync.Once
		base := p.HTTPClient()
		client := &http.Client{Timeout: base.Timeout, Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			res, err := base.Transport.RoundTrip(r)
			if err != nil {
				once.Do(func() { close(failed) })
			}
			return res, err
		})}
		l, err := oidc.NewLazy(oidc.Options{
			Issuer: p.Issuer, ClientID: "edihub", ClientSecret: "client-secret", RedirectURL: callback, Roles: roles, HTTPClient: client,
		}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
		if err != nil {
			t.Fatal(err)
		}
		l.SetRetry(time.Millisecond, 20*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Lazy.Run: %v", err)
			}
		})
		if po.Down {
			select {
			case <-failed:
			case <-time.After(30 * time.Second):
				t.Fatal("no discovery tried within 30s")
			}
		} else {
			waitReady(t, l)
		}
		o.OIDC, o.OIDCName = l, "Test IdP"
		*prov = p
		if lazy != nil {
			*lazy = l
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// waitReady waits until l discovered its provider.
func waitReady(t *testing.T, l *oidc.Lazy) {
	t.Helper()
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the provider was not discovered within 30s")
	}
}

// trustAnyCertificate makes the tab accept the provider's test
// certificate (httptest's, which the browser does not know).
var trustAnyCertificate = chromedp.Action[chromedp.Void](func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
	_, err := cdp.Call(ctx, tg, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true})
	return chromedp.Void{}, err
})

// signInAtProvider clicks "Sign in with" on the console's sign-in page and
// signs in on the provider's own page.
func signInAtProvider(t *testing.T, tb context.Context, e *env, user, pw string) {
	t.Helper()
	run(t, tb, "sign in at the provider as "+user,
		trustAnyCertificate,
		chromedp.Navigate(e.page("/login")),
		chromedp.WaitVisible(chromedp.CSS("#oidc")),
		submit("#oidc"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="username"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), user),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), pw),
		submit(`button[type="submit"]`),
	)
}

// TestOIDCSignIn: a person signs in with the company's provider in the
// browser: the user is made on the first sign-in with the role its groups
// map to, and signed in; a person whose groups map to no role is refused
// with a page that says why, and nothing is made for them.
func TestOIDCSignIn(t *testing.T) {
	t.Parallel()
	var prov *oidcprovider.Provider
	e := newEnv(t, withOIDC(t, &prov,
		oidcprovider.User{Subject: "u-1001", Name: "Olga Ops", Email: "olga@example.com", Password: "olga-password", Groups: []string{"staff", "edi-ops"}},
		oidcprovider.User{Subject: "u-2002", Name: "Mark Eting", Email: "mark@example.com", Password: "mark-password", Groups: []string{"staff", "marketing"}},
	))

	tb := tab(t)
	run(t, tb, "open the sign-in page", chromedp.Navigate(e.page("/login")), chromedp.WaitVisible(chromedp.CSS("#oidc")))
	if got := text(t, tb, "#oidc"); got != "Sign in with Test IdP" {
		t.Errorf("button %q", got)
	}
	checkPage(t, tb, "#name", "#password", "#signin", "#oidc")

	signInAtProvider(t, tb, e, "olga@example.com", "olga-password")
	run(t, tb, "land in the console", chromedp.WaitVisible(chromedp.CSS("#logout")))
	if got := text(t, tb, ".who"); !strings.Contains(got, "olga@example.com") || !strings.Contains(got, "operator") {
		t.Errorf("signed in as %q, want olga@example.com, operator", got)
	}
	u, err := e.st.User(e.ctx, "olga@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if u.Role != "operator" || u.OIDCIssuer != prov.Issuer || u.OIDCSubject != "u-1001" || u.PasswordHash != "" {
		t.Errorf("user made: %+v", u)
	}
	logins := e.auditOf("login")
	if len(logins) != 1 || logins[0].Actor != "user:olga@example.com" || logins[0].Detail["via"] != "oidc" {
		t.Errorf("audit of the sign-in: %+v", logins)
	}
	if adds := e.auditOf("user.add"); len(adds) != 1 || adds[0].Actor != "oidc:"+prov.Issuer {
		t.Errorf("audit of the user made: %+v", adds)
	}
	noErrors(t, tb)

	// Someone whose groups give no role.
	tb = tab(t)
	signInAtProvider(t, tb, e, "mark@example.com", "mark-password")
	run(t, tb, "be refused", chromedp.WaitVisible(chromedp.CSS("#oidc-refused")))
	if got := text(t, tb, "main"); !strings.Contains(got, "mark@example.com") || !strings.Contains(got, "marketing") || !strings.Contains(got, "EDIHUB_OIDC_ROLES") {
		t.Errorf("refusal page: %q", got)
	}
	if _, err := e.st.User(e.ctx, "mark@example.com"); err == nil {
		t.Error("a user was made for a refused person")
	}
	failed := e.auditOf("login.failed")
	if len(failed) != 1 || failed[0].Target != "mark@example.com" || failed[0].Detail["reason"] != "no group maps to a role" {
		t.Errorf("audit of the refusal: %+v", failed)
	}
	// Refused: no session.
	run(t, tb, "open the messages", chromedp.Navigate(e.page("/messages")), chromedp.WaitVisible(chromedp.CSS("#name")))
}

// TestOIDCCallbackWithoutFlow: a callback that this browser did not
// start (a forged or replayed link) is refused before anything is
// exchanged.
func TestOIDCCallbackWithoutFlow(t *testing.T) {
	t.Parallel()
	var prov *oidcprovider.Provider
	e := newEnv(t, withOIDC(t, &prov))
	tb := tab(t)
	run(t, tb, "open a forged callback", chromedp.Navigate(e.page("/oidc/callback?code=stolen&state=guess")), chromedp.WaitVisible(chromedp.CSS(".error")))
	if got := text(t, tb, ".error"); !strings.Contains(got, "not started here") {
		t.Errorf("forged callback: %q", got)
	}
	if users, err := e.st.Users(e.ctx); err != nil || len(users) != 0 {
		t.Errorf("users after a forged callback: %v %v", users, err)
	}
}

// oidcSignIn signs user in with the provider through the console over
// HTTP, as a browser would, with browser's cookies (a client of
// prov.Browser): it follows "Sign in with" to the provider, signs in on its
// page and opens the console's callback, whose answer it returns unread
// (303 to the console, or the page of a refusal).
func oidcSignIn(t *testing.T, e *env, prov *oidcprovider.Provider, browser *http.Client, user, pw string) *http.Response {
	t.Helper()
	noFollow := *browser
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := noFollow.Get(e.page("/oidc/start"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	authURL := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(authURL, prov.Issuer) {
		t.Fatalf("GET /oidc/start = %d to %q, want 303 to the provider", res.StatusCode, authURL)
	}
	callback, err := prov.Login(e.ctx, browser, authURL, user, pw)
	if err != nil {
		t.Fatal(err)
	}
	res, err = noFollow.Get(callback)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestOIDCNoRoleEndsAccess: once the provider vouches for a person whose
// groups map to no role any more, their user is disabled in the
// transaction of the refusal: their open console session ends, and their
// API token (made before) is refused, whatever role it had. Tokens for a
// provider's user are refused when asked for.
func TestOIDCNoRoleEndsAccess(t *testing.T) {
	t.Parallel()
	var prov *oidcprovider.Provider
	e := newEnv(t, withOIDC(t, &prov,
		oidcprovider.User{Subject: "u-3003", Name: "Ada Admin", Email: "ada@example.com", Password: "ada-password", Groups: []string{"edi-admins"}},
	))
	// The session that stays open in one browser.
	open := prov.Browser()
	if res := oidcSignIn(t, e, prov, open, "ada@example.com", "ada-password"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("first sign-in = %d, want 303", res.StatusCode)
	}
	u, err := e.st.User(e.ctx, "ada@example.com")
	if err != nil || u.Role != "admin" {
		t.Fatalf("user after the first sign-in = %+v, %v; want an admin", u, err)
	}
	if _, _, err := e.users.CreateToken(e.ctx, auth.Caller{Principal: auth.CLIPrincipal("test@host")}, u.Name, auth.TokenRequest{Name: "ci"}); !errors.Is(err, auth.ErrProviderUserToken) {
		t.Errorf("CreateToken for a provider's user = %v, want ErrProviderUserToken", err)
	}
	// A token stored before tokens were refused for them.
	tok := auth.NewToken()
	if _, err := e.st.CreateAPIToken(e.ctx, postgres.NewAPIToken{UserID: u.ID, Name: "ci", Hash: auth.HashToken(tok), Role: "admin", CreatedBy: "cli:test@host"},
		postgres.AuditEntry{Actor: "cli:test@host", Action: "token.create", Target: u.Name}); err != nil {
		t.Fatal(err)
	}
	usersPage := func(c *http.Client) int {
		t.Helper()
		noFollow := *c
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := noFollow.Get(e.page("/users"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := usersPage(open); got != http.StatusOK {
		t.Fatalf("GET /users in the open session = %d, want 200", got)
	}

	// The provider's administrator takes Ada out of every mapped group;
	// she signs in again elsewhere and is refused.
	prov.SetGroups("u-3003", []string{"staff"})
	if res := oidcSignIn(t, e, prov, prov.Browser(), "ada@example.com", "ada-password"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without a mapped group = %d, want 403", res.StatusCode)
	}

	if got := usersPage(open); got == http.StatusOK {
		t.Errorf("GET /users in the session opened before the refusal = %d, want the session ended", got)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/messages", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if p, err := e.auth.Bearer(req); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Bearer(token of the refused user) = %+v, %v; want ErrUnauthenticated", p, err)
	}
	u, err = e.st.User(e.ctx, "ada@example.com")
	if err != nil || u.DisabledAt == nil {
		t.Errorf("user after the refusal = %+v, %v; want it disabled", u, err)
	}
	failed := e.auditOf("login.failed")
	if len(failed) != 1 || failed[0].Target != "ada@example.com" || failed[0].Detail["subject"] != "u-3003" {
		t.Errorf("audit of the refusal = %+v, want one login.failed of ada@example.com", failed)
	}
	disabled := e.auditOf("user.disable")
	if len(disabled) != 1 || disabled[0].Target != "ada@example.com" || disabled[0].Actor != "oidc:"+prov.Issuer {
		t.Errorf("audit of the disable = %+v, want one by oidc:%s", disabled, prov.Issuer)
	}

	// Back in a mapped group, she stays out until an administrator
	// enables her user again.
	prov.SetGroups("u-3003", []string{"edi-viewers"})
	if res := oidcSignIn(t, e, prov, prov.Browser(), "ada@example.com", "ada-password"); res.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in of the disabled user = %d, want 403", res.StatusCode)
	}
}

// TestOIDCUnverifiedEmailIsNoName: a person whose provider does not vouch
// for their e-mail address (email_verified false) is not named after it:
// an insider who typed a colleague's address at the provider appears under
// a name made of their subject. Audit rows of a provider's user carry the
// issuer and subject.
func TestOIDCUnverifiedEmailIsNoName(t *testing.T) {
	t.Parallel()
	var prov *oidcprovider.Provider
	e := newEnv(t, withOIDC(t, &prov,
		oidcprovider.User{Subject: "u-6666", Name: "Carl Chief", Email: "ceo@example.com", EmailUnverified: true, Password: "m-password", Groups: []string{"edi-ops"}},
	))
	if res := oidcSignIn(t, e, prov, prov.Browser(), "u-6666", "m-password"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in = %d, want 303", res.StatusCode)
	}
	if _, err := e.st.User(e.ctx, "ceo@example.com"); !errors.Is(err, postgres.ErrUserNotFound) {
		t.Errorf("User(ceo@example.com) = %v, want ErrUserNotFound: an unverified address named the user", err)
	}
	u, err := e.st.User(e.ctx, "oidc-u-6666")
	if err != nil || u.OIDCSubject != "u-6666" {
		t.Fatalf("User(oidc-u-6666) = %+v, %v; want the user of subject u-6666", u, err)
	}
	logins := e.auditOf("login")
	if len(logins) != 1 || logins[0].Actor != "user:oidc-u-6666" || logins[0].Detail["actor_issuer"] != prov.Issuer || logins[0].Detail["actor_subject"] != "u-6666" {
		t.Errorf("audit of the sign-in = %+v, want user:oidc-u-6666 with actor_issuer %s and actor_subject u-6666", logins, prov.Issuer)
	}
	// What the user does later is recorded with the issuer and subject too.
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	p, err := e.auth.SessionPrincipal(e.ctx, u.ID, u.SessionEpoch)
	if err != nil {
		t.Fatal(err)
	}
	entry := auth.AuditFromRequest(r.WithContext(auth.WithPrincipal(r.Context(), p)))
	entry.Action, entry.Detail = "message.resend", map[string]any{"message_id": "<m-1@edihub>"}
	if err := e.st.Record(e.ctx, entry); err != nil {
		t.Fatal(err)
	}
	resends := e.auditOf("message.resend")
	if len(resends) != 1 || resends[0].Detail["actor_issuer"] != prov.Issuer || resends[0].Detail["actor_subject"] != "u-6666" || resends[0].Detail["message_id"] != "<m-1@edihub>" {
		t.Errorf("audit of an action = %+v, want actor_issuer %s and actor_subject u-6666 beside the detail", resends, prov.Issuer)
	}
}

// TestOIDCProviderDownAtStart: a console whose identity provider is down
// when it starts serves password sign-in, says on its sign-in page that
// SSO is unavailable, and answers "Sign in with" with a page that says so;
// once the provider is up, sign-in with it works, without a restart.
func TestOIDCProviderDownAtStart(t *testing.T) {
	t.Parallel()
	var prov *oidcprovider.Provider
	var lazy *oidc.Lazy
	e := newEnv(t, withProvider(t, &prov, &lazy, oidcprovider.Options{Down: true, Users: []oidcprovider.User{
		{Subject: "u-1001", Name: "Olga Ops", Email: "olga@example.com", Password: "olga-password", Groups: []string{"edi-ops"}},
	}}))
	e.addUser("paula", auth.RoleViewer)
	browser := prov.Browser()
	get := func(path string) (int, string) {
		t.Helper()
		noFollow := *browser
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := noFollow.Get(e.page(path))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(b)
	}

	status, page := get("/login")
	if status != http.StatusOK || !strings.Contains(page, `id="sso-unavailable"`) || strings.Contains(page, `id="oidc"`) {
		t.Errorf("GET /login with the provider down = %d, want 200 saying that SSO is unavailable, without its button:\n%s", status, page)
	}
	status, page = get("/oidc/start")
	if status != http.StatusServiceUnavailable || !strings.Contains(page, "SSO) is unavailable") {
		t.Errorf("GET /oidc/start with the provider down = %d, want 503 saying that SSO is unavailable:\n%s", status, page)
	}
	// Password sign-in works meanwhile.
	tb := tab(t)
	e.login(t, tb, "paula")
	if got := text(t, tb, ".who"); !strings.Contains(got, "paula") {
		t.Errorf("signed in with a password as %q, want paula", got)
	}

	prov.SetDown(false)
	waitReady(t, lazy)
	if status, page = get("/login"); !strings.Contains(page, `id="oidc"`) || strings.Contains(page, `id="sso-unavailable"`) {
		t.Errorf("GET /login with the provider up = %d, want its button and no word of SSO unavailable:\n%s", status, page)
	}
	if res := oidcSignIn(t, e, prov, prov.Browser(), "olga@example.com", "olga-password"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in once the provider is up = %d, want 303", res.StatusCode)
	}
	if u, err := e.st.User(e.ctx, "olga@example.com"); err != nil || u.Role != "operator" {
		t.Errorf("user after the sign-in = %+v, %v; want an operator", u, err)
	}
}
