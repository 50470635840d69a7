package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/oidc"
	"github.com/edihub/edihub/internal/testenv/oidcprovider"
)

// withOIDC starts a real OpenID provider (testenv/oidcprovider) with
// users and registers the console as its client; the provider is stored
// in *prov.
func withOIDC(t *testing.T, prov **oidcprovider.Provider, users ...oidcprovider.User) option {
	return func(o *console.Options, url string) {
		callback := url + console.Prefix + "/oidc/callback"
		p := oidcprovider.Start(t, oidcprovider.Options{
			Users:   users,
			Clients: []oidcprovider.Client{{ID: "edihub", Secret: "client-secret", RedirectURIs: []string{callback}}},
		})
		roles, err := oidc.ParseRoles("edi-admins=admin,edi-ops=operator,edi-viewers=viewer")
		if err != nil {
			t.Fatal(err)
		}
		provider, err := oidc.New(t.Context(), oidc.Options{
			Issuer: p.Issuer, ClientID: "edihub", ClientSecret: "client-secret", RedirectURL: callback, Roles: roles, HTTPClient: p.HTTPClient(),
		})
		if err != nil {
			t.Fatal(err)
		}
		o.OIDC, o.OIDCName = provider, "Test IdP"
		*prov = p
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
