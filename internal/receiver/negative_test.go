package receiver_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
)

// TestReceiveNegative sends broken and refused messages: each gets its
// disposition (signed when a signed MDN was asked for and the partner is
// known), nothing is stored as received successfully, and the server goes
// on serving.
func TestReceiveNegative(t *testing.T) {
	keys(t)
	e := newEnv(t, envOptions{})
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	signedOnly := buildOpenSSL(t, build{sign: "sha256"})
	plain := buildOpenSSL(t, build{})

	tamperPayload := func() ([]byte, http.Header) {
		b := bytes.Replace(signedOnly.body, []byte("PO-1"), []byte("PO-9"), 1)
		return b, signedOnly.header
	}
	tamperSignature := func() ([]byte, http.Header) {
		// Flip characters deep inside the base64 signature value.
		i := bytes.Index(signedOnly.body, []byte("smime.p7s"))
		b := bytes.Clone(signedOnly.body)
		j := len(b) - 200
		if i < 0 || j <= i {
			t.Fatal("no signature part")
		}
		if b[j] == 'A' {
			b[j] = 'B'
		} else {
			b[j] = 'A'
		}
		return b, signedOnly.header
	}
	tests := []struct {
		name    string
		give    func() ([]byte, http.Header) // body and MIME fields
		from    string
		to      string
		msgID   string
		opts    string // Disposition-Notification-Options; "-" for none
		want    mdn.Disposition
		signed  bool
		stored  bool // a message row with status error
		result  string
		partner string
	}{
		{
			name: "wrong key",
			give: func() ([]byte, http.Header) {
				m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idC})
				return m.body, m.header
			},
			want: mdn.Errored("decryption-failed"), signed: true, stored: true, result: "decryption-failed",
		},
		{name: "tampered payload", give: tamperPayload, want: mdn.Errored("integrity-check-failed"), signed: true, stored: true, result: "integrity-check-failed"},
		{name: "tampered signature", give: tamperSignature, want: mdn.Errored("authentication-failed"), signed: true, stored: true, result: "authentication-failed"},
		{
			name: "signed by a stranger",
			give: func() ([]byte, http.Header) {
				m := buildOpenSSL(t, build{sign: "sha256", signer: idC})
				return m.body, m.header
			},
			want: mdn.Errored("authentication-failed"), signed: true, stored: true, result: "authentication-failed",
		},
		{
			name: "unknown partner", from: "NOBODY",
			give: func() ([]byte, http.Header) { return good.body, good.header },
			want: mdn.Errored(mdn.UnknownTradingRelationship), signed: true, result: mdn.UnknownTradingRelationship, partner: "unknown",
		},
		{
			name: "wrong station", to: "SOMEONE ELSE",
			give: func() ([]byte, http.Header) { return good.body, good.header },
			want: mdn.Errored(mdn.UnknownTradingRelationship), signed: true, result: mdn.UnknownTradingRelationship, partner: "unknown",
		},
		{
			name: "AS2 names compared case-sensitively", from: "acme corp",
			give: func() ([]byte, http.Header) { return good.body, good.header },
			want: mdn.Errored(mdn.UnknownTradingRelationship), signed: true, result: mdn.UnknownTradingRelationship, partner: "unknown",
		},
		{
			name: "unsupported micalg", opts: "signed-receipt-protocol=required, pkcs7-signature; signed-receipt-micalg=required, md5",
			give: func() ([]byte, http.Header) { return good.body, good.header },
			want: mdn.Failed(mdn.UnsupportedMICAlgorithms), stored: true, result: mdn.UnsupportedMICAlgorithms,
		},
		{
			name: "truncated body",
			give: func() ([]byte, http.Header) { return good.body[:len(good.body)/2], good.header },
			want: mdn.Errored("decryption-failed"), signed: true, stored: true, result: "decryption-failed",
		},
		{
			name: "garbage claiming encryption",
			give: func() ([]byte, http.Header) {
				return []byte("this is not CMS at all"), http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=enveloped-data"}}
			},
			want: mdn.Errored("decryption-failed"), signed: true, stored: true, result: "decryption-failed",
		},
		{
			name: "garbage claiming a signature",
			give: func() ([]byte, http.Header) {
				return []byte("garbage\r\n"), http.Header{"Content-Type": {`multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="b"`}}
			},
			want: mdn.Errored("authentication-failed"), signed: true, stored: true, result: "authentication-failed",
		},
		{
			name: "garbage claiming compression",
			give: func() ([]byte, http.Header) {
				return []byte{0x30, 0x03, 0x02, 0x01, 0x00}, http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=compressed-data"}}
			},
			want: mdn.Errored("decompression-failed"), signed: true, stored: true, result: "decompression-failed",
		},
		{
			name: "no Content-Type",
			give: func() ([]byte, http.Header) { return []byte("hello"), http.Header{} },
			want: mdn.Errored("unexpected-processing-error"), signed: true, stored: true, result: "unexpected-processing-error",
		},
		{
			name: "partner requires signing and encryption", from: partnerStrict,
			give: func() ([]byte, http.Header) { return plain.body, plain.header },
			want: mdn.Errored("insufficient-message-security"), signed: true, stored: true, result: "insufficient-message-security", partner: partnerStrict,
		},
		{
			name: "partner requires encryption", from: partnerStrict,
			give: func() ([]byte, http.Header) { return signedOnly.body, signedOnly.header },
			want: mdn.Errored("insufficient-message-security"), signed: true, stored: true, result: "insufficient-message-security", partner: partnerStrict,
		},
		{
			name: "no Message-ID", msgID: "-",
			give: func() ([]byte, http.Header) { return good.body, good.header },
			want: mdn.Errored("unexpected-processing-error"), signed: true, result: "unexpected-processing-error",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to := or(tt.from, partnerACME), or(tt.to, station)
			id := or(tt.msgID, fmt.Sprintf("<negative-%d@partner.example>", i))
			if tt.msgID == "-" {
				id = ""
			}
			body, mime := tt.give()
			h := request(as2Header(from, to, id, "sha-256"), opensslMessage{header: mime})
			if id == "" {
				h.Del("Message-ID")
			}
			if tt.opts != "" {
				h.Set("Disposition-Notification-Options", tt.opts)
			}
			partner := or(tt.partner, partnerACME)
			before := e.received(partner, tt.result)
			r := post(t, e.url, h, body, false)
			got := parseMDN(t, r)
			if got.Disposition != tt.want {
				t.Errorf("disposition = %q, want %q", got.Disposition, tt.want)
			}
			if got.Signed != tt.signed {
				t.Errorf("MDN signed = %v, want %v", got.Signed, tt.signed)
			}
			if got.Signed {
				opensslVerifyMDN(t, r)
			}
			if got.MIC != "" {
				t.Errorf("error MDN carries a MIC %q", got.MIC)
			}
			if got.OriginalMessageID != id {
				t.Errorf("Original-Message-ID = %q, want %q", got.OriginalMessageID, id)
			}
			if strings.Contains(got.Text, "cms:") || strings.Contains(got.Text, "as2:") {
				t.Errorf("MDN text leaks internal errors: %q", got.Text)
			}
			row, ok := e.row(t, partner, id)
			if ok != tt.stored || (ok && (row.Status != "error" || row.Payloads != 0 || row.Disposition != tt.want.String())) {
				t.Errorf("row = %+v (stored %v), want stored %v with status error, no payload", row, ok, tt.stored)
			}
			if n := e.received(partner, tt.result) - before; n != 1 {
				t.Errorf("received_total{partner=%q,result=%q} grew by %v, want 1", partner, tt.result, n)
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE status = 'processed'`); n != 0 {
		t.Errorf("%d messages processed, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM payloads`); n != 0 {
		t.Errorf("%d payloads stored, want 0", n)
	}
	// Still serving.
	r := post(t, e.url, request(as2Header(partnerACME, station, "<after@x>", "sha-256"), good), good.body, false)
	if got := parseMDN(t, r); got.Disposition != mdn.Processed() {
		t.Errorf("after the negative cases: %q, want processed", got.Disposition)
	}
}

// TestReceiveHTTPErrors covers requests answered without an MDN.
func TestReceiveHTTPErrors(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 4096})
	big := bytes.Repeat([]byte("x"), 8192)
	small := buildOpenSSL(t, build{sign: "sha256"})
	tests := []struct {
		name     string
		header   http.Header
		body     []byte
		chunked  bool
		want     int
		wantText string
		result   string
	}{
		{"oversized with Content-Length", request(as2Header(partnerACME, station, "<big1@x>", ""), small), big, false, 413, "too large", "too-large"},
		{"oversized chunked", request(as2Header(partnerACME, station, "<big2@x>", ""), small), big, true, 413, "too large", "too-large"},
		{"no AS2-From", delHeader(request(as2Header(partnerACME, station, "<m1@x>", ""), small), "AS2-From"), small.body, false, 400, "AS2-From", "bad-request"},
		{"no AS2-To", delHeader(request(as2Header(partnerACME, station, "<m2@x>", ""), small), "AS2-To"), small.body, false, 400, "AS2-To", "bad-request"},
		{"no Message-ID, no MDN", delHeader(delHeader(request(as2Header(partnerACME, station, "<m3@x>", ""), small), "Message-ID"), "Disposition-Notification-To"), small.body, false, 400, "Message-ID", "bad-request"},
		{"unknown partner, no MDN", delHeader(request(as2Header("NOBODY", station, "<m4@x>", ""), small), "Disposition-Notification-To"), small.body, false, 403, "unknown trading relationship", "unknown-trading-relationship"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, e.url, tt.header, tt.body, tt.chunked)
			if r.status != tt.want || !strings.Contains(string(r.body), tt.wantText) {
				t.Errorf("reply = %d %q, want %d containing %q", r.status, r.body, tt.want, tt.wantText)
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("%d messages stored, want 0", n)
	}
	if n := e.received(partnerACME, "too-large"); n != 1 { // the chunked one; Content-Length is refused by the router
		t.Errorf("too-large count = %v, want 1", n)
	}

	// A body cut off mid-way by the client: nothing stored, still serving.
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(e.url, "/as2"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /as2 HTTP/1.1\r\nHost: x\r\nAS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <cut@x>\r\n"+
		"Content-Type: application/pkcs7-mime\r\nContent-Length: 1000\r\n\r\n%s", bytes.Repeat([]byte("y"), 300))
	conn.Close()
	r := post(t, e.url, request(as2Header(partnerACME, station, "<after-cut@x>", "sha-256"), small), small.body, false)
	if got := parseMDN(t, r); got.Disposition != mdn.Processed() {
		t.Errorf("after a cut request: %q, want processed", got.Disposition)
	}
	if _, ok := e.row(t, partnerACME, "<cut@x>"); ok {
		t.Errorf("the cut request was stored")
	}
}

func delHeader(h http.Header, k string) http.Header {
	h.Del(k)
	return h
}
