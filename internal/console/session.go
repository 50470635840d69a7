package console

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
)

// Session keys.
const (
	keyUser  = "user_id"
	keyEpoch = "epoch"
	keyFlash = "flash"
	keyOIDC  = "oidc_flow"
)

// signedIn serves requests of a session whose user still may: it exists,
// is enabled and its session epoch is the one of the sign-in (a disable
// or a password change bumps it). The principal, with the user's role as
// it is now, goes into the request's context. Anyone else is sent to the
// sign-in page, and a session that ended is destroyed.
func (c *Console) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		uid := c.sessions.GetInt64(ctx, keyUser)
		if uid == 0 {
			c.toLogin(w, r, "")
			return
		}
		p, err := c.o.Auth.SessionPrincipal(ctx, uid, c.sessions.GetInt64(ctx, keyEpoch))
		if errors.Is(err, auth.ErrUnauthenticated) {
			c.log.Info("session ended", zap.Int64("user_id", uid), zap.String("reason", err.Error()), zap.String("remote", auth.RemoteIP(r)))
			if derr := c.sessions.Destroy(ctx); derr != nil {
				c.log.Warn("session not destroyed", zap.Error(derr))
			}
			c.toLogin(w, r, "ended")
			return
		}
		if err != nil {
			c.log.Error("check session", zap.Error(err))
			c.fail(w, r, http.StatusServiceUnavailable, "Your session could not be checked (the database did not answer). Try again in a moment.")
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(ctx, p)))
	})
}

// require serves only principals with role need or above; others get a
// 403 page naming the role needed.
func (c *Console) require(need auth.Role, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		if !p.Role.Allows(need) {
			c.log.Info("forbidden", zap.String("user", p.User), zap.String("role", p.Role.String()), zap.String("needs", need.String()),
				zap.String("method", r.Method), zap.String("path", r.URL.Path))
			c.fail(w, r, http.StatusForbidden, fmt.Sprintf("This needs the %s role; you (%s) have the %s role. Ask an administrator if you need more.", need, p.User, p.Role))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// toLogin sends the browser to the sign-in page, to come back to the page
// it asked for (GET) afterwards. why "ended" says the session ended.
func (c *Console) toLogin(w http.ResponseWriter, r *http.Request, why string) {
	q := url.Values{}
	if r.Method == http.MethodGet && r.URL.Path != Prefix+"/" {
		q.Set("next", r.URL.RequestURI())
	}
	if why != "" {
		q.Set("why", why)
	}
	u := Prefix + "/login"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// safeNext is where to go after sign-in: a console page named by next,
// else the messages. A path with dot segments is refused, as browsers
// resolve them (also percent-encoded) and "/console/../api" is not a
// console page.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, Prefix+"/") ||
		strings.HasPrefix(next, "//") || strings.Contains(next, "\\") || strings.HasPrefix(u.Path, Prefix+"/login") ||
		hasDotSegment(u.Path) {
		return Prefix + "/messages"
	}
	return u.RequestURI()
}

// hasDotSegment reports whether path has a "." or ".." segment.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// loginData is the sign-in page's.
type loginData struct {
	Name  string
	Next  string
	Error string
	// OIDC names the provider of the "Sign in with" button; "" hides it.
	OIDC string
	// OIDCDown says that sign-in with the provider is set up but the
	// provider is unreachable.
	OIDCDown bool
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.sessions.GetInt64(r.Context(), keyUser) != 0 {
		// Signed in already (or a session that ended: the page it asks
		// for will say so).
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d := loginData{Next: r.URL.Query().Get("next"), OIDC: c.oidcName(), OIDCDown: c.oidcDown()}
	v := c.view(r, "Sign in", "", d)
	if r.URL.Query().Get("why") == "ended" {
		v.Flash = "Your session has ended. Sign in again."
	}
	c.render(w, r, http.StatusOK, "login", v)
}

// login checks the name and password of the sign-in form. A throttled
// attempt is told how long to wait, and so is one refused because this
// replica checks as many passwords as it may at once (429 and Retry-After
// both); a wrong name and a wrong password get the same answer.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	name, password := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("password")
	d := loginData{Name: name, Next: r.PostFormValue("next"), OIDC: c.oidcName(), OIDCDown: c.oidcDown()}
	if name == "" || password == "" {
		d.Error = "Enter your user name and password."
		c.render(w, r, http.StatusBadRequest, "login", c.view(r, "Sign in", "", d))
		return
	}
	p, err := c.o.Auth.Login(r.Context(), name, password, auth.RemoteIP(r))
	var te *auth.ThrottledError
	switch {
	case errors.As(err, &te):
		mins := int(math.Ceil(te.RetryAfter.Minutes()))
		unit := "minutes"
		if mins == 1 {
			unit = "minute"
		}
		d.Error = fmt.Sprintf("Too many attempts, try again in %d %s.", mins, unit)
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(te.RetryAfter.Seconds()))))
		c.render(w, r, http.StatusTooManyRequests, "login", c.view(r, "Sign in", "", d))
		return
	case errors.Is(err, auth.ErrBusy):
		d.Error = "Too many sign-ins at once, try again in a moment."
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(auth.BusyRetryAfter.Seconds()))))
		c.render(w, r, http.StatusTooManyRequests, "login", c.view(r, "Sign in", "", d))
		return
	case errors.Is(err, auth.ErrDisabled):
		d.Error = "This user is disabled. Ask an administrator."
		c.render(w, r, http.StatusUnauthorized, "login", c.view(r, "Sign in", "", d))
		return
	case errors.Is(err, auth.ErrUnauthenticated):
		d.Error = "Wrong user name or password."
		c.render(w, r, http.StatusUnauthorized, "login", c.view(r, "Sign in", "", d))
		return
	case err != nil:
		c.internal(w, r, "Signing in", err)
		return
	}
	if err := c.startSession(r, p); err != nil {
		c.internal(w, r, "Signing in", err)
		return
	}
	http.Redirect(w, r, safeNext(d.Next), http.StatusSeeOther)
}

// startSession makes the request's session p's, under a new token (no
// session fixation: a token planted before sign-in is worth nothing after).
func (c *Console) startSession(r *http.Request, p auth.Principal) error {
	ctx := r.Context()
	if err := c.sessions.RenewToken(ctx); err != nil {
		return err
	}
	c.sessions.Remove(ctx, keyOIDC)
	c.sessions.Put(ctx, keyUser, p.UserID)
	c.sessions.Put(ctx, keyEpoch, p.Epoch)
	return nil
}

// logout ends the session and shows the sign-in page.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if err := c.sessions.Destroy(r.Context()); err != nil {
		c.internal(w, r, "Signing out", err)
		return
	}
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// flash keeps a message for the next page the session sees.
func (c *Console) flash(r *http.Request, msg string) { c.sessions.Put(r.Context(), keyFlash, msg) }
