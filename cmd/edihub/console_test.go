package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/freeport"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestBinaryConsole: the binary serves the console on its API listener,
// wired to the replica's parts: an admin signs in and reads the hub (this
// replica's elector and the lease it holds), the partners of the file, the
// messages and the audit log; the AS2 listener serves none of it.
func TestBinaryConsole(t *testing.T) {
	const pw = "correct horse battery"
	dbURL := databaseWithAdmin(t, "ada", pw)
	p := startReplica(t, "EDIHUB_DATABASE_URL="+dbURL, "EDIHUB_API_ADDR=127.0.0.1:0")

	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(p.api+"/console/login", url.Values{"name": {"ada"}, "password": {pw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.Secure || !session.HttpOnly {
		t.Fatalf("sign-in = %s, cookie %+v; want 303 and a Secure, HttpOnly session cookie\n%s", resp.Status, session, p.log())
	}
	get := func(base, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.AddCookie(session)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Content-Security-Policy") != console.Policy && resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: policy %q", path, resp.Header.Get("Content-Security-Policy"))
		}
		return resp.StatusCode, string(b)
	}
	// The replica takes the lease within seconds: the hub shows it leads.
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := get(p.api, "/console/hub")
		if status != http.StatusOK {
			t.Fatalf("GET /console/hub = %d\n%s", status, body)
		}
		if strings.Contains(body, `<span class="badge ok">yes</span> token`) && strings.Contains(body, "mdn-poller") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub page never shows this replica leading:\n%s", body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The replica records its elector's status for the hub pages of the
	// others: leading, with its workers and its version.
	conn := pgtest.Conn(t, dbURL)
	for {
		var leads, workers bool
		var ver string
		err := conn.QueryRow(context.Background(), `SELECT is_leader, status->'workers' ? 'mdn-poller', version FROM replica_status`).Scan(&leads, &workers, &ver)
		if err == nil && leads && workers && ver == version() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica_status: leads %v, workers %v, version %q (%v); want the leader with its workers and version %q", leads, workers, ver, err, version())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for path, want := range map[string]string{
		"/console/partners": "ACME CORP",
		"/console/messages": "<h1>Messages</h1>",
		"/console/audit":    "login",
		"/console/tokens":   "API tokens",
	} {
		if status, body := get(p.api, path); status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d, want 200 with %q:\n%s", path, status, want, body)
		}
	}
	if status, _ := get(p.as2, "/console/hub"); status != http.StatusNotFound {
		t.Errorf("GET /console/hub on the AS2 listener = %d, want 404", status)
	}
}

// TestBinaryStartsWithProviderDown: an identity provider that cannot be
// reached does not keep the replica from starting (discovery runs in the
// background): it is ready, its sign-in page says SSO is unavailable, the
// SSO start answers 503, and password sign-in works.
func TestBinaryStartsWithProviderDown(t *testing.T) {
	const pw = "correct horse battery"
	dbURL := databaseWithAdmin(t, "ada", pw)
	secret := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := freeport.Addr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + addr
	p := startReplica(t, "EDIHUB_DATABASE_URL="+dbURL, "EDIHUB_API_ADDR=127.0.0.1:0",
		"EDIHUB_OIDC_ISSUER="+down, "EDIHUB_OIDC_CLIENT_ID=edihub", "EDIHUB_OIDC_CLIENT_SECRET_FILE="+secret,
		"EDIHUB_OIDC_ROLES=edi-admins=admin", "EDIHUB_OIDC_REDIRECT_URL=https://hub.example/console/oidc/callback")

	if code, _, err := httpGet(p.ops + "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /readyz with the provider down = %d, %v; want 200\n%s", code, err, p.log())
	}
	if code, body, err := httpGet(p.api + "/console/login"); err != nil || code != http.StatusOK || !strings.Contains(body, `id="sso-unavailable"`) {
		t.Errorf("GET /console/login with the provider down = %d, %v; want 200 saying SSO is unavailable:\n%s", code, err, body)
	}
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(p.api + "/console/oidc/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /console/oidc/start with the provider down = %d, want 503", resp.StatusCode)
	}
	resp, err = client.PostForm(p.api+"/console/login", url.Values{"name": {"ada"}, "password": {pw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("password sign-in with the provider down = %d, want 303\n%s", resp.StatusCode, p.log())
	}
}

// databaseWithAdmin is a fresh migrated database holding the admin name
// with password pw.
func databaseWithAdmin(t *testing.T, name, pw string) string {
	t.Helper()
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	users := &auth.Users{Store: st, Params: auth.Params{Memory: 64, Time: 1, Threads: 1}}
	if _, err := users.Add(context.Background(), auth.Caller{Principal: auth.CLIPrincipal("test@host")}, name, auth.RoleAdmin, pw); err != nil {
		t.Fatal(err)
	}
	return dbURL
}
