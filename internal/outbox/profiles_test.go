package outbox_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDispatchPartnerProfiles sends a document to a partner configured
// with each partner profile (config.Profiles) and lets openssl take the
// request apart as that peer would: it must decrypt, verify and digest
// it, the MIC edihub stored must equal openssl's, and the wire must show
// what the profile is for.
func TestDispatchPartnerProfiles(t *testing.T) {
	binary := func(t *testing.T, r request, u unpacked) {
		t.Helper()
		if te := r.header.Get("Content-Transfer-Encoding"); te != "" || u.payloadCTE != "binary" {
			t.Errorf("Content-Transfer-Encoding: HTTP %q, payload %q; want none and binary", te, u.payloadCTE)
		}
	}
	tests := []struct {
		profile    string
		lines      []string
		wantLayers []string
		check      func(t *testing.T, r request, u unpacked)
	}{
		{
			// Sterling rejects the RFC 6211 attribute: openssl lists the
			// signed attributes, and it is not among them.
			profile: "sterling", lines: []string{"sign: sha-256", "encrypt: aes256-cbc"}, wantLayers: []string{"encrypted", "signed"},
			check: func(t *testing.T, r request, u unpacked) {
				p := filepath.Join(t.TempDir(), "sig.der")
				if err := os.WriteFile(p, u.signature, 0o600); err != nil {
					t.Fatal(err)
				}
				out := opensslRun(t, nil, "cms", "-cmsout", "-print", "-inform", "DER", "-in", p)
				if !bytes.Contains(out, []byte("messageDigest")) {
					t.Fatalf("openssl printed no signed attributes:\n%s", out)
				}
				if bytes.Contains(out, []byte("CMSAlgorithmProtection")) || bytes.Contains(out, []byte("1.2.840.113549.1.9.52")) {
					t.Errorf("signature carries the RFC 6211 algorithm protection attribute:\n%s", out)
				}
			},
		},
		{
			// BizTalk: compressed before signing, inside the encryption.
			profile: "biztalk", lines: []string{"sign: sha-256", "encrypt: aes256-cbc"}, wantLayers: []string{"encrypted", "signed", "compressed"},
		},
		{
			// Older Seeburger: micalg in the RFC 3851 spelling.
			profile: "seeburger", lines: []string{"sign: sha-256"}, wantLayers: []string{"signed"},
			check: func(t *testing.T, r request, u unpacked) {
				if u.micalgParam != "sha256" {
					t.Errorf("micalg = %q, want sha256", u.micalgParam)
				}
			},
		},
		{profile: "openas2", lines: []string{"sign: sha-256"}, wantLayers: []string{"signed"}, check: binary},
		{profile: "mendelson", lines: []string{"sign: sha-256", "encrypt: aes128-cbc"}, wantLayers: []string{"encrypted", "signed"}, check: binary},
		{profile: "amazon-vendor-central", lines: []string{"sign: sha-256", "encrypt: aes256-cbc"}, wantLayers: []string{"encrypted", "signed"}, check: binary},
	}
	var names []string
	for _, tt := range tests {
		names = append(names, tt.profile)
	}
	var all []string
	for _, p := range config.Profiles() {
		all = append(all, p.Name)
	}
	if diff := cmp.Diff(all, names); diff != "" {
		t.Errorf("profiles without a case here (-profiles +cases):\n%s", diff)
	}
	payload := []byte("UNA:+.? 'UNB+UNOC:3+EDIHUB+ACME+260101:1200+1'\nbare LF\r\nCRLF and a trailing space \n")
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			t.Parallel()
			k := keys(t)
			st := pgtest.Store(t)
			var got unpacked
			partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) {
				got = opensslUnpack(t, r, "sha-256")
				return signedMDN(t, r, mdn.Processed(), got.mic+", "+got.micAlg, k["partner"])
			})
			lines := append([]string{"profile: " + tt.profile, "mdn: sync", "mdn_signed: true"}, tt.lines...)
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: lines})
			q := enqueue(t, st, cfg, partnerID, payload, "application/EDIFACT", "orders.edi")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if m.Status != "delivered" {
				t.Fatalf("status %q (error %q), want delivered", m.Status, m.Error)
			}
			reqs := partner.requests()
			if len(reqs) != 1 {
				t.Fatalf("partner got %d requests, want 1", len(reqs))
			}
			if !bytes.Equal(got.payload, payload) {
				t.Errorf("payload at the partner = %q, want %q", got.payload, payload)
			}
			if diff := cmp.Diff(tt.wantLayers, got.layers); diff != "" {
				t.Errorf("layers (-want +got):\n%s", diff)
			}
			if want := got.mic + ", " + got.micAlg; m.MIC != want {
				t.Errorf("stored MIC = %q, openssl computed %q", m.MIC, want)
			}
			if tt.check != nil {
				tt.check(t, reqs[0], got)
			}
		})
	}
}
