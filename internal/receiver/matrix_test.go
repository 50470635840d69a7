package receiver_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/mdn"
)

// processed is the disposition of an accepted message (RFC 4130 §7.4.3).
const processed = "automatic-action/MDN-sent-automatically; processed"

// TestReceiveOpenSSLMatrix posts every combination of signing, encryption,
// compression and transfer encoding built by openssl over HTTP, asks for a
// signed sync MDN, and checks the MDN with openssl: its signature, and its
// MIC against openssl dgst; and what was stored: the payload byte-exact,
// the disposition, MIC, MIC algorithm, layers and MDN mode.
func TestReceiveOpenSSLMatrix(t *testing.T) { receiveMatrix(t, envOptions{}) }

// TestReceiveOpenSSLMatrixSpooled is the matrix through the spool: every
// body spooled and unwrapped as a stream (AES-GCM too), the
// payload stored in pieces.
func TestReceiveOpenSSLMatrixSpooled(t *testing.T) { receiveMatrix(t, envOptions{spool: true}) }

func receiveMatrix(t *testing.T, eo envOptions) {
	e := newEnv(t, eo)
	var (
		signings    = []string{"", "sha1", "sha256", "sha512"}
		encryptions = []string{"", "aes128", "aes192", "aes256", "des3", "aes256-oaep-sha256", "aes128-gcm"}
		compresses  = []string{"none", "before", "after"}
		ctes        = []string{"binary", "base64"}
	)
	var n, passed atomic.Int64
	t.Run("matrix", func(t *testing.T) {
		for _, sign := range signings {
			for _, enc := range encryptions {
				for _, comp := range compresses {
					for _, cte := range ctes {
						i := n.Add(1)
						name := fmt.Sprintf("sign=%s/enc=%s/compress=%s/cte=%s", or(sign, "none"), or(enc, "none"), comp, cte)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							m := buildOpenSSL(t, build{sign: sign, enc: enc, comp: comp, cte: cte})
							id := fmt.Sprintf("<matrix-%d@partner.example>", i)
							// Odd combinations go chunked, even ones with Content-Length.
							r := post(t, e.url, request(as2Header(partnerACME, station, id, "sha-256, sha-1"), m), m.body, i%2 == 1)
							got := parseMDN(t, r)
							if !got.Signed {
								t.Fatalf("MDN not signed")
							}
							// Every expectation comes from constants and openssl,
							// never from what the receiver stored.
							// The first algorithm asked for (sha-256), whatever the
							// signature's digest.
							wantMIC := dgst(t, "sha256", m.micFile)
							if d := got.Disposition.String(); d != processed {
								t.Fatalf("MDN disposition = %q, want %q", d, processed)
							}
							if got.MIC != wantMIC {
								t.Errorf("Received-content-MIC = %q, want %q (openssl dgst)", got.MIC, wantMIC)
							}
							if got.OriginalMessageID != id {
								t.Errorf("Original-Message-ID = %q, want %q", got.OriginalMessageID, id)
							}
							opensslVerifyMDN(t, r)
							if p := e.payload(t, partnerACME, id); string(p) != doc {
								t.Errorf("stored payload = %q, want %q", p, doc)
							}
							stored, ok := e.row(t, partnerACME, id)
							want := row{
								Status: "processed", Disposition: processed, MIC: wantMIC, MICAlg: "sha-256",
								Signed: sign != "", Encrypted: enc != "", Compressed: comp != "none",
								MDNMode: "sync", Payloads: 1,
							}
							if !ok {
								t.Fatalf("no inbound message row for %s", id)
							}
							if diff := cmp.Diff(want, stored); diff != "" {
								t.Errorf("stored message row mismatch (-want +got):\n%s", diff)
							}
							passed.Add(1)
						})
					}
				}
			}
		}
	})
	t.Logf("%d of %d combinations passed", passed.Load(), n.Load())
	if got := e.received(partnerACME, "processed"); got != float64(passed.Load()) {
		t.Errorf("edihub_as2_messages_received_total{processed} = %v, want %d", got, passed.Load())
	}
	// Spooled, every message (AES-GCM included: it streams) was stored
	// in pieces; in memory, none.
	want := 0
	if eo.spool {
		want = int(n.Load())
	}
	if got := e.count(t, `SELECT count(*) FROM payloads WHERE chunked`); got != want {
		t.Errorf("payloads stored in pieces = %d, want %d", got, want)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestReceiveUnsignedMDN asks for an MDN without a signature.
func TestReceiveUnsignedMDN(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes128"})
	h := request(as2Header(partnerACME, station, "<unsigned@x>", ""), m)
	r := post(t, e.url, h, m.body, false)
	got := parseMDN(t, r)
	if got.Signed {
		t.Errorf("MDN signed, want unsigned")
	}
	if ct := r.header.Get("Content-Type"); !hasPrefix(ct, "multipart/report") {
		t.Errorf("Content-Type = %q, want multipart/report", ct)
	}
	if want := dgst(t, m.micDigest, m.micFile); got.MIC != want || got.Disposition != mdn.Processed() {
		t.Errorf("MDN = %q %q, want processed %q", got.Disposition, got.MIC, want)
	}
	for k, want := range map[string]string{"AS2-From": `"EDIHUB HUB"`, "AS2-To": `"ACME CORP"`, "AS2-Version": "1.2", "Message-Id": "<mdn-1@edihub.test>"} {
		if v := r.header.Get(k); v != want {
			t.Errorf("MDN header %s = %q, want %q", k, v, want)
		}
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// TestReceiveNoMDNRequested gets 200 and an empty body.
func TestReceiveNoMDNRequested(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256"})
	h := request(as2Header(partnerACME, station, "<nomdn@x>", ""), m)
	h.Del("Disposition-Notification-To")
	r := post(t, e.url, h, m.body, false)
	if r.status != http.StatusOK || len(r.body) != 0 {
		t.Fatalf("reply = %d %q, want 200 and no body", r.status, r.body)
	}
	if row, _ := e.row(t, partnerACME, "<nomdn@x>"); row.Status != "processed" || row.MDNMode != "none" || row.Payloads != 1 {
		t.Errorf("row = %+v", row)
	}
}
