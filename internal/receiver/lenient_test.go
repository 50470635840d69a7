package receiver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
)

// TestReceiveUnquotedContentType: signed messages and signed async MDNs
// whose Content-Type carries unquoted values (as IBM Sterling, Cleo and
// others write them) are read as the peer meant: the message is processed
// with the MIC openssl computes, the MDN lands in the MDN inbox.
func TestReceiveUnquotedContentType(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256"})
	_, params := as2.ParseMediaType(m.header.Get("Content-Type"))
	old := params["boundary"]
	if old == "" {
		t.Fatalf("no boundary in %q", m.header.Get("Content-Type"))
	}
	variants := []struct{ name, boundary, ct string }{
		{"IBM Sterling shape", "----=_Part_5_1234.5678", "multipart/signed; protocol=application/pkcs7-signature; micalg=sha-256; boundary=%s"},
		{"Cleo shape", "_=1234567890ABC=_", "multipart/signed; boundary=%s; protocol=application/pkcs7-signature; micalg=sha256"},
		{"spaces and case", "b:1@x/y", "Multipart/Signed ; Protocol = application/pkcs7-signature ; MICALG = SHA-256 ; Boundary = %s ;"},
	}
	want := dgst(t, "sha256", m.micFile)
	for i, v := range variants {
		t.Run("message "+v.name, func(t *testing.T) {
			h := request(as2Header(partnerACME, station, fmt.Sprintf("<unquoted-%d@partner.example>", i), "sha-256"), m)
			h.Set("Content-Type", strings.Replace(v.ct, "%s", v.boundary, 1))
			body := bytes.ReplaceAll(m.body, []byte("--"+old), []byte("--"+v.boundary))
			got := parseMDN(t, post(t, e.url, h, body, false))
			if got.Disposition != mdn.Processed() || got.MIC != want {
				t.Errorf("Content-Type %q: %q MIC %q, want processed with %q", h.Get("Content-Type"), got.Disposition, got.MIC, want)
			}
		})
	}

	rep, mb, err := mdn.Build(mdn.Report{ReportingUA: "partner", OriginalRecipient: partnerACME, FinalRecipient: partnerACME,
		OriginalMessageID: "<ours-1@edihub>", Disposition: mdn.Processed(), MIC: want},
		mdn.BuildOptions{Sign: true, Key: idA.Key, Cert: idA.Cert, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	_, params = as2.ParseMediaType(rep.Get("Content-Type"))
	for i, v := range variants {
		t.Run("MDN "+v.name, func(t *testing.T) {
			f, _ := as2.FormatAS2Name(partnerACME)
			s, _ := as2.FormatAS2Name(station)
			h := http.Header{"AS2-From": {f}, "AS2-To": {s}, "Message-ID": {fmt.Sprintf("<mdn-unquoted-%d@partner>", i)},
				"Content-Type": {strings.Replace(v.ct, "%s", v.boundary, 1)}}
			body := bytes.ReplaceAll(mb, []byte("--"+params["boundary"]), []byte("--"+v.boundary))
			before := e.count(t, `SELECT count(*) FROM mdn_inbox`)
			r := post(t, e.url, h, body, false)
			if r.status != http.StatusOK || len(r.body) != 0 {
				t.Errorf("MDN answered %d %q, want an empty 200", r.status, r.body)
			}
			if n := e.count(t, `SELECT count(*) FROM mdn_inbox`) - before; n != 1 {
				t.Errorf("%d MDNs stored in the inbox, want 1 (taken for a message?)", n)
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE message_id LIKE '<mdn-unquoted-%'`); n != 0 {
		t.Errorf("%d MDNs stored as messages, want 0", n)
	}
}

// TestReceiveUnsignedMIC: the MIC returned for an unsigned, unencrypted
// message is the digest of the content alone (RFC 4130 §7.3.1), compressed
// or not, as openssl dgst computes it; a partner with mic_include_headers
// gets the digest of the MIME entity, headers included.
func TestReceiveUnsignedMIC(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i, tt := range []struct {
		name string
		give build
	}{{"plain", build{}}, {"base64", build{cte: "base64"}}, {"compressed", build{comp: "before"}}} {
		t.Run(tt.name, func(t *testing.T) {
			m := buildOpenSSL(t, tt.give)
			for _, p := range []struct{ partner, file string }{{partnerACME, m.micFile}, {partnerLegacyMIC, m.entityFile}} {
				id := fmt.Sprintf("<unsigned-mic-%d-%s@partner.example>", i, strings.ReplaceAll(p.partner, " ", "_"))
				got := parseMDN(t, post(t, e.url, request(as2Header(p.partner, station, id, "sha-256"), m), m.body, false))
				if want := dgst(t, "sha256", p.file); got.Disposition != mdn.Processed() || got.MIC != want {
					t.Errorf("%s: %q MIC %q, want processed with %q", p.partner, got.Disposition, got.MIC, want)
				}
			}
		})
	}
}

// TestReceiveMICAlgorithm: the MIC is computed with the first supported
// algorithm of the sender's signed-receipt-micalg list, not with the
// signature's digest; with no list, the signature's digest (signed) or
// SHA-256. The MDN's EDIINT-Features is checked on the way.
func TestReceiveMICAlgorithm(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name   string
		give   build
		micalg string // "" asks for an unsigned receipt without a list
		want   string // openssl dgst name
	}{
		{"sha-1 signature, sha-512 asked", build{sign: "sha1"}, "sha-512, sha-256", "sha512"},
		{"sha-512 signature, sha-256 asked", build{sign: "sha512"}, "sha-256", "sha256"},
		{"unsupported first", build{sign: "sha256"}, "md5, sha-384", "sha384"},
		{"encrypted sha-384 signature, sha-1 asked", build{sign: "sha384", enc: "aes256"}, "sha1, sha-256", "sha1"},
		{"no list, sha-512 signature", build{sign: "sha512"}, "", "sha512"},
		{"no list, unsigned", build{}, "", "sha256"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := buildOpenSSL(t, tt.give)
			id := fmt.Sprintf("<micalg-%d@partner.example>", i)
			r := post(t, e.url, request(as2Header(partnerACME, station, id, tt.micalg), m), m.body, false)
			// EDIINT-Features names only what edihub supports.
			if f := r.header.Values("EDIINT-Features"); len(f) != 1 || f[0] != as2.EDIINTFeatures {
				t.Errorf("EDIINT-Features = %q, want [%s]", f, as2.EDIINTFeatures)
			}
			got := parseMDN(t, r)
			if want := dgst(t, tt.want, m.micFile); got.Disposition != mdn.Processed() || got.MIC != want {
				t.Errorf("%q MIC %q, want processed with %q", got.Disposition, got.MIC, want)
			}
		})
	}
}
