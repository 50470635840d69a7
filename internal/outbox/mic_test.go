package outbox_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres/pgtest"
)

// TestDispatchUnsignedMIC: the MIC kept for an unsigned, unencrypted
// message is openssl's digest of the content alone (RFC 4130 §7.3.1),
// and a partner returning that MIC gets the message delivered; with
// mic_include_headers it is the digest of the entity rebuilt from the
// header fields sent. The request carries EDIINT-Features.
func TestDispatchUnsignedMIC(t *testing.T) {
	payload := []byte("UNB+UNOA:2+EDIHUB+ACME'\nUNZ+1'\n")
	for _, tt := range []struct {
		name    string
		profile []string
		headers bool
	}{
		{"content only", nil, false},
		{"mic_include_headers", []string{"mic_include_headers: true"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			var want, features string
			partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) {
				features = r.header.Get("EDIINT-Features")
				b := payload
				if tt.headers {
					b = nil
					for _, name := range []string{"Content-Type", "Content-Transfer-Encoding", "Content-Disposition"} {
						if v := r.header.Get(name); v != "" {
							b = fmt.Appendf(b, "%s: %s\r\n", name, v)
						}
					}
					b = append(append(b, "\r\n"...), r.body...)
				}
				want = opensslMIC(t, t.TempDir(), b, "sha-256") + ", sha-256"
				return signedMDN(t, r, mdn.Processed(), want, nil)
			})
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: append([]string{"mdn: sync"}, tt.profile...)})
			q := enqueue(t, st, cfg, partnerID, payload, "application/EDIFACT", "")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if m.Status != "delivered" || m.MIC != want {
				t.Errorf("status %q (error %q), MIC %q; want delivered with openssl's %q", m.Status, m.Error, m.MIC, want)
			}
			// EDIINT-Features names only what edihub supports.
			if features != "AS2-Reliability" {
				t.Errorf("EDIINT-Features = %q, want %q", features, "AS2-Reliability")
			}
		})
	}
}
