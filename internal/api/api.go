// Package api is edihub's REST API for internal systems, mounted under
// /api/v1 behind the authentication of httpserver.RouterOptions (a user's
// API token, or the bootstrap token). Each route needs a role (viewer <
// operator < admin, see internal/auth and docs/users.md):
//
//	POST /messages?partner=ID&filename=F   operator  queue the body for a partner (202;
//	                                                 200 for a repeated Idempotency-Key)
//	GET  /messages?partner=&direction=&status=&since=&until=&message_id=&filename=&icn=&overdue=&limit=&cursor=   viewer
//	                                                 newest first; message_id: exact, with or
//	                                                 without <>; filename: names that start with it;
//	                                                 icn: carrying that interchange control number
//	GET  /messages/{id}                    viewer    one message, inbound or outbound, with its EDI
//	                                                 interchanges and acknowledgement (ack)
//	GET  /messages/{id}/payload            operator  the document, raw
//	GET  /messages/{id}/mdn                operator  the MDN as stored, raw
//	GET  /messages/{id}/trace              viewer    the message, its attempts, events, MDN and async
//	                                                 MDNs (no payload or MDN bytes)
//	POST /messages/{id}/resend             operator  send a failed or overdue message again
//	POST /messages/{id}/cancel             operator  fail a message still queued or retrying; body
//	                                                 optional: {"reason": "..."} (409 when it cannot be)
//	GET  /mdns?state=&limit=&cursor=       viewer    async MDNs received: pending, processed, orphan
//	POST /mdns/{id}/reapply                operator  judge an orphan async MDN again (409 when not one)
//	GET  /events?after=CURSOR&limit=N      viewer    the event feed, oldest first
//	GET  /reports/{day}?format=            viewer    a day's report (YYYY-MM-DD, today,
//	                                                 yesterday): html, text, csv, json
//	                                                 or png (the hourly chart); by
//	                                                 default chosen from Accept, else json
//	GET  /certificates                     viewer    station and partner certificates, with expiry
//	GET  /partners                         viewer    stored partners, the set's revision, each replica's
//	POST /partners                         admin     create a partner (its entry as JSON or YAML)
//	GET  /partners/{as2id}                 viewer    one partner (?format=yaml: its entry); ETag: version
//	PUT  /partners/{as2id}                 admin     update it; If-Match: the version read (428 without, 412 stale)
//	DELETE /partners/{as2id}               admin     delete it (If-Match optional)
//	GET  /partners/{as2id}/history         viewer    its changes: who, when, the diff
//	POST /partners/{as2id}/restore?version=N  admin  make version N current again
//	POST /partners/{as2id}/test            operator  send a test document, report each step
//	GET  /connectors                       viewer    the connectors document (?format=yaml: as written),
//	                                                 its revision (ETag), each replica's
//	PUT  /connectors                       admin     replace it (body: YAML); If-Match or ?expect= the
//	                                                 revision read (428 without, 412 stale);
//	                                                 ?dry_run=true: the plan only
//	GET  /connectors/history               viewer    its revisions: who, when, what changed
//	POST /connectors/history/{revision}/restore  admin  make that revision current again
//	GET  /audit?actor=&action=&target=&since=&until=&limit=&cursor=   admin   the audit log, newest first
//	GET  /users                            admin     the users
//	POST /users                            admin     add a user ({"name", "role", "password"})
//	POST /users/{name}/disable             admin     disable a user: its tokens stop working
//	POST /users/{name}/enable              admin     enable it again
//	GET  /users/{name}/tokens              viewer    a user's API tokens (the user itself or an admin)
//	POST /users/{name}/tokens              viewer    make one ({"name", "role", "expires_in"}); shown once
//	DELETE /users/{name}/tokens/{token}    viewer    revoke one
//	GET  /openapi.json                     viewer    this list as an OpenAPI 3.1 document (OpenAPI)
//
// Every change is recorded in the audit log (Options.Auditor).
//
// Errors are JSON {"error": "...", "parameter": "..."}; a bad query
// parameter is a 400 that names it.
package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/spool"
)

// Options configure New.
type Options struct {
	Queue  Enqueuer
	Store  Reader
	Logger *zap.Logger
	// Resender, when set, serves POST /messages/{id}/resend.
	Resender Resender
	// Inbox, when set, serves GET /mdns.
	Inbox InboxReader
	// Tracer, when set, serves GET /messages/{id}/trace.
	Tracer Tracer
	// Interchanges, when set, adds each message's EDI interchanges and
	// acknowledgement state to GET /messages/{id}.
	Interchanges InterchangeReader
	// Canceller, when set, serves POST /messages/{id}/cancel.
	Canceller Canceller
	// Reapplier, when set, serves POST /mdns/{id}/reapply.
	Reapplier Reapplier
	// Certificates lists the configured certificates for GET
	// /certificates; nil answers an empty list.
	Certificates CertificateLister
	// BasePath is where the handler is mounted, for Location headers;
	// default "/api/v1".
	BasePath string
	// Reports serves GET /reports/{day}; nil leaves it out.
	Reports Reports
	// Partners and PartnerReader, when set, serve /partners: the stored
	// partners, changed with the checks of the configuration file.
	Partners      PartnerService
	PartnerReader PartnerReader
	// ServedRevision is the partner set revision this replica serves.
	ServedRevision func() int64
	// TestPartner, when set, serves POST /partners/{as2id}/test: it runs
	// a connectivity test and returns its report (JSON), or false for a
	// partner not served.
	TestPartner func(ctx context.Context, as2ID string) (any, bool)
	// Connectors and ConnectorReader, when set, serve /connectors: the
	// connectors document (destinations, sources, routes), planned,
	// applied against an expected revision, its history and restores.
	Connectors      ConnectorService
	ConnectorReader ConnectorReader
	// ServedConnectors is the connectors revision this replica serves.
	ServedConnectors func() int64
	// Auditor, when set, records every change made through the API in the
	// audit log: who, what, from where.
	Auditor auth.Auditor
	// Audit, when set, serves GET /audit.
	Audit AuditReader
	// Users, when set, serves /users: users and their API tokens.
	Users UserService
	// Spool, when set, takes the documents of POST /messages larger than
	// SpoolFromBytes, or of unknown length (chunked): the body is
	// written to a spool file as it arrives and stored from it in
	// pieces, never held whole. Without it every document is read into
	// memory.
	Spool *spool.Spool
	// SpoolFromBytes is the Content-Length above which a document is
	// spooled (outbox.DefaultSpoolFromBytes when zero).
	SpoolFromBytes int64
}

type handler struct {
	o   Options
	log *zap.Logger
}

// New returns the API handler, with paths relative to its mount point.
func New(o Options) (http.Handler, error) {
	if o.Queue == nil || o.Store == nil || o.Logger == nil {
		return nil, errors.New("api: Queue, Store and Logger are required")
	}
	if o.BasePath == "" {
		o.BasePath = "/api/v1"
	}
	if o.Certificates == nil {
		o.Certificates = func(time.Time) []config.CertificateInfo { return nil }
	}
	h := &handler{o: o, log: o.Logger.Named("api")}
	if h.o.ServedRevision == nil {
		h.o.ServedRevision = func() int64 { return 0 }
	}
	if h.o.ServedConnectors == nil {
		h.o.ServedConnectors = func() int64 { return 0 }
	}
	r := chi.NewRouter()
	// Every route names the least role it needs; the caller was resolved
	// by the authentication in front (auth.Authenticator.API). The table
	// of docs/users.md lists them, and TestRouteRoles checks each.
	for _, rt := range h.routes() {
		if rt.on {
			r.With(auth.Require(rt.role)).Method(rt.method, rt.path, rt.h)
		}
	}
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such API endpoint")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "", "method not allowed")
	})
	return r, nil
}

// route is one endpoint: its method and path, the least role it needs,
// its handler, and whether it is served (the Options it needs are set).
type route struct {
	method, path string
	role         auth.Role
	h            http.HandlerFunc
	on           bool
}

// routes are the API's endpoints.
func (h *handler) routes() []route {
	o := h.o
	const get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	viewer, operator, admin := auth.RoleViewer, auth.RoleOperator, auth.RoleAdmin
	partners := o.Partners != nil && o.PartnerReader != nil
	conns := o.Connectors != nil && o.ConnectorReader != nil
	return []route{
		{post, "/messages", operator, h.enqueue, true},
		{get, "/messages", viewer, h.list, true},
		{get, "/messages/{id}", viewer, h.get, true},
		{get, "/messages/{id}/payload", operator, h.payload, true}, // payload bytes: never for viewers
		{get, "/messages/{id}/mdn", operator, h.mdn, true},
		{get, "/messages/{id}/trace", viewer, h.trace, o.Tracer != nil},
		{post, "/messages/{id}/resend", operator, h.resend, o.Resender != nil},
		{post, "/messages/{id}/cancel", operator, h.cancel, o.Canceller != nil},
		{get, "/mdns", viewer, h.mdns, o.Inbox != nil},
		{post, "/mdns/{id}/reapply", operator, h.reapply, o.Reapplier != nil},
		{get, "/events", viewer, h.events, true},
		{get, "/reports/{day}", viewer, h.report, o.Reports != nil},
		{get, "/certificates", viewer, h.certificates, true},
		{get, "/partners", viewer, h.listPartners, partners},
		{post, "/partners", admin, h.createPartner, partners},
		{get, "/partners/{as2id}", viewer, h.getPartner, partners},
		{put, "/partners/{as2id}", admin, h.updatePartner, partners},
		{del, "/partners/{as2id}", admin, h.deletePartner, partners},
		{get, "/partners/{as2id}/history", viewer, h.partnerHistory, partners},
		{post, "/partners/{as2id}/restore", admin, h.restorePartner, partners},
		{post, "/partners/{as2id}/test", operator, h.testPartner, partners && o.TestPartner != nil},
		{get, "/connectors", viewer, h.getConnectors, conns},
		{put, "/connectors", admin, h.putConnectors, conns},
		{get, "/connectors/history", viewer, h.connectorsHistory, conns},
		{post, "/connectors/history/{revision}/restore", admin, h.restoreConnectors, conns},
		{get, "/audit", admin, h.auditLog, o.Audit != nil},
		{get, "/users", admin, h.listUsers, o.Users != nil},
		{post, "/users", admin, h.addUser, o.Users != nil},
		{post, "/users/{name}/disable", admin, h.disableUser, o.Users != nil},
		{post, "/users/{name}/enable", admin, h.enableUser, o.Users != nil},
		// A user's own tokens: any role for itself (auth.Users checks
		// that the caller is the user or an admin).
		{get, "/users/{name}/tokens", viewer, h.listTokens, o.Users != nil},
		{post, "/users/{name}/tokens", viewer, h.createToken, o.Users != nil},
		{del, "/users/{name}/tokens/{token}", viewer, h.revokeToken, o.Users != nil},
		// The description of these routes (openapi.yaml): any caller that
		// may use the API may read it.
		{get, "/openapi.json", viewer, h.openAPI, true},
	}
}
