package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/postgres"
)

// AuditReader lists the audit log; *postgres.Store implements it.
type AuditReader interface {
	AuditLog(ctx context.Context, q postgres.AuditQuery) ([]postgres.AuditRecord, error)
}

// UserService manages users and their tokens, checking that the caller
// may; *auth.Users implements it.
type UserService interface {
	Add(ctx context.Context, c auth.Caller, name string, role auth.Role, password string) (postgres.User, error)
	List(ctx context.Context, c auth.Caller) ([]postgres.User, error)
	SetDisabled(ctx context.Context, c auth.Caller, name string, disabled bool) (postgres.User, error)
	CreateToken(ctx context.Context, c auth.Caller, user string, tr auth.TokenRequest) (string, postgres.APIToken, error)
	Tokens(ctx context.Context, c auth.Caller, user string) ([]postgres.APIToken, error)
	RevokeToken(ctx context.Context, c auth.Caller, user, token string) (postgres.APIToken, error)
}

var _ UserService = (*auth.Users)(nil)

// maxUserBody bounds the JSON body of a user or token request.
const maxUserBody = 64 << 10

// AuditEntry is one entry of GET /audit.
type AuditEntry struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Target string         `json:"target"`
	Detail map[string]any `json:"detail"`
	Remote string         `json:"remote"`
}

// AuditList is the answer of GET /audit, newest first. NextCursor, when
// not empty, fetches the next (older) page as ?cursor=.
type AuditList struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

func (h *handler) auditLog(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "actor", "action", "target", "since", "until", "limit", "cursor")
	if !ok {
		return
	}
	aq := postgres.AuditQuery{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	if !timeRange(w, q, &aq.Since, &aq.Until) {
		return
	}
	var out AuditList
	out.Entries, out.NextCursor, ok = listPage(h, w, r, "audit log", func(limit int, before int64) ([]postgres.AuditRecord, error) {
		aq.Limit, aq.Before = limit, before
		return h.o.Audit.AuditLog(r.Context(), aq)
	}, func(a postgres.AuditRecord) int64 { return a.ID }, func(a postgres.AuditRecord) AuditEntry {
		return AuditEntry{ID: a.ID, At: a.At, Actor: a.Actor, Action: a.Action, Target: a.Target, Detail: a.Detail, Remote: a.Remote}
	})
	if ok {
		httpserver.WriteJSON(w, http.StatusOK, out)
	}
}

// User is the JSON form of a user: never its password hash.
type User struct {
	Name        string     `json:"name"`
	Role        string     `json:"role"`
	Disabled    bool       `json:"disabled"`
	DisabledAt  *time.Time `json:"disabled_at"`
	HasPassword bool       `json:"has_password"`
	LastLoginAt *time.Time `json:"last_login_at"`
	CreatedAt   time.Time  `json:"created_at"`
	CreatedBy   string     `json:"created_by"`
	// Password is a generated password, in the answer of POST /users
	// only, when none was given: shown once.
	Password string `json:"password,omitempty"`
}

func userView(u postgres.User) User {
	return User{Name: u.Name, Role: u.Role, Disabled: u.DisabledAt != nil, DisabledAt: u.DisabledAt, HasPassword: u.PasswordHash != "",
		LastLoginAt: u.LastLoginAt, CreatedAt: u.CreatedAt, CreatedBy: u.CreatedBy}
}

// Token is the JSON form of an API token: never the token nor its hash.
type Token struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// State is active, expired or revoked.
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	CreatedBy  string     `json:"created_by"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	// Token is the token itself, in the answer of POST .../tokens only:
	// shown once, only its hash is stored.
	Token string `json:"token,omitempty"`
}

// TokenState is a token's state at now: revoked, expired or active.
func TokenState(t postgres.APIToken, now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return "expired"
	}
	return "active"
}

func tokenView(t postgres.APIToken, now time.Time) Token {
	return Token{Name: t.Name, Role: t.Role, State: TokenState(t, now), CreatedAt: t.CreatedAt, CreatedBy: t.CreatedBy,
		ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, RevokedAt: t.RevokedAt}
}

// decodeBody reads a JSON object of at most maxUserBody bytes into v,
// refusing unknown keys; it answers 400 itself and returns false then.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxUserBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "", "the body must be a JSON object: "+err.Error())
		return false
	}
	return true
}

func (h *handler) listUsers(w http.ResponseWriter, r *http.Request) {
	us, err := h.o.Users.List(r.Context(), auth.CallerOf(r))
	if err != nil {
		h.userError(w, "list users", err)
		return
	}
	out := struct {
		Users []User `json:"users"`
	}{Users: []User{}}
	for _, u := range us {
		out.Users = append(out.Users, userView(u))
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

func (h *handler) addUser(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name     string `json:"name"`
		Role     string `json:"role"`
		Password string `json:"password"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	role, err := auth.ParseRole(req.Role)
	if err != nil {
		writeError(w, http.StatusBadRequest, "role", err.Error())
		return
	}
	generated := req.Password == ""
	if generated {
		req.Password = auth.GeneratePassword()
	}
	u, err := h.o.Users.Add(r.Context(), auth.CallerOf(r), req.Name, role, req.Password)
	if err != nil {
		h.userError(w, "add user", err)
		return
	}
	out := userView(u)
	if generated {
		out.Password = req.Password
	}
	httpserver.WriteJSON(w, http.StatusCreated, out)
}

func (h *handler) disableUser(w http.ResponseWriter, r *http.Request) { h.setDisabled(w, r, true) }
func (h *handler) enableUser(w http.ResponseWriter, r *http.Request)  { h.setDisabled(w, r, false) }

func (h *handler) setDisabled(w http.ResponseWriter, r *http.Request, disabled bool) {
	u, err := h.o.Users.SetDisabled(r.Context(), auth.CallerOf(r), chi.URLParam(r, "name"), disabled)
	if err != nil {
		h.userError(w, "change user", err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, userView(u))
}

func (h *handler) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := h.o.Users.Tokens(r.Context(), auth.CallerOf(r), chi.URLParam(r, "name"))
	if err != nil {
		h.userError(w, "list tokens", err)
		return
	}
	now := time.Now()
	out := struct {
		Tokens []Token `json:"tokens"`
	}{Tokens: []Token{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, tokenView(t, now))
	}
	httpserver.WriteJSON(w, http.StatusOK, out)
}

func (h *handler) createToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name      string     `json:"name"`
		Role      string     `json:"role"`
		ExpiresIn string     `json:"expires_in"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	tr := auth.TokenRequest{Name: req.Name, ExpiresAt: req.ExpiresAt}
	if req.Role != "" {
		role, err := auth.ParseRole(req.Role)
		if err != nil {
			writeError(w, http.StatusBadRequest, "role", err.Error())
			return
		}
		tr.Role = role
	}
	if req.ExpiresIn != "" {
		if req.ExpiresAt != nil {
			writeError(w, http.StatusBadRequest, "expires_in", "give expires_in or expires_at, not both")
			return
		}
		d, err := auth.ParseLifetime(req.ExpiresIn)
		if err != nil {
			writeError(w, http.StatusBadRequest, "expires_in", err.Error())
			return
		}
		at := time.Now().Add(d)
		tr.ExpiresAt = &at
	}
	tok, t, err := h.o.Users.CreateToken(r.Context(), auth.CallerOf(r), chi.URLParam(r, "name"), tr)
	if err != nil {
		h.userError(w, "create token", err)
		return
	}
	out := tokenView(t, time.Now())
	out.Token = tok
	httpserver.WriteJSON(w, http.StatusCreated, out)
}

func (h *handler) revokeToken(w http.ResponseWriter, r *http.Request) {
	t, err := h.o.Users.RevokeToken(r.Context(), auth.CallerOf(r), chi.URLParam(r, "name"), chi.URLParam(r, "token"))
	if err != nil {
		h.userError(w, "revoke token", err)
		return
	}
	httpserver.WriteJSON(w, http.StatusOK, tokenView(t, time.Now()))
}

// userError answers a failed user or token request.
func (h *handler) userError(w http.ResponseWriter, what string, err error) {
	status := 0
	for _, m := range []struct {
		err    error
		status int
	}{
		{auth.ErrForbidden, http.StatusForbidden},
		{postgres.ErrUserNotFound, http.StatusNotFound},
		{postgres.ErrTokenNotFound, http.StatusNotFound},
		{postgres.ErrUserExists, http.StatusConflict},
		{postgres.ErrTokenExists, http.StatusConflict},
		{auth.ErrDisabled, http.StatusConflict},
		{auth.ErrInvalidName, http.StatusBadRequest},
		{auth.ErrUnknownRole, http.StatusBadRequest},
		{auth.ErrBadExpiry, http.StatusBadRequest},
		{auth.ErrRoleTooHigh, http.StatusUnprocessableEntity},
		{auth.ErrWeakPassword, http.StatusUnprocessableEntity},
	} {
		if errors.Is(err, m.err) {
			status = m.status
			break
		}
	}
	if status == 0 {
		h.internal(w, what, err)
		return
	}
	writeError(w, status, "", err.Error())
}
