package httpserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// serve starts h on a real loopback listener and stops it at cleanup.
func serve(t *testing.T, name string, h http.Handler) string {
	t.Helper()
	srv, err := httpserver.Listen(httpserver.Options{Name: name, Addr: "127.0.0.1:0", Handler: h, Logger: zap.NewNop(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + srv.Addr().String()
}

func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers want; the database reconnect after
// a restart is not instantaneous.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got int
	for time.Now().Before(deadline) {
		if got, _ = get(t, url); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond) // stays: bounded poll of a real PostgreSQL reconnect
	}
	t.Fatalf("GET %s = %d, want %d", url, got, want)
}

func TestReadinessFollowsDatabase(t *testing.T) {
	pg := pgtest.NewServer(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, pg.URL("postgres"), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	base := serve(t, "ops", httpserver.NewOpsRouter(httpserver.OpsOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(reg), Gatherer: reg, Ready: store.Ping,
	}))

	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("GET /readyz with database up = %d %s, want 200", code, body)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz with database down = %d %s, want 503", code, body)
	}
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "postgres://") {
		t.Errorf("GET /readyz leaks connection details: %s", body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz with database down = %d, want 200 (liveness must not follow the database)", code)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base+"/readyz", http.StatusOK)
}

// TestHealthzFollowsHealthyNotReadiness: /healthz fails while Healthy
// reports an error (stuck leader-gated workers) and /readyz stays
// independent of it.
func TestHealthzFollowsHealthyNotReadiness(t *testing.T) {
	var unhealthy atomic.Bool
	reg := prometheus.NewRegistry()
	base := serve(t, "ops", httpserver.NewOpsRouter(httpserver.OpsOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(reg), Gatherer: reg,
		Ready: func(context.Context) error { return nil },
		Healthy: func() error {
			if unhealthy.Load() {
				return errors.New("leader-gated workers are stuck: poller (no progress for 10m0s)")
			}
			return nil
		},
	}))
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz while healthy = %d %s, want 200", code, body)
	}
	unhealthy.Store(true)
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "poller") {
		t.Errorf("GET /healthz while unhealthy = %d %s, want 503 naming the worker", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz while unhealthy = %d %s, want 200 (readiness does not follow liveness)", code, body)
	}
}

// TestOpsProfilingIsOptIn: /debug/pprof/ answers on the ops listener only
// when Profiling is set.
func TestOpsProfilingIsOptIn(t *testing.T) {
	for _, give := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		base := serve(t, "ops", httpserver.NewOpsRouter(httpserver.OpsOptions{
			Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(reg), Gatherer: reg,
			Ready: func(context.Context) error { return nil }, Profiling: give,
		}))
		code, body := get(t, base+"/debug/pprof/goroutine?debug=1")
		if got := code == http.StatusOK && strings.Contains(body, "goroutine profile"); got != give {
			t.Errorf("Profiling %v: GET /debug/pprof/goroutine = %d %.80q, want served %v", give, code, body, give)
		}
	}
}

func TestMetricsExposeHTTPAndPool(t *testing.T) {
	store := pgtest.Store(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(store.Collector())
	m := httpserver.NewMetrics(reg)
	ops := serve(t, "ops", httpserver.NewOpsRouter(httpserver.OpsOptions{Logger: zap.NewNop(), Metrics: m, Gatherer: reg, Ready: store.Ping}))
	app := serve(t, "as2", httpserver.NewRouter(httpserver.RouterOptions{Logger: zap.NewNop(), Metrics: m, MaxBodyBytes: 1 << 20}))

	get(t, ops+"/readyz")
	get(t, app+"/")
	get(t, app+"/no/such/path/123")
	_, body := get(t, ops+"/metrics")
	for _, want := range []string{
		`edihub_http_requests_total{code="200",listener="ops",method="GET",route="/readyz"} 1`,
		`edihub_http_requests_total{code="200",listener="as2",method="GET",route="/"} 1`,
		`edihub_http_requests_total{code="404",listener="as2",method="GET",route="unmatched"} 1`,
		`edihub_http_request_duration_seconds_bucket{listener="as2",method="GET",route="/",le="+Inf"} 1`,
		"edihub_db_pool_max_conns ",
		"edihub_db_pool_acquires_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "/no/such/path") {
		t.Error("GET /metrics has a raw path as a label value; labels must stay bounded")
	}
}

func TestShutdownWaitsForInFlightRequest(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	srv, err := httpserver.Listen(httpserver.Options{Name: "as2", Addr: "127.0.0.1:0", Handler: h, Logger: zap.NewNop(), DrainTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	type result struct {
		body string
		err  error
	}
	respc := make(chan result, 1)
	var wg sync.WaitGroup
	// On failure, release the handler and stop the server so that neither
	// goroutine outlives the test (goleak checks in TestMain).
	t.Cleanup(func() {
		releaseOnce()
		cancel()
		wg.Wait()
	})
	wg.Go(func() { runDone <- srv.Run(ctx) })
	wg.Go(func() {
		resp, err := http.Get("http://" + srv.Addr().String() + "/")
		if err != nil {
			respc <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		respc <- result{string(b), err}
	})
	select {
	case <-entered:
	case r := <-respc:
		t.Fatalf("request ended (%q, %v) before reaching the handler", r.body, r.err)
	}
	cancel()
	select {
	case err := <-runDone:
		t.Fatalf("Run returned (%v) while a request was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	releaseOnce()
	if err := <-runDone; err != nil {
		t.Fatalf("Run = %v, want nil after a clean drain", err)
	}
	r := <-respc
	if r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request = %q, %v; want \"done\", nil", r.body, r.err)
	}
	if _, err := http.Get("http://" + srv.Addr().String() + "/"); err == nil {
		t.Error("server still accepts connections after Run returned")
	}
}

func TestDrainTimeoutIsBounded(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(entered); <-release })
	srv, err := httpserver.Listen(httpserver.Options{Name: "as2", Addr: "127.0.0.1:0", Handler: h, Logger: zap.NewNop(), DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	getDone := make(chan error, 1)
	var wg sync.WaitGroup
	t.Cleanup(func() { // the stuck handler is released, then both goroutines are awaited
		close(release)
		cancel()
		wg.Wait()
	})
	wg.Go(func() { runDone <- srv.Run(ctx) })
	wg.Go(func() {
		resp, err := http.Get("http://" + srv.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		getDone <- err
	})
	select {
	case <-entered:
	case err := <-getDone:
		t.Fatalf("request ended (%v) before reaching the handler", err)
	}
	cancel()
	if err := <-runDone; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run with a stuck request = %v, want a drain deadline error", err)
	}
}

func TestAPIRequiresBearerToken(t *testing.T) {
	reg := prometheus.NewRegistry()
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "secret data") })
	tests := []struct {
		name     string
		token    string
		header   string
		wantCode int
	}{
		{"no header", "s3cret", "", http.StatusUnauthorized},
		{"wrong token", "s3cret", "Bearer nope", http.StatusUnauthorized},
		{"basic scheme", "s3cret", "Basic czNjcmV0", http.StatusUnauthorized},
		{"truncated token", "s3cret", "Bearer s3cre", http.StatusUnauthorized},
		{"first character only", "s3cret", "Bearer s", http.StatusUnauthorized},
		{"longer token", "s3cret", "Bearer s3cret0", http.StatusUnauthorized},
		{"token twice", "s3cret", "Bearer s3crets3cret", http.StatusUnauthorized},
		// net/http trims the trailing space: the server sees "Bearer".
		{"empty token", "s3cret", "Bearer ", http.StatusUnauthorized},
		{"token without scheme", "s3cret", "s3cret", http.StatusUnauthorized},
		{"right token", "s3cret", "Bearer s3cret", http.StatusOK},
		{"api disabled", "", "Bearer ", http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := serve(t, "as2", httpserver.NewRouter(httpserver.RouterOptions{
				Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"t": tt.name}, reg)),
				MaxBodyBytes: 1 << 20, API: api, APIToken: tt.token,
			}))
			var hdr []string
			if tt.header != "" {
				hdr = []string{"Authorization", tt.header}
			}
			code, body := get(t, base+"/api/v1/anything", hdr...)
			if code != tt.wantCode {
				t.Fatalf("GET /api/v1/anything with %q = %d, want %d", tt.header, code, tt.wantCode)
			}
			if code != http.StatusOK && strings.Contains(body, "secret data") {
				t.Errorf("unauthenticated response carries the API's data")
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "ok")
	})
	base := serve(t, "as2", httpserver.NewRouter(httpserver.RouterOptions{Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(reg), MaxBodyBytes: 1024, AS2: h}))
	tests := []struct {
		name     string
		size     int
		chunked  bool
		wantCode int
	}{
		{"under limit", 1000, false, http.StatusOK},
		{"over limit, Content-Length", 2000, false, http.StatusRequestEntityTooLarge},
		{"over limit, chunked", 2000, true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(strings.Repeat("x", tt.size))
			if tt.chunked {
				body = io.MultiReader(body) // unknown length: sent chunked
			}
			resp, err := http.Post(base+"/as2", "application/edi-x12", body)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Errorf("POST %d bytes = %d, want %d", tt.size, resp.StatusCode, tt.wantCode)
			}
		})
	}
}

func TestAccessLogCarriesRequestID(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	base := serve(t, "as2", httpserver.NewRouter(httpserver.RouterOptions{Logger: zap.New(core), Metrics: httpserver.NewMetrics(reg), MaxBodyBytes: 1024}))
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set(httpserver.RequestIDHeader, "abc-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(httpserver.RequestIDHeader); got != "abc-123" {
		t.Errorf("response %s = %q, want abc-123", httpserver.RequestIDHeader, got)
	}
	entries := logs.FilterMessage("request").All()
	if len(entries) != 1 {
		t.Fatalf("access log entries = %d, want 1", len(entries))
	}
	if got := entries[0].ContextMap()["request_id"]; got != "abc-123" {
		t.Errorf("access log request_id = %v, want abc-123", got)
	}
}
