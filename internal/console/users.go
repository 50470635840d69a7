package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
)

// UserService manages users and tokens with the checks of the command line
// and the API (who may, the name and password policy), each change in the
// audit log; *auth.Users implements it.
type UserService interface {
	Add(ctx context.Context, c auth.Caller, name string, role auth.Role, password string) (postgres.User, error)
	List(ctx context.Context, c auth.Caller) ([]postgres.User, error)
	SetDisabled(ctx context.Context, c auth.Caller, name string, disabled bool) (postgres.User, error)
	SetRole(ctx context.Context, c auth.Caller, name string, role auth.Role) (postgres.User, error)
	CreateToken(ctx context.Context, c auth.Caller, user string, tr auth.TokenRequest) (string, postgres.APIToken, error)
	Tokens(ctx context.Context, c auth.Caller, user string) ([]postgres.APIToken, error)
	RevokeToken(ctx context.Context, c auth.Caller, user, token string) (postgres.APIToken, error)
}

// AuditStore reads the audit log; *postgres.Store implements it.
type AuditStore interface {
	AuditLog(ctx context.Context, q postgres.AuditQuery) ([]postgres.AuditRecord, error)
}

// userError is what a person is told about a refused user or token
// change; "" for an error that is not theirs.
func userError(err error) string {
	for _, e := range []error{auth.ErrInvalidName, auth.ErrWeakPassword, auth.ErrUnknownRole, auth.ErrRoleTooHigh, auth.ErrBadExpiry,
		auth.ErrForbidden, auth.ErrDisabled, postgres.ErrUserExists, postgres.ErrUserNotFound, postgres.ErrTokenExists, postgres.ErrTokenNotFound} {
		if errors.Is(err, e) {
			return err.Error()
		}
	}
	return ""
}

// usersData is the users page's.
type usersData struct {
	Users []postgres.User
	Roles []string
	// Name and Role are the add form's, sent back with an error.
	Name, Role string
	Error      string
	// Password is a password generated for a user just added: shown once.
	Password, For string
	Me            string
}

func roleNames() []string {
	var out []string
	for _, r := range auth.Roles() {
		out = append(out, r.String())
	}
	return out
}

func (c *Console) usersPage(w http.ResponseWriter, r *http.Request, status int, d usersData) {
	users, err := c.o.Users.List(r.Context(), auth.CallerOf(r))
	if err != nil {
		c.internal(w, r, "Listing the users", err)
		return
	}
	d.Users, d.Roles = users, roleNames()
	if p, ok := auth.FromContext(r.Context()); ok {
		d.Me = p.User
	}
	c.render(w, r, status, "users", c.view(r, "Users", "users", d))
}

// users lists the users (admins).
func (c *Console) users(w http.ResponseWriter, r *http.Request) {
	c.usersPage(w, r, http.StatusOK, usersData{Role: "viewer"})
}

// addUser adds a user with a password typed, or generated and shown once.
func (c *Console) addUser(w http.ResponseWriter, r *http.Request) {
	name, roleName, pw := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("role"), r.PostFormValue("password")
	d := usersData{Name: name, Role: roleName}
	role, err := auth.ParseRole(roleName)
	if err != nil {
		d.Error = "Choose a role: viewer, operator or admin."
		c.usersPage(w, r, http.StatusBadRequest, d)
		return
	}
	generated := pw == ""
	if generated {
		pw = auth.GeneratePassword()
	}
	u, err := c.o.Users.Add(r.Context(), auth.CallerOf(r), name, role, pw)
	if msg := userError(err); msg != "" {
		d.Error = msg
		c.usersPage(w, r, http.StatusUnprocessableEntity, d)
		return
	}
	if err != nil {
		c.internal(w, r, "Adding the user", err)
		return
	}
	d = usersData{Role: "viewer"}
	if generated {
		d.Password, d.For = pw, u.Name
	} else {
		c.flash(r, fmt.Sprintf("%s is added as a %s.", u.Name, u.Role))
	}
	c.usersPage(w, r, http.StatusOK, d)
}

// userAction changes a user (admins): disable, enable or its role.
func (c *Console) userAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, caller := r.PathValue("name"), auth.CallerOf(r)
		var u postgres.User
		var err error
		var done string
		switch action {
		case "disable":
			u, err = c.o.Users.SetDisabled(r.Context(), caller, name, true)
			done = "%s is disabled: its sessions and API tokens stopped working."
		case "enable":
			u, err = c.o.Users.SetDisabled(r.Context(), caller, name, false)
			done = "%s is enabled again."
		case "role":
			role, perr := auth.ParseRole(r.PostFormValue("role"))
			if perr != nil {
				c.usersPage(w, r, http.StatusBadRequest, usersData{Role: "viewer", Error: "Choose a role: viewer, operator or admin."})
				return
			}
			u, err = c.o.Users.SetRole(r.Context(), caller, name, role)
			done = "%s is now a " + role.String() + "."
		}
		if msg := userError(err); msg != "" {
			status := http.StatusUnprocessableEntity
			if errors.Is(err, postgres.ErrUserNotFound) {
				status = http.StatusNotFound
			}
			c.usersPage(w, r, status, usersData{Role: "viewer", Error: msg})
			return
		}
		if err != nil {
			c.internal(w, r, "Changing the user", err)
			return
		}
		c.flash(r, fmt.Sprintf(done, u.Name))
		http.Redirect(w, r, Prefix+"/users", http.StatusSeeOther)
	}
}

// tokensData is the API tokens page's.
type tokensData struct {
	// User owns the tokens shown; Self is true when it is the one signed
	// in, else an admin manages another user's tokens. Base is the
	// page's path, where its forms go.
	User   string
	Self   bool
	Base   string
	Tokens []tokenView
	Roles  []string
	// Token is a token just made: shown once.
	Token, TokenName string
	Name, Role       string
	Expires          string
	Error            string
}

// tokenView is one token with its state.
type tokenView struct {
	postgres.APIToken
	State string
}

// Expiries are the lifetimes the token form offers; "" never expires.
var Expiries = []string{"30d", "90d", "365d", ""}

func (c *Console) tokensPage(w http.ResponseWriter, r *http.Request, status int, d tokensData) {
	p, _ := auth.FromContext(r.Context())
	d.User, d.Base = tokenOwner(r)
	d.Self = d.User == p.User
	toks, err := c.o.Users.Tokens(r.Context(), auth.CallerOf(r), d.User)
	if msg := userError(err); msg != "" {
		c.fail(w, r, http.StatusNotFound, msg)
		return
	}
	if err != nil {
		c.internal(w, r, "Listing the API tokens", err)
		return
	}
	now := c.now()
	for _, t := range toks {
		v := tokenView{APIToken: t, State: "active"}
		switch {
		case t.RevokedAt != nil:
			v.State = "revoked"
		case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
			v.State = "expired"
		}
		d.Tokens = append(d.Tokens, v)
	}
	for _, role := range auth.Roles() {
		if p.Role.Allows(role) {
			d.Roles = append(d.Roles, role.String())
		}
	}
	if d.Role == "" {
		d.Role = p.Role.String()
	}
	title := "API tokens"
	if !d.Self {
		title = "API tokens of " + d.User
	}
	c.render(w, r, status, "tokens", c.view(r, title, "tokens", d))
}

// tokenOwner is whose tokens a request is about, and the page's path:
// the user of /users/{name}/tokens (admins), else the one signed in.
func tokenOwner(r *http.Request) (user, base string) {
	if name := r.PathValue("name"); name != "" {
		return name, Prefix + "/users/" + url.PathEscape(name) + "/tokens"
	}
	p, _ := auth.FromContext(r.Context())
	return p.User, Prefix + "/tokens"
}

func (c *Console) tokens(w http.ResponseWriter, r *http.Request) {
	c.tokensPage(w, r, http.StatusOK, tokensData{Expires: "90d"})
}

// createToken makes an API token for the signed-in user and shows it once.
func (c *Console) createToken(w http.ResponseWriter, r *http.Request) {
	owner, _ := tokenOwner(r)
	name, roleName, expires := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("role"), r.PostFormValue("expires")
	d := tokensData{Name: name, Role: roleName, Expires: expires}
	role, err := auth.ParseRole(roleName)
	if err != nil {
		d.Error = "Choose the token's role."
		c.tokensPage(w, r, http.StatusBadRequest, d)
		return
	}
	tr := auth.TokenRequest{Name: name, Role: role}
	if expires != "" {
		if !slices.Contains(Expiries, expires) {
			d.Error = "Choose when the token expires."
			c.tokensPage(w, r, http.StatusBadRequest, d)
			return
		}
		life, err := auth.ParseLifetime(expires)
		if err != nil {
			d.Error = err.Error()
			c.tokensPage(w, r, http.StatusBadRequest, d)
			return
		}
		at := c.now().Add(life)
		tr.ExpiresAt = &at
	}
	tok, t, err := c.o.Users.CreateToken(r.Context(), auth.CallerOf(r), owner, tr)
	if msg := userError(err); msg != "" {
		d.Error = msg
		c.tokensPage(w, r, http.StatusUnprocessableEntity, d)
		return
	}
	if err != nil {
		c.internal(w, r, "Making the API token", err)
		return
	}
	c.tokensPage(w, r, http.StatusOK, tokensData{Token: tok, TokenName: t.Name, Expires: "90d"})
}

// revokeToken revokes one of the signed-in user's tokens.
func (c *Console) revokeToken(w http.ResponseWriter, r *http.Request) {
	owner, base := tokenOwner(r)
	name := r.PathValue("token")
	t, err := c.o.Users.RevokeToken(r.Context(), auth.CallerOf(r), owner, name)
	if msg := userError(err); msg != "" {
		c.tokensPage(w, r, http.StatusNotFound, tokensData{Expires: "90d", Error: msg})
		return
	}
	if err != nil {
		c.internal(w, r, "Revoking the API token", err)
		return
	}
	c.flash(r, fmt.Sprintf("The API token %q of %s is revoked: it no longer works.", t.Name, owner))
	http.Redirect(w, r, base, http.StatusSeeOther)
}

// AuditActions are the actions the audit page's filter offers.
var AuditActions = []string{"login", "login.failed", "message.send", "message.resend", "message.cancel", "mdn.reapply",
	"partner.create", "partner.update", "partner.delete", "partner.restore", "partner.test",
	"user.add", "user.disable", "user.enable", "user.role", "user.passwd", "token.create", "token.revoke"}

// auditFilter is the audit search form as typed.
type auditFilter struct{ Actor, Action, Target, Since, Until string }

func (f auditFilter) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"actor": f.Actor, "action": f.Action, "target": f.Target, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// auditRow is one entry of the audit page.
type auditRow struct {
	postgres.AuditRecord
	Detail []string
}

// auditData is the audit page's.
type auditData struct {
	Q       auditFilter
	Actions []string
	Entries []auditRow
	Next    string
	First   string
	Errors  []string
}

// auditLog lists the audit log, newest first, with filters and paging
// (admins).
func (c *Console) auditLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := auditFilter{Actor: strings.TrimSpace(q.Get("actor")), Action: q.Get("action"), Target: strings.TrimSpace(q.Get("target")),
		Since: q.Get("since"), Until: q.Get("until")}
	d := auditData{Q: f, Actions: AuditActions}
	aq := postgres.AuditQuery{Actor: f.Actor, Action: f.Action, Target: f.Target, Limit: PageSize + 1}
	day := func(field, v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		t, err := time.ParseInLocation("2006-01-02", v, c.o.Location)
		if err != nil {
			d.Errors = append(d.Errors, fmt.Sprintf("%s: %q is not a date like 2026-01-31.", field, v))
			return time.Time{}
		}
		return t
	}
	aq.Since = day("From", f.Since)
	if until := day("To", f.Until); !until.IsZero() {
		aq.Until = until.AddDate(0, 0, 1)
	}
	if aq.Before = cursor(q, &d.Errors); aq.Before > 0 {
		d.First = Prefix + "/audit?" + f.values().Encode()
	}
	if len(d.Errors) == 0 {
		recs, err := c.o.Audit.AuditLog(r.Context(), aq)
		if err != nil {
			c.internal(w, r, "Reading the audit log", err)
			return
		}
		if len(recs) > PageSize {
			recs = recs[:PageSize]
			d.Next = nextPage("/audit", f.values(), recs[len(recs)-1].ID)
		}
		for _, a := range recs {
			row := auditRow{AuditRecord: a}
			for k, v := range a.Detail {
				row.Detail = append(row.Detail, fmt.Sprintf("%s: %v", k, v))
			}
			slices.Sort(row.Detail)
			d.Entries = append(d.Entries, row)
		}
	}
	status := http.StatusOK
	if len(d.Errors) > 0 {
		status = http.StatusBadRequest
	}
	c.render(w, r, status, "audit", c.view(r, "Audit log", "audit", d))
}
