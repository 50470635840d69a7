package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/oidc"
)

// OIDCProvider signs people in with an OpenID Connect provider;
// *oidc.Lazy implements it. Until the provider is discovered, Available is
// false and Start returns oidc.ErrUnavailable: the console offers
// passwords meanwhile.
type OIDCProvider interface {
	Available() bool
	Start() (oidc.Flow, string, error)
	Finish(ctx context.Context, flow oidc.Flow, callback url.Values) (oidc.Identity, error)
}

// Session key of where to go after an OIDC sign-in.
const keyOIDCNext = "oidc_next"

// oidcName is the provider's name on the sign-in button; "" without one
// or while it is unavailable (oidcDown).
func (c *Console) oidcName() string {
	if c.o.OIDC == nil || !c.o.OIDC.Available() {
		return ""
	}
	return c.o.OIDCName
}

// oidcDown reports a provider set up but not (yet) reachable.
func (c *Console) oidcDown() bool { return c.o.OIDC != nil && !c.o.OIDC.Available() }

// oidcStart begins a sign-in with the provider: the flow's secrets (state,
// nonce, PKCE verifier) stay in the server-side session, and the browser
// goes to the provider. It is a link (GET), not a form: a form's
// redirection to another site breaks the policy's form-action 'self'.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	flow, authURL, err := c.o.OIDC.Start()
	if errors.Is(err, oidc.ErrUnavailable) {
		c.fail(w, r, http.StatusServiceUnavailable, "Sign-in with "+c.o.OIDCName+" (SSO) is unavailable: the hub cannot reach the identity provider. Sign in with your password, or try again later.")
		return
	}
	if err != nil {
		c.internal(w, r, "Starting the sign-in", err)
		return
	}
	b, err := json.Marshal(flow)
	if err != nil {
		c.internal(w, r, "Starting the sign-in", err)
		return
	}
	ctx := r.Context()
	c.sessions.Put(ctx, keyOIDC, string(b))
	c.sessions.Put(ctx, keyOIDCNext, safeNext(r.URL.Query().Get("next")))
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// oidcRefusedData is the page of a sign-in the hub refuses.
type oidcRefusedData struct {
	Message string
	Who     string
	Groups  []string
	Fix     string
}

// oidcCallback finishes the sign-in: the flow is taken out of the session
// whatever the outcome, the provider's answer is checked (oidc.Finish),
// and the user of (issuer, subject) is signed in with the role its groups
// map to, made on its first sign-in. A person whose groups map to no role
// is refused, and their user, if any, disabled (Auth.ExternalLoginRefused).
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	raw := c.sessions.PopString(ctx, keyOIDC)
	next := c.sessions.PopString(ctx, keyOIDCNext)
	var flow oidc.Flow
	if raw == "" || json.Unmarshal([]byte(raw), &flow) != nil {
		c.fail(w, r, http.StatusBadRequest, "This sign-in was not started here, or was finished already. Sign in again.")
		return
	}
	remote := auth.RemoteIP(r)
	id, err := c.o.OIDC.Finish(ctx, flow, r.URL.Query())
	var ce *oidc.ConfigError
	switch {
	case errors.Is(err, oidc.ErrNoRole):
		who := verifiedName(id)
		if who == "" {
			who = id.Subject
		}
		// The provider vouched for the person and gave no role: their user,
		// if they have one, loses access now, not only at a later sign-in.
		if err := c.o.Auth.ExternalLoginRefused(ctx, auth.ExternalIdentity{Issuer: id.Issuer, Subject: id.Subject, Name: who}, "no group maps to a role", remote); err != nil {
			c.internal(w, r, "Refusing the sign-in", err)
			return
		}
		d := oidcRefusedData{
			Message: fmt.Sprintf("You signed in at %s as %s, but none of your groups gives a role at this hub, so you cannot use the console.", c.o.OIDCName, who),
			Who:     fmt.Sprintf("subject %s", id.Subject),
			Groups:  id.Groups,
			Fix:     "If you should have access, ask an administrator to add you to one of the groups the hub maps to a role (EDIHUB_OIDC_ROLES).",
		}
		c.render(w, r, http.StatusForbidden, "oidc-refused", c.view(r, "No access", "", d))
		return
	case errors.Is(err, oidc.ErrState):
		c.fail(w, r, http.StatusBadRequest, "This sign-in does not belong to this browser's session (another tab, the back button, or a forged link). Sign in again.")
		return
	case errors.As(err, &ce):
		c.log.Error("OpenID Connect sign-in", zap.Error(err))
		c.fail(w, r, http.StatusBadGateway, "The identity provider refused the hub's credentials: the hub's sign-in settings need an administrator's attention. Sign in with a password meanwhile.")
		return
	case errors.Is(err, oidc.ErrProvider), errors.Is(err, oidc.ErrIDToken):
		c.log.Warn("OpenID Connect sign-in failed", zap.String("remote", remote), zap.Error(err))
		c.fail(w, r, http.StatusBadGateway, "The sign-in did not succeed: "+strings.TrimPrefix(err.Error(), "oidc: ")+". Sign in again.")
		return
	case err != nil:
		c.internal(w, r, "Signing in", err)
		return
	}
	role, err := auth.ParseRole(id.Role)
	if err != nil {
		c.internal(w, r, "Signing in", err)
		return
	}
	p, err := c.o.Auth.ExternalLogin(ctx, auth.ExternalIdentity{Issuer: id.Issuer, Subject: id.Subject, Name: verifiedName(id), Role: role}, remote)
	switch {
	case errors.Is(err, auth.ErrDisabled):
		c.fail(w, r, http.StatusForbidden, "Your user at this hub is disabled. Ask an administrator.")
		return
	case err != nil:
		c.internal(w, r, "Signing in", err)
		return
	}
	if err := c.startSession(r, p); err != nil {
		c.internal(w, r, "Signing in", err)
		return
	}
	if next == "" {
		next = Prefix + "/messages"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// verifiedName is the name a person of the provider gets at the hub: their
// e-mail address when the provider verified it, else "" (a name made of
// the subject). An unverified address, or a display name, is whatever the
// person typed at the provider, and would let them appear in the audit log
// and partner history as somebody else.
func verifiedName(id oidc.Identity) string {
	if id.EmailVerified {
		return id.Email
	}
	return ""
}
