package outbox_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/pgtest"
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
			if features != "AS2-Reliability, AS2-Restart" {
				t.Errorf("EDIINT-Features = %q, want %q", features, "AS2-Reliability, AS2-Restart")
			}
		})
	}
}

// TestDispatchMICInOtherAlgorithm: a partner may return the MIC in another
// supported algorithm than the one asked for. The MIC is then checked
// against the one computed in that algorithm when the message was built,
// which is the only way for an encrypted message (its MIC covers the
// content before encryption, which is not stored). The partner is openssl:
// it decrypts, verifies and digests what the MIC covers with sha-384 or
// sha-1 while sha-256 was asked for.
func TestDispatchMICInOtherAlgorithm(t *testing.T) {
	t.Parallel()
	payload := []byte("ISA*00*other-mic-algorithm~\n")
	for _, tt := range []struct {
		name    string
		profile []string
		alg     string
		wrong   bool
		// retried: the first attempt gets a 503, so the second judges the
		// MDN with the MICs read back from the outbox row.
		retried bool
	}{
		{"signed, encrypted, sha-384", []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn_signed: true"}, "sha-384", false, false},
		{"signed, encrypted, sha-1", []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn_signed: true"}, "sha-1", false, false},
		{"encrypted, unsigned, sha-512", []string{"sign: none", "encrypt: aes128-cbc", "mdn_signed: true"}, "sha-512", false, false},
		{"signed, compressed, encrypted, sha-384", []string{"sign: sha-256", "encrypt: aes256-cbc", "compress: true", "mdn_signed: true"}, "sha-384", false, false},
		{"signed, encrypted, sha-512, second attempt", []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn_signed: true"}, "sha-512", false, true},
		{"signed, encrypted, wrong sha-384", []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn_signed: true"}, "sha-384", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t)
			var returned string
			partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) {
				if tt.retried && n == 1 {
					return http.StatusServiceUnavailable, nil, nil
				}
				u := opensslUnpack(t, r, "sha-256")
				covered := u.covered
				if tt.wrong {
					covered = append(bytes.Clone(covered), 'x')
				}
				returned = opensslMIC(t, t.TempDir(), covered, tt.alg) + ", " + tt.alg
				return signedMDN(t, r, mdn.Processed(), returned, keys(t)["partner"])
			})
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: append([]string{"mdn: sync"}, tt.profile...)})
			q := enqueue(t, st, cfg, partnerID, payload, "application/EDI-X12", "")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if tt.wrong {
				if m.Status != "failed" || !strings.Contains(m.Error, "MIC mismatch") {
					t.Errorf("status %q (error %q), want failed: MIC mismatch", m.Status, m.Error)
				}
				return
			}
			if m.Status != "delivered" || m.MICVerified == nil || !*m.MICVerified {
				t.Errorf("status %q (error %q), mic_verified %v; want delivered with the %s MIC %q verified", m.Status, m.Error, m.MICVerified, tt.alg, returned)
			}
			if tt.retried && m.Attempts != 2 {
				t.Errorf("attempts = %d, want 2 (a 503, then the MDN)", m.Attempts)
			}
			if !strings.HasSuffix(m.MIC, ", sha-256") {
				t.Errorf("stored MIC %q, want the sha-256 one asked for", m.MIC)
			}
		})
	}
}
