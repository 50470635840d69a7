package oidc_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/oidc"
	"github.com/edihub/edihub/internal/testenv/oidcprovider"
)

// TestLazyDiscoversWhenTheProviderComesUp: a Lazy made while its provider
// is down starts no sign-in (ErrUnavailable) and keeps trying; once the
// provider answers, sign-in works with the same Lazy. Its Run ends when
// its context does (the package's tests check for leaked goroutines).
func TestLazyDiscoversWhenTheProviderComesUp(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{Down: true})
	// failed hears of the first request that found the provider down, so
	// that it comes up only after a discovery failed.
	failed := make(chan struct{})
	var once sync.Once
	base := op.HTTPClient()
	client := &http.Client{Timeout: base.Timeout, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res, err := base.Transport.RoundTrip(r)
		if err != nil {
			once.Do(func() { close(failed) })
		}
		return res, err
	})}
	l, err := oidc.NewLazy(oidc.Options{Issuer: op.Issuer, ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirectURL,
		Roles: roles, HTTPClient: client}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewLazy with the provider down = %v, want nil", err)
	}
	l.SetRetry(time.Millisecond, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()

	if l.Available() {
		t.Error("Available() = true with the provider down")
	}
	if _, _, err := l.Start(); !errors.Is(err, oidc.ErrUnavailable) {
		t.Errorf("Start() with the provider down = %v, want ErrUnavailable", err)
	}
	if _, err := l.Finish(ctx, oidc.Flow{}, url.Values{}); !errors.Is(err, oidc.ErrUnavailable) {
		t.Errorf("Finish() with the provider down = %v, want ErrUnavailable", err)
	}

	select {
	case <-failed:
	case <-time.After(30 * time.Second):
		t.Fatal("no discovery tried within 30s")
	}
	op.SetDown(false)
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not discovered within 30s of the provider coming up")
	}
	flow, authURL, err := l.Start()
	if err != nil {
		t.Fatalf("Start() with the provider up = %v", err)
	}
	cb, err := op.Login(ctx, nil, authURL, olga.Email, olga.Password)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cb)
	if err != nil {
		t.Fatal(err)
	}
	id, err := l.Finish(ctx, flow, u.Query())
	if err != nil || id.Subject != olga.Subject || id.Role != "operator" {
		t.Errorf("Finish() = %+v, %v; want %s, operator", id, err, olga.Subject)
	}
}

// TestLazyRunStopsWhileTheProviderIsDown: Run returns nil when its
// context ends, while it waits to try again.
func TestLazyRunStopsWhileTheProviderIsDown(t *testing.T) {
	op := startProvider(t, oidcprovider.Options{Down: true})
	l, err := oidc.NewLazy(oidc.Options{Issuer: op.Issuer, ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirectURL,
		Roles: roles, HTTPClient: op.HTTPClient()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.SetRetry(time.Hour, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if l.Available() {
		t.Error("Available() = true, the provider never answered")
	}
}

// TestNewLazyRefusesMistakes: settings wrong in themselves are refused
// without the provider, as New refuses them.
func TestNewLazyRefusesMistakes(t *testing.T) {
	_, err := oidc.NewLazy(oidc.Options{Issuer: "http://idp.example", ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirectURL, Roles: roles}, nil)
	var ce *oidc.ConfigError
	if !errors.As(err, &ce) || ce.Setting != oidc.SettingIssuer {
		t.Errorf("NewLazy(plain http issuer) = %v, want a ConfigError of %s", err, oidc.SettingIssuer)
	}
}

// TestUnverifiedEmail: an address the provider sends with
// email_verified false is read as unverified.
func TestUnverifiedEmail(t *testing.T) {
	mallory := oidcprovider.User{Subject: "u-mallory", Name: "Mallory", Email: "ceo@example.test", EmailUnverified: true, Password: "m-pw", Groups: []string{"edi-ops"}}
	op := oidcprovider.Start(t, oidcprovider.Options{Users: []oidcprovider.User{mallory},
		Clients: []oidcprovider.Client{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{redirectURL}}}})
	h := newHub(t, op, nil)
	flow, cb := signIn(t, h, op, mallory)
	id, err := h.Finish(context.Background(), flow, cb)
	if err != nil || id.Email != "ceo@example.test" || id.EmailVerified {
		t.Errorf("Finish() = %+v, %v; want ceo@example.test, not verified", id, err)
	}
}
