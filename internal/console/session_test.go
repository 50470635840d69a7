package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alexedwards/scs/v2"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
)

// TestSecurityHeaders: every answer, page or asset, signed in or not,
// carries the policy and the other headers.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/login", http.StatusOK},
		{http.MethodGet, "/messages", http.StatusSeeOther},
		{http.MethodGet, "/no-such-page", http.StatusNotFound},
		{http.MethodPost, "/messages", http.StatusNotFound}, // a method the page does not take
		{http.MethodHead, "/login", http.StatusOK},
		{http.MethodGet, "/", http.StatusSeeOther},
		{http.MethodGet, "/static/console.css", http.StatusOK},
		{http.MethodGet, "/static/console.js", http.StatusOK},
		{http.MethodPost, "/login", http.StatusBadRequest},
	} {
		req, err := http.NewRequestWithContext(e.ctx, tt.method, e.page(tt.path), strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
		for h, want := range map[string]string{
			"Content-Security-Policy": console.Policy,
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "same-origin",
			"X-Frame-Options":         "DENY",
		} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s %s: %s = %q, want %q", tt.method, tt.path, h, got, want)
			}
		}
	}
	if console.Policy != "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'" {
		t.Errorf("Policy = %q", console.Policy)
	}
}

// TestSessionCookie: the session cookie is Secure, HttpOnly, SameSite=Lax,
// and a new one is made at sign-in (a cookie planted before is worth
// nothing after it).
func TestSessionCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	tb := tab(t)
	cookie := func() *network.Cookie {
		cs, err := chromedp.Run(tb, chromedp.Action[[]*network.Cookie](func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
			r, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{e.page("/")}})
			return r.Cookies, err
		}))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Name == console.CookieName {
				return c
			}
		}
		return nil
	}
	// An attacker who can set a cookie in the victim's browser plants a
	// session token they know, made by the console (scs's encoding).
	data, err := scs.GobCodec{}.Encode(time.Now().Add(time.Hour), map[string]any{"planted": true})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO sessions (token, data, expiry) VALUES ('planted-token-0123456789', $1, now() + interval '1 hour')`, data)
	run(t, tb, "plant a session cookie", chromedp.Navigate(e.page("/login")),
		chromedp.Action[chromedp.Void](func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, network.SetCookie, network.SetCookieParams{Name: console.CookieName, Value: "planted-token-0123456789",
				URL: e.page("/"), Path: "/console/", Secure: new(true), HTTPOnly: new(true)})
			return chromedp.Void{}, err
		}))
	e.loginHere(t, tb, "vera")
	c := cookie()
	if c == nil {
		t.Fatal("no session cookie after sign-in")
	}
	if c.Value == "planted-token-0123456789" {
		t.Error("the planted session token was kept at sign-in")
	}
	var planted int
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FROM sessions WHERE token = 'planted-token-0123456789'`).Scan(&planted); err != nil || planted != 0 {
		t.Errorf("the planted session is still stored (%d, %v)", planted, err)
	}
	if !c.Secure || !c.HTTPOnly || c.SameSite != network.CookieSameSiteLax || c.Path != "/console/" {
		t.Errorf("session cookie %+v: want Secure, HttpOnly, SameSite=Lax, Path=/console/", c)
	}
	first := c.Value
	run(t, tb, "sign out", submit("#logout"), chromedp.WaitVisible(chromedp.CSS("#name")))
	e.loginHere(t, tb, "vera")
	if c := cookie(); c == nil || c.Value == first {
		t.Errorf("the session token after a second sign-in is the first one")
	}
	// The first session ended with the sign-out: its token opens nothing.
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.page("/messages"), nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: first})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
		t.Errorf("GET /messages with the signed-out token = %d %s, want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestDisabledUserSignedOut: a user disabled while signed in is signed out
// at its next request, and cannot sign in again.
func TestDisabledUserSignedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	tb := tab(t)
	e.login(t, tb, "olga")
	if _, err := e.users.SetDisabled(e.ctx, auth.Caller{Principal: auth.CLIPrincipal("test@host")}, "olga", true); err != nil {
		t.Fatal(err)
	}
	run(t, tb, "open the messages", chromedp.Navigate(e.page("/messages")), chromedp.WaitVisible(chromedp.CSS("#name")))
	if got := text(t, tb, ".flash"); !strings.Contains(got, "Your session has ended") {
		t.Errorf("flash = %q, want the session ended", got)
	}
	u, err := url.Parse(location(t, tb))
	if err != nil {
		t.Fatal(err)
	}
	if u.Path != "/console/login" || u.Query().Get("next") != "/console/messages" {
		t.Errorf("sent to %s, want the sign-in page, back to /console/messages", u)
	}
	noErrors(t, tb)
	e.loginFails(t, tb, "olga")
	if got := text(t, tb, "#login-error"); !strings.Contains(got, "disabled") {
		t.Errorf("sign-in of a disabled user says %q", got)
	}
}

// TestLoginThrottled: after five wrong passwords the sign-in page says how
// long to wait, and refuses even the right password meanwhile.
func TestLoginThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	tb := tab(t)
	run(t, tb, "open the sign-in page", chromedp.Navigate(e.page("/login")))
	for i := range auth.UserFailureLimit {
		run(t, tb, "a wrong password",
			chromedp.WaitVisible(chromedp.CSS("#name")),
			chromedp.SetValue(chromedp.CSS("#name"), "olga"),
			chromedp.SendKeys(chromedp.CSS("#password"), "wrong password "+string(rune('a'+i))),
			submit("#signin"),
			chromedp.WaitVisible(chromedp.CSS("#login-error")),
		)
		if got := text(t, tb, "#login-error"); got != "Wrong user name or password." {
			t.Fatalf("attempt %d: %q", i+1, got)
		}
	}
	e.loginFails(t, tb, "olga")
	if got := text(t, tb, "#login-error"); got != "Too many attempts, try again in 1 minute." {
		t.Errorf("after %d failures: %q", auth.UserFailureLimit, got)
	}
}
