package oidc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/oidc"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/freeport"
	"github.com/edihub/edihub/internal/testenv/oidcprovider"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

const (
	clientID     = "edihub"
	clientSecret = "s3cret-of-the-hub"
	redirectURL  = "https://edihub.test/console/oidc/callback"
)

var (
	ada  = oidcprovider.User{Subject: "u-ada", Name: "Ada Admin", Email: "ada@example.test", Password: "ada-pw", Groups: []string{"staff", "edi-admins"}}
	olga = oidcprovider.User{Subject: "u-olga", Name: "Olga Ops", Email: "olga@example.test", Password: "olga-pw", Groups: []string{"edi-viewers", "edi-ops"}}
	otto = oidcprovider.User{Subject: "u-otto", Name: "Otto Ops", Email: "otto@example.test", Password: "otto-pw", Groups: []string{"edi-ops", "edi-viewers"}}
	nora = oidcprovider.User{Subject: "u-nora", Name: "Nora Nobody", Email: "nora@example.test", Password: "nora-pw", Groups: []string{"staff"}}

	roles = map[string]string{"edi-admins": "admin", "edi-ops": "operator", "edi-viewers": "viewer"}
)

// startProvider starts a real OpenID provider with the four users and the
// hub's client registration.
func startProvider(t *testing.T, opts oidcprovider.Options) *oidcprovider.Provider {
	t.Helper()
	opts.Users = []oidcprovider.User{ada, olga, otto, nora}
	opts.Clients = []oidcprovider.Client{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{redirectURL}}}
	return oidcprovider.Start(t, opts)
}

// hub is the relying party under test and what went over its back channel.
type hub struct {
	*oidc.Provider
	rec *recorder
}

// newHub makes a Provider for op's issuer; change adjusts its options. Its
// HTTP client trusts the providers in trust (op when empty) and records
// the token responses, so that tests can look for tokens in errors.
func newHub(t *testing.T, op *oidcprovider.Provider, change func(*oidc.Options), trust ...*oidcprovider.Provider) hub {
	t.Helper()
	h, err := tryHub(t, op, change, trust...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

func tryHub(t *testing.T, op *oidcprovider.Provider, change func(*oidc.Options), trust ...*oidcprovider.Provider) (hub, error) {
	t.Helper()
	if len(trust) == 0 {
		trust = []*oidcprovider.Provider{op}
	}
	pool := x509.NewCertPool()
	for _, p := range trust {
		pool.AddCert(p.Certificate())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &recorder{next: tr}
	opts := oidc.Options{
		Issuer:       op.Issuer,
		ClientID:     clientID,
		ClientSecret: clientSecret,
		RedirectURL:  redirectURL,
		Roles:        roles,
		HTTPClient:   &http.Client{Transport: rec, Timeout: 30 * time.Second},
	}
	if change != nil {
		change(&opts)
	}
	p, err := oidc.New(context.Background(), opts)
	return hub{p, rec}, err
}

// signIn starts a sign-in at h, logs user in at op's login page, and
// returns the flow and the query of the callback.
func signIn(t *testing.T, h hub, op *oidcprovider.Provider, user oidcprovider.User) (oidc.Flow, url.Values) {
	t.Helper()
	flow, authURL := h.Start()
	cb, err := op.Login(context.Background(), nil, authURL, user.Email, user.Password)
	if err != nil {
		t.Fatalf("Login(%s): %v", user.Email, err)
	}
	u, err := url.Parse(cb)
	if err != nil {
		t.Fatal(err)
	}
	return flow, u.Query()
}

// recorder is the hub's transport: it keeps the tokens of every token
// response it carries, and lets edit change what the provider answered.
type recorder struct {
	next http.RoundTripper
	edit func(path string, body []byte) []byte // nil: no change

	mu     sync.Mutex
	tokens []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if r.edit != nil {
		body = r.edit(req.URL.Path, body)
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if !strings.HasSuffix(req.URL.Path, "/token") {
		return resp, nil
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		IDToken     string `json:"id_token"`
	}
	if json.Unmarshal(body, &tr) == nil {
		r.mu.Lock()
		r.tokens = append(r.tokens, tr.AccessToken, tr.IDToken)
		r.mu.Unlock()
	}
	return resp, nil
}

// checkNoSecrets fails t when err's message holds a token the hub
// received, the code, or a secret of the flow.
func (h hub) checkNoSecrets(t *testing.T, err error, flow oidc.Flow, callback url.Values) {
	t.Helper()
	h.rec.mu.Lock()
	secrets := append([]string{flow.State, flow.Nonce, flow.Verifier, callback.Get("code"), clientSecret}, h.rec.tokens...)
	h.rec.mu.Unlock()
	for _, s := range secrets {
		if len(s) >= 8 && strings.Contains(err.Error(), s) {
			t.Errorf("error %q holds a secret (%.12s…)", err, s)
		}
	}
}

func TestSignInMapsGroupsToTheHighestRole(t *testing.T) {
	modes := []struct {
		name string
		opts oidcprovider.Options
	}{
		{"claims in the ID token", oidcprovider.Options{}},
		{"claims from UserInfo only", oidcprovider.Options{UserInfoOnly: true}},
	}
	tests := []struct {
		give oidcprovider.User
		want string
	}{
		{ada, "admin"},     // staff maps to nothing, edi-admins to admin
		{olga, "operator"}, // viewer, then operator
		{otto, "operator"}, // operator, then viewer
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			op := startProvider(t, mode.opts)
			h := newHub(t, op, nil)
			for _, tt := range tests {
				flow, cb := signIn(t, h, op, tt.give)
				got, err := h.Finish(context.Background(), flow, cb)
				if err != nil {
					t.Fatalf("Finish(%s) error: %v", tt.give.Email, err)
				}
				want := oidc.Identity{
					Issuer:        op.Issuer,
					Subject:       tt.give.Subject,
					Name:          tt.give.Name,
					Email:         tt.give.Email,
					EmailVerified: true,
					Groups:        tt.give.Groups,
					Role:          tt.want,
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Finish(%s) identity (-want +got):\n%s", tt.give.Email, diff)
				}
			}
		})
	}
}

func TestUserInNoMappedGroupGetsNoRole(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	h := newHub(t, op, nil)
	flow, cb := signIn(t, h, op, nora)
	got, err := h.Finish(context.Background(), flow, cb)
	if !errors.Is(err, oidc.ErrNoRole) {
		t.Fatalf("Finish(nora) = %+v, %v; want ErrNoRole", got, err)
	}
	if got.Subject != nora.Subject || got.Role != "" || !cmp.Equal(got.Groups, nora.Groups) {
		t.Errorf("Finish(nora) identity = %+v, want subject %s, groups %v and no role", got, nora.Subject, nora.Groups)
	}
	if !strings.Contains(err.Error(), oidc.SettingRoles) {
		t.Errorf("error %q does not name %s", err, oidc.SettingRoles)
	}
	h.checkNoSecrets(t, err, flow, cb)
}

// TestGroupsScope: a provider that issues the groups claim only for a
// scope (Okta) gives a role to a hub that asks for that scope, and none
// to a hub that does not.
func TestGroupsScope(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{GroupsScope: "groups", GroupsClaim: "roles"})
	tests := []struct {
		scopes []string
		want   error
	}{
		{[]string{"openid", "profile", "email", "groups"}, nil},
		{nil, oidc.ErrNoRole},
	}
	for _, tt := range tests {
		h := newHub(t, op, func(o *oidc.Options) { o.Scopes = tt.scopes; o.GroupsClaim = "roles" })
		flow, cb := signIn(t, h, op, ada)
		got, err := h.Finish(context.Background(), flow, cb)
		if !errors.Is(err, tt.want) {
			t.Errorf("scopes %v: Finish = %+v, %v; want %v", tt.scopes, got, err, tt.want)
		}
		if tt.want == nil && got.Role != "admin" {
			t.Errorf("scopes %v: role = %q, want admin", tt.scopes, got.Role)
		}
	}
}

// TestCallbackRefused: a callback that is not this sign-in's, or that
// brings the provider's refusal, ends the sign-in before any exchange.
func TestCallbackRefused(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	h := newHub(t, op, nil)
	tests := []struct {
		name    string
		change  func(f *oidc.Flow, cb url.Values)
		want    error
		wantMsg string
	}{
		{"state from another sign-in", func(f *oidc.Flow, cb url.Values) { cb.Set("state", "another-sign-in-state") }, oidc.ErrState, "another tab"},
		{"no state", func(f *oidc.Flow, cb url.Values) { cb.Del("state") }, oidc.ErrState, "another tab"},
		{"flow without state", func(f *oidc.Flow, cb url.Values) { f.State = ""; cb.Set("state", "") }, oidc.ErrState, "another tab"},
		{"the provider's error", func(f *oidc.Flow, cb url.Values) {
			cb.Del("code")
			cb.Set("error", "access_denied")
			cb.Set("error_description", "the user\ndeclined")
		}, oidc.ErrProvider, "refused the sign-in: access_denied: the user declined"},
		{"another issuer named", func(f *oidc.Flow, cb url.Values) { cb.Set("iss", "https://evil.example") }, oidc.ErrProvider, `"https://evil.example"`},
		{"no code", func(f *oidc.Flow, cb url.Values) { cb.Del("code") }, oidc.ErrProvider, "no code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flow, cb := signIn(t, h, op, ada)
			orig := flow
			tt.change(&flow, cb)
			_, err := h.Finish(context.Background(), flow, cb)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Finish = %v, want %v (%s)", err, tt.want, tt.wantMsg)
			}
			h.checkNoSecrets(t, err, orig, cb)
			// The code was not spent: the genuine callback still signs in.
			if tt.want == oidc.ErrState {
				flow, cb2 := orig, url.Values{"state": {orig.State}, "code": {cb.Get("code")}}
				if _, err := h.Finish(context.Background(), flow, cb2); err != nil {
					t.Errorf("Finish with the genuine callback after the refused one: %v", err)
				}
			}
		})
	}
}

func TestReplayedCodeIsRefused(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	h := newHub(t, op, nil)
	flow, cb := signIn(t, h, op, ada)
	if _, err := h.Finish(context.Background(), flow, cb); err != nil {
		t.Fatalf("first Finish: %v", err)
	}
	_, err := h.Finish(context.Background(), flow, cb)
	if !errors.Is(err, oidc.ErrProvider) || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("second Finish with the same code = %v, want ErrProvider (invalid_grant)", err)
	}
	h.checkNoSecrets(t, err, flow, cb)
}

// TestTamperedFlowIsRefused: a flow whose nonce or PKCE verifier is not
// the one the sign-in started with fails, though state and code are
// genuine.
func TestTamperedFlowIsRefused(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	h := newHub(t, op, nil)
	tests := []struct {
		name   string
		change func(*oidc.Flow)
		want   error
	}{
		{"nonce", func(f *oidc.Flow) { f.Nonce = "a-nonce-of-another-sign-in" }, oidc.ErrIDToken},
		{"no nonce", func(f *oidc.Flow) { f.Nonce = "" }, oidc.ErrIDToken},
		{"PKCE verifier", func(f *oidc.Flow) { f.Verifier = strings.Repeat("v", 43) }, oidc.ErrProvider},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flow, cb := signIn(t, h, op, ada)
			orig := flow
			tt.change(&flow)
			_, err := h.Finish(context.Background(), flow, cb)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Finish = %v, want %v", err, tt.want)
			}
			h.checkNoSecrets(t, err, orig, cb)
		})
	}
}

// TestTamperedResponsesAreRefused: an access token that is not the one
// the ID token was issued with, or UserInfo about another user, ends the
// sign-in.
func TestTamperedResponsesAreRefused(t *testing.T) {
	tests := []struct {
		name    string
		opts    oidcprovider.Options
		path    string
		old     string
		new     string
		want    error
		wantMsg string
	}{
		{"access token swapped", oidcprovider.Options{}, "/token", `"access_token":"`, `"access_token":"x`, oidc.ErrIDToken, "at_hash"},
		{"userinfo about another user", oidcprovider.Options{UserInfoOnly: true}, "/userinfo", `"sub":"u-nora"`, `"sub":"u-ada"`, oidc.ErrProvider, "another subject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := startProvider(t, tt.opts)
			h := newHub(t, op, nil)
			edited := false
			h.rec.edit = func(path string, body []byte) []byte {
				if !strings.HasSuffix(path, tt.path) || !bytes.Contains(body, []byte(tt.old)) {
					return body
				}
				edited = true
				return bytes.Replace(body, []byte(tt.old), []byte(tt.new), 1)
			}
			// Nora's UserInfo is made to say Ada (an admin).
			flow, cb := signIn(t, h, op, nora)
			got, err := h.Finish(context.Background(), flow, cb)
			if !edited {
				t.Fatalf("no %s response held %s", tt.path, tt.old)
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Finish = %+v, %v; want %v (%s)", got, err, tt.want, tt.wantMsg)
			}
			h.checkNoSecrets(t, err, flow, cb)
		})
	}
}

func TestWrongClientSecretNamesTheSetting(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	h := newHub(t, op, func(o *oidc.Options) { o.ClientSecret = "not-the-secret" })
	flow, cb := signIn(t, h, op, ada)
	_, err := h.Finish(context.Background(), flow, cb)
	var ce *oidc.ConfigError
	if !errors.As(err, &ce) || ce.Setting != oidc.SettingClientSecret || !errors.Is(err, oidc.ErrProvider) {
		t.Fatalf("Finish = %v, want a ConfigError for %s wrapping ErrProvider", err, oidc.SettingClientSecret)
	}
	for _, want := range []string{oidc.SettingClientSecret, oidc.SettingClientID, "invalid_client"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "not-the-secret") {
		t.Errorf("error %q holds the configured secret", err)
	}
	h.checkNoSecrets(t, err, flow, cb)
}

func TestExpiredIDTokenIsRefused(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{IDTokenLifetime: time.Minute})
	h := newHub(t, op, func(o *oidc.Options) { o.Now = func() time.Time { return time.Now().Add(2 * time.Minute) } })
	flow, cb := signIn(t, h, op, ada)
	_, err := h.Finish(context.Background(), flow, cb)
	if !errors.Is(err, oidc.ErrIDToken) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Finish two minutes after a one-minute token = %v, want ErrIDToken (expired)", err)
	}
	h.checkNoSecrets(t, err, flow, cb)
}

// TestAnotherIssuersTokenIsRefused: a token endpoint that answers with
// another provider's ID token (a mix-up, or a compromised endpoint) gets
// nowhere, even when the other provider signs with a key the hub trusts.
func TestAnotherIssuersTokenIsRefused(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     *rsa.PrivateKey // of the other provider
		wantMsg string
	}{
		{"same signing key", key, "different provider"},
		{"own signing key", nil, "signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := startProvider(t, oidcprovider.Options{SigningKey: key})
			other := startProvider(t, oidcprovider.Options{SigningKey: tt.key})
			h := newHub(t, good, nil, good, other)
			goodURL, _ := url.Parse(good.Issuer)
			otherURL, _ := url.Parse(other.Issuer)
			// The hub's token requests go to the other provider.
			rec := h.rec.next
			h.rec.next = roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.URL.Host == goodURL.Host && strings.HasSuffix(req.URL.Path, "/token") {
					req = req.Clone(req.Context())
					req.URL.Host, req.Host = otherURL.Host, otherURL.Host
				}
				return rec.RoundTrip(req)
			})

			// The user signs in at the other provider, with the hub's flow.
			flow, authURL := h.Start()
			au, _ := url.Parse(authURL)
			au.Host = otherURL.Host
			cbURL, err := other.Login(context.Background(), nil, au.String(), ada.Email, ada.Password)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(cbURL)
			cb := u.Query()

			got, err := h.Finish(context.Background(), flow, cb)
			if !errors.Is(err, oidc.ErrIDToken) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Finish with the other issuer's token = %+v, %v; want ErrIDToken (%s)", got, err, tt.wantMsg)
			}
			h.checkNoSecrets(t, err, flow, cb)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDiscoveryFailuresNameTheFix: every way the issuer can be wrong is
// a ConfigError naming EDIHUB_OIDC_ISSUER and saying what to do.
func TestDiscoveryFailuresNameTheFix(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{})
	dead, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		change      func(*oidc.Options)
		wantProblem string
		wantFix     string
	}{
		{"nobody listens", func(o *oidc.Options) { o.Issuer = "https://127.0.0.1:" + itoa(dead) }, "unreachable", "firewall"},
		{"no discovery there", func(o *oidc.Options) { o.Issuer = op.Issuer + "/realms/edi" }, "no OpenID discovery document", "realms"},
		{"trailing slash", func(o *oidc.Options) { o.Issuer = op.Issuer + "/" }, "calls itself", "set it to " + op.Issuer + " exactly"},
		{"untrusted certificate", func(o *oidc.Options) { o.HTTPClient = &http.Client{Timeout: 10 * time.Second} }, "not trusted", "CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryHub(t, op, tt.change)
			var ce *oidc.ConfigError
			if !errors.As(err, &ce) || ce.Setting != oidc.SettingIssuer {
				t.Fatalf("New = %v, want a ConfigError for %s", err, oidc.SettingIssuer)
			}
			if !strings.Contains(ce.Problem, tt.wantProblem) || !strings.Contains(ce.Fix, tt.wantFix) {
				t.Errorf("New = %q, want problem %q and fix %q", err, tt.wantProblem, tt.wantFix)
			}
			if !strings.Contains(err.Error(), oidc.SettingIssuer) {
				t.Errorf("error %q does not name %s", err, oidc.SettingIssuer)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestOptionMistakes: New refuses each mistake before it calls the
// provider, naming the setting; all mistakes at once are all reported.
func TestOptionMistakes(t *testing.T) {
	valid := func() oidc.Options {
		return oidc.Options{
			Issuer: "https://idp.example/realms/edi", ClientID: clientID, ClientSecret: clientSecret,
			RedirectURL: redirectURL, Roles: roles,
		}
	}
	tests := []struct {
		name   string
		change func(*oidc.Options)
		want   []string // settings named, in order
	}{
		{"no issuer", func(o *oidc.Options) { o.Issuer = "" }, []string{oidc.SettingIssuer}},
		{"relative issuer", func(o *oidc.Options) { o.Issuer = "idp.example" }, []string{oidc.SettingIssuer}},
		{"plain http issuer", func(o *oidc.Options) { o.Issuer = "http://idp.example" }, []string{oidc.SettingIssuer}},
		{"no client ID", func(o *oidc.Options) { o.ClientID = " " }, []string{oidc.SettingClientID}},
		{"no client secret", func(o *oidc.Options) { o.ClientSecret = "" }, []string{oidc.SettingClientSecret}},
		{"plain http redirect", func(o *oidc.Options) { o.RedirectURL = "http://hub.example/console/oidc/callback" }, []string{oidc.SettingRedirectURL}},
		{"scopes without openid", func(o *oidc.Options) { o.Scopes = []string{"profile", "groups"} }, []string{oidc.SettingScopes}},
		{"two claims", func(o *oidc.Options) { o.GroupsClaim = "groups roles" }, []string{oidc.SettingGroupsClaim}},
		{"no roles", func(o *oidc.Options) { o.Roles = nil }, []string{oidc.SettingRoles}},
		{"unknown role", func(o *oidc.Options) { o.Roles = map[string]string{"edi-admins": "root"} }, []string{oidc.SettingRoles}},
		{"everything", func(o *oidc.Options) { *o = oidc.Options{} }, []string{oidc.SettingIssuer, oidc.SettingClientID, oidc.SettingClientSecret, oidc.SettingRedirectURL, oidc.SettingRoles}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.change(&o)
			_, err := oidc.New(context.Background(), o)
			var got []string
			for _, e := range unjoin(err) {
				var ce *oidc.ConfigError
				if !errors.As(e, &ce) || ce.Fix == "" {
					t.Fatalf("New error %v is not a ConfigError with a fix", e)
				}
				got = append(got, ce.Setting)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("New(%s) settings named (-want +got):\n%s\nerror: %v", tt.name, diff, err)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestParseRoles(t *testing.T) {
	tests := []struct {
		give    string
		want    map[string]string
		wantErr []string // fragments of the messages, one per mistake
	}{
		{give: "edi-admins=admin,edi-ops=operator,edi-viewers=viewer", want: roles},
		{give: " edi-admins = admin , /edi/ops=operator,", want: map[string]string{"edi-admins": "admin", "/edi/ops": "operator"}},
		{give: "CN=EDI Admins,OU=Groups=admin", wantErr: []string{`"EDI Admins" is not a role`}},
		{give: "a=b=admin", want: map[string]string{"a=b": "admin"}},
		{give: "", wantErr: []string{"no group is mapped"}},
		{give: "edi-admins=root", wantErr: []string{`"root" is not a role`}},
		{give: "edi-admins=admin,edi-admins=viewer", wantErr: []string{"mapped twice (admin and viewer)"}},
		{give: "edi-admins,=admin", wantErr: []string{`"edi-admins" has no =role`, "names no group"}},
	}
	for _, tt := range tests {
		got, err := oidc.ParseRoles(tt.give)
		if tt.wantErr == nil {
			if err != nil || !cmp.Equal(got, tt.want) {
				t.Errorf("ParseRoles(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
			}
			continue
		}
		errs := unjoin(err)
		if len(errs) != len(tt.wantErr) {
			t.Errorf("ParseRoles(%q) = %v, %v; want %d errors", tt.give, got, err, len(tt.wantErr))
			continue
		}
		for i, e := range errs {
			var ce *oidc.ConfigError
			if !errors.As(e, &ce) || ce.Setting != oidc.SettingRoles || !strings.Contains(e.Error(), tt.wantErr[i]) || !strings.Contains(e.Error(), "edi-admins=admin,edi-ops=operator") {
				t.Errorf("ParseRoles(%q) error %d = %v, want a ConfigError for %s saying %q and showing an example", tt.give, i, e, oidc.SettingRoles, tt.wantErr[i])
			}
		}
	}
}

// TestUnusableProviderIsRefused: a provider without S256 PKCE, or that
// takes no client secret, is refused at start. A discovery document stands
// in for such a provider (the test provider offers both).
func TestUnusableProviderIsRefused(t *testing.T) {
	tests := []struct {
		name        string
		meta        map[string]any
		wantSetting string
		wantProblem string
	}{
		{"PKCE plain only", map[string]any{"code_challenge_methods_supported": []string{"plain"}}, oidc.SettingIssuer, "PKCE with S256"},
		{"private_key_jwt only", map[string]any{"token_endpoint_auth_methods_supported": []string{"private_key_jwt"}}, oidc.SettingClientSecret, "no client secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var issuer string
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				doc := map[string]any{
					"issuer": issuer, "authorization_endpoint": issuer + "/authorize", "token_endpoint": issuer + "/token",
					"jwks_uri": issuer + "/keys", "response_types_supported": []string{"code"},
					"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
				}
				for k, v := range tt.meta {
					doc[k] = v
				}
				_ = json.NewEncoder(w).Encode(doc)
			}))
			defer srv.Close()
			issuer = srv.URL
			_, err := oidc.New(context.Background(), oidc.Options{
				Issuer: issuer, ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirectURL, Roles: roles,
				HTTPClient: srv.Client(),
			})
			var ce *oidc.ConfigError
			if !errors.As(err, &ce) || ce.Setting != tt.wantSetting || !strings.Contains(ce.Problem, tt.wantProblem) {
				t.Fatalf("New = %v, want a ConfigError for %s saying %q", err, tt.wantSetting, tt.wantProblem)
			}
		})
	}
}
