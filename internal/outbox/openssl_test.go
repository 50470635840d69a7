package outbox_test

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
)

// unpacked is what the openssl-based partner found in a request.
type unpacked struct {
	payload     []byte
	contentType string
	layers      []string
	// mic is base64 of openssl's digest over the signed part (or, unsigned,
	// over the decrypted entity); micAlg its RFC 5751 name.
	mic, micAlg string
	// covered are the bytes the MIC covers, for a MIC in another algorithm.
	covered []byte
	// micalgParam is the micalg parameter of the outermost
	// multipart/signed as written, signature its decoded signature.
	micalgParam string
	signature   []byte
	// payloadCTE is the payload entity's Content-Transfer-Encoding.
	payloadCTE string
}

// entity is a MIME entity: header fields (lower-case names) and body.
type entity struct {
	header map[string]string
	body   []byte
}

func splitEntity(t testing.TB, raw []byte) entity {
	t.Helper()
	i := bytes.Index(raw, []byte("\r\n\r\n"))
	if i < 0 {
		t.Fatalf("MIME entity without a blank line after the header: %.200q", raw)
	}
	e := entity{header: map[string]string{}, body: raw[i+4:]}
	for _, l := range strings.Split(string(raw[:i]), "\r\n") {
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			t.Fatalf("folded header line %q", l)
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("bad header line %q", l)
		}
		e.header[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	return e
}

func (e entity) decoded(t testing.TB) []byte {
	t.Helper()
	if strings.EqualFold(e.header["content-transfer-encoding"], "base64") {
		b, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(e.body)))
		if err != nil {
			t.Fatalf("base64 body: %v", err)
		}
		return b
	}
	return e.body
}

var opensslDigest = map[string]string{"sha-1": "-sha1", "sha-256": "-sha256", "sha-384": "-sha384", "sha-512": "-sha512"}

// rfc3851Names maps the micalg names S/MIME used before RFC 5751 to the
// current ones; a partner accepts both.
var rfc3851Names = map[string]string{"sha1": "sha-1", "sha256": "sha-256", "sha384": "sha-384", "sha512": "sha-512"}

// opensslUnpack takes an AS2 request apart the way an independent partner
// would: openssl decrypts and verifies, the signed part is split per RFC
// 2046 and digested by openssl. CMS CompressedData is inflated with the
// cms package because this OpenSSL is built without zlib. micAlg is the
// digest for an unsigned message's MIC.
func opensslUnpack(t testing.TB, r request, micAlg string) unpacked {
	t.Helper()
	k := keys(t)
	dir := t.TempDir()
	var u unpacked
	e := entity{header: map[string]string{
		"content-type":              r.header.Get("Content-Type"),
		"content-transfer-encoding": r.header.Get("Content-Transfer-Encoding"),
	}, body: r.body}
	signed := false
	for depth := 0; depth < 8; depth++ {
		mt, params, err := mime.ParseMediaType(e.header["content-type"])
		if err != nil {
			t.Fatalf("Content-Type %q: %v", e.header["content-type"], err)
		}
		switch {
		case mt == "application/pkcs7-mime" && (strings.EqualFold(params["smime-type"], "enveloped-data") || strings.EqualFold(params["smime-type"], "authenveloped-data")):
			u.layers = append(u.layers, "encrypted")
			in := filepath.Join(dir, "enc.der")
			if err := os.WriteFile(in, e.decoded(t), 0o600); err != nil {
				t.Fatal(err)
			}
			plain := opensslRun(t, nil, "cms", "-decrypt", "-inform", "DER", "-in", in, "-recip", k["partner"].certPath, "-inkey", k["partner"].keyPath, "-binary")
			if !signed && u.mic == "" {
				u.mic, u.micAlg, u.covered = opensslMIC(t, dir, plain, micAlg), micAlg, plain
			}
			e = splitEntity(t, plain)
		case mt == "application/pkcs7-mime" && strings.EqualFold(params["smime-type"], "compressed-data"):
			u.layers = append(u.layers, "compressed")
			der := e.decoded(t)
			// openssl confirms the structure even though it cannot inflate.
			in := filepath.Join(dir, "z.der")
			if err := os.WriteFile(in, der, 0o600); err != nil {
				t.Fatal(err)
			}
			if out := opensslRun(t, nil, "cms", "-cmsout", "-print", "-inform", "DER", "-in", in); !bytes.Contains(out, []byte("id-smime-ct-compressedData")) {
				t.Fatalf("openssl does not see CompressedData:\n%s", out)
			}
			plain, err := cms.Decompress(der, 1<<30)
			if err != nil {
				t.Fatalf("Decompress: %v", err)
			}
			e = splitEntity(t, plain)
		case mt == "multipart/signed":
			u.layers = append(u.layers, "signed")
			part1, sig := splitSigned(t, e.body, params["boundary"])
			alg := strings.ToLower(params["micalg"])
			if old, ok := rfc3851Names[alg]; ok {
				alg = old
			}
			if _, ok := opensslDigest[alg]; !ok {
				t.Fatalf("micalg %q", params["micalg"])
			}
			p1 := filepath.Join(dir, "part1.bin")
			sd := filepath.Join(dir, "sig.der")
			if err := os.WriteFile(p1, part1, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(sd, sig, 0o600); err != nil {
				t.Fatal(err)
			}
			opensslRun(t, nil, "cms", "-verify", "-inform", "DER", "-in", sd, "-content", p1, "-binary", "-CAfile", k["station"].certPath, "-purpose", "any", "-out", os.DevNull)
			if !signed {
				u.mic, u.micAlg, u.covered = opensslMIC(t, dir, part1, alg), alg, part1
				u.micalgParam, u.signature = params["micalg"], sig
				signed = true
			}
			e = splitEntity(t, part1)
		default:
			u.payload = e.decoded(t)
			u.contentType = e.header["content-type"]
			u.payloadCTE = e.header["content-transfer-encoding"]
			return u
		}
	}
	t.Fatal("too many layers")
	return u
}

func opensslMIC(t testing.TB, dir string, b []byte, alg string) string {
	t.Helper()
	p := filepath.Join(dir, "mic.in")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d := opensslRun(t, nil, "dgst", opensslDigest[alg], "-binary", p)
	return base64.StdEncoding.EncodeToString(d)
}

// splitSigned splits a multipart/signed body per RFC 2046: the first part
// exactly as sent (without the CRLF before the delimiter) and the decoded
// signature.
func splitSigned(t testing.TB, body []byte, boundary string) (part1, sig []byte) {
	t.Helper()
	delim := []byte("--" + boundary + "\r\n")
	i := bytes.Index(body, delim)
	if i < 0 {
		t.Fatalf("no opening delimiter %q", delim)
	}
	rest := body[i+len(delim):]
	j := bytes.Index(rest, []byte("\r\n--"+boundary+"\r\n"))
	if j < 0 {
		t.Fatal("no second part")
	}
	part1 = rest[:j]
	rest = rest[j+len("\r\n--"+boundary+"\r\n"):]
	k := bytes.Index(rest, []byte("\r\n--"+boundary+"--"))
	if k < 0 {
		t.Fatal("no closing delimiter")
	}
	return part1, splitEntity(t, rest[:k]).decoded(t)
}

func hashFor(alg string) crypto.Hash {
	return map[string]crypto.Hash{"sha-1": crypto.SHA1, "sha-256": crypto.SHA256, "sha-384": crypto.SHA384, "sha-512": crypto.SHA512}[alg]
}
