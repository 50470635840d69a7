package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"
)

// NoUsersMessage is the answer of the API while no one can authenticate:
// no user exists and no bootstrap token is set.
const NoUsersMessage = "the API has no users yet: create the first admin with 'edihub users add NAME -role admin', " +
	"then a token with 'edihub users token NAME -name TOKEN-NAME' (docs/users.md); or set EDIHUB_API_TOKEN (-api-token) as a bootstrap admin token"

// API resolves the principal of every request with Bearer and serves it
// with the principal in its context (FromContext). It answers itself:
//   - 401 with WWW-Authenticate and a JSON error saying why, for a missing
//     or invalid token (unknown, revoked, expired, its user disabled);
//   - 503 with NoUsersMessage while no one can authenticate (no users and
//     no bootstrap token), saying how to create the first admin;
//   - 503 when the database does not answer.
//
// It checks no role: each route does, with Require.
func (a *Authenticator) API(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Bearer(r)
		if err == nil {
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
			return
		}
		if errors.Is(err, ErrUnauthenticated) {
			on, eerr := a.enabled(r.Context())
			if eerr != nil {
				err = eerr
			} else {
				if !on {
					writeJSON(w, http.StatusServiceUnavailable, apiError{Error: NoUsersMessage})
					return
				}
				challenge := `Bearer realm="edihub"`
				if _, given := bearerToken(r); given {
					challenge += `, error="invalid_token"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
				writeJSON(w, http.StatusUnauthorized, apiError{Error: unauthorizedMessage(err)})
				return
			}
		}
		a.log.Error("authentication unavailable", zap.Error(err))
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: "authentication is unavailable (the database did not answer); retry later"})
	})
}

// unauthorizedMessage is the 401 body's error: "missing or invalid bearer
// token" or why a known token is refused.
func unauthorizedMessage(err error) string {
	msg := err.Error()
	switch msg {
	case ErrUnauthenticated.Error() + ": missing bearer token", ErrUnauthenticated.Error() + ": invalid bearer token":
		return "missing or invalid bearer token: send Authorization: Bearer <token>"
	}
	return msg
}

// Require serves only requests whose principal (set by API) has role need
// or above; it answers 403 naming the role needed, and 401 when the
// request carries no principal at all (a route mounted without API).
func Require(need Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := FromContext(r.Context())
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edihub"`)
				writeJSON(w, http.StatusUnauthorized, apiError{Error: "not authenticated"})
				return
			}
			if !p.Role.Allows(need) {
				writeJSON(w, http.StatusForbidden, apiError{
					Error: fmt.Sprintf("forbidden: this needs the %s role; %s has %s (an admin can give a token a higher role, up to its user's)", need, p.Actor(), roleName(p.Role)),
					Role:  need.String(),
				})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func roleName(r Role) string {
	if r == 0 {
		return "no role"
	}
	return r.String()
}

// apiError is the JSON error body, as the API's.
type apiError struct {
	Error string `json:"error"`
	// Role is the role a 403 needs.
	Role string `json:"role,omitempty"`
}

// writeJSON writes v as the API writes its answers (httpserver.WriteJSON,
// which imports this package).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
