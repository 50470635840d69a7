package probe_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/probe"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/freeport"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// loadPartner writes a configuration with the station (B's key) and one
// partner (A's certificate) at url, whose profile is the default test
// profile (signed sha-256, aes256-cbc, signed sync MDN, 5 s timeout) with
// lines replacing or adding keys, and loads it as edihub would.
func loadPartner(t *testing.T, url string, lines ...string) *config.File {
	t.Helper()
	k := openssltest.Keys(t)
	profile := []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true", "timeout: 5s"}
	for _, l := range lines {
		key, _, _ := strings.Cut(l, ":")
		replaced := false
		for i, p := range profile {
			if strings.HasPrefix(p, key+":") {
				profile[i], replaced = l, true
			}
		}
		if !replaced {
			profile = append(profile, l)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "station: {as2_id: %q, private_key: %q, certificate: %q, async_mdn_url: \"http://127.0.0.1:1/as2\"}\npartners:\n", stationID, k.B.KeyPath, k.B.CertPath)
	fmt.Fprintf(&b, "  - as2_id: %q\n    url: %q\n    certificate: %q\n", partnerID, url, k.A.CertPath)
	for _, l := range profile {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	path := filepath.Join(t.TempDir(), "edihub.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, b.String())
	}
	return cfg
}

// writeFile writes b into a new file of the test's temporary directory.
func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// serveTLS starts h on a TLS listener configured by cfg (nil: httptest's
// defaults) and returns it with a CA file that trusts its certificate.
// Handshake errors, which the tests provoke, are not logged.
func serveTLS(t *testing.T, h http.Handler, cfg *tls.Config) (srv *httptest.Server, caFile string) {
	t.Helper()
	srv = httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	id := &devpki.Identity{Cert: srv.Certificate()}
	return srv, writeFile(t, "partner-ca.pem", id.CertPEM())
}

// hang answers nothing until the client gives up. It reads the body first:
// only then does the server notice the client closing the connection.
func hang(release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(10 * time.Second): // a probe that ignores its timeout gets an empty 200
		}
	})
}

// forwardProxy is an HTTP proxy for http URLs (absolute-URI requests)
// counting the requests it forwarded.
func forwardProxy(t *testing.T) (url string, forwarded *atomic.Int64) {
	t.Helper()
	forwarded = &atomic.Int64{}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { forwarded.Add(1) },
		Transport: tr,
	}
	return serve(t, rp).URL, forwarded
}

// answer is a partner that is no AS2 server: it answers every request
// with status, header fields and body.
func answer(status int, h http.Header, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}

// run probes the partner of cfg.
func run(t *testing.T, cfg *config.File) probe.Report {
	t.Helper()
	p, ok := cfg.Partner(partnerID)
	if !ok {
		t.Fatalf("no partner %q", partnerID)
	}
	return probe.Run(context.Background(), probe.Options{Station: cfg.Station, Partner: p})
}

// TestRun probes real partners on loopback listeners: an AS2 partner made
// of openssl (it decrypts, verifies our signature, digests the signed part
// and answers with an MDN openssl signs) and plain HTTP and TLS servers
// that fail in the ways partners do. Each case checks the steps that ran,
// in order, that only the last one failed (or none), what the failed step
// says, and that its fix names the setting or what to ask the partner for.
func TestRun(t *testing.T) {
	k := openssltest.Keys(t)
	all := []string{probe.StepMessage, probe.StepDNS, probe.StepConnect, probe.StepHTTP, probe.StepMDN, probe.StepSignature, probe.StepDisposition, probe.StepMIC}
	allTLS := []string{probe.StepMessage, probe.StepDNS, probe.StepConnect, probe.StepTLS, probe.StepHTTP, probe.StepMDN, probe.StepSignature, probe.StepDisposition, probe.StepMIC}
	upTo := func(steps []string, last string) []string {
		for i, s := range steps {
			if s == last {
				return steps[:i+1]
			}
		}
		t.Fatalf("no step %q in %v", last, steps)
		return nil
	}
	good := mdnAnswer{signer: k.A}
	const wrongMIC = "Tm90IHRoZSBkaWdlc3Qgb2YgYW55dGhpbmcgYXQgYWxsISE=, sha-256" // 32 bytes, not the digest

	tests := []struct {
		name string
		// setup starts the partner and returns its URL, the profile lines
		// and the openssl partner (nil when the partner is no AS2 server).
		setup      func(t *testing.T) (url string, profile []string, pt *as2Partner)
		wantSteps  []string
		wantDetail string   // in the last step's detail
		wantFix    []string // in the failed step's fix
		wantNote   string   // in one of the notes
		// wantLayers are the layers the openssl partner took off; nil
		// when the request must not have reached it.
		wantLayers []string
		// check, when set, checks more of the report.
		check func(t *testing.T, r probe.Report)
	}{
		{
			name: "success over http",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				return serve(t, pt).URL + "/as2", nil, pt
			},
			wantSteps: all, wantDetail: "matches", wantLayers: []string{"encrypted", "signed"},
			wantNote: "url is plain http",
		},
		{
			name: "success over https with the CA, basic auth and an extra header",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				srv, ca := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if u, pw, ok := r.BasicAuth(); !ok || u != "edi" || pw != "s3cret-password" || r.Header.Get("X-Partner-Key") != "k-secret-header" {
						w.Header().Set("WWW-Authenticate", `Basic realm="as2"`)
						http.Error(w, "who are you", http.StatusUnauthorized)
						return
					}
					pt.ServeHTTP(w, r)
				}), nil)
				pwFile := writeFile(t, "password", []byte("s3cret-password\n"))
				return srv.URL + "/as2", []string{
					fmt.Sprintf("tls: {ca_file: %q}", ca),
					fmt.Sprintf("auth: {user: edi, password_file: %q}", pwFile),
					`headers: {X-Partner-Key: "k-secret-header"}`,
				}, pt
			},
			wantSteps: allTLS, wantDetail: "matches", wantLayers: []string{"encrypted", "signed"},
		},
		{
			name: "a profile with async unsigned MDNs is tested with a sync signed MDN",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				return serve(t, pt).URL + "/as2", []string{"mdn: async", "mdn_signed: false"}, pt
			},
			wantSteps: all, wantDetail: "matches", wantLayers: []string{"encrypted", "signed"},
			wantNote: "the profile asks for asynchronous MDNs; this test asks for a synchronous signed MDN",
		},
		{
			name: "an unsigned profile is followed and noted",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				return serve(t, pt).URL + "/as2", []string{`sign: ""`}, pt
			},
			wantSteps: all, wantDetail: "matches", wantLayers: []string{"encrypted"},
			wantNote: "the profile sends unsigned messages",
		},
		{
			name: "success through the profile's proxy",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				proxy, forwarded := forwardProxy(t)
				t.Cleanup(func() {
					if n := forwarded.Load(); n != 1 {
						t.Errorf("the proxy forwarded %d requests, want 1", n)
					}
				})
				return serve(t, pt).URL + "/as2", []string{fmt.Sprintf("proxy: %q", proxy)}, pt
			},
			wantSteps: all, wantDetail: "matches", wantLayers: []string{"encrypted", "signed"},
			wantNote: "requests go through the proxy http://127.0.0.1:",
			check: func(t *testing.T, r probe.Report) {
				if c := r.Step(probe.StepConnect); !strings.Contains(c.Detail, "connected to the proxy 127.0.0.1:") {
					t.Errorf("connect step %q, want it to name the proxy", c.Detail)
				}
			},
		},
		{
			name: "the profile's proxy refuses connections",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				port, err := freeport.Port()
				if err != nil {
					t.Fatal(err)
				}
				return "http://as2.acme.invalid/as2", []string{fmt.Sprintf("proxy: \"http://127.0.0.1:%d\"", port)}, nil
			},
			wantSteps: upTo(all, probe.StepConnect), wantDetail: "connection to the proxy 127.0.0.1:", wantFix: []string{"check proxy in the partner profile"},
		},
		{
			name: "DNS: no such host",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return "https://as2.acme.invalid/as2", nil, nil
			},
			wantSteps: upTo(allTLS, probe.StepDNS), wantDetail: "no such host as2.acme.invalid", wantFix: []string{"url"},
		},
		{
			name: "connection refused",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				port, err := freeport.Port()
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("http://127.0.0.1:%d/as2", port), nil, nil
			},
			wantSteps: upTo(all, probe.StepConnect), wantDetail: "refused", wantFix: []string{"port", "url"},
		},
		{
			name: "TLS: certificate signed by an unknown authority",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				srv, _ := serveTLS(t, pt, nil)
				return srv.URL + "/as2", nil, pt
			},
			wantSteps: upTo(allTLS, probe.StepTLS), wantDetail: "unknown authority", wantFix: []string{"tls.ca_file"},
		},
		{
			name: "TLS: certificate for another host name",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				srv, ca := serveTLS(t, pt, nil)
				return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/as2", []string{fmt.Sprintf("tls: {ca_file: %q}", ca)}, pt
			},
			wantSteps: upTo(allTLS, probe.StepTLS), wantDetail: "not localhost", wantFix: []string{"url"},
		},
		{
			name: "TLS: expired server certificate",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				id, err := devpki.New("as2.acme.test", devpki.Options{NotBefore: time.Now().AddDate(-2, 0, 0), NotAfter: time.Now().AddDate(0, 0, -1)})
				if err != nil {
					t.Fatal(err)
				}
				pt := newAS2Partner(t, good)
				srv, _ := serveTLS(t, pt, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{id.Cert.Raw}, PrivateKey: id.Key}}})
				return srv.URL + "/as2", []string{fmt.Sprintf("tls: {ca_file: %q}", writeFile(t, "ca.pem", id.CertPEM()))}, pt
			},
			wantSteps: upTo(allTLS, probe.StepTLS), wantDetail: "expired on", wantFix: []string{"renew"},
		},
		{
			name: "TLS: the partner requires a client certificate",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, good)
				// TLS 1.2: the refusal comes inside the handshake (in TLS
				// 1.3 it would race the request).
				srv, ca := serveTLS(t, pt, &tls.Config{ClientAuth: tls.RequireAnyClientCert, MaxVersion: tls.VersionTLS12})
				return srv.URL + "/as2", []string{fmt.Sprintf("tls: {ca_file: %q}", ca)}, pt
			},
			wantSteps: upTo(allTLS, probe.StepTLS), wantDetail: "alert", wantFix: []string{"tls.cert_file", "tls.key_file"},
		},
		{
			name: "HTTP 401",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusUnauthorized, http.Header{"Www-Authenticate": {`Basic realm="as2"`}}, "login")).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepHTTP), wantDetail: "HTTP 401", wantFix: []string{"auth.user", "auth.password_file"},
		},
		{
			name: "HTTP 500",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusInternalServerError, nil, "oops")).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepHTTP), wantDetail: "HTTP 500", wantFix: []string{"logs for Message-ID <"},
		},
		{
			name: "HTTP 302 is not followed",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusFound, http.Header{"Location": {"https://new.acme.example/as2"}}, "")).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepHTTP), wantDetail: "redirecting to https://new.acme.example/as2", wantFix: []string{"set url"},
		},
		{
			name: "no answer within the partner timeout",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				release := make(chan struct{})
				srv := serve(t, hang(release))
				t.Cleanup(func() { close(release) }) // before srv.Close: cleanups run last first
				return srv.URL + "/as2", []string{"timeout: 300ms"}, nil
			},
			wantSteps: upTo(all, probe.StepHTTP), wantDetail: "within the partner timeout 300ms", wantFix: []string{"raise timeout"},
		},
		{
			name: "200 with an empty body: no MDN",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusOK, nil, "")).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepMDN), wantDetail: "empty body", wantFix: []string{"synchronous MDN", "url"},
		},
		{
			name: "200 with a web page",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusOK, http.Header{"Content-Type": {"text/html"}}, "<html>welcome</html>")).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepMDN), wantDetail: "not an MDN", wantFix: []string{"check url"},
		},
		{
			name: "200 with an answer too large for an MDN",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				return serve(t, answer(http.StatusOK, http.Header{"Content-Type": {"application/octet-stream"}}, strings.Repeat("x", mdn.DefaultMaxMDNBytes+1))).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepMDN), wantDetail: fmt.Sprintf("more than %d bytes", mdn.DefaultMaxMDNBytes), wantFix: []string{"check url"},
		},
		{
			name: "an MDN that cannot be parsed",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				body := "--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b\r\nContent-Type: message/disposition-notification\r\n\r\n" +
					"Original-Message-ID: <x@y>\r\n\r\n--b--\r\n"
				return serve(t, answer(http.StatusOK, http.Header{"Content-Type": {`multipart/report; report-type=disposition-notification; boundary="b"`}}, body)).URL + "/as2", nil, nil
			},
			wantSteps: upTo(all, probe.StepMDN), wantDetail: "no Disposition field", wantFix: []string{"malformed MDN"},
		},
		{
			name: "MDN for another message",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, mdnAnswer{signer: k.A, messageID: "<someone-else@acme>"})
				return serve(t, pt).URL + "/as2", nil, pt
			},
			wantSteps: upTo(all, probe.StepMDN), wantDetail: `answers Original-Message-ID "<someone-else@acme>"`,
			wantFix: []string{"another message"}, wantLayers: []string{"encrypted", "signed"},
		},
		{
			name: "MDN signed by another key",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, mdnAnswer{signer: k.C})
				return serve(t, pt).URL + "/as2", nil, pt
			},
			wantSteps: upTo(all, probe.StepSignature), wantDetail: "does not verify with the partner certificate(s) serial " + k.A.Cert.SerialNumber.Text(16),
			wantFix: []string{"current certificate", "certificate in the partner profile"}, wantLayers: []string{"encrypted", "signed"},
		},
		{
			name: "unsigned MDN although a signed one was asked for",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, mdnAnswer{})
				return serve(t, pt).URL + "/as2", nil, pt
			},
			wantSteps: upTo(all, probe.StepSignature), wantDetail: "not signed", wantFix: []string{"sign its MDNs"}, wantLayers: []string{"encrypted", "signed"},
		},
		{
			name: "negative disposition: decryption-failed",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, mdnAnswer{signer: k.A, disposition: "processed/Error: decryption-failed"})
				return serve(t, pt).URL + "/as2", nil, pt
			},
			wantSteps: upTo(all, probe.StepDisposition), wantDetail: "processed/Error: decryption-failed",
			wantFix: []string{
				"serial " + k.A.Cert.SerialNumber.Text(16), "certificate in the partner profile", "key_encryption: rsa-pkcs1v15",
				"station certificate (serial " + k.B.Cert.SerialNumber.Text(16) + ")",
			},
			wantLayers: []string{"encrypted", "signed"},
		},
		{
			name: "MIC mismatch",
			setup: func(t *testing.T) (string, []string, *as2Partner) {
				pt := newAS2Partner(t, mdnAnswer{signer: k.A, mic: func(string) string { return wrongMIC }})
				return serve(t, pt).URL + "/as2", []string{"compress: true"}, pt
			},
			wantSteps: upTo(all, probe.StepMIC), wantDetail: "MIC mismatch",
			wantFix: []string{"compress_order: after-signing", "transfer_encoding: base64"}, wantLayers: []string{"encrypted", "signed", "compressed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, profile, pt := tt.setup(t)
			r := run(t, loadPartner(t, url, profile...))
			t.Logf("report:\n%s", r.Text())

			var names []string
			for _, s := range r.Steps {
				names = append(names, s.Name)
			}
			if strings.Join(names, " ") != strings.Join(tt.wantSteps, " ") {
				t.Fatalf("steps %v, want %v", names, tt.wantSteps)
			}
			for _, s := range r.Steps[:len(r.Steps)-1] {
				if !s.OK {
					t.Errorf("step %s failed before the last one: %s", s.Name, s.Detail)
				}
			}
			last := r.Steps[len(r.Steps)-1]
			wantOK := tt.wantFix == nil
			if last.OK != wantOK || r.OK != wantOK {
				t.Fatalf("last step %s OK %v, report OK %v; want %v", last.Name, last.OK, r.OK, wantOK)
			}
			if !strings.Contains(last.Detail, tt.wantDetail) {
				t.Errorf("%s detail %q, want it to contain %q", last.Name, last.Detail, tt.wantDetail)
			}
			if !wantOK && last.Fix == "" {
				t.Errorf("%s failed without a fix", last.Name)
			}
			for _, f := range tt.wantFix {
				if !strings.Contains(last.Fix, f) {
					t.Errorf("%s fix %q, want it to contain %q", last.Name, last.Fix, f)
				}
			}
			if wantOK && last.Fix != "" {
				t.Errorf("%s succeeded with a fix %q", last.Name, last.Fix)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
			if tt.wantNote != "" && !strings.Contains(strings.Join(r.Notes, "\n"), tt.wantNote) {
				t.Errorf("notes %q, want one containing %q", r.Notes, tt.wantNote)
			}
			if r.Partner != partnerID || r.URL != url {
				t.Errorf("report for %q at %q, want %q at %q", r.Partner, r.URL, partnerID, url)
			}

			var got []received
			if pt != nil {
				got = pt.received()
			}
			if tt.wantLayers == nil {
				if len(got) != 0 {
					t.Fatalf("the openssl partner unpacked %d requests, want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("the openssl partner unpacked %d requests, want 1", len(got))
			}
			rec := got[0]
			if strings.Join(rec.layers, " ") != strings.Join(tt.wantLayers, " ") {
				t.Errorf("partner took off layers %v, want %v", rec.layers, tt.wantLayers)
			}
			if !strings.Contains(string(rec.payload), "edihub connectivity test") {
				t.Errorf("partner got payload %q, want the test document", rec.payload)
			}
			if got := rec.header.Get("Message-ID"); got != r.MessageID || got == "" {
				t.Errorf("request Message-ID %q, report's %q", got, r.MessageID)
			}
			if !strings.Contains(rec.header.Get("Disposition-Notification-Options"), "signed-receipt-micalg=optional, sha-256") || rec.header.Get("Disposition-Notification-To") == "" {
				t.Errorf("request asks for MDN %q / %q, want a signed one", rec.header.Get("Disposition-Notification-To"), rec.header.Get("Disposition-Notification-Options"))
			}
			if v, async := rec.header["Receipt-Delivery-Option"]; async {
				t.Errorf("request asks for an async MDN to %q, want a synchronous one", v)
			}
			if wantOK {
				// The MIC edihub computed (and the MDN returned) is
				// openssl's digest of what the partner received.
				if mic := r.Step(probe.StepMIC); !strings.Contains(mic.Detail, rec.mic+", sha-256") {
					t.Errorf("mic step %q, want openssl's digest %q", mic.Detail, rec.mic)
				}
			}
		})
	}
}

// TestRunKeepsSecretsOut: the report of a partner with a password in its
// URL, basic auth and an extra header field holds none of them, in JSON or
// as text, and shows the URL redacted.
func TestRunKeepsSecretsOut(t *testing.T) {
	srv := serve(t, answer(http.StatusUnauthorized, http.Header{"Www-Authenticate": {`Basic realm="as2"`}}, "no"))
	url := strings.Replace(srv.URL, "http://", "http://edi:url-password-1@", 1) + "/as2"
	pwFile := writeFile(t, "password", []byte("file-password-2\n"))
	cfg := loadPartner(t, url, fmt.Sprintf("auth: {user: edi-user, password_file: %q}", pwFile), `headers: {X-Api-Key: "header-secret-3"}`)
	r := run(t, cfg)
	if f := r.Failed(); f == nil || f.Name != probe.StepHTTP {
		t.Fatalf("failed step %+v, want http (HTTP 401)", f)
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(j), r.Text()} {
		for _, secret := range []string{"url-password-1", "file-password-2", "header-secret-3", "edi-user"} {
			if strings.Contains(out, secret) {
				t.Errorf("report holds %q:\n%s", secret, out)
			}
		}
	}
	if want := strings.Replace(url, "url-password-1", "xxxxx", 1); r.URL != want {
		t.Errorf("report URL %q, want %q", r.URL, want)
	}
}

// TestRunCancelled: cancelling the context ends the test at once with a
// failed step, well before the partner's timeout.
func TestRunCancelled(t *testing.T) {
	release := make(chan struct{})
	srv := serve(t, hang(release))
	defer close(release)
	cfg := loadPartner(t, srv.URL+"/as2", "timeout: 30s")
	p, _ := cfg.Partner(partnerID)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := probe.Run(ctx, probe.Options{Station: cfg.Station, Partner: p})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %s after cancellation", d)
	}
	f := r.Failed()
	if r.OK || f == nil || f.Name != probe.StepHTTP || !strings.Contains(f.Detail, "cancelled") {
		t.Fatalf("report OK %v, failed step %+v; want http cancelled", r.OK, f)
	}
}
