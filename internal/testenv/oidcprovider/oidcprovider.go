// Package oidcprovider starts a real OpenID Connect provider on loopback
// for tests: zitadel/oidc's op package (discovery, authorize, token,
// userinfo and keys endpoints, ID tokens signed with RS256) over an
// in-memory storage of the users and clients a test names, behind a login
// page that checks passwords. Login drives that page over HTTP the way a
// browser would, so a test signs a user in without a browser.
//
// The provider serves HTTPS with httptest's certificate: clients trust it
// through HTTPClient or Certificate. It requires PKCE (S256) and a nonce on
// every authorization request, issues single-use codes, and refuses every
// grant but the authorization code.
package oidcprovider

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/net/html"
)

// User is an account at the provider. The login page takes its Email or
// its Subject, and its Password.
type User struct {
	Subject  string
	Name     string
	Email    string
	Password string
	Groups   []string
	// EmailUnverified makes email_verified false: an address the person
	// typed that the provider did not check.
	EmailUnverified bool
}

// Client is a confidential web client (client_secret_basic or
// client_secret_post, authorization code flow).
type Client struct {
	ID           string
	Secret       string
	RedirectURIs []string
}

// Options describe the provider; the zero value has no users and no
// clients.
type Options struct {
	Users   []User
	Clients []Client

	// GroupsClaim names the claim that lists a user's groups; "" means
	// "groups". It is left out for a user without groups.
	GroupsClaim string
	// GroupsScope, when set, is a scope the client must request for the
	// groups claim to be issued (as Okta's "groups"); "" issues it always
	// (as Keycloak's group mapper or Entra ID).
	GroupsScope string
	// UserInfoOnly makes the ID token carry only the protocol claims and
	// sub: name, email and groups come from the UserInfo endpoint alone, as
	// some providers do by default.
	UserInfoOnly bool

	// SigningKey signs the ID tokens; nil makes a fresh RSA-2048 key. Two
	// providers given the same key publish the same key ID, so that a test
	// can show a client refusing another issuer's token for its issuer
	// alone, not for its signature.
	SigningKey *rsa.PrivateKey
	// IDTokenLifetime is how long ID tokens are valid; 0 means 5 minutes.
	IDTokenLifetime time.Duration
	// Down starts the provider down, as SetDown(true) does.
	Down bool
}

// Provider is a running OpenID provider. Its methods are safe for
// concurrent use.
type Provider struct {
	// Issuer is the provider's issuer URL (https://127.0.0.1:port), the
	// value of the hub's EDIHUB_OIDC_ISSUER.
	Issuer string

	server  *httptest.Server
	storage *storage
	client  *http.Client

	down atomic.Bool

	mu       sync.Mutex
	browsers []*http.Transport // closed with the provider
}

const (
	loginPath      = "/login"
	requestIDParam = "authRequestID"
)

// Start starts a provider on a loopback port and stops it in t.Cleanup.
// It fails t when the options are unusable.
func Start(t testing.TB, opts Options) *Provider {
	t.Helper()
	p, err := start(opts)
	if err != nil {
		t.Fatalf("oidcprovider: %v", err)
	}
	t.Cleanup(p.close)
	return p
}

func start(opts Options) (*Provider, error) {
	if opts.GroupsClaim == "" {
		opts.GroupsClaim = "groups"
	}
	if opts.IDTokenLifetime == 0 {
		opts.IDTokenLifetime = 5 * time.Minute
	}
	key := opts.SigningKey
	if key == nil {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
	}
	thumb, err := (&jose.JSONWebKey{Key: &key.PublicKey}).Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("key ID: %w", err)
	}
	st := &storage{
		users:        opts.Users,
		clients:      map[string]*client{},
		key:          key,
		keyID:        base64.RawURLEncoding.EncodeToString(thumb),
		groupsClaim:  opts.GroupsClaim,
		groupsScope:  opts.GroupsScope,
		userInfoOnly: opts.UserInfoOnly,
		requests:     map[string]*authRequest{},
		codes:        map[string]string{},
		tokens:       map[string]*accessToken{},
	}
	seen := map[string]bool{}
	for _, u := range opts.Users {
		if u.Subject == "" || u.Password == "" {
			return nil, fmt.Errorf("user %q: Subject and Password are required", u.Email)
		}
		if seen[u.Subject] || (u.Email != "" && seen[u.Email]) {
			return nil, fmt.Errorf("user %q: Subject or Email used twice", u.Subject)
		}
		seen[u.Subject], seen[u.Email] = true, u.Email != ""
	}
	var scopes []string
	if opts.GroupsScope != "" {
		scopes = []string{opts.GroupsScope}
	}
	for _, c := range opts.Clients {
		if c.ID == "" || c.Secret == "" || len(c.RedirectURIs) == 0 {
			return nil, fmt.Errorf("client %q: ID, Secret and RedirectURIs are required", c.ID)
		}
		st.clients[c.ID] = &client{
			id:             c.ID,
			secret:         c.Secret,
			redirectURIs:   c.RedirectURIs,
			scopes:         scopes,
			idTokenClaims:  !opts.UserInfoOnly,
			idTokenTimeout: opts.IDTokenLifetime,
		}
	}

	server := httptest.NewUnstartedServer(nil)
	issuer := "https://" + server.Listener.Addr().String()
	config := &op.Config{
		CodeMethodS256:  true,
		AuthMethodPost:  true,
		SupportedScopes: append([]string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail}, scopes...),
	}
	if _, err := rand.Read(config.CryptoKey[:]); err != nil {
		return nil, err
	}
	provider, err := op.NewProvider(config, st, op.StaticIssuer(issuer))
	if err != nil {
		server.Close()
		return nil, fmt.Errorf("op: %w", err)
	}
	login := &loginPage{storage: st, callback: op.AuthCallbackURL(provider)}
	interceptor := op.NewIssuerInterceptor(provider.IssuerFromRequest)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+loginPath, login.show)
	mux.HandleFunc("POST "+loginPath, interceptor.HandlerFunc(login.check))
	mux.Handle("/", provider)
	p := &Provider{Issuer: issuer, server: server, storage: st}
	p.down.Store(opts.Down)
	server.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			// Like a provider that is down: the connection ends
			// without an answer.
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
				return
			}
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	})
	server.Config.ReadHeaderTimeout = 10 * time.Second
	server.StartTLS()
	p.client = server.Client()
	return p, nil
}

// SetDown takes the provider down (every request's connection is closed
// without an answer, as when it is unreachable) or brings it up again.
func (p *Provider) SetDown(down bool) { p.down.Store(down) }

func (p *Provider) close() {
	p.server.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.browsers {
		t.CloseIdleConnections()
	}
}

// SetGroups changes the groups of the user of subject, as an administrator
// of the provider does: tokens issued from then on carry the new groups.
// It panics for a subject the provider does not have (a mistake in the
// test).
func (p *Provider) SetGroups(subject string, groups []string) {
	st := p.storage
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.users {
		if st.users[i].Subject == subject {
			st.users[i].Groups = slices.Clone(groups)
			return
		}
	}
	panic("oidcprovider: SetGroups: no user " + subject)
}

// HTTPClient returns a client that trusts the provider's certificate, for
// the relying party's back channel (discovery, token, keys, userinfo). It
// follows no cookies.
func (p *Provider) HTTPClient() *http.Client { return p.client }

// Certificate returns the provider's TLS certificate, for a client that
// must trust several providers.
func (p *Provider) Certificate() *x509.Certificate { return p.server.Certificate() }

// Browser returns a new client with a cookie jar that trusts the
// provider's certificate: one user agent, for Login. Its connections are
// closed with the provider.
func (p *Provider) Browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		panic(err) // cookiejar.New fails only on bad options
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.server.Certificate())
	t := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	p.mu.Lock()
	p.browsers = append(p.browsers, t)
	p.mu.Unlock()
	return &http.Client{Jar: jar, Transport: t, Timeout: 30 * time.Second}
}

// ErrLoginRefused is returned by Login when the provider's login page
// refused the user name or password.
var ErrLoginRefused = errors.New("oidcprovider: login refused")

// Login signs username in with password the way a browser would: it
// opens authURL (the relying party's authorization URL) with browser
// (nil: a new Browser), fills in and posts the provider's login form, and
// follows redirects until the one to authURL's redirect_uri, which it
// returns without following. That callback URL carries the code and state,
// or the provider's error.
//
// It returns ErrLoginRefused when the form comes back with an error, and
// an error naming the status when a page is not the login form.
func (p *Provider) Login(ctx context.Context, browser *http.Client, authURL, username, password string) (callbackURL string, err error) {
	au, err := url.Parse(authURL)
	if err != nil {
		return "", fmt.Errorf("oidcprovider: auth URL: %w", err)
	}
	redirect, err := url.Parse(au.Query().Get("redirect_uri"))
	if err != nil || redirect.Host == "" {
		return "", fmt.Errorf("oidcprovider: auth URL %s has no usable redirect_uri", authURL)
	}
	if browser == nil {
		browser = p.Browser()
	}
	c := *browser
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return "", fmt.Errorf("oidcprovider: %w", err)
	}
	posted := false
	for range 10 {
		resp, err := c.Do(req)
		if err != nil {
			return "", fmt.Errorf("oidcprovider: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return "", fmt.Errorf("oidcprovider: read %s: %w", req.URL, err)
		}
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
			next, err := req.URL.Parse(loc)
			if err != nil {
				return "", fmt.Errorf("oidcprovider: redirect to %q: %w", loc, err)
			}
			if next.Scheme == redirect.Scheme && next.Host == redirect.Host && next.Path == redirect.Path {
				return next.String(), nil
			}
			if req, err = http.NewRequestWithContext(ctx, http.MethodGet, next.String(), nil); err != nil {
				return "", fmt.Errorf("oidcprovider: %w", err)
			}
			continue
		}
		f, ok := findLoginForm(body)
		switch {
		case ok && posted:
			return "", fmt.Errorf("%w: %s", ErrLoginRefused, f.message)
		case ok:
			action, err := req.URL.Parse(f.action)
			if err != nil {
				return "", fmt.Errorf("oidcprovider: form action %q: %w", f.action, err)
			}
			f.values.Set(f.user, username)
			f.values.Set(f.password, password)
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, action.String(), strings.NewReader(f.values.Encode()))
			if err != nil {
				return "", fmt.Errorf("oidcprovider: %w", err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			posted = true
		default:
			return "", fmt.Errorf("oidcprovider: %s answered %s, not the login form or a redirect: %.300s", req.URL.Redacted(), resp.Status, body)
		}
	}
	return "", errors.New("oidcprovider: more than 10 steps without reaching the redirect_uri")
}

// loginForm is a form with a password field, as a browser would see it.
type loginForm struct {
	action         string
	values         url.Values // hidden fields
	user, password string     // the names of the text and password fields
	message        string     // the text of an element of class "error"
}

// findLoginForm finds the first form with a password input in page.
func findLoginForm(page []byte) (loginForm, bool) {
	doc, err := html.Parse(strings.NewReader(string(page)))
	if err != nil {
		return loginForm{}, false
	}
	var found loginForm
	var message string
	var walk func(n *html.Node, form *loginForm)
	walk = func(n *html.Node, form *loginForm) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "form":
				form = &loginForm{action: attr(n, "action"), values: url.Values{}}
			case "input":
				if form != nil {
					switch attr(n, "type") {
					case "hidden":
						form.values.Set(attr(n, "name"), attr(n, "value"))
					case "password":
						form.password = attr(n, "name")
					case "", "text", "email":
						if form.user == "" {
							form.user = attr(n, "name")
						}
					}
				}
			}
			if strings.Contains(" "+attr(n, "class")+" ", " error ") {
				message = strings.TrimSpace(text(n))
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, form)
		}
		if n.Type == html.ElementNode && n.Data == "form" && form.password != "" && found.password == "" {
			found = *form
		}
	}
	walk(doc, nil)
	found.message = message
	return found, found.password != "" && found.user != ""
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// loginPage is the provider's own sign-in page: one form, a user name and
// a password, checked against the users of the options.
type loginPage struct {
	storage  *storage
	callback func(context.Context, string) string
}

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test OpenID provider: sign in</title></head>
<body>
<h1>Sign in</h1>
{{if .Error}}<p class="error">{{.Error}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="id" value="{{.ID}}">
<label>E-mail or user ID <input type="text" name="username" autocomplete="username"></label>
<label>Password <input type="password" name="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button>
</form>
</body></html>
`))

func (l *loginPage) render(w http.ResponseWriter, status int, id, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = loginTemplate.Execute(w, struct{ ID, Error string }{id, msg})
}

func (l *loginPage) show(w http.ResponseWriter, r *http.Request) {
	l.render(w, http.StatusOK, r.URL.Query().Get(requestIDParam), "")
}

func (l *loginPage) check(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	id := r.PostForm.Get("id")
	if err := l.storage.checkPassword(id, r.PostForm.Get("username"), r.PostForm.Get("password")); err != nil {
		l.render(w, http.StatusUnauthorized, id, err.Error())
		return
	}
	http.Redirect(w, r, l.callback(r.Context(), id), http.StatusFound)
}
