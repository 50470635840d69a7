package console_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
)

// confirmAll makes the page's confirmation dialogs answer yes, as a
// person clicking OK would.
var confirmAll = chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`)

// TestUsersAndAudit: an admin adds a user (its password generated and
// shown once), changes its role, disables and enables it, and finds each
// change in the audit log under its own name.
func TestUsersAndAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	tb := tab(t)
	e.login(t, tb, "ada")
	run(t, tb, "add bob",
		chromedp.Navigate(e.page("/users")),
		chromedp.WaitVisible(chromedp.CSS("#new-name")),
		chromedp.SetValue(chromedp.CSS("#new-name"), "bob"),
		chromedp.SetValue(chromedp.CSS("#new-role"), "viewer"),
		submit("#add-user"),
		chromedp.WaitVisible(chromedp.CSS("#new-password")),
	)
	pw := text(t, tb, "#new-password .secret")
	if _, err := e.auth.Login(e.ctx, "bob", pw, "192.0.2.1"); err != nil {
		t.Errorf("bob cannot sign in with the password shown (%q): %v", pw, err)
	}
	checkPage(t, tb)
	bob, err := e.st.User(e.ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) string { return s + "-" + strconv.FormatInt(bob.ID, 10) }
	run(t, tb, "make bob an operator",
		chromedp.SetValue(chromedp.CSS("#"+id("role")), "operator"),
		submit(`form[action="/console/users/bob/role"] button`),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	run(t, tb, "disable bob", confirmAll, submit("#"+id("disable")), chromedp.WaitVisible(chromedp.CSS("#"+id("enable"))))
	if u, _ := e.st.User(e.ctx, "bob"); u.DisabledAt == nil || u.Role != "operator" {
		t.Errorf("bob after the changes: %+v", u)
	}
	run(t, tb, "enable bob", submit("#"+id("enable")), chromedp.WaitVisible(chromedp.CSS("#"+id("disable"))))

	run(t, tb, "read the audit log", chromedp.Navigate(e.page("/audit")), chromedp.WaitVisible(chromedp.CSS("#audit")))
	log := text(t, tb, "#audit tbody")
	for _, want := range []string{"user.add", "user.role", "user.disable", "user.enable", "login"} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	checkPage(t, tb, "#a-actor", "#a-action", "#audit-search")
	run(t, tb, "filter the audit log",
		chromedp.SetValue(chromedp.CSS("#a-action"), "user.disable"),
		submit("#audit-search"),
		chromedp.WaitVisible(chromedp.CSS("#audit")),
	)
	rows := eval[[]string](t, tb, `Array.from(document.querySelectorAll("#audit tbody tr")).map(tr => tr.innerText)`)
	if len(rows) != 1 || !strings.Contains(rows[0], "user:ada") || !strings.Contains(rows[0], "bob") {
		t.Errorf("audit filtered by user.disable: %q", rows)
	}
}

// TestOwnTokens: a viewer makes an API token (shown once, working with
// the viewer role), and revokes it; the users and audit pages are
// refused to it.
func TestOwnTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	tb := tab(t)
	e.login(t, tb, "vera")
	run(t, tb, "make a token",
		chromedp.Navigate(e.page("/tokens")),
		chromedp.WaitVisible(chromedp.CSS("#token-name")),
		chromedp.SetValue(chromedp.CSS("#token-name"), "laptop"),
		submit("#make-token"),
		chromedp.WaitVisible(chromedp.CSS("#token-value")),
	)
	tok := text(t, tb, "#token-value")
	req, _ := http.NewRequest(http.MethodGet, "/api/v1/messages", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	p, err := e.auth.Bearer(req.WithContext(e.ctx))
	if err != nil || p.Actor() != "token:laptop (vera)" || p.Role != auth.RoleViewer {
		t.Errorf("the token shown authenticates as %+v, %v; want token:laptop (vera), a viewer", p, err)
	}
	checkPage(t, tb, "#revoke-laptop", "#token-name", "#make-token")
	// Shown once: the page again has no token.
	run(t, tb, "reload", chromedp.Navigate(e.page("/tokens")), chromedp.WaitVisible(chromedp.CSS("#tokens")))
	if strings.Contains(text(t, tb, "main"), tok) {
		t.Error("the token is shown again")
	}
	run(t, tb, "revoke it", confirmAll, submit("#revoke-laptop"), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if _, err := e.auth.Bearer(req.WithContext(e.ctx)); err == nil {
		t.Error("the revoked token still works")
	}
	if got := text(t, tb, "#tokens tbody"); !strings.Contains(got, "revoked") {
		t.Errorf("tokens: %q", got)
	}
	noErrors(t, tb)
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/console/users"}, {http.MethodPost, "/console/users"}, {http.MethodPost, "/console/users/vera/role"},
		{http.MethodGet, "/console/audit"},
	} {
		if got := fetchStatus(t, tb, tt.method, tt.path); got != http.StatusForbidden {
			t.Errorf("%s %s as a viewer = %d, want 403", tt.method, tt.path, got)
		}
	}
}

// TestAdminManagesTokens: an admin opens another user's tokens from the
// users page, revokes a leaked one (it stops working at once) and makes
// a new one for the user (acting as the user, with the user's role at
// most); both are in the audit log under the admin's name. Another
// user's tokens are refused to anyone but an admin.
func TestAdminManagesTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	vera := e.addUser("vera", auth.RoleViewer)
	leaked, _, err := e.users.CreateToken(e.ctx, auth.Caller{Principal: auth.CLIPrincipal("test@host")}, "vera", auth.TokenRequest{Name: "laptop", Role: auth.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	bearer := func(tok string) (auth.Principal, error) {
		req, _ := http.NewRequest(http.MethodGet, "/api/v1/messages", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return e.auth.Bearer(req.WithContext(e.ctx))
	}
	tb := tab(t)
	e.login(t, tb, "ada")
	run(t, tb, "open vera's tokens",
		chromedp.Navigate(e.page("/users")),
		chromedp.WaitVisible(chromedp.CSS("#users")),
		submit("#tokens-"+strconv.FormatInt(vera.ID, 10)),
		chromedp.WaitVisible(chromedp.CSS("#tokens")),
	)
	if got := text(t, tb, "h1"); got != "API tokens of vera" {
		t.Errorf("h1 = %q", got)
	}
	checkPage(t, tb, "#revoke-laptop", "#token-name", "#token-role", "#token-expires", "#make-token")
	run(t, tb, "revoke vera's laptop token", confirmAll, submit("#revoke-laptop"), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if _, err := bearer(leaked); err == nil {
		t.Error("the revoked token still works")
	}
	if got := location(t, tb); !strings.HasSuffix(got, "/console/users/vera/tokens") {
		t.Errorf("after the revoke the page is %s, want vera's tokens", got)
	}
	run(t, tb, "make a token for vera",
		chromedp.SetValue(chromedp.CSS("#token-name"), "erp"),
		chromedp.SetValue(chromedp.CSS("#token-role"), "viewer"),
		submit("#make-token"),
		chromedp.WaitVisible(chromedp.CSS("#token-value")),
	)
	if p, err := bearer(text(t, tb, "#token-value")); err != nil || p.Actor() != "token:erp (vera)" || p.Role != auth.RoleViewer {
		t.Errorf("the token made for vera authenticates as %+v, %v; want token:erp (vera), a viewer", p, err)
	}
	run(t, tb, "read the audit log", chromedp.Navigate(e.page("/audit")), chromedp.WaitVisible(chromedp.CSS("#audit")))
	log := text(t, tb, "#audit tbody")
	for _, want := range []string{"token.revoke", "token.create"} {
		if !strings.Contains(log, want) || !strings.Contains(log, "user:ada") {
			t.Errorf("audit log lacks %s by user:ada:\n%s", want, log)
		}
	}
	noErrors(t, tb)

	e.addUser("olga", auth.RoleOperator)
	tb2 := tab(t)
	e.login(t, tb2, "olga")
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/console/users/vera/tokens"}, {http.MethodPost, "/console/users/vera/tokens"},
		{http.MethodPost, "/console/users/vera/tokens/erp/revoke"},
	} {
		if got := fetchStatus(t, tb2, tt.method, tt.path); got != http.StatusForbidden {
			t.Errorf("%s %s as an operator = %d, want 403", tt.method, tt.path, got)
		}
	}
}
