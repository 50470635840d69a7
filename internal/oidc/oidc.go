// Package oidc signs users of the ops console in with an OpenID Connect
// provider (Keycloak, Entra ID, Okta, ...) and maps their groups to a hub
// role.
//
// The sign-in is the authorization code flow with PKCE (S256), state and
// nonce: Start makes a Flow and the provider's URL, the console keeps the
// Flow in the user's session and sends the browser to the URL; Finish
// takes the Flow back with the query of the callback, checks the state,
// exchanges the code with the PKCE verifier, verifies the ID token
// (signature, issuer, audience, expiry, nonce) with coreos/go-oidc, and
// reads the user's groups from the ID token or, when it has none, from the
// UserInfo endpoint.
//
// A user of the provider is not a user of the hub: a sign-in whose groups
// map to no role ends in ErrNoRole, and the console refuses it. Errors
// never contain tokens, codes or the flow's secrets.
package oidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Errors of Finish, matchable with errors.Is. A *ConfigError is returned
// instead when the provider refuses the hub's client credentials.
var (
	// ErrState: the callback's state is not the Flow's (a forged callback,
	// or one from another sign-in or tab).
	ErrState = errors.New("oidc: state mismatch")
	// ErrProvider: the provider refused the sign-in or the code, could not
	// be reached, or answered something unusable.
	ErrProvider = errors.New("oidc: provider error")
	// ErrIDToken: the ID token failed verification (signature, issuer,
	// audience, expiry, nonce or access token hash).
	ErrIDToken = errors.New("oidc: ID token refused")
	// ErrNoRole: the user signed in at the provider, but none of their
	// groups maps to a hub role. Finish returns the Identity with it, so
	// that the caller can say who was refused.
	ErrNoRole = errors.New("oidc: no group of the user maps to a role")
)

// Provider signs users in with one OpenID provider. It is safe for
// concurrent use.
type Provider struct {
	opts     Options
	provider *gooidc.Provider
	oauth    oauth2.Config
	verifier *gooidc.IDTokenVerifier
	userInfo bool // the provider has a UserInfo endpoint
}

// Flow is what the console keeps in the user's session between Start and
// Finish: secrets of one sign-in, to be stored on the server side (never in
// a cookie the browser can read), used by one Finish and then deleted.
type Flow struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"` // PKCE code verifier
}

// Identity is the user Finish signed in. Issuer and Subject together
// identify them; Email and Name are for display (an e-mail address can be
// reassigned at the provider).
type Identity struct {
	Issuer        string
	Subject       string
	Name          string
	Email         string
	EmailVerified bool
	Groups        []string
	// Role is the highest role among the Groups' mapped roles: "viewer",
	// "operator" or "admin", or "" (with ErrNoRole) when none maps.
	Role string
}

// New validates opts and fetches the provider's discovery document. Every
// mistake in opts, and a discovery that fails, is a *ConfigError naming the
// setting and the fix. ctx bounds discovery only.
//
// edihub serve uses NewLazy instead, which discovers in the background:
// a provider that is down must not keep the hub from starting.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return discover(ctx, opts)
}

// discover fetches the discovery document of opts, validated, and makes
// the Provider.
func discover(ctx context.Context, opts Options) (*Provider, error) {
	ctx = gooidc.ClientContext(ctx, opts.HTTPClient)
	provider, err := gooidc.NewProvider(ctx, opts.Issuer)
	if err != nil {
		return nil, discoveryError(opts.Issuer, err)
	}
	var meta struct {
		CodeChallengeMethods []string `json:"code_challenge_methods_supported"`
		AuthMethods          []string `json:"token_endpoint_auth_methods_supported"`
		UserInfo             string   `json:"userinfo_endpoint"`
	}
	if err := provider.Claims(&meta); err != nil {
		return nil, &ConfigError{Option: "Issuer", Setting: SettingIssuer, Problem: "unreadable discovery document", Err: err,
			Fix: "check that the URL is the issuer of an OpenID Connect provider"}
	}
	if meta.CodeChallengeMethods != nil && !slices.Contains(meta.CodeChallengeMethods, "S256") {
		return nil, &ConfigError{Option: "Issuer", Setting: SettingIssuer,
			Problem: fmt.Sprintf("the provider does not offer PKCE with S256 (it offers %v)", meta.CodeChallengeMethods),
			Fix:     "enable PKCE (S256) for the hub's client at the provider, or use a provider that supports it"}
	}
	endpoint := provider.Endpoint()
	// client_secret_basic is the default of the specification when the
	// provider lists nothing.
	switch {
	case meta.AuthMethods == nil || slices.Contains(meta.AuthMethods, "client_secret_basic"):
		endpoint.AuthStyle = oauth2.AuthStyleInHeader
	case slices.Contains(meta.AuthMethods, "client_secret_post"):
		endpoint.AuthStyle = oauth2.AuthStyleInParams
	default:
		return nil, &ConfigError{Option: "ClientSecret", Setting: SettingClientSecret,
			Problem: fmt.Sprintf("the provider takes no client secret at its token endpoint (it offers %v)", meta.AuthMethods),
			Fix:     "register the hub at the provider as a confidential client authenticated with a client secret"}
	}
	return &Provider{
		opts:     opts,
		provider: provider,
		oauth: oauth2.Config{
			ClientID:     opts.ClientID,
			ClientSecret: opts.ClientSecret,
			Endpoint:     endpoint,
			RedirectURL:  opts.RedirectURL,
			Scopes:       opts.Scopes,
		},
		// The key set fetches with ctx's values (our client) but not its
		// cancellation.
		verifier: provider.VerifierContext(ctx, &gooidc.Config{ClientID: opts.ClientID, Now: opts.Now}),
		userInfo: meta.UserInfo != "",
	}, nil
}

// discoveryError explains why the issuer's discovery failed.
func discoveryError(issuer string, err error) error {
	e := &ConfigError{Option: "Issuer", Setting: SettingIssuer, Err: err}
	wellKnown := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	var mismatch *gooidc.IssuerMismatchError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var recordHeader tls.RecordHeaderError
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &mismatch):
		e.Err = nil
		e.Problem = fmt.Sprintf("the provider calls itself %q, not %q", mismatch.Discovered, mismatch.Provided)
		e.Fix = fmt.Sprintf("set it to %s exactly (a trailing slash counts)", mismatch.Discovered)
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &certInvalid):
		e.Problem = "the provider's TLS certificate is not trusted"
		e.Fix = "give the hub the CA that signed the provider's certificate (the system's trust store or SSL_CERT_FILE), or correct the host name"
	case errors.As(err, &recordHeader):
		e.Problem = "the provider does not speak TLS there"
		e.Fix = "check the scheme and port of the URL"
	case errors.As(err, &dnsErr):
		e.Problem = fmt.Sprintf("the host %s is not known", dnsErr.Name)
		e.Fix = "check the host name of the URL and the hub's DNS"
	case errors.As(err, &opErr), errors.Is(err, context.DeadlineExceeded):
		e.Problem = "the provider is unreachable at " + wellKnown
		e.Fix = "check the URL, that the provider runs, and that the hub may reach it (firewall, proxy, NetworkPolicy)"
	default:
		// a status other than 200 or a document that is not JSON
		e.Err = errors.New(brief(err.Error()))
		e.Problem = "no OpenID discovery document at " + wellKnown
		e.Fix = "set the issuer URL the provider documents, such as https://keycloak.example/realms/<realm> or https://login.microsoftonline.com/<tenant>/v2.0"
	}
	return e
}

// Start begins a sign-in: a new Flow (random state, nonce and PKCE
// verifier, 256 bits each) and the provider's authorization URL to send the
// browser to.
func (p *Provider) Start() (Flow, string) {
	f := Flow{State: random(), Nonce: random(), Verifier: random()}
	return f, p.oauth.AuthCodeURL(f.State, gooidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
}

func random() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Finish completes the sign-in of flow with the query of the callback
// request (the provider's redirect to RedirectURL). It returns ErrState,
// ErrProvider, ErrIDToken or ErrNoRole (with the Identity), or a
// *ConfigError when the provider refuses the hub's client credentials. A
// flow is good for one Finish: a code exchanged once is refused the second
// time. ctx bounds the calls to the provider.
func (p *Provider) Finish(ctx context.Context, flow Flow, callback url.Values) (Identity, error) {
	if flow.State == "" || subtle.ConstantTimeCompare([]byte(callback.Get("state")), []byte(flow.State)) != 1 {
		return Identity{}, fmt.Errorf("%w: the callback does not belong to this sign-in (forged, or from another tab); start again", ErrState)
	}
	// RFC 9207: a provider that names itself must be ours (mix-up attacks).
	if iss := callback.Get("iss"); iss != "" && iss != p.opts.Issuer {
		return Identity{}, fmt.Errorf("%w: the callback comes from %q, not %q", ErrProvider, brief(iss), p.opts.Issuer)
	}
	if code := callback.Get("error"); code != "" {
		msg := brief(code)
		if d := callback.Get("error_description"); d != "" {
			msg += ": " + brief(d)
		}
		return Identity{}, fmt.Errorf("%w: the provider refused the sign-in: %s", ErrProvider, msg)
	}
	code := callback.Get("code")
	if code == "" {
		return Identity{}, fmt.Errorf("%w: the callback carries no code", ErrProvider)
	}

	ctx = gooidc.ClientContext(ctx, p.opts.HTTPClient)
	token, err := p.oauth.Exchange(ctx, code, oauth2.VerifierOption(flow.Verifier))
	if err != nil {
		return Identity{}, p.exchangeError(err)
	}
	raw, _ := token.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, fmt.Errorf("%w: the token response has no id_token (is the openid scope granted?)", ErrIDToken)
	}
	idToken, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %s", ErrIDToken, brief(err.Error()))
	}
	if subtle.ConstantTimeCompare([]byte(idToken.Nonce), []byte(flow.Nonce)) != 1 || flow.Nonce == "" {
		return Identity{}, fmt.Errorf("%w: its nonce is not this sign-in's (a replayed or injected token)", ErrIDToken)
	}
	if idToken.AccessTokenHash != "" {
		if err := idToken.VerifyAccessToken(token.AccessToken); err != nil {
			return Identity{}, fmt.Errorf("%w: the access token does not match its at_hash", ErrIDToken)
		}
	}
	var claims map[string]any
	if err := idToken.Claims(&claims); err != nil {
		return Identity{}, fmt.Errorf("%w: claims: %s", ErrIDToken, brief(err.Error()))
	}
	id := Identity{Issuer: idToken.Issuer, Subject: idToken.Subject}
	groups, found, err := p.readClaims(&id, claims)
	if err != nil {
		return Identity{}, err
	}
	// Some providers put profile, email or groups in the UserInfo answer
	// only. Without the groups the sign-in cannot go on; without a name or
	// an e-mail address it can, so a failing UserInfo is then ignored.
	if (!found || id.Name == "" || id.Email == "") && p.userInfo {
		g, f, err := p.fromUserInfo(ctx, token, &id)
		switch {
		case err != nil && !found:
			return Identity{}, err
		case err == nil && !found:
			groups, found = g, f
		}
	}
	id.Groups = groups
	id.Role = roleOf(groups, p.opts.Roles)
	if id.Role == "" {
		return id, fmt.Errorf("%w: %s (%s) is in groups %q of claim %q; map one of them in %s",
			ErrNoRole, id.Subject, id.Email, groups, p.opts.GroupsClaim, SettingRoles)
	}
	return id, nil
}

// fromUserInfo reads the UserInfo endpoint's claims into id's empty fields
// and returns its groups claim, if any.
func (p *Provider) fromUserInfo(ctx context.Context, token *oauth2.Token, id *Identity) ([]string, bool, error) {
	info, err := p.provider.UserInfo(ctx, oauth2.StaticTokenSource(token))
	if err != nil {
		return nil, false, fmt.Errorf("%w: userinfo: %s", ErrProvider, brief(err.Error()))
	}
	if info.Subject != id.Subject {
		return nil, false, fmt.Errorf("%w: userinfo is about another subject than the ID token", ErrProvider)
	}
	var claims map[string]any
	if err := info.Claims(&claims); err != nil {
		return nil, false, fmt.Errorf("%w: userinfo: %s", ErrProvider, brief(err.Error()))
	}
	return p.readClaims(id, claims)
}

// exchangeError explains a failed code exchange without the response body
// (which a provider may fill with anything).
func (p *Provider) exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("%w: token endpoint: %s", ErrProvider, brief(err.Error()))
	}
	status := 0
	if re.Response != nil {
		status = re.Response.StatusCode
	}
	desc := ""
	if re.ErrorDescription != "" {
		desc = ": " + brief(re.ErrorDescription)
	}
	switch {
	case re.ErrorCode == "invalid_client" || status == http.StatusUnauthorized:
		return &ConfigError{Option: "ClientSecret", Setting: SettingClientSecret, Err: ErrProvider,
			Problem: fmt.Sprintf("the provider refused the hub's client credentials (%d %s%s)", status, re.ErrorCode, desc),
			Fix:     fmt.Sprintf("check that %s is the client ID registered at the provider and that the file named by %s holds its current secret", SettingClientID, SettingClientSecret)}
	case re.ErrorCode == "invalid_grant":
		return fmt.Errorf("%w: the provider refused the code (invalid_grant%s): it was used already, expired, or does not match the PKCE verifier; start again", ErrProvider, desc)
	case re.ErrorCode != "":
		return fmt.Errorf("%w: token endpoint: %d %s%s", ErrProvider, status, brief(re.ErrorCode), desc)
	default:
		return fmt.Errorf("%w: token endpoint answered %d", ErrProvider, status)
	}
}

// readClaims fills id's empty fields from claims and returns the groups
// claim and whether it is there.
func (p *Provider) readClaims(id *Identity, claims map[string]any) ([]string, bool, error) {
	str := func(name string) string { s, _ := claims[name].(string); return s }
	if id.Name == "" {
		id.Name = str("name")
		if id.Name == "" {
			id.Name = str("preferred_username")
		}
	}
	if id.Email == "" {
		id.Email = str("email")
		switch v := claims["email_verified"].(type) {
		case bool:
			id.EmailVerified = v
		case string: // some providers send "true"
			id.EmailVerified = v == "true"
		}
	}
	v, ok := lookup(claims, p.opts.GroupsClaim)
	if !ok {
		return nil, false, nil
	}
	groups, err := stringList(v)
	if err != nil {
		return nil, false, fmt.Errorf("%w: claim %q is %s; set %s to the claim that lists the groups", ErrProvider, p.opts.GroupsClaim, err, SettingGroupsClaim)
	}
	return groups, true, nil
}

// lookup finds claim name, or, when there is no such claim and the name has
// dots, the path it spells through nested objects.
func lookup(claims map[string]any, name string) (any, bool) {
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var v any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("a list holding %s", jsonType(e))
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, errors.New(jsonType(v))
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	default:
		return "a string"
	}
}

// roleOf returns the highest role of groups in roles, or "".
func roleOf(groups []string, roles map[string]string) string {
	best := ""
	for _, g := range groups {
		if r := roles[g]; roleRank[r] > roleRank[best] {
			best = r
		}
	}
	return best
}

// brief makes text from the network fit for an error message: printable
// characters only, at most 200 of them.
func brief(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}
