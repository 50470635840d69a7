package openssltest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Spec is an AS2 message for Build to make with openssl.
type Spec struct {
	// Sign is the openssl digest to sign with ("sha256"); "" unsigned.
	Sign string
	// Enc is the openssl cipher to encrypt with ("aes256", "des3"), or
	// "aes256-oaep-sha256" (RSAES-OAEP key transport) or "aes128-gcm"
	// (AuthEnvelopedData); "" unencrypted.
	Enc string
	// Comp is "before" (compress, then sign), "after" (sign, then
	// compress) or "none" / "" (uncompressed). Unsigned, "after" is none.
	Comp string
	// CTE is the content transfer encoding of every layer: "binary"
	// (the default) or "base64".
	CTE string
	// Opaque signs with the content inside the signature (an
	// application/pkcs7-mime signed-data entity) instead of a
	// multipart/signed.
	Opaque bool
	// Signer signs and Recipient decrypts: required when signing or
	// encrypting.
	Signer, Recipient *Identity
	// Payload is the EDI document (InnerMIME wraps it).
	Payload string
}

// Message is an AS2 request built by Build, with what its MIC covers.
type Message struct {
	// Header holds the MIME fields that travel as HTTP fields.
	Header http.Header
	Body   []byte
	// MICFile holds the bytes the MIC covers: the signed entity; for an
	// encrypted unsigned message the decrypted entity; for an unsigned
	// unencrypted one the content alone (RFC 4130 §7.3.1).
	MICFile string
	// EntityFile, for an unsigned unencrypted message, holds the MIME
	// entity the compatibility MIC (with header fields) covers.
	EntityFile string
	// MICDigest is the openssl digest of the signature ("sha256" when
	// unsigned).
	MICDigest string
	// Layers are the S/MIME layers, outermost first: "encrypted",
	// "signed", "compressed".
	Layers []string
}

var buildSeq atomic.Int64

// Build makes the message s with openssl (compression with edihub's own
// cms.Compress: this openssl has no zlib). It fails the test on error.
func Build(t testing.TB, s Spec) Message {
	t.Helper()
	if s.CTE == "" {
		s.CTE = "binary"
	}
	dir := t.TempDir()
	file := func(b []byte) string { return WriteFile(t, dir, "f"+strconv.FormatInt(buildSeq.Add(1), 10), b) }
	inner := InnerMIME(s.CTE, s.Payload)
	cur := inner
	m := Message{MICFile: file(inner), MICDigest: "sha256"}
	compressed := s.Comp != "" && s.Comp != "none"
	if compressed && (s.Sign == "" || s.Comp == "before") {
		cur = CompressedEntity(t, cur, s.CTE)
		m.Layers = append(m.Layers, "compressed")
		if s.Sign != "" || s.Enc != "" {
			m.MICFile = file(cur)
		}
	}
	if s.Sign != "" {
		in := file(cur)
		m.MICFile, m.MICDigest = in, s.Sign
		if s.Opaque {
			der := Run(t, nil, "cms", "-sign", "-nodetach", "-in", in, "-signer", s.Signer.CertPath, "-inkey", s.Signer.KeyPath,
				"-md", s.Sign, "-binary", "-outform", "DER")
			cur = smimeEntity("signed-data", "smime.p7m", der, s.CTE)
		} else {
			cur = Run(t, nil, "cms", "-sign", "-in", in, "-signer", s.Signer.CertPath, "-inkey", s.Signer.KeyPath,
				"-md", s.Sign, "-binary", "-crlfeol")
		}
		m.Layers = append([]string{"signed"}, m.Layers...)
		if s.Comp == "after" {
			cur = CompressedEntity(t, cur, s.CTE)
			m.Layers = append([]string{"compressed"}, m.Layers...)
		}
	}
	if s.Enc != "" {
		in := file(cur)
		if s.Sign == "" {
			m.MICFile = in
		}
		m.Header, m.Body = encrypt(t, in, s)
		m.Layers = append([]string{"encrypted"}, m.Layers...)
		return m
	}
	if s.Sign == "" {
		m.EntityFile, m.MICFile = m.MICFile, file([]byte(s.Payload))
	}
	// Unencrypted: the top entity's header fields travel as HTTP fields.
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(cur))).ReadMIMEHeader()
	if err != nil {
		t.Fatalf("split top entity: %v", err)
	}
	m.Header = http.Header(h)
	m.Body = cur[bytes.Index(cur, []byte("\r\n\r\n"))+4:]
	return m
}

// encrypt encrypts the entity in file in to s.Recipient.
func encrypt(t testing.TB, in string, s Spec) (http.Header, []byte) {
	t.Helper()
	args := []string{"cms", "-encrypt", "-in", in, "-binary", "-outform", "DER"}
	switch s.Enc {
	case "aes256-oaep-sha256":
		args = append(args, "-aes256", "-recip", s.Recipient.CertPath, "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256")
	case "aes128-gcm":
		args = append(args, "-aes-128-gcm", s.Recipient.CertPath)
	default:
		args = append(args, "-"+s.Enc, s.Recipient.CertPath)
	}
	der := Run(t, nil, args...)
	smimeType := "enveloped-data"
	if strings.HasSuffix(s.Enc, "gcm") {
		smimeType = "authEnveloped-data"
	}
	h := http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=" + smimeType + "; name=\"smime.p7m\""}}
	if s.CTE == "base64" {
		h.Set("Content-Transfer-Encoding", "base64")
		return h, []byte(base64.StdEncoding.EncodeToString(der))
	}
	return h, der
}
