package receiver_test

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/edihub/edihub/internal/testenv/openssltest"
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

// buildOpenSSL builds b with openssl (openssltest.Build), from the
// partner (A) to the station (B) unless b names others.
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
	m := openssltest.Build(t, openssltest.Spec{Sign: b.sign, Enc: b.enc, Comp: b.comp, CTE: b.cte, Signer: b.signer, Recipient: b.recipient, Payload: b.payload})
	return opensslMessage{header: m.Header, body: m.Body, micFile: m.MICFile, entityFile: m.EntityFile, micDigest: m.MICDigest}
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
