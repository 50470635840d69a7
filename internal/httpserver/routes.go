package httpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
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
	// AS2 serves POST /as2 (messages and async MDNs); nil leaves it out.
	AS2 http.Handler
	// API is mounted under /api/v1 behind bearer-token authentication;
	// nil leaves it out.
	API http.Handler
	// APIToken is the bearer token the API requires. Empty disables the
	// API: its routes then answer 503 saying how to enable it.
	APIToken string
	// Listener names the listener in the request metrics and access log
	// ("as2", or "api" for a separate API listener); default "as2".
	Listener string
}

// NewRouter returns the routes of an AS2 and/or API listener: GET /, and
// POST /as2 and /api/v1 for whichever of AS2 and API is set; every other
// path is 404.
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
	}
	if opts.API != nil {
		r.Route("/api/v1", func(r chi.Router) {
			r.Use(bearer(opts.APIToken))
			r.Mount("/", opts.API)
		})
	}
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	})
	return r
}

// bearer requires "Authorization: Bearer <token>". The SHA-256 digests
// of the two are compared in constant time: comparing the strings
// themselves returns at once on a length mismatch, which tells a caller
// the token's length.
func bearer(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if token == "" {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the API is disabled: set EDIHUB_API_TOKEN (flag -api-token) to enable it"})
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			gotSum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(gotSum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edihub"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or invalid bearer token"})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
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
