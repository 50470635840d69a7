package outbox_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// tlsPartner is a partner on a real TLS listener that requires a client
// certificate issued by clientCA.
func tlsPartner(t *testing.T, clientCA *x509.Certificate) (srv *httptest.Server, caFile string, got func() (cn, header string, n int)) {
	t.Helper()
	var mu sync.Mutex
	var cn, hdr string
	var n int
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		hdr = r.Header.Get("X-Partner-Key")
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(clientCA)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "partner-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, caFile, func() (string, string, int) {
		mu.Lock()
		defer mu.Unlock()
		return cn, hdr, n
	}
}

// connectProxy is a minimal HTTP CONNECT proxy counting its tunnels.
func connectProxy(t *testing.T) (url string, tunnels *atomic.Int64) {
	t.Helper()
	tunnels = &atomic.Int64{}
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		tunnels.Add(1)
		// Hijack first, answer on the raw connection, and read the
		// tunnel through the server's buffered reader: a 200 written
		// before Hijack reaches the client before the server stops its
		// background read, which can then take the first byte of the
		// ClientHello into that reader (dropping it ended 1 run in 5
		// with "EOF").
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			conn.Close()
			up.Close()
			return
		}
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(up, brw.Reader); up.Close() }()
		go func() { defer wg.Done(); _, _ = io.Copy(conn, up); conn.Close() }()
	}))
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return srv.URL, tunnels
}

// TestDispatchHTTPS posts to a partner on a real TLS listener that
// requires a client certificate: with the partner's CA bundle, our client
// certificate and key, an extra header and a proxy the message is sent
// (through the proxy, with the header, as our certificate's subject);
// without the CA bundle (unknown authority) or without the client
// certificate it fails.
func TestDispatchHTTPS(t *testing.T) {
	k := keys(t)
	client := k["other"] // our client certificate, trusted by the partner
	srv, caFile, got := tlsPartner(t, client.cert)
	proxy, tunnels := connectProxy(t)
	tests := []struct {
		name     string
		profile  []string
		want     string
		wantErr  string
		viaProxy bool
	}{
		{"CA, client certificate, header, proxy", []string{
			fmt.Sprintf("tls: {ca_file: %q, cert_file: %q, key_file: %q}", caFile, client.certPath, client.keyPath),
			`headers: {X-Partner-Key: "k-123"}`, fmt.Sprintf("proxy: %q", proxy),
		}, "sent", "", true},
		{"unknown CA", []string{fmt.Sprintf("tls: {cert_file: %q, key_file: %q}", client.certPath, client.keyPath)}, "failed", "certificate", false},
		{"no client certificate", []string{fmt.Sprintf("tls: {ca_file: %q}", caFile)}, "failed", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: srv.URL + "/as2", extra: append([]string{"mdn: none", "max_attempts: 1"}, tt.profile...)})
			_, _, before := got()
			tunnelsBefore := tunnels.Load()
			q := enqueue(t, st, cfg, partnerID, []byte("over TLS"), "application/EDIFACT", "")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "sent", "failed")
			cn, hdr, n := got()
			if m.Status != tt.want || !strings.Contains(m.Error, tt.wantErr) {
				t.Fatalf("status %q (error %q), want %q with %q", m.Status, m.Error, tt.want, tt.wantErr)
			}
			if tt.want == "sent" && (n != before+1 || cn != "as2-other" || hdr != "k-123") {
				t.Errorf("partner saw %d requests, client certificate %q, X-Partner-Key %q", n-before, cn, hdr)
			}
			if tt.want == "failed" && n != before {
				t.Errorf("the partner's handler ran without a valid handshake")
			}
			if tt.viaProxy && tunnels.Load() != tunnelsBefore+1 {
				t.Errorf("%d proxy tunnels, want 1", tunnels.Load()-tunnelsBefore)
			}
			t.Logf("error: %s", m.Error)
		})
	}
}
