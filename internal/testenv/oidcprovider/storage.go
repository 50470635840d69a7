package oidcprovider

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// codeLifetime bounds how long an authorization code can be exchanged, as
// real providers do (Keycloak: one minute).
const codeLifetime = time.Minute

// storage is the smallest op.Storage for the authorization code flow:
// users, clients, authorization requests, codes and access tokens in
// memory. Every other grant is refused.
type storage struct {
	users        []User
	clients      map[string]*client
	key          *rsa.PrivateKey
	keyID        string
	groupsClaim  string
	groupsScope  string
	userInfoOnly bool

	mu       sync.Mutex
	requests map[string]*authRequest // by ID (users too: SetGroups changes them)
	codes    map[string]string       // code → request ID
	tokens   map[string]*accessToken // by ID
}

var (
	_ op.Storage                   = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest = (*storage)(nil)
)

type accessToken struct {
	id, subject, clientID string
	scopes                []string
	expires               time.Time
}

func (s *storage) userBySubject(sub string) (User, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.users {
		if u.Subject == sub {
			return u, true
		}
	}
	return User{}, false
}

// checkPassword marks the request as authenticated by the user whose
// Email or Subject is login, when password is theirs.
func (s *storage) checkPassword(requestID, login, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[requestID]
	if !ok {
		return errors.New("the sign-in request is unknown or finished; start again")
	}
	for _, u := range s.users {
		if (login == u.Email || login == u.Subject) && password == u.Password && u.Password != "" {
			req.subject = u.Subject
			req.authTime = time.Now()
			req.done = true
			return nil
		}
	}
	return errors.New("wrong user name or password")
}

// CreateAuthRequest refuses requests without S256 PKCE or without a nonce,
// as a provider following OAuth 2.1 and the hub's own policy would: a
// client that stops sending them fails the tests.
func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	if r.CodeChallenge == "" || r.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("this provider requires PKCE with code_challenge_method=S256")
	}
	if r.Nonce == "" {
		return nil, oidc.ErrInvalidRequest().WithDescription("this provider requires a nonce")
	}
	req := &authRequest{
		id:           rand.Text(),
		clientID:     r.ClientID,
		redirectURI:  r.RedirectURI,
		state:        r.State,
		nonce:        r.Nonce,
		scopes:       slices.Clone(r.Scopes),
		responseType: r.ResponseType,
		responseMode: r.ResponseMode,
		challenge:    &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[req.id] = req
	return req, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[id]
	if !ok {
		return nil, errors.New("auth request not found")
	}
	return req, nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[s.codes[code]]
	if !ok {
		return nil, errors.New("code unknown or already used")
	}
	if time.Since(req.codeIssued) > codeLifetime {
		return nil, errors.New("code expired")
	}
	return req, nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[id]
	if !ok {
		return errors.New("auth request not found")
	}
	req.codeIssued = time.Now()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest is called once tokens were issued for a code: the
// code dies with its request, so a replayed code is refused.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(_ context.Context, r op.TokenRequest) (string, time.Time, error) {
	req, ok := r.(*authRequest)
	if !ok {
		return "", time.Time{}, oidc.ErrUnsupportedGrantType()
	}
	t := &accessToken{id: rand.Text(), subject: req.subject, clientID: req.clientID, scopes: req.scopes, expires: time.Now().Add(5 * time.Minute)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[t.id] = t
	return t.id, t.expires, nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, oidc.ErrUnsupportedGrantType().WithDescription("no refresh tokens here")
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(_ context.Context, tokenID, _, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[tokenID]; ok && t.clientID == clientID {
		delete(s.tokens, tokenID)
	}
	return nil
}

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{s.key, s.keyID}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{&s.key.PublicKey, s.keyID}}, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %q not found", id)
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.secret == "" || secret != c.secret {
		return errors.New("unknown client or wrong secret")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil // deprecated by op in favour of SetUserinfoFromRequest
}

// SetUserinfoFromRequest fills the ID token's claims. With UserInfoOnly
// it leaves out the groups (op already leaves out profile and email when
// an access token is issued and the client does not assert them).
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, r op.IDTokenRequest, scopes []string) error {
	return s.setUserinfo(info, r.GetSubject(), scopes, !s.userInfoOnly)
}

// SetUserinfoFromToken fills the answer of the UserInfo endpoint.
func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, _, _ string) error {
	s.mu.Lock()
	t, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || time.Now().After(t.expires) {
		return errors.New("access token unknown or expired")
	}
	return s.setUserinfo(info, t.subject, t.scopes, true)
}

func (s *storage) setUserinfo(info *oidc.UserInfo, subject string, scopes []string, groups bool) error {
	u, ok := s.userBySubject(subject)
	if !ok {
		return fmt.Errorf("user %q not found", subject)
	}
	info.Subject = u.Subject
	for _, scope := range scopes {
		switch scope {
		case oidc.ScopeProfile:
			info.Name = u.Name
			info.PreferredUsername = u.Email
		case oidc.ScopeEmail:
			info.Email = u.Email
			info.EmailVerified = oidc.Bool(!u.EmailUnverified)
			if u.EmailUnverified {
				// The field's omitempty would leave a false out.
				info.AppendClaims("email_verified", false)
			}
		}
	}
	if groups && len(u.Groups) > 0 && (s.groupsScope == "" || slices.Contains(scopes, s.groupsScope)) {
		info.AppendClaims(s.groupsClaim, slices.Clone(u.Groups))
	}
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not offered")
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT client authentication is not offered")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("the JWT profile grant is not offered")
}

func (s *storage) Health(context.Context) error { return nil }

// authRequest is one sign-in between /authorize and the code exchange.
type authRequest struct {
	id, clientID, redirectURI, state, nonce string
	scopes                                  []string
	responseType                            oidc.ResponseType
	responseMode                            oidc.ResponseMode
	challenge                               *oidc.CodeChallenge

	// set under storage.mu by the login and the code
	subject    string
	authTime   time.Time
	done       bool
	codeIssued time.Time
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

// client is a confidential web client: code flow, secret in the Basic
// header or the form, opaque access tokens.
type client struct {
	id, secret     string
	redirectURIs   []string
	scopes         []string // beyond the standard ones
	idTokenClaims  bool
	idTokenTimeout time.Duration
}

func (c *client) GetID() string                    { return c.id }
func (c *client) RedirectURIs() []string           { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string { return nil }
func (c *client) ApplicationType() op.ApplicationType {
	return op.ApplicationTypeWeb
}
func (c *client) AuthMethod() oidc.AuthMethod { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType         { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c *client) LoginURL(id string) string            { return loginPath + "?" + requestIDParam + "=" + id }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration       { return c.idTokenTimeout }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(scope string) bool     { return slices.Contains(c.scopes, scope) }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return c.idTokenClaims }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

type signingKey struct {
	key *rsa.PrivateKey
	id  string
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct {
	key *rsa.PublicKey
	id  string
}

func (k publicKey) ID() string                         { return k.id }
func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return k.key }
