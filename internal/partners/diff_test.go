package partners_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/testenv/devpki"
)

// spec decodes one partner entry written in YAML.
func spec(t testing.TB, text string) *config.PartnerSpec {
	t.Helper()
	s, err := config.DecodeSpec("test", text)
	if err != nil {
		t.Fatalf("DecodeSpec(%q): %v", text, err)
	}
	return &s
}

// withCert is s with its certificate written inline.
func withCert(s *config.PartnerSpec, pem []byte) *config.PartnerSpec {
	c := *s
	c.Certificate = string(pem)
	return &c
}

// TestDiff: one line per key that differs, in key order, nested keys
// dotted; a certificate renewal is one line naming both certificates
// without their PEM; equal profiles give "".
func TestDiff(t *testing.T) {
	identities(t)
	renewed, err := devpki.New("ACME CORP", devpki.Options{NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(3, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	const base = "as2_id: A\nurl: https://a.example/as2\n"
	oldCert, newCert := acmeID.CertPEM(), renewed.CertPEM()
	withOld := withCert(spec(t, base), oldCert)
	tests := []struct {
		name     string
		old, new *config.PartnerSpec
		want     string
	}{
		{"equal", spec(t, base+"sign: sha-256\n"), spec(t, base+"sign: sha-256\n"), ""},
		{"equal with certificates", withOld, withCert(spec(t, base), oldCert), ""},
		{"both nil", nil, nil, ""},
		{"added", spec(t, base), spec(t, base+"sign: sha-256\n"), "+ sign: \"sha-256\"\n"},
		{"removed", spec(t, base+"sign: sha-256\n"), spec(t, base), "- sign: \"sha-256\"\n"},
		{"changed", spec(t, base), spec(t, "as2_id: A\nurl: https://b.example/as2\n"), "~ url: \"https://a.example/as2\" → \"https://b.example/as2\"\n"},
		{"bool and number", spec(t, base+"max_attempts: 3\n"), spec(t, base+"compress: true\nmax_attempts: 5\n"), "+ compress: true\n~ max_attempts: 3 → 5\n"},
		{"list", spec(t, base+"mdn_hosts: [a.example]\n"), spec(t, base+"mdn_hosts: [a.example, b.example]\n"), "~ mdn_hosts: [a.example] → [a.example, b.example]\n"},
		{
			"nested keys in key order",
			spec(t, base+"headers: {X-Partner-Key: k1, X-Gone: g}\n"),
			spec(t, base+"auth: {user: edi, password_file: acme.pw}\nheaders: {X-Partner-Key: k2}\ntls: {ca_file: ca.pem}\n"),
			"+ auth.password_file: \"acme.pw\"\n+ auth.user: \"edi\"\n- headers.X-Gone: \"g\"\n~ headers.X-Partner-Key: \"k1\" → \"k2\"\n+ tls.ca_file: \"ca.pem\"\n",
		},
		{"create", nil, spec(t, base+"sign: sha-256\n"), "+ as2_id: \"A\"\n+ sign: \"sha-256\"\n+ url: \"https://a.example/as2\"\n"},
		{"delete", spec(t, base), nil, "- as2_id: \"A\"\n- url: \"https://a.example/as2\"\n"},
		{
			"certificate renewal",
			withOld, withCert(spec(t, base), newCert),
			"~ certificate: " + partners.DescribePEM(string(oldCert)) + " → " + partners.DescribePEM(string(newCert)) + "\n",
		},
		{
			"certificate added for rollover",
			withOld, withCert(spec(t, base), append(append([]byte{}, oldCert...), newCert...)),
			"~ certificate: " + partners.DescribePEM(string(oldCert)) + " → " + partners.DescribePEM(string(oldCert)+string(newCert)) + "\n",
		},
	}
	for _, tt := range tests {
		got := partners.Diff(tt.old, tt.new)
		if got != tt.want {
			t.Errorf("%s: Diff = %q, want %q", tt.name, got, tt.want)
		}
		if strings.Contains(got, "BEGIN") || strings.Contains(got, "MII") {
			t.Errorf("%s: Diff = %q holds PEM text", tt.name, got)
		}
	}
}

// TestDescribePEM: each certificate is named by its subject, serial,
// expiry and fingerprint; PEM that holds no certificate says so.
func TestDescribePEM(t *testing.T) {
	identities(t)
	describe := func(id *devpki.Identity) string {
		sum := sha256.Sum256(id.Cert.Raw)
		return `certificate "` + id.Cert.Subject.CommonName + `" serial ` + id.Cert.SerialNumber.Text(16) +
			" until " + id.Cert.NotAfter.UTC().Format("2006-01-02") + " sha256:" + hex.EncodeToString(sum[:8])
	}
	keyOnly := string(stationID.KeyPEM())
	tests := []struct {
		name, give, want string
	}{
		{"one certificate", string(acmeID.CertPEM()), "[" + describe(acmeID) + "]"},
		{"a bundle", string(acmeID.CertPEM()) + string(betaID.CertPEM()), "[" + describe(acmeID) + "; " + describe(betaID) + "]"},
		{"not a certificate", keyOnly, "[PRIVATE KEY]"},
		{"no PEM", "-----BEGIN CERTIFICATE-----\nnot base64\n", "(PEM without a certificate)"},
	}
	for _, tt := range tests {
		if got := partners.DescribePEM(tt.give); got != tt.want {
			t.Errorf("%s: DescribePEM = %q, want %q", tt.name, got, tt.want)
		}
	}
}
