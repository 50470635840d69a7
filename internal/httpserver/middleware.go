package httpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// RequestIDHeader carries the request ID in requests and responses.
const RequestIDHeader = "X-Request-ID"

type ctxKey int

const requestIDKey ctxKey = 0

// RequestID returns the request ID stored in ctx by the middleware, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// requestID takes a caller's X-Request-ID when it is short and printable,
// else makes one, and echoes it in the response.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Metrics are the HTTP metrics of one listener set, registered on the
// registry given to NewMetrics.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

// NewMetrics registers edihub_http_* metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_http_requests_total",
			Help: "HTTP requests answered, by listener, route pattern, method and status code.",
		}, []string{"listener", "route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edihub_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by listener, route pattern and method.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"listener", "route", "method"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_http_requests_in_flight",
			Help: "HTTP requests being served, by listener.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.requests, m.duration, m.inflight)
	return m
}

// knownMethods bounds the method label: anything else is "other".
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// instrument logs and measures each request. The route label is chi's
// route pattern ("/api/v1/messages/{id}"), never the raw path, so label
// values stay bounded; unmatched requests are "unmatched".
func instrument(listener string, log *zap.Logger, m *Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			m.inflight.WithLabelValues(listener).Inc()
			defer func() {
				m.inflight.WithLabelValues(listener).Dec()
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					log.Error("panic in handler", zap.Any("panic", p), zap.String("request_id", RequestID(r.Context())), zap.Stack("stack"))
					if ww.Status() == 0 {
						http.Error(ww, "internal error", http.StatusInternalServerError)
					}
				}
				route := "unmatched"
				if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
					route = rc.RoutePattern()
				}
				method := r.Method
				if !knownMethods[method] {
					method = "other"
				}
				status := ww.Status()
				if status == 0 {
					status = http.StatusOK
				}
				d := time.Since(start)
				m.requests.WithLabelValues(listener, route, method, strconv.Itoa(status)).Inc()
				m.duration.WithLabelValues(listener, route, method).Observe(d.Seconds())
				log.Info("request",
					zap.String("request_id", RequestID(r.Context())),
					zap.String("method", r.Method),
					zap.String("route", route),
					zap.Int("status", status),
					zap.Int("bytes", ww.BytesWritten()),
					zap.Int64("request_bytes", r.ContentLength),
					zap.Duration("duration", d),
					zap.String("remote", r.RemoteAddr),
				)
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// closeChunked makes net/http close the connection after answering a
// request whose body came chunked. RFC 9112 §6.1 requires that for a
// request with both Transfer-Encoding and Content-Length: a front end
// that framed it by the length sees a different next request than we do
// (request smuggling), so nothing after it on the connection may be
// answered. net/http deletes the Content-Length field before a handler
// runs, so the two cases cannot be told apart here and every chunked
// request ends its connection; that costs a chunked sender one new
// connection per message, and AS2 sends one message per request anyway.
func closeChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// LimitBody bounds request bodies to n bytes; reading past it fails with
// *http.MaxBytesError, which handlers answer with 413.
func LimitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > n {
				http.Error(w, "request body too large: the limit is "+strconv.FormatInt(n, 10)+" bytes", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}
