package oidcprovider_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/oidcprovider"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

const redirectURL = "https://rp.test/callback"

var user = oidcprovider.User{Subject: "u1", Name: "Una User", Email: "una@example.test", Password: "right-password", Groups: []string{"g1"}}

func start(t *testing.T, opts ...oidcprovider.Options) (*oidcprovider.Provider, oauth2.Config, string) {
	t.Helper()
	var o oidcprovider.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Users = []oidcprovider.User{user}
	o.Clients = []oidcprovider.Client{{ID: "rp", Secret: "rp-secret", RedirectURIs: []string{redirectURL}}}
	p := oidcprovider.Start(t, o)
	var doc struct {
		Authorize string `json:"authorization_endpoint"`
		Token     string `json:"token_endpoint"`
		UserInfo  string `json:"userinfo_endpoint"`
	}
	resp, err := p.HTTPClient().Get(p.Issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return p, oauth2.Config{
		ClientID: "rp", ClientSecret: "rp-secret", RedirectURL: redirectURL,
		Endpoint: oauth2.Endpoint{AuthURL: doc.Authorize, TokenURL: doc.Token, AuthStyle: oauth2.AuthStyleInHeader},
		Scopes:   []string{"openid", "profile", "email"},
	}, doc.UserInfo
}

// TestLoginChecksThePassword: the provider's login page signs a user in
// with their password only; a refused login never reaches the redirect.
func TestLoginChecksThePassword(t *testing.T) {
	p, rp, _ := start(t)
	tests := []struct {
		login, password string
		wantErr         error
	}{
		{user.Email, "wrong-password", oidcprovider.ErrLoginRefused},
		{user.Email, "", oidcprovider.ErrLoginRefused},
		{"nobody@example.test", user.Password, oidcprovider.ErrLoginRefused},
		{user.Email, strings.ToUpper(user.Password), oidcprovider.ErrLoginRefused},
		{user.Email, user.Password, nil},
		{user.Subject, user.Password, nil},
	}
	for _, tt := range tests {
		verifier := oauth2.GenerateVerifier()
		authURL := rp.AuthCodeURL("the-state", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", "the-nonce"))
		cb, err := p.Login(context.Background(), nil, authURL, tt.login, tt.password)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("Login(%q, %q) = %q, %v; want %v", tt.login, tt.password, cb, err, tt.wantErr)
			continue
		}
		if tt.wantErr != nil {
			if !strings.Contains(err.Error(), "wrong user name or password") {
				t.Errorf("Login(%q, %q) error %q does not show the page's message", tt.login, tt.password, err)
			}
			continue
		}
		u, err := url.Parse(cb)
		if err != nil || !strings.HasPrefix(cb, redirectURL+"?") || u.Query().Get("state") != "the-state" || u.Query().Get("code") == "" {
			t.Fatalf("Login(%q) = %q, want %s with the state and a code", tt.login, cb, redirectURL)
		}
		// The code is genuine: it buys tokens once, with the verifier.
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, p.HTTPClient())
		tok, err := rp.Exchange(ctx, u.Query().Get("code"), oauth2.VerifierOption(verifier))
		if err != nil || tok.Extra("id_token") == nil {
			t.Fatalf("Exchange = %v, %v; want tokens with an id_token", tok, err)
		}
		if _, err := rp.Exchange(ctx, u.Query().Get("code"), oauth2.VerifierOption(verifier)); err == nil {
			t.Errorf("a second Exchange of the code succeeded; codes must be single-use")
		}
	}
}

// TestAuthorizeRequiresPKCEAndNonce: a request without S256 PKCE or
// without a nonce comes back to the client with invalid_request.
func TestAuthorizeRequiresPKCEAndNonce(t *testing.T) {
	p, rp, _ := start(t)
	tests := []struct {
		name string
		opts []oauth2.AuthCodeOption
	}{
		{"no PKCE", []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("nonce", "n")}},
		{"plain PKCE", []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("nonce", "n"), oauth2.SetAuthURLParam("code_challenge", strings.Repeat("c", 43)), oauth2.SetAuthURLParam("code_challenge_method", "plain")}},
		{"no nonce", []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(oauth2.GenerateVerifier())}},
	}
	for _, tt := range tests {
		cb, err := p.Login(context.Background(), nil, rp.AuthCodeURL("s", tt.opts...), user.Email, user.Password)
		if err != nil {
			t.Fatalf("%s: Login: %v", tt.name, err)
		}
		u, _ := url.Parse(cb)
		if got := u.Query().Get("error"); got != "invalid_request" || u.Query().Get("code") != "" {
			t.Errorf("%s: callback %s, want error=invalid_request and no code", tt.name, cb)
		}
	}
}

func TestStartRefusesUnusableOptions(t *testing.T) {
	// Start fails the test it is given; run it on a stand-in.
	tests := []oidcprovider.Options{
		{Users: []oidcprovider.User{{Subject: "u", Password: ""}}},
		{Users: []oidcprovider.User{{Subject: "u", Password: "p"}, {Subject: "u", Password: "q"}}},
		{Clients: []oidcprovider.Client{{ID: "c", Secret: "s"}}},
	}
	for _, opts := range tests {
		ft := &fatalT{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			oidcprovider.Start(ft, opts)
		}()
		<-done
		if ft.msg == "" {
			t.Errorf("Start(%+v) did not fail", opts)
		}
	}
}

// fatalT records Fatalf and ends its goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestClaimsWhereTheOptionsPutThem: by default the ID token carries name,
// email and groups; with UserInfoOnly only the UserInfo endpoint does.
func TestClaimsWhereTheOptionsPutThem(t *testing.T) {
	for _, userInfoOnly := range []bool{false, true} {
		p, rp, userInfoURL := start(t, oidcprovider.Options{UserInfoOnly: userInfoOnly})
		verifier := oauth2.GenerateVerifier()
		authURL := rp.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", "n"))
		cb, err := p.Login(context.Background(), nil, authURL, user.Email, user.Password)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(cb)
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, p.HTTPClient())
		tok, err := rp.Exchange(ctx, u.Query().Get("code"), oauth2.VerifierOption(verifier))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := tok.Extra("id_token").(string)
		parts := strings.Split(raw, ".")
		if len(parts) != 3 {
			t.Fatalf("id_token %q is not a JWS", raw)
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		var idClaims map[string]any
		if err := json.Unmarshal(payload, &idClaims); err != nil {
			t.Fatal(err)
		}
		resp, err := rp.Client(ctx, tok).Get(userInfoURL)
		if err != nil {
			t.Fatal(err)
		}
		var infoClaims map[string]any
		err = json.NewDecoder(resp.Body).Decode(&infoClaims)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, claim := range []string{"name", "email", "groups"} {
			if _, ok := idClaims[claim]; ok == userInfoOnly {
				t.Errorf("UserInfoOnly=%v: ID token claim %s present = %v", userInfoOnly, claim, ok)
			}
			if _, ok := infoClaims[claim]; !ok {
				t.Errorf("UserInfoOnly=%v: UserInfo lacks %s: %v", userInfoOnly, claim, infoClaims)
			}
		}
		if idClaims["nonce"] != "n" || idClaims["sub"] != user.Subject || infoClaims["sub"] != user.Subject {
			t.Errorf("UserInfoOnly=%v: ID token %v / UserInfo %v lack the nonce or subject", userInfoOnly, idClaims, infoClaims)
		}
	}
}
