package receiver_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/openssltest"
)

// doc is an X12 document ending in a bare LF, the classic MIC pitfall.
const doc = "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *260101*1200*U*00401*000000001*0*P*>~\n" +
	"GS*PO*SENDER*RECEIVER*20260101*1200*1*X*004010~\nST*850*0001~\nBEG*00*SA*PO-1**20260101~\nSE*3*0001~\nGE*1*1~\nIEA*1*000000001~\n"

// opensslMessage is an AS2 request body built by openssl (compression by
// cms.Compress: this openssl has no zlib) with what its MIC covers.
type opensslMessage struct {
	header  http.Header // the MIME fields that travel as HTTP fields
	body    []byte
	micFile string // file holding the bytes the MIC covers
	// entityFile holds the MIME entity an unsigned, unencrypted message's
	// MIC covers with mic_include_headers (the compatibility form).
	entityFile string
	micDigest  string // openssl dgst name
}

type build struct {
	sign, enc, comp, cte string
	// signer and recipient default to the partner (A) and station (B).
	signer, recipient *identity
	payload           string
}

func buildOpenSSL(t testing.TB, b build) opensslMessage {
	t.Helper()
	if b.signer == nil {
		b.signer = idA
	}
	if b.recipient == nil {
		b.recipient = idB
	}
	if b.payload == "" {
		b.payload = doc
	}
	if b.comp == "" {
		b.comp = "none"
	}
	if b.cte == "" {
		b.cte = "binary"
	}
	dir := t.TempDir()
	inner := openssltest.InnerMIME(b.cte, b.payload)
	cur := inner
	m := opensslMessage{micFile: writeFile(t, dir, inner), micDigest: "sha256"}
	if b.comp != "none" && (b.sign == "" || b.comp == "before") {
		cur = openssltest.CompressedEntity(t, cur, b.cte)
		m.micFile = writeFile(t, dir, cur)
		if b.sign == "" && b.enc == "" {
			// Unsigned, unencrypted, compressed: the MIC covers the
			// uncompressed entity (RFC 5402 §4).
			m.micFile = writeFile(t, dir, inner)
		}
	}
	if b.sign != "" {
		in := writeFile(t, dir, cur)
		m.micFile, m.micDigest = in, b.sign
		cur = runOpenSSL(t, nil, "cms", "-sign", "-in", in, "-signer", b.signer.CertPath, "-inkey", b.signer.KeyPath,
			"-md", b.sign, "-binary", "-crlfeol")
		if b.comp == "after" {
			cur = openssltest.CompressedEntity(t, cur, b.cte)
		}
	}
	if b.enc != "" {
		in := writeFile(t, dir, cur)
		if b.sign == "" {
			m.micFile = in
		}
		args := []string{"cms", "-encrypt", "-in", in, "-binary", "-outform", "DER"}
		switch b.enc {
		case "aes256-oaep-sha256":
			args = append(args, "-aes256", "-recip", b.recipient.CertPath, "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256")
		case "aes128-gcm":
			args = append(args, "-aes-128-gcm", b.recipient.CertPath)
		default:
			args = append(args, "-"+b.enc, b.recipient.CertPath)
		}
		der := runOpenSSL(t, nil, args...)
		smimeType := "enveloped-data"
		if strings.HasSuffix(b.enc, "gcm") {
			smimeType = "authEnveloped-data"
		}
		m.header = http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=" + smimeType + "; name=\"smime.p7m\""}}
		m.body = der
		if b.cte == "base64" {
			m.header.Set("Content-Transfer-Encoding", "base64")
			m.body = []byte(base64.StdEncoding.EncodeToString(der))
		}
		return m
	}
	if b.sign == "" {
		// Unsigned, unencrypted: the MIC covers the content alone (RFC
		// 4130 §7.3.1); the entity form is the compatibility setting.
		m.entityFile, m.micFile = m.micFile, writeFile(t, dir, []byte(b.payload))
	}
	// Unencrypted: the top entity's header fields travel as HTTP fields.
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(cur)))
	h, err := r.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("split top entity: %v", err)
	}
	m.header = http.Header(h)
	i := bytes.Index(cur, []byte("\r\n\r\n"))
	m.body = cur[i+4:]
	return m
}

// dgst is the MIC openssl computes over file: "base64, sha-256".
func dgst(t testing.TB, alg, file string) string {
	t.Helper()
	sum := runOpenSSL(t, nil, "dgst", "-"+alg, "-binary", file)
	return base64.StdEncoding.EncodeToString(sum) + ", " + micAlgNames[alg]
}

// micAlgNames maps openssl digest names to their RFC 5751 micalg names.
var micAlgNames = map[string]string{"sha1": "sha-1", "sha256": "sha-256", "sha384": "sha-384", "sha512": "sha-512"}

// request merges the AS2 fields and the message's MIME fields.
func request(as2 http.Header, m opensslMessage) http.Header {
	h := as2.Clone()
	for k, v := range m.header {
		h[k] = v
	}
	return h
}
