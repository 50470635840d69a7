package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
)

// OpsOptions configure the ops router.
type OpsOptions struct {
	Logger   *zap.Logger
	Metrics  *Metrics
	Gatherer prometheus.Gatherer
	// Ready reports whether this replica can serve traffic (the database
	// answers). It must never depend on leadership.
	Ready func(context.Context) error
	// Leader serves GET /leader; nil leaves the route out.
	Leader http.Handler
	// Healthy, when set, makes /healthz fail (503) while it returns an
	// error: the process is alive but must be restarted (leader-gated
	// workers stuck). It must not depend on the database, or every
	// replica would restart when it is down.
	Healthy func() error
}

// ErrShuttingDown is returned by a Ready function while the replica drains:
// /readyz then says so instead of blaming the database.
var ErrShuttingDown = errors.New("shutting down")

// readyTimeout bounds the readiness probe's database check, well below
// kubelet's default probe timeout.
const readyTimeout = 2 * time.Second

// NewOpsRouter returns the ops listener's routes: /healthz, /readyz,
// /metrics and, when given, /leader.
func NewOpsRouter(opts OpsOptions) http.Handler {
	r := chi.NewRouter()
	log := opts.Logger.Named("ops")
	r.Use(requestID, closeChunked, instrument("ops", quiet(log), opts.Metrics))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if opts.Healthy != nil {
			if err := opts.Healthy(); err != nil {
				log.Error("unhealthy", zap.Error(err))
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": err.Error()})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := opts.Ready(ctx); err != nil {
			reason := "database unreachable"
			if errors.Is(err, ErrShuttingDown) {
				reason = "shutting down"
			} else {
				log.Warn("not ready", zap.Error(err))
			}
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": reason})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:          zap.NewStdLog(log),
		EnableOpenMetrics: true,
	}))
	if opts.Leader != nil {
		r.Method(http.MethodGet, "/leader", opts.Leader)
	}
	return r
}

// quiet logs ops requests at debug level: probes and scrapes every few
// seconds would otherwise drown the log.
func quiet(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
}

// RouterOptions configure the AS2/API router.
type RouterOptions struct {
	Logger  *zap.Logger
	Metrics *Metrics
	// Version is reported by GET /.
	Version string
	// MaxBodyBytes bounds every request body.
	MaxBodyBytes int64
	// AS2 serves POST /as2 (messages and async MDNs) and HEAD /as2 (how
	// much of an interrupted AS2 restart transfer arrived); nil leaves
	// them out.
	AS2 http.Handler
	// API is mounted under /api/v1 behind Authenticate; nil leaves it out.
	API http.Handler
	// Authenticate wraps the API: it resolves the caller of each request
	// (auth.Authenticator.API) and answers 401 or 503 itself. The API's
	// routes check the caller's role. Nil authenticates APIToken alone.
	Authenticate func(http.Handler) http.Handler
	// APIToken, when Authenticate is nil, is the one bearer token the API
	// accepts: an admin (the bootstrap token). With neither, the API
	// answers 503 saying how to enable it.
	APIToken string
	// Console, when set, is the ops console, mounted under /console/
	// (internal/console): it authenticates its own requests (sessions).
	Console http.Handler
	// Listener names the listener in the request metrics and access log
	// ("as2", or "api" for a separate API listener); default "as2".
	Listener string
}

// NewRouter returns the routes of an AS2 and/or API listener: GET /, and
// POST /as2, /api/v1 and /console/ for whichever of AS2, API and Console
// is set; every other path is 404.
func NewRouter(opts RouterOptions) http.Handler {
	r := chi.NewRouter()
	log := opts.Logger.Named("access")
	listener := opts.Listener
	if listener == "" {
		listener = "as2"
	}
	r.Use(requestID, closeChunked, instrument(listener, log, opts.Metrics), LimitBody(opts.MaxBodyBytes))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"service": "edihub", "version": opts.Version})
	})
	if opts.AS2 != nil {
		r.Method(http.MethodPost, "/as2", opts.AS2)
		// AS2 restart: how much of an interrupted transfer arrived.
		r.Method(http.MethodHead, "/as2", opts.AS2)
	}
	if opts.API != nil {
		authenticate := opts.Authenticate
		if authenticate == nil {
			authenticate = bootstrapOnly(opts.APIToken, opts.Logger)
		}
		r.Route("/api/v1", func(r chi.Router) {
			r.Use(authenticate)
			r.Mount("/", opts.API)
		})
	}
	if opts.Console != nil {
		r.Handle("/console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
		r.Handle("/console/*", opts.Console)
	}
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	})
	return r
}

// bootstrapOnly authenticates token alone, as an admin.
func bootstrapOnly(token string, log *zap.Logger) func(http.Handler) http.Handler {
	a, err := auth.New(auth.Options{BootstrapToken: token, Logger: log})
	if err != nil { // fail closed; New refuses only bad password parameters
		return func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "authentication is misconfigured: " + err.Error()})
			})
		}
	}
	return a.API
}

// WriteJSON writes v as a JSON response with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // Message-IDs are <...@...>: keep them readable
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
