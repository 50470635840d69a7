package outbox_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDispatchBasicAuth: auth: {user, password_file} is sent as HTTP
// basic authentication to the partner's URL.
func TestDispatchBasicAuth(t *testing.T) {
	st := pgtest.Store(t)
	var gotUser, gotPass string
	var ok bool
	partner := newPartner(t, func(_ int, r request) (int, http.Header, []byte) {
		gotUser, gotPass, ok = r.basicAuth()
		if !ok || gotPass != "s3cret-pw" {
			return 401, nil, nil
		}
		return 200, nil, nil
	})
	pw := filepath.Join(t.TempDir(), "acme.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: []string{"mdn: none", "auth: {user: edi-user, password_file: " + pw + "}"}})
	q := enqueue(t, st, cfg, partnerID, []byte("hello"), "application/EDIFACT", "")
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	if m := waitStatus(t, st, q.ID, "sent", "failed"); m.Status != "sent" || gotUser != "edi-user" || gotPass != "s3cret-pw" {
		t.Errorf("status %q (%q), basic auth %q:%q (%v), want sent as edi-user", m.Status, m.Error, gotUser, gotPass, ok)
	}
}

// TestDispatchRedactsURLs: a password in a partner URL never reaches a
// log line or the stored error text (network error and redirect alike).
func TestDispatchRedactsURLs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: connection refused
	redirect := newPartner(t, func(int, request) (int, http.Header, []byte) {
		return 301, http.Header{"Location": {"http://user:location-pw@elsewhere.example/"}}, nil
	})
	for _, tt := range []struct{ name, url string }{
		{"network error", "http://edi:url-pw-123@" + closed + "/as2"},
		{"redirect", strings.Replace(redirect.URL, "http://", "http://edi:url-pw-123@", 1) + "/as2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: tt.url, extra: []string{"mdn: none", "max_attempts: 1"}})
			core, logs := observer.New(zap.DebugLevel)
			o := dispatcherOpts(t, st, cfg, "d1")
			o.Logger = zap.New(core)
			q := enqueue(t, st, cfg, partnerID, []byte("hello"), "application/EDIFACT", "")
			startDispatcher(t, o)
			m := waitStatus(t, st, q.ID, "failed")
			if m.Error == "" || strings.Contains(m.Error, "url-pw-123") || strings.Contains(m.Error, "location-pw") {
				t.Errorf("stored error = %q, want one without the password", m.Error)
			}
			for _, e := range logs.All() {
				line := e.Message
				for k, v := range e.ContextMap() {
					line += " " + k + "=" + strings.ReplaceAll(strings.ReplaceAll(fmtAny(v), "\n", " "), "\t", " ")
				}
				if strings.Contains(line, "url-pw-123") || strings.Contains(line, "location-pw") {
					t.Errorf("log line leaks the password: %s", line)
				}
			}
			t.Logf("stored error: %s", m.Error)
		})
	}
}

// basicAuth decodes the request's Authorization header.
func (r request) basicAuth() (user, pass string, ok bool) {
	return (&http.Request{Header: r.header}).BasicAuth()
}

func fmtAny(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// TestDispatchMDNCredentialsSameOrigin: an async MDN to the partner's host
// and port carries its basic authentication and extra header fields only
// when the scheme is the partner URL's too: an MDN to http://<host>/…
// of a partner whose URL is https goes without them (its URL comes from
// the unsigned Receipt-Delivery-Option).
func TestDispatchMDNCredentialsSameOrigin(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "acme.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		scheme   string // of the partner's URL; the MDN goes over http
		wantAuth bool
	}{
		{"partner on https, MDN over http", "https", false},
		{"partner on http, MDN over http", "http", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			target := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, nil })
			hostPort := strings.TrimPrefix(target.URL, "http://")
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: tt.scheme + "://" + hostPort + "/as2", extra: []string{
				"mdn: sync", "allow_private_mdn_targets: true",
				"auth: {user: edi-user, password_file: " + pw + "}",
				"headers: {X-Partner-Key: k3y}",
			}})
			reg := owedMDN(t, st, cfg, fmt.Sprintf("<cred-%d@partner>", i), "http://"+hostPort+"/mdn", postgres.Retry{})
			deadline := time.Now().Add(20 * time.Second)
			for metric(reg, "mdn-sent") == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			reqs := target.requests()
			if len(reqs) != 1 {
				t.Fatalf("the MDN target got %d requests, want 1", len(reqs))
			}
			_, _, gotAuth := reqs[0].basicAuth()
			gotHeader := reqs[0].header.Get("X-Partner-Key") != ""
			if gotAuth != tt.wantAuth || gotHeader != tt.wantAuth {
				t.Errorf("MDN to http://%s/mdn: basic auth %v, X-Partner-Key %v; want %v", hostPort, gotAuth, gotHeader, tt.wantAuth)
			}
		})
	}
}
