package mdn_test

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// counter is a deterministic Rand: 0, 1, 2, ...
type counter struct{ n byte }

func (c *counter) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = c.n
		c.n++
	}
	return len(p), nil
}

// The golden files' key pair lives in testdata; it signs nothing else.
func testKey(t testing.TB) (crypto.Signer, *x509.Certificate) {
	t.Helper()
	kp, err := os.ReadFile("testdata/test-station.key")
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(kp)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile("testdata/test-station.crt")
	if err != nil {
		t.Fatal(err)
	}
	blk, _ = pem.Decode(cp)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(crypto.Signer), c
}

var goldenReport = mdn.Report{
	ReportingUA:       "edihub test",
	OriginalRecipient: "EDIHUB HUB",
	FinalRecipient:    "EDIHUB HUB",
	OriginalMessageID: "<order-1@acme.example>",
	Disposition:       mdn.Processed(),
	MIC:               "7NoB8u3GzlqLoJu1pNLfs4lEnkxmzMyvVCvaxyb9Wsg=, sha-256",
}

// wire renders header and body as the golden file stores them.
func wire(h http.Header, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("Content-Type: " + h.Get("Content-Type") + "\r\nMIME-Version: " + h.Get("Mime-Version") + "\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}

func TestBuildGolden(t *testing.T) {
	key, cert := testKey(t)
	errReport := goldenReport
	errReport.Disposition, errReport.MIC = mdn.Errored("decryption-failed"), ""
	tests := []struct {
		name string
		give mdn.Report
		opts mdn.BuildOptions
	}{
		{"unsigned", goldenReport, mdn.BuildOptions{}},
		{"signed-sha256", goldenReport, mdn.BuildOptions{Sign: true, MICAlg: crypto.SHA256, Key: key, Cert: cert}},
		{"signed-sha1-error", errReport, mdn.BuildOptions{Sign: true, MICAlg: crypto.SHA1, Key: key, Cert: cert}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Rand, o.Time = &counter{}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			h, body, err := mdn.Build(tt.give, o)
			if err != nil {
				t.Fatal(err)
			}
			got := wire(h, body)
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/mdn -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Build() differs from %s (-want +got):\n%s", path, cmp.Diff(string(want), string(got)))
			}
			if bytes.Contains(bytes.ReplaceAll(got, []byte("\r\n"), nil), []byte("\n")) {
				t.Errorf("Build() has bare LF line ends")
			}
			m, err := mdn.Parse(h, body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{cert}, RequireSigned: o.Sign})
			if err != nil {
				t.Fatalf("Parse(Build()) error = %v", err)
			}
			want2 := tt.give
			want2.Text = m.Text
			if diff := cmp.Diff(want2, m.Report); diff != "" {
				t.Errorf("Parse(Build()) report (-want +got):\n%s", diff)
			}
			if m.Signed != o.Sign || (o.Sign && !m.Signer.Equal(cert)) {
				t.Errorf("Parse(Build()) signed %v signer %v", m.Signed, m.Signer != nil)
			}
			if !mdn.IsMDN(h, body) {
				t.Errorf("IsMDN(Build()) = false")
			}
		})
	}
}

// TestSignedMDNOpenSSL has openssl verify a signed MDN, split per RFC 2046,
// and also whole (our first part ends in CRLF, so cms -verify on the MIME
// works too).
func TestSignedMDNOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl is required on PATH: %v", err)
	}
	key, cert := testKey(t)
	for _, alg := range []crypto.Hash{crypto.SHA1, crypto.SHA256, crypto.SHA384, crypto.SHA512} {
		t.Run(as2.MICAlgName(alg), func(t *testing.T) {
			h, body, err := mdn.Build(goldenReport, mdn.BuildOptions{Sign: true, MICAlg: alg, Key: key, Cert: cert, AlgorithmProtection: alg == crypto.SHA512})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(h.Get("Content-Type"), "micalg="+as2.MICAlgName(alg)) {
				t.Errorf("Content-Type = %q", h.Get("Content-Type"))
			}
			dir := t.TempDir()
			top, err := as2.ParseEntity(wire(h, body), as2.Limits{})
			if err != nil || len(top.Parts) != 2 {
				t.Fatalf("split: %v", err)
			}
			sig, _ := top.Parts[1].DecodedBody()
			write := func(name string, b []byte) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			for _, args := range [][]string{
				{"cms", "-verify", "-inform", "DER", "-in", write("sig.der", sig), "-content", write("part1", top.Parts[0].Raw), "-binary"},
				{"cms", "-verify", "-in", write("whole.mime", wire(h, body))},
			} {
				args = append(args, "-CAfile", "testdata/test-station.crt", "-purpose", "any", "-out", filepath.Join(dir, "out"))
				if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
					t.Errorf("openssl %v: %v\n%s", args, err, out)
				}
			}
		})
	}
}

func TestParseLenient(t *testing.T) {
	report := func(fields string) (http.Header, []byte) {
		body := "--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b\r\nContent-Type: message/disposition-notification\r\n\r\n" + fields + "\r\n--b--\r\n"
		return http.Header{"Content-Type": {`multipart/report; report-type=disposition-notification; boundary="b"`}}, []byte(body)
	}
	tests := []struct {
		name   string
		fields string
		want   mdn.Report
	}{
		{
			name:   "canonical",
			fields: "Reporting-UA: x\r\nOriginal-Recipient: rfc822; EDIHUB\r\nFinal-Recipient: rfc822; EDIHUB\r\nOriginal-Message-ID: <a@b>\r\nDisposition: automatic-action/MDN-sent-automatically; processed\r\nReceived-content-MIC: abc=, sha-256\r\n",
			want:   mdn.Report{ReportingUA: "x", OriginalRecipient: "EDIHUB", FinalRecipient: "EDIHUB", OriginalMessageID: "<a@b>", Disposition: mdn.Processed(), MIC: "abc=, sha-256"},
		},
		{
			name:   "lower-case names, no spaces, ;processed",
			fields: "original-message-id:<a@b>\r\ndisposition:automatic-action/MDN-sent-automatically;processed\r\nreceived-content-mic:abc=,sha-256\r\nfinal-recipient:rfc822;\"ACME CORP\"\r\n",
			want:   mdn.Report{OriginalMessageID: "<a@b>", Disposition: mdn.Processed(), MIC: "abc=,sha-256", FinalRecipient: `"ACME CORP"`},
		},
		{
			name:   "historic lower-case error, folded",
			fields: "Original-Message-ID: <a@b>\r\nDISPOSITION: automatic-action/mdn-sent-automatically;\r\n  PROCESSED/error: decryption-failed\r\n",
			want: mdn.Report{OriginalMessageID: "<a@b>", Disposition: mdn.Disposition{
				Action: "automatic-action", Sending: "mdn-sent-automatically", Type: "processed", Modifier: "Error: decryption-failed"}},
		},
		{
			name:   "LF line ends",
			fields: "Original-Message-ID: <a@b>\nDisposition: automatic-action/MDN-sent-automatically; processed/Warning: duplicate-document\n",
			want:   mdn.Report{OriginalMessageID: "<a@b>", Disposition: mdn.Warned("duplicate-document")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, body := report(tt.fields)
			got, err := mdn.Parse(h, body, mdn.ParseOptions{})
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			tt.want.Text = "hello"
			if diff := cmp.Diff(tt.want, got.Report); diff != "" {
				t.Errorf("Parse() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	key, cert := testKey(t)
	signedH, signedB, err := mdn.Build(goldenReport, mdn.BuildOptions{Sign: true, Key: key, Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	unsignedH, unsignedB, _ := mdn.Build(goldenReport, mdn.BuildOptions{})
	tampered := bytes.Replace(signedB, []byte("Original-Message-ID: <order-1"), []byte("Original-Message-ID: <order-2"), 1)
	tests := []struct {
		name string
		h    http.Header
		body []byte
		o    mdn.ParseOptions
		want error
	}{
		{"tampered", signedH, tampered, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{cert}}, mdn.ErrSignature},
		{"no certificates", signedH, signedB, mdn.ParseOptions{}, mdn.ErrSignature},
		{"unsigned but required", unsignedH, unsignedB, mdn.ParseOptions{RequireSigned: true}, mdn.ErrUnsigned},
		{"not an MDN", http.Header{"Content-Type": {"application/edi-x12"}}, []byte("ISA*"), mdn.ParseOptions{}, mdn.ErrNotMDN},
		{"no Content-Type", http.Header{}, unsignedB, mdn.ParseOptions{}, mdn.ErrNotMDN},
		{"delivery status report", http.Header{"Content-Type": {strings.Replace(unsignedH.Get("Content-Type"), "disposition-notification", "delivery-status", 1)}}, unsignedB, mdn.ParseOptions{}, mdn.ErrNotMDN},
		{"no Disposition", http.Header{"Content-Type": {`multipart/report; report-type=disposition-notification; boundary=b`}},
			[]byte("--b\r\nContent-Type: message/disposition-notification\r\n\r\nOriginal-Message-ID: <a@b>\r\n\r\n--b--\r\n"), mdn.ParseOptions{}, mdn.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := mdn.Parse(tt.h, tt.body, tt.o); !errors.Is(err, tt.want) {
				t.Errorf("Parse() error = %v, want %v", err, tt.want)
			}
		})
	}
	// Unverified skips the signature.
	m, err := mdn.Parse(signedH, tampered, mdn.ParseOptions{Unverified: true})
	if err != nil || m.OriginalMessageID != "<order-2@acme.example>" || m.Signer != nil {
		t.Errorf("Parse(Unverified) = %v, %v", m, err)
	}
}

func TestParseDisposition(t *testing.T) {
	tests := []struct {
		give       string
		want       mdn.Disposition
		successful bool
	}{
		{"automatic-action/MDN-sent-automatically; processed", mdn.Processed(), true},
		{"automatic-action/MDN-sent-automatically;processed", mdn.Processed(), true},
		{"  automatic-action / MDN-sent-automatically ;  Processed ", mdn.Processed(), true},
		{"automatic-action/MDN-sent-automatically; processed/Error: decryption-failed", mdn.Errored("decryption-failed"), false},
		{"automatic-action/MDN-sent-automatically; processed/error:decryption-failed", mdn.Errored("decryption-failed"), false},
		{"automatic-action/MDN-sent-automatically; processed/decryption-failed", mdn.Errored("decryption-failed"), false},
		{"automatic-action/MDN-sent-automatically; processed/warning: duplicate-document", mdn.Warned("duplicate-document"), true},
		{"automatic-action/MDN-sent-automatically; failed/Failure: unsupported MIC-algorithms", mdn.Failed("unsupported MIC-algorithms"), false},
		{"manual-action/MDN-sent-manually; deleted", mdn.Disposition{Action: "manual-action", Sending: "MDN-sent-manually", Type: "deleted"}, false},
	}
	for _, tt := range tests {
		got, err := mdn.ParseDisposition(tt.give)
		if err != nil {
			t.Errorf("ParseDisposition(%q) error = %v", tt.give, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseDisposition(%q) = %#v, want %#v", tt.give, got, tt.want)
		}
		if got.Successful() != tt.successful {
			t.Errorf("ParseDisposition(%q).Successful() = %v, want %v", tt.give, got.Successful(), tt.successful)
		}
	}
	for _, bad := range []string{"", "processed", "; processed", "automatic-action/MDN-sent-automatically;"} {
		if _, err := mdn.ParseDisposition(bad); !errors.Is(err, mdn.ErrMalformedDisposition) {
			t.Errorf("ParseDisposition(%q) error = %v, want ErrMalformedDisposition", bad, err)
		}
	}
	if s := mdn.Errored("decryption-failed").String(); s != "automatic-action/MDN-sent-automatically; processed/Error: decryption-failed" {
		t.Errorf("String() = %q", s)
	}
}

func TestIsMDN(t *testing.T) {
	key, cert := testKey(t)
	sh, sb, _ := mdn.Build(goldenReport, mdn.BuildOptions{Sign: true, Key: key, Cert: cert})
	uh, ub, _ := mdn.Build(goldenReport, mdn.BuildOptions{})
	ct := func(v string) http.Header { return http.Header{"Content-Type": {v}} }
	signedPayload := "--b\r\nContent-Type: application/EDI-X12\r\n\r\nISA*\r\n--b\r\nContent-Type: application/pkcs7-signature\r\n\r\nxx\r\n--b--\r\n"
	tests := []struct {
		name string
		h    http.Header
		body string
		want bool
	}{
		{"unsigned MDN", uh, string(ub), true},
		{"signed MDN", sh, string(sb), true},
		{"report type in capitals", ct(`Multipart/Report; Report-Type="Disposition-Notification"; boundary=b`), "", true},
		{"other report", ct("multipart/report; report-type=delivery-status; boundary=b"), "", false},
		{"signed payload", ct(`multipart/signed; protocol="application/pkcs7-signature"; boundary="b"`), signedPayload, false},
		{"signed report, folded Content-Type", ct(`multipart/signed; boundary=b`),
			"preamble\r\n--b\r\nContent-Type: multipart/report;\r\n\treport-type=disposition-notification; boundary=c\r\n\r\n--c--\r\n--b--", true},
		{"signed without boundary", ct("multipart/signed"), string(sb), false},
		{"encrypted message", ct("application/pkcs7-mime; smime-type=enveloped-data"), "\x30\x80", false},
		{"no Content-Type", http.Header{}, string(ub), false},
	}
	for _, tt := range tests {
		if got := mdn.IsMDN(tt.h, []byte(tt.body)); got != tt.want {
			t.Errorf("IsMDN(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMICMatches(t *testing.T) {
	want := as2.ComputeMIC(crypto.SHA256, []byte("hello"))
	tests := []struct {
		give string
		want bool
	}{
		{want.String(), true},
		{strings.ReplaceAll(want.String(), ", ", ","), true},
		{strings.TrimRight(strings.Split(want.String(), ",")[0], "=") + ", SHA256", true},
		{as2.ComputeMIC(crypto.SHA256, []byte("hellO")).String(), false},
		{strings.Replace(want.String(), "sha-256", "sha-1", 1), false},
		{"", false},
	}
	for _, tt := range tests {
		m := &mdn.MDN{Report: mdn.Report{MIC: tt.give}}
		if got := m.MICMatches(want); got != tt.want {
			t.Errorf("MICMatches(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestRequestOptions(t *testing.T) {
	got := mdn.RequestOptions(crypto.SHA512, crypto.SHA256)
	want := "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-512, sha-256"
	if got != want {
		t.Errorf("RequestOptions() = %q, want %q", got, want)
	}
	o, err := as2.ParseDispositionOptions(got)
	if err != nil || !o.SignedReceipt() {
		t.Errorf("ParseDispositionOptions(RequestOptions()) = %+v, %v", o, err)
	}
	if h, _ := o.MICAlg(); h != crypto.SHA512 {
		t.Errorf("first micalg = %v", h)
	}
}

func TestBuildRejectsLineBreaks(t *testing.T) {
	r := goldenReport
	r.OriginalMessageID = "<a@b>\r\nBcc: x"
	if _, _, err := mdn.Build(r, mdn.BuildOptions{}); err == nil {
		t.Errorf("Build() accepted a line break in Original-Message-ID")
	}
}

// TestSignedMDNUnquotedContentType: a signed MDN whose Content-Type is
// written with unquoted values, in the shapes AS2 products use, is an MDN
// (not taken for a message) and parses and verifies.
func TestSignedMDNUnquotedContentType(t *testing.T) {
	key, cert := testKey(t)
	h, body, err := mdn.Build(goldenReport, mdn.BuildOptions{Sign: true, Key: key, Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	_, params := as2.ParseMediaType(h.Get("Content-Type"))
	old := params["boundary"]
	tests := []struct{ name, boundary, ct string }{
		{"IBM Sterling shape", "----=_Part_5_1234.5678", "multipart/signed; protocol=application/pkcs7-signature; micalg=sha-256; boundary=%s"},
		{"Cleo shape", "_=1234567890ABC=_", "multipart/signed; boundary=%s; protocol=application/pkcs7-signature; micalg=sha256"},
		{"spaces and case", "b:1@x/y", "Multipart/Signed ; Protocol = application/pkcs7-signature ; MICALG = SHA-256 ; Boundary = %s ;"},
		{"x-pkcs7, no spaces", "----=_NextPart_000_0001", "multipart/signed;protocol=application/x-pkcs7-signature;micalg=sha-256;boundary=%s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hh := http.Header{"Content-Type": {strings.Replace(tt.ct, "%s", tt.boundary, 1)}}
			b := bytes.ReplaceAll(body, []byte("--"+old), []byte("--"+tt.boundary))
			if !mdn.IsMDN(hh, b) {
				t.Fatalf("IsMDN(%q) = false, want true", hh.Get("Content-Type"))
			}
			m, err := mdn.Parse(hh, b, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{cert}, RequireSigned: true})
			if err != nil {
				t.Fatalf("Parse(%q) error = %v", hh.Get("Content-Type"), err)
			}
			if !m.Signed || m.OriginalMessageID != goldenReport.OriginalMessageID {
				t.Errorf("Parse(%q) = signed %v, %q", hh.Get("Content-Type"), m.Signed, m.OriginalMessageID)
			}
		})
	}
}
