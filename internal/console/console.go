// Package console is edihub's ops console: the pages people use in a
// browser to see, search, trace and act on messages, watch the partners and
// the hub, and manage users, their API tokens and the audit log.
//
// The pages are rendered on the server with html/template and embedded in
// the binary with their one stylesheet and one small, optional script (a
// confirmation before some forms, the hub page's auto-refresh): every page
// works without JavaScript where a form suffices. Every response carries a
// Content-Security-Policy without inline scripts or styles (Policy), and
// every state-changing request passes Go's http.CrossOriginProtection.
//
// People sign in with a name and password (auth.Authenticator.Login, with
// its throttling) or, when configured, with an OpenID Connect provider
// (internal/oidc). Sessions are kept in PostgreSQL by
// github.com/alexedwards/scs, so any replica serves any request; every
// request checks the session's user again (auth.Authenticator.
// SessionPrincipal), so a disabled user or a changed password ends its
// sessions at once. Each handler checks the role it needs on the server,
// with the roles of the REST API (docs/users.md): the page hiding a button
// is never the check.
//
// The routes live under Prefix; docs/console.md describes the pages.
package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/alexedwards/scs/postgresstore"
	"github.com/alexedwards/scs/v2"
	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
	"github.com/edihub/edihub/internal/spool"
)

// InterchangeStore reads the EDI interchanges a message carries;
// *postgres.Store implements it.
type InterchangeStore interface {
	Interchanges(ctx context.Context, id int64) ([]postgres.InterchangeInfo, error)
}

// Prefix is where the console is mounted; every route is under it.
const Prefix = "/console"

// Session settings.
const (
	// CookieName names the session cookie.
	CookieName = "edihub_session"
	// IdleTimeout ends a session nobody used for this long.
	IdleTimeout = 30 * time.Minute
	// Lifetime ends a session this long after sign-in, used or not.
	Lifetime = 12 * time.Hour
	// DefaultCleanupInterval is how often Run deletes expired sessions.
	DefaultCleanupInterval = 5 * time.Minute
	// DefaultMaxUploadBytes bounds a document sent from the console.
	DefaultMaxUploadBytes = 20 << 20
	// DefaultStatusInterval is how often Run records this replica's
	// elector status for the hub pages of every replica.
	DefaultStatusInterval = 5 * time.Second
)

// Policy is the Content-Security-Policy of every console response but the
// day reports' own (see reportPolicy): scripts and styles from the console
// only, never inline; images from the console or data: URIs; forms posting
// to the console only; never framed.
const Policy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Authenticator signs people in and checks their sessions;
// *auth.Authenticator implements it.
type Authenticator interface {
	Login(ctx context.Context, name, password, remote string) (auth.Principal, error)
	SessionPrincipal(ctx context.Context, userID, epoch int64) (auth.Principal, error)
	ExternalLogin(ctx context.Context, id auth.ExternalIdentity, remote string) (auth.Principal, error)
	ExternalLoginRefused(ctx context.Context, id auth.ExternalIdentity, reason, remote string) error
}

// MessageStore reads messages and what happened to them;
// *postgres.Store implements it.
type MessageStore interface {
	Message(ctx context.Context, id int64) (hub.MessageInfo, error)
	Messages(ctx context.Context, q postgres.MessageQuery) ([]hub.MessageInfo, error)
	// WritePayload streams a message's payload (any size) to the writer
	// to returns, once the message is found.
	WritePayload(ctx context.Context, id int64, to func(hub.MessageInfo) io.Writer) (hub.MessageInfo, error)
	MessageMDN(ctx context.Context, id int64) (postgres.MDNInfo, error)
	MessageTrace(ctx context.Context, id int64) (postgres.Trace, error)
	MessageOutbox(ctx context.Context, id int64) ([]postgres.OutboxEntry, error)
}

// SessionStore deletes expired sessions; *postgres.Store implements it.
type SessionStore interface {
	DeleteExpiredSessions(ctx context.Context) (int64, error)
}

// Options configure New.
type Options struct {
	// Auth signs people in and checks their sessions. Required.
	Auth Authenticator
	// Messages reads messages. Required.
	Messages MessageStore
	// SessionDB is the database the sessions are kept in (the sessions
	// table of migration 00010); postgres.Store.SessionDB gives it.
	// Required.
	SessionDB *sql.DB
	// Sessions deletes expired sessions (Run). Required.
	Sessions SessionStore
	// Partners lists the partners served, for the search form; nil
	// shows a text field.
	Partners func() []string
	// Auditor records every action and change in the audit log. Required.
	Auditor auth.Auditor
	// Queue queues the documents sent from the console; nil leaves the
	// send page out.
	Queue Enqueuer
	// Resender resends messages; nil leaves resend out.
	Resender Resender
	// Canceller cancels messages still queued or retrying; nil leaves
	// cancel out.
	Canceller Canceller
	// Reapplier judges orphan async MDNs again; nil leaves it out.
	Reapplier Reapplier
	// Interchanges reads the EDI interchanges of a message for its trace;
	// nil leaves them out.
	Interchanges InterchangeStore
	// MaxUploadBytes bounds a document sent from the console; 0 means
	// DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// Spool, when set, takes the documents sent from the console larger
	// than SpoolFromBytes, as they arrive (as POST /api/v1/messages does):
	// a spool file, removed when the request ends, that the queue stores
	// from in pieces; nil holds a document in memory.
	Spool *spool.Spool
	// SpoolFromBytes is the size above which a document is spooled
	// (outbox.DefaultSpoolFromBytes when zero).
	SpoolFromBytes int64
	// Hub reads the hub's state for the hub page; nil leaves the page
	// out.
	Hub HubStore
	// LeaseName names the leader lease whose term and heartbeats the hub
	// page shows.
	LeaseName string
	// Leader is this replica's elector's status; nil shows what the
	// database knows only.
	Leader func() leader.Status
	// Reports renders the day reports; nil leaves them out.
	Reports Reports
	// PartnerStore reads the stored partners; nil leaves the partner
	// pages out.
	PartnerStore PartnerStore
	// PartnerService changes a stored partner (admins); nil makes the
	// partner pages read-only.
	PartnerService PartnerService
	// Certificates lists the certificates served at a time, for the
	// partners' expiry; nil shows none.
	Certificates func(now time.Time) []config.CertificateInfo
	// Users manages users (admins) and API tokens (everyone's own); nil
	// leaves those pages out.
	Users UserService
	// Audit reads the audit log (admins); nil leaves the page out.
	Audit AuditStore
	// OIDC, when set, offers sign-in with an OpenID Connect provider,
	// named OIDCName on the sign-in page.
	OIDC     OIDCProvider
	OIDCName string
	// TestPartner runs the connectivity test against a partner served
	// (operators), false for one not served; nil leaves the test out.
	TestPartner func(ctx context.Context, as2ID string) (probe.Report, bool)
	// Logger logs what goes wrong (never a secret or payload). Required.
	Logger *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Location is the time zone times are shown in; nil means UTC.
	Location *time.Location
	// CleanupInterval is how often Run deletes expired sessions; 0 means
	// DefaultCleanupInterval.
	CleanupInterval time.Duration
	// StatusInterval is how often Run records this replica's elector
	// status (Leader) in the database, besides at once when its
	// leadership changes; 0 means DefaultStatusInterval. Nothing is
	// recorded without Hub and Leader.
	StatusInterval time.Duration
	// Version and Started describe this replica in its recorded status.
	Version string
	Started time.Time
}

// Console serves the console's pages. Build it with New, serve it under
// Prefix and run Run beside it.
type Console struct {
	o        Options
	log      *zap.Logger
	sessions *scs.SessionManager
	mux      chi.Router
	pages    pages
	csrf     *http.CrossOriginProtection
	handler  http.Handler
	// todayFigures keeps today's figures for the hub page.
	todayFigures todayCache
}

// New validates o and returns the console.
func New(o Options) (*Console, error) {
	if o.Auth == nil || o.Messages == nil || o.SessionDB == nil || o.Sessions == nil || o.Auditor == nil || o.Logger == nil {
		return nil, errors.New("console: Auth, Messages, SessionDB, Sessions, Auditor and Logger are required")
	}
	if o.MaxUploadBytes <= 0 {
		o.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.CleanupInterval <= 0 {
		o.CleanupInterval = DefaultCleanupInterval
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.Started.IsZero() {
		o.Started = o.Now()
	}
	ps, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, log: o.Logger.Named("console"), pages: ps, mux: chi.NewRouter()}

	// Not scs.New: it starts a memory store's cleanup goroutine that
	// nothing can stop. Expired rows of the PostgreSQL store are deleted
	// by Run, which stops with the replica, for the same reason.
	sm := &scs.SessionManager{
		Store:       postgresstore.NewWithConfig(o.SessionDB, postgresstore.Config{CleanUpInterval: 0}),
		Codec:       scs.GobCodec{},
		IdleTimeout: IdleTimeout,
		Lifetime:    Lifetime,
		Cookie: scs.SessionCookie{
			Name: CookieName, Path: Prefix + "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode, Persist: false,
		},
	}
	sm.ErrorFunc = func(w http.ResponseWriter, r *http.Request, err error) {
		c.log.Error("session", zap.Error(err))
		c.fail(w, r, http.StatusServiceUnavailable, "Your session could not be read (the database did not answer). Try again in a moment.")
	}
	c.sessions = sm

	c.csrf = http.NewCrossOriginProtection()
	c.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.log.Info("cross-origin request refused", zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.String("origin", r.Header.Get("Origin")), zap.String("remote", auth.RemoteIP(r)))
		c.fail(w, r, http.StatusForbidden, "This request came from another site and was refused. Use the console's own pages.")
	}))

	c.routes()
	c.handler = c.sessions.LoadAndSave(withSession(c.csrf.Handler(c.mux)))
	return c, nil
}

// ServeHTTP serves the console's routes under Prefix, each response with
// the console's security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", Policy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if strings.HasPrefix(r.URL.Path, staticPrefix) {
		// Assets need no session: no database read for them.
		c.static(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	c.handler.ServeHTTP(w, r)
}

// Run deletes expired sessions every CleanupInterval and records this
// replica's elector status (see statusReporter) until ctx ends; it
// returns nil then. A failed deletion or recording is logged and tried
// again at the next tick.
func (c *Console) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.o.Hub != nil && c.o.Leader != nil {
		wg.Go(func() { (&statusReporter{c: c}).run(ctx) })
	}
	t := time.NewTicker(c.o.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n, err := c.o.Sessions.DeleteExpiredSessions(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				c.log.Warn("expired sessions not deleted; retrying later", zap.Error(err))
			case n > 0:
				c.log.Debug("expired sessions deleted", zap.Int64("sessions", n))
			}
		}
	}
}

// handle registers a page ("METHOD path") that needs a signed-in user
// with role need or above; need 0 is a page for everyone (the sign-in
// page). GET pages answer HEAD too.
func (c *Console) handle(pattern string, need auth.Role, h http.HandlerFunc) {
	method, path, _ := strings.Cut(pattern, " ")
	var page http.Handler = h
	if need != 0 {
		page = c.signedIn(c.require(need, h))
	}
	c.mux.Method(method, path, page)
	if method == http.MethodGet {
		c.mux.Method(http.MethodHead, path, page)
	}
}

func (c *Console) routes() {
	c.handle("GET "+Prefix+"/", auth.RoleViewer, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/messages", http.StatusSeeOther)
	})
	c.handle("GET "+Prefix+"/login", 0, c.loginPage)
	c.handle("POST "+Prefix+"/login", 0, c.login)
	c.handle("POST "+Prefix+"/logout", 0, c.logout)
	if c.o.OIDC != nil {
		c.handle("GET "+Prefix+"/oidc/start", 0, c.oidcStart)
		c.handle("GET "+Prefix+"/oidc/callback", 0, c.oidcCallback)
	}

	c.handle("GET "+Prefix+"/messages", auth.RoleViewer, c.messages)
	c.handle("GET "+Prefix+"/messages/{id}", auth.RoleViewer, c.trace)
	// Payload bytes and raw MDNs: never for viewers.
	c.handle("GET "+Prefix+"/messages/{id}/payload", auth.RoleOperator, c.payload)
	c.handle("GET "+Prefix+"/messages/{id}/mdn", auth.RoleOperator, c.rawMDN)
	if c.o.Resender != nil {
		c.handle("GET "+Prefix+"/messages/{id}/resend", auth.RoleOperator, c.resendConfirm())
		c.handle("POST "+Prefix+"/messages/{id}/resend", auth.RoleOperator, c.resend())
	}
	if c.o.Canceller != nil {
		c.handle("GET "+Prefix+"/messages/{id}/cancel", auth.RoleOperator, c.cancelConfirm())
		c.handle("POST "+Prefix+"/messages/{id}/cancel", auth.RoleOperator, c.cancel())
	}
	if c.o.Reapplier != nil {
		c.handle("GET "+Prefix+"/mdns/{id}/reapply", auth.RoleOperator, c.reapplyConfirm)
		c.handle("POST "+Prefix+"/mdns/{id}/reapply", auth.RoleOperator, c.reapply)
	}
	if c.o.Queue != nil {
		c.handle("GET "+Prefix+"/send", auth.RoleOperator, c.sendForm)
		c.handle("POST "+Prefix+"/send", auth.RoleOperator, c.send)
	}

	if c.o.PartnerStore != nil {
		c.handle("GET "+Prefix+"/partners", auth.RoleViewer, c.partnerList)
		c.handle("GET "+Prefix+"/partners/{as2id}", auth.RoleViewer, c.partnerPage)
		if c.o.PartnerService != nil {
			c.handle("POST "+Prefix+"/partners/{as2id}", auth.RoleAdmin, c.partnerUpdate)
			c.handle("GET "+Prefix+"/new-partner", auth.RoleAdmin, c.newPartnerForm)
			c.handle("POST "+Prefix+"/partners", auth.RoleAdmin, c.partnerCreate)
			c.handle("GET "+Prefix+"/partners/{as2id}/delete", auth.RoleAdmin, c.partnerDeleteConfirm)
			c.handle("POST "+Prefix+"/partners/{as2id}/delete", auth.RoleAdmin, c.partnerDelete)
			c.handle("GET "+Prefix+"/partners/{as2id}/restore", auth.RoleAdmin, c.partnerRestoreConfirm)
			c.handle("POST "+Prefix+"/partners/{as2id}/restore", auth.RoleAdmin, c.partnerRestore)
		}
		if c.o.TestPartner != nil {
			c.handle("POST "+Prefix+"/partners/{as2id}/test", auth.RoleOperator, c.partnerTest)
		}
	}
	if c.o.Users != nil {
		c.handle("GET "+Prefix+"/users", auth.RoleAdmin, c.users)
		c.handle("POST "+Prefix+"/users", auth.RoleAdmin, c.addUser)
		c.handle("POST "+Prefix+"/users/{name}/disable", auth.RoleAdmin, c.userAction("disable"))
		c.handle("POST "+Prefix+"/users/{name}/enable", auth.RoleAdmin, c.userAction("enable"))
		c.handle("POST "+Prefix+"/users/{name}/role", auth.RoleAdmin, c.userAction("role"))
		// A user's own tokens: any role (auth.Users checks it is its own).
		c.handle("GET "+Prefix+"/tokens", auth.RoleViewer, c.tokens)
		c.handle("POST "+Prefix+"/tokens", auth.RoleViewer, c.createToken)
		c.handle("POST "+Prefix+"/tokens/{token}/revoke", auth.RoleViewer, c.revokeToken)
		c.handle("GET "+Prefix+"/users/{name}/tokens", auth.RoleAdmin, c.tokens)
		c.handle("POST "+Prefix+"/users/{name}/tokens", auth.RoleAdmin, c.createToken)
		c.handle("POST "+Prefix+"/users/{name}/tokens/{token}/revoke", auth.RoleAdmin, c.revokeToken)
	}
	if c.o.Audit != nil {
		c.handle("GET "+Prefix+"/audit", auth.RoleAdmin, c.auditLog)
	}
	if c.o.Hub != nil {
		c.handle("GET "+Prefix+"/hub", auth.RoleViewer, c.hub)
	}
	if c.o.Reports != nil {
		c.handle("GET "+Prefix+"/reports/{day}", auth.RoleViewer, c.reportPage)
		c.handle("GET "+Prefix+"/reports/{day}/report.html", auth.RoleViewer, c.reportFile("html"))
		c.handle("GET "+Prefix+"/reports/{day}/report.csv", auth.RoleViewer, c.reportFile("csv"))
	}

	// A path the console does not serve, or a method a page does not
	// take: the console's own 404 page.
	notFound := func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no such page.")
	}
	c.mux.NotFound(notFound)
	c.mux.MethodNotAllowed(notFound)
}

type sessionKey struct{}

// withSession marks requests whose session LoadAndSave loaded: the
// session manager panics on a request without one (its error page).
func withSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, true)))
	})
}

func hasSession(r *http.Request) bool { v, _ := r.Context().Value(sessionKey{}).(bool); return v }

// now is the console's clock.
func (c *Console) now() time.Time { return c.o.Now() }

// internal answers 500 for an error that is not the person's, logged.
func (c *Console) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.log.Error(what, zap.String("path", r.URL.Path), zap.Error(err))
	c.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("%s failed (the database did not answer or something went wrong). Try again in a moment.", what))
}
