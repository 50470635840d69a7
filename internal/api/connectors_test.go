package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const connectorsV1 = `destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/inbox}
routes:
  - name: all
    to: [erp-inbox]
`

const connectorsV2 = `destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/in}
  - name: app
    type: http
    http: {url: "https://app.example/edi", secret: app-hook}
routes:
  - name: all
    to: [erp-inbox, app]
`

// setupConnectors is the API with the connectors routes over a real
// connectors.Service on a fresh database, with a secrets directory
// holding app-hook and a folders directory.
func setupConnectors(t *testing.T) *env {
	t.Helper()
	secrets, folders := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "app-hook"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: &config.File{}})
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	svc := &connectors.Service{Store: st, Options: config.ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders}}
	h, err := api.New(api.Options{Queue: q, Store: st, Logger: log, Connectors: svc, ConnectorReader: st,
		ServedConnectors: func() int64 { return servedRevision }, Auditor: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: log, Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 100 << 20, API: h, APIToken: token,
	}))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, store: st, dbURL: dbURL}
}

// TestConnectorsAPI: a document is planned with dry_run (nothing
// stored), applied against the revision read, read back as JSON and as
// written, changed again, listed in the history and restored; each
// change is audited with the caller.
func TestConnectorsAPI(t *testing.T) {
	e := setupConnectors(t)
	yamlCT := []string{"Content-Type", "application/yaml"}

	got := decode[api.ConnectorsDocument](t, e.call(t, "GET", "/api/v1/connectors", nil))
	if got.Revision != 0 || got.ServedRevision != servedRevision || len(got.Connectors.Destinations) != 0 {
		t.Fatalf("GET /connectors on an empty database = %+v, want revision 0", got)
	}

	r := e.call(t, "PUT", "/api/v1/connectors?dry_run=true", []byte(connectorsV1), yamlCT...)
	plan := decode[api.ConnectorsApplied](t, r)
	if !plan.DryRun || len(plan.Plan.Changes) != 2 || plan.Revision != 0 {
		t.Fatalf("PUT ?dry_run=true = %+v, want a plan of two creates at revision 0", plan)
	}
	if n, _ := e.store.ConnectorsRevisionNumber(context.Background()); n != 0 {
		t.Fatalf("after a dry run the revision is %d, want 0: nothing stored", n)
	}

	r = e.call(t, "PUT", "/api/v1/connectors", []byte(connectorsV1), yamlCT...)
	if r.status != http.StatusPreconditionRequired {
		t.Fatalf("PUT without If-Match = %d %s, want 428", r.status, r.body)
	}
	r = e.call(t, "PUT", "/api/v1/connectors", []byte(connectorsV1), append(yamlCT, "If-Match", `"0"`)...)
	applied := decode[api.ConnectorsApplied](t, r)
	if applied.Revision != 1 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("PUT If-Match 0 = %+v (ETag %s), want revision 1", applied, r.header.Get("ETag"))
	}

	r = e.call(t, "GET", "/api/v1/connectors", nil)
	got = decode[api.ConnectorsDocument](t, r)
	if got.Revision != 1 || r.header.Get("ETag") != `"1"` || len(got.Connectors.Destinations) != 1 ||
		got.Connectors.Destinations[0].FileName != config.DefaultFileName || got.YAML != connectorsV1 || got.UpdatedBy != "bootstrap-token" {
		t.Errorf("GET /connectors = %+v, want revision 1 with defaults, as written, by the token", got)
	}
	r = e.call(t, "GET", "/api/v1/connectors?format=yaml", nil)
	if r.status != http.StatusOK || string(r.body) != connectorsV1 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/yaml") {
		t.Errorf("GET ?format=yaml = %d %q, want the document as written", r.status, r.body)
	}

	// Stale: made against revision 0.
	r = e.call(t, "PUT", "/api/v1/connectors", []byte(connectorsV2), append(yamlCT, "If-Match", `"0"`)...)
	if r.status != http.StatusPreconditionFailed {
		t.Errorf("PUT If-Match 0 at revision 1 = %d %s, want 412", r.status, r.body)
	}
	r = e.call(t, "PUT", "/api/v1/connectors?expect=1", []byte(connectorsV2), yamlCT...)
	if applied := decode[api.ConnectorsApplied](t, r); applied.Revision != 2 {
		t.Fatalf("PUT ?expect=1 = %+v, want revision 2", applied)
	}

	hist := decode[struct {
		History    []api.ConnectorsRevision `json:"history"`
		NextCursor string                   `json:"next_cursor"`
	}](t, e.call(t, "GET", "/api/v1/connectors/history?limit=1", nil))
	if len(hist.History) != 1 || hist.History[0].Revision != 2 || hist.NextCursor != "2" ||
		!strings.Contains(strings.Join(hist.History[0].Changes, "\n"), "create destination app") {
		t.Errorf("GET /connectors/history?limit=1 = %+v, want revision 2 creating app, next cursor 2", hist)
	}

	r = e.call(t, "POST", "/api/v1/connectors/history/1/restore", nil)
	restored := decode[api.ConnectorsApplied](t, r)
	if restored.Revision != 3 || restored.RestoredFrom != 1 {
		t.Fatalf("POST restore 1 = %+v, want revision 3 restored from 1", restored)
	}
	if cur, _ := e.store.Connectors(context.Background()); cur.Document != connectorsV1 {
		t.Errorf("after the restore the document is %q, want revision 1's", cur.Document)
	}
	if r := e.call(t, "POST", "/api/v1/connectors/history/42/restore", nil); r.status != http.StatusNotFound {
		t.Errorf("POST restore 42 = %d %s, want 404", r.status, r.body)
	}

	audit, err := e.store.AuditLog(context.Background(), postgres.AuditQuery{Target: "connectors"})
	if err != nil || len(audit) != 3 || audit[0].Action != "connectors.restore" || audit[2].Action != "connectors.apply" || audit[0].Remote == "" {
		t.Errorf("audit = %+v, %v, want apply, apply, restore with the caller's address", audit, err)
	}
}

// TestConnectorsAPIInvalid: a document that does not validate is a 422
// naming the field, line and fix, and stores nothing; an oversized one
// is a 413.
func TestConnectorsAPIInvalid(t *testing.T) {
	e := setupConnectors(t)
	bad := strings.Replace(connectorsV2, "app-hook", "../../etc/passwd", 1)
	r := e.call(t, "PUT", "/api/v1/connectors", []byte(bad), "If-Match", `"0"`)
	ce := decode[struct {
		Error, Field, Fix string
		Line              int
	}](t, r)
	if r.status != http.StatusUnprocessableEntity || ce.Field != "destinations[1].http.secret" || ce.Line != 7 || ce.Fix == "" ||
		!strings.Contains(ce.Error, "not a name in the secrets directory") {
		t.Errorf("PUT a secret path = %d %+v, want 422 on destinations[1].http.secret line 7", r.status, ce)
	}
	r = e.call(t, "PUT", "/api/v1/connectors", []byte(strings.Replace(connectorsV2, "app-hook", "missing", 1)), "If-Match", `"0"`)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `\"missing\": not found in the secrets directory`) {
		t.Errorf("PUT a missing secret = %d %s, want 422 naming it", r.status, r.body)
	}
	big := connectorsV1 + strings.Repeat("#", config.MaxConnectorsBytes)
	if r := e.call(t, "PUT", "/api/v1/connectors", []byte(big), "If-Match", `"0"`); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT %d bytes = %d, want 413", len(big), r.status)
	}
	if n, _ := e.store.ConnectorsRevisionNumber(context.Background()); n != 0 {
		t.Errorf("revision = %d, want 0: nothing stored", n)
	}
}
