package as2_test

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// doc is an X12 document ending in a bare LF, the classic MIC pitfall.
const doc = "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *260101*1200*U*00401*000000001*0*P*>~\n" +
	"GS*PO*SENDER*RECEIVER*20260101*1200*1*X*004010~\nST*850*0001~\nBEG*00*SA*PO-1**20260101~\nSE*3*0001~\nGE*1*1~\nIEA*1*000000001~\n"

var (
	signings    = []string{"", "sha1", "sha256", "sha512"}
	encryptions = []string{"", "aes128", "aes192", "aes256", "des3", "aes256-oaep-sha256", "aes128-gcm"}
	compresses  = []string{"none", "before", "after"}
	ctes        = []string{"binary", "base64"}
)

var fileSeq atomic.Int64

func write(t testing.TB, dir string, b []byte) string {
	return openssltest.WriteFile(t, dir, "f"+strconv.FormatInt(fileSeq.Add(1), 10), b)
}

// buildOpenSSL is an AS2 request from partner A to station B built by
// openssl.
func buildOpenSSL(t testing.TB, ids *openssltest.Identities, sign, enc, comp, cte string) openssltest.Message {
	t.Helper()
	return openssltest.Build(t, openssltest.Spec{Sign: sign, Enc: enc, Comp: comp, CTE: cte, Signer: ids.A, Recipient: ids.B, Payload: doc})
}

func dgst(t testing.TB, alg, file string) string {
	t.Helper()
	sum := openssltest.Run(t, nil, "dgst", "-"+alg, "-binary", file)
	return base64.StdEncoding.EncodeToString(sum)
}

func micName(alg string) string {
	return map[string]string{"sha1": "sha-1", "sha256": "sha-256", "sha384": "sha-384", "sha512": "sha-512"}[alg]
}

func TestUnwrapOpenSSLMatrix(t *testing.T) {
	ids := openssltest.Keys(t)
	opts := as2.UnwrapOptions{
		Keys:         []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}},
		PartnerCerts: []*x509Cert{ids.A.Cert},
		MICAlgs:      []crypto.Hash{crypto.SHA256, crypto.SHA1},
	}
	var passed atomic.Int64
	total := 0
	t.Run("matrix", func(t *testing.T) {
		for _, sign := range signings {
			for _, enc := range encryptions {
				for _, comp := range compresses {
					for _, cte := range ctes {
						total++
						name := fmt.Sprintf("sign=%s/enc=%s/compress=%s/cte=%s", or(sign, "none"), or(enc, "none"), comp, cte)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							m := buildOpenSSL(t, ids, sign, enc, comp, cte)
							got, err := as2.Unwrap(m.Header, m.Body, opts)
							if err != nil {
								t.Fatalf("Unwrap() error = %v (disposition %q)", err, as2.Disposition(err))
							}
							if string(got.Payload) != doc {
								t.Errorf("Unwrap().Payload = %q, want %q", got.Payload, doc)
							}
							if got.ContentType != "application/EDI-X12" || got.Filename != "order 1.edi" {
								t.Errorf("Unwrap() content type %q filename %q", got.ContentType, got.Filename)
							}
							if fmt.Sprint(got.Layers) != fmt.Sprint(m.Layers) {
								t.Errorf("Unwrap().Layers = %v, want %v", got.Layers, m.Layers)
							}
							if got.Signed != (sign != "") || got.Encrypted != (enc != "") || got.Compressed != (comp != "none") {
								t.Errorf("Unwrap() signed %v encrypted %v compressed %v", got.Signed, got.Encrypted, got.Compressed)
							}
							// The first algorithm of opts.MICAlgs, whatever the signature's digest.
							// (RFC 4130 §7.3.1: unsigned and unencrypted, the content alone.)
							want := dgst(t, "sha256", m.MICFile) + ", sha-256"
							if got.MIC.String() != want {
								t.Errorf("Unwrap().MIC = %q, want %q", got.MIC, want)
							}
							if sign != "" {
								// No signed-receipt-micalg list: the signature's digest.
								o := opts
								o.MICAlgs = nil
								got, err := as2.Unwrap(m.Header, m.Body, o)
								if err != nil {
									t.Fatal(err)
								}
								if want := dgst(t, m.MICDigest, m.MICFile) + ", " + micName(m.MICDigest); got.MIC.String() != want {
									t.Errorf("Unwrap(no micalg list).MIC = %q, want %q", got.MIC, want)
								}
							}
							if sign == "" && enc == "" {
								// The compatibility form: the entity, headers included.
								o := opts
								o.UnsignedMIC = as2.MICWithHeaders
								got, err := as2.Unwrap(m.Header, m.Body, o)
								if err != nil {
									t.Fatal(err)
								}
								want := dgst(t, "sha256", m.EntityFile) + ", sha-256"
								if got.MIC.String() != want {
									t.Errorf("Unwrap(with headers).MIC = %q, want %q", got.MIC, want)
								}
							}
							if !t.Failed() {
								passed.Add(1)
							}
						})
					}
				}
			}
		}
	})
	t.Logf("openssl → Unwrap matrix: %d/%d passed", passed.Load(), total)
	if int(passed.Load()) != total {
		t.Errorf("matrix: %d of %d cases passed", passed.Load(), total)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var wrapEncryptions = []struct {
	name string
	c    cms.Cipher
	oaep bool
}{
	{"", 0, false},
	{"aes128", cms.AES128CBC, false},
	{"aes192", cms.AES192CBC, false},
	{"aes256", cms.AES256CBC, false},
	{"des3", cms.DESEDE3CBC, false},
	{"aes256-oaep-sha256", cms.AES256CBC, true},
	{"aes128-gcm", cms.AES128GCM, false},
	{"aes256-gcm-oaep-sha256", cms.AES256GCM, true},
}

// splitEntity splits a MIME entity with the standard library only.
func splitEntity(t testing.TB, ent []byte) (textproto.MIMEHeader, []byte) {
	t.Helper()
	i := bytes.Index(ent, []byte("\r\n\r\n"))
	if i < 0 {
		t.Fatalf("no header/body separator in %q", ent[:min(len(ent), 200)])
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(ent[:i+4]))).ReadMIMEHeader()
	if err != nil {
		t.Fatalf("read header: %v", err)
	}
	return h, ent[i+4:]
}

func transferDecode(t testing.TB, cte string, b []byte) []byte {
	t.Helper()
	if strings.EqualFold(cte, "base64") {
		d, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b)))
		if err != nil {
			t.Fatalf("base64: %v", err)
		}
		return d
	}
	return b
}

var octetRE = regexp.MustCompile(`(?m)^\s*(\d+):d=\d+\s+hl=(\d+)\s+l=\s*(\d+)\s+prim:\s+OCTET STRING`)

// opensslInflate checks a CompressedData with openssl and inflates the
// zlib stream openssl located, with compress/zlib (this openssl has no
// zlib, so cms -uncompress is not available).
func opensslInflate(t testing.TB, dir string, der []byte) []byte {
	t.Helper()
	p := write(t, dir, der)
	printed := string(openssltest.Run(t, nil, "cms", "-cmsout", "-print", "-inform", "DER", "-in", p))
	if !strings.Contains(printed, "id-smime-ct-compressedData") || !strings.Contains(printed, "zlib compression") {
		t.Fatalf("openssl does not see CompressedData/zlib:\n%s", printed)
	}
	parsed := string(openssltest.Run(t, nil, "asn1parse", "-inform", "DER", "-in", p))
	ms := octetRE.FindAllStringSubmatch(parsed, -1)
	if len(ms) == 0 {
		t.Fatalf("no OCTET STRING in\n%s", parsed)
	}
	last := ms[len(ms)-1]
	off, _ := strconv.Atoi(last[1])
	hl, _ := strconv.Atoi(last[2])
	l, _ := strconv.Atoi(last[3])
	zr, err := zlib.NewReader(bytes.NewReader(der[off+hl : off+hl+l]))
	if err != nil {
		t.Fatalf("zlib: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("zlib: %v", err)
	}
	return out
}

func TestWrapOpenSSLMatrix(t *testing.T) {
	ids := openssltest.Keys(t)
	var passed atomic.Int64
	total := 0
	payload := []byte(doc)
	t.Run("matrix", func(t *testing.T) {
		for _, sign := range signings {
			for _, enc := range wrapEncryptions {
				for ci, comp := range compresses {
					for ti, cte := range ctes {
						total++
						name := fmt.Sprintf("sign=%s/enc=%s/compress=%s/cte=%s", or(sign, "none"), or(enc.name, "none"), comp, cte)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							dir := t.TempDir()
							var h crypto.Hash
							if sign != "" {
								h, _ = as2.ParseMICAlg(sign)
							}
							w, err := as2.Wrap(payload, "application/EDI-X12", "order 1.edi", as2.WrapOptions{
								Sign: h, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
								Encrypt: enc.c, OAEP: enc.oaep, RecipientCert: ids.B.Cert,
								Compress: as2.Compression(ci), TransferEncoding: as2.TransferEncoding(ti),
							})
							if err != nil {
								t.Fatalf("Wrap() error = %v", err)
							}
							// Peel with openssl and the standard library.
							cur := append(writeHTTPHeader(w.Header), w.Body...)
							var micBytes []byte
							micAlg := "sha256"
							for depth := 0; ; depth++ {
								if depth > 5 {
									t.Fatal("too deep")
								}
								hdr, body := splitEntity(t, cur)
								mt, params, err := mime.ParseMediaType(hdr.Get("Content-Type"))
								if err != nil {
									t.Fatalf("content type %q: %v", hdr.Get("Content-Type"), err)
								}
								switch {
								case mt == "application/pkcs7-mime" && strings.Contains(params["smime-type"], "nveloped-data"):
									der := transferDecode(t, hdr.Get("Content-Transfer-Encoding"), body)
									p := write(t, dir, der)
									cur = openssltest.Run(t, nil, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", p,
										"-recip", ids.B.CertPath, "-inkey", ids.B.KeyPath)
									if micBytes == nil && sign == "" {
										micBytes = cur
									}
								case mt == "application/pkcs7-mime" && params["smime-type"] == "compressed-data":
									der := transferDecode(t, hdr.Get("Content-Transfer-Encoding"), body)
									cur = opensslInflate(t, dir, der)
									if micBytes == nil && sign == "" {
										micBytes = cur
									}
								case mt == "multipart/signed":
									if params["micalg"] != micName(sign) || params["protocol"] != "application/pkcs7-signature" {
										t.Errorf("multipart/signed params %v", params)
									}
									b := "--" + params["boundary"]
									start := bytes.Index(body, []byte(b+"\r\n")) + len(b) + 2
									end := bytes.Index(body, []byte("\r\n"+b+"\r\n"))
									first := body[start:end]
									sigEnt := body[end+len(b)+4:]
									sigEnt = sigEnt[:bytes.Index(sigEnt, []byte("\r\n"+b+"--"))]
									sh, sb := splitEntity(t, sigEnt)
									sig := transferDecode(t, sh.Get("Content-Transfer-Encoding"), sb)
									openssltest.Run(t, nil, "cms", "-verify", "-binary", "-inform", "DER", "-in", write(t, dir, sig),
										"-content", write(t, dir, first), "-CAfile", ids.A.CertPath, "-purpose", "any", "-out", os.DevNull)
									if micBytes == nil {
										micBytes, micAlg = first, sign
									}
									cur = first
								default:
									if mt != "application/edi-x12" {
										t.Fatalf("payload type %q", mt)
									}
									if got := transferDecode(t, hdr.Get("Content-Transfer-Encoding"), body); !bytes.Equal(got, payload) {
										t.Errorf("payload = %q, want %q", got, payload)
									}
									if _, p, _ := mime.ParseMediaType(hdr.Get("Content-Disposition")); p["filename"] != "order 1.edi" {
										t.Errorf("Content-Disposition = %q", hdr.Get("Content-Disposition"))
									}
									if sign == "" && enc.name == "" {
										// Unsigned, unencrypted: the content alone (RFC 4130 §7.3.1).
										micBytes = payload
									}
									want := dgst(t, micAlg, write(t, dir, micBytes)) + ", " + micName(micAlg)
									if w.MIC.String() != want {
										t.Errorf("Wrap().MIC = %q, want %q", w.MIC, want)
									}
									// Round trip through Unwrap.
									got, err := as2.Unwrap(w.Header, w.Body, as2.UnwrapOptions{
										Keys:         []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}},
										PartnerCerts: []*x509Cert{ids.A.Cert},
									})
									if err != nil {
										t.Fatalf("Unwrap(Wrap()) error = %v", err)
									}
									if !bytes.Equal(got.Payload, payload) || !got.MIC.Equal(w.MIC) {
										t.Errorf("Unwrap(Wrap()) payload %q MIC %v, want MIC %v", got.Payload, got.MIC, w.MIC)
									}
									if !t.Failed() {
										passed.Add(1)
									}
									return
								}
							}
						})
					}
				}
			}
		}
	})
	t.Logf("Wrap → openssl matrix: %d/%d passed", passed.Load(), total)
	if int(passed.Load()) != total {
		t.Errorf("matrix: %d of %d cases passed", passed.Load(), total)
	}
}

// writeHTTPHeader renders HTTP header fields as a MIME header block.
func writeHTTPHeader(h http.Header) []byte {
	var b bytes.Buffer
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// TestUnsignedMICScope: the MIC of an unsigned, unencrypted message we
// send is the digest of the content alone (RFC 4130 §7.3.1), as openssl
// dgst computes it over the payload; MICWithHeaders keeps the old form,
// the entity rebuilt from the header fields sent. Unwrap agrees with
// Wrap either way.
func TestUnsignedMICScope(t *testing.T) {
	dir := t.TempDir()
	payload := []byte(doc)
	for _, tt := range []struct {
		name  string
		scope as2.MICScope
	}{{"content only (default)", as2.MICContentOnly}, {"with headers", as2.MICWithHeaders}} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := as2.Wrap(payload, "application/EDI-X12", "order 1.edi", as2.WrapOptions{UnsignedMIC: tt.scope})
			if err != nil {
				t.Fatal(err)
			}
			micBytes := payload
			if tt.scope == as2.MICWithHeaders {
				micBytes = fmt.Appendf(nil, "Content-Type: %s\r\nContent-Transfer-Encoding: %s\r\nContent-Disposition: %s\r\n\r\n%s",
					w.Header.Get("Content-Type"), w.Header.Get("Content-Transfer-Encoding"), w.Header.Get("Content-Disposition"), w.Body)
			}
			want := dgst(t, "sha256", write(t, dir, micBytes)) + ", sha-256"
			if w.MIC.String() != want {
				t.Errorf("Wrap().MIC = %q, want %q", w.MIC, want)
			}
			got, err := as2.Unwrap(w.Header, w.Body, as2.UnwrapOptions{UnsignedMIC: tt.scope})
			if err != nil {
				t.Fatal(err)
			}
			if got.MIC.String() != want {
				t.Errorf("Unwrap().MIC = %q, want %q", got.MIC, want)
			}
		})
	}
}

// TestUnwrapSameKindLayersMIC pins which layer the MIC is taken from when
// a message has two layers of the same kind: the outermost one (AS2.md,
// "The MIC"). The messages are built by openssl (compression by
// cms.Compress, as this openssl has no zlib) and the expected MICs are
// computed by `openssl dgst` over the bytes of the outer layer's content;
// the inner layer's MIC is shown on failure to tell the two choices apart.
func TestUnwrapSameKindLayersMIC(t *testing.T) {
	ids := openssltest.Keys(t)
	opts := stationOpts(ids)
	dir := t.TempDir()
	inner := openssltest.InnerMIME("binary", doc)
	sign := func(ent []byte, md string) []byte {
		return openssltest.Run(t, nil, "cms", "-sign", "-in", write(t, dir, ent), "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath,
			"-md", md, "-binary", "-crlfeol")
	}
	encryptDER := func(ent []byte) []byte {
		return openssltest.Run(t, nil, "cms", "-encrypt", "-in", write(t, dir, ent), "-binary", "-outform", "DER", "-aes256", ids.B.CertPath)
	}
	// asHTTP splits an unencrypted top entity into HTTP header fields and body.
	asHTTP := func(ent []byte) (http.Header, []byte) {
		h, body := splitEntity(t, ent)
		return http.Header(h), body
	}

	// Signed inside signed, with different digests: the outer signature
	// covers the inner multipart/signed entity as openssl wrote it.
	signedOnce := sign(inner, "sha1")
	signedTwiceH, signedTwice := asHTTP(sign(signedOnce, "sha256"))

	// The same with opaque signed-data (application/pkcs7-mime), which
	// Unwrap handles on its own path.
	opaque := func(ent []byte, md string) []byte {
		return openssltest.Run(t, nil, "cms", "-sign", "-in", write(t, dir, ent), "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath,
			"-md", md, "-binary", "-nodetach", "-outform", "DER")
	}
	opaqueOnce := append([]byte("Content-Type: application/pkcs7-mime; smime-type=signed-data; name=\"smime.p7m\"\r\n"+
		"Content-Transfer-Encoding: base64\r\n\r\n"), base64.StdEncoding.EncodeToString(opaque(inner, "sha1"))+"\r\n"...)
	opaqueTwice := opaque(opaqueOnce, "sha256")
	opaqueTwiceH := http.Header{"Content-Type": {`application/pkcs7-mime; smime-type=signed-data; name="smime.p7m"`}}

	// Compressed twice: the outer layer decompresses to the inner
	// application/pkcs7-mime compressed entity.
	compressedOnce := openssltest.CompressedEntity(t, inner, "base64")
	compressedTwiceH, compressedTwice := asHTTP(openssltest.CompressedEntity(t, compressedOnce, "binary"))

	// Encrypted twice: the outer layer decrypts to the inner
	// application/pkcs7-mime enveloped entity.
	encryptedOnce := append([]byte("Content-Type: application/pkcs7-mime; smime-type=enveloped-data; name=\"smime.p7m\"\r\n"+
		"Content-Transfer-Encoding: base64\r\n\r\n"), base64.StdEncoding.EncodeToString(encryptDER(inner))+"\r\n"...)
	encryptedTwice := encryptDER(encryptedOnce)
	encryptedTwiceH := http.Header{"Content-Type": {`application/pkcs7-mime; smime-type=enveloped-data; name="smime.p7m"`}}

	tests := []struct {
		name      string
		header    http.Header
		body      []byte
		layers    string
		want      string // openssl dgst of the outer layer's content
		wantInner string // what taking the inner layer would give
		// scope of an unsigned, unencrypted message's MIC; the layer
		// choice only shows with headers (content only is the payload's).
		scope as2.MICScope
	}{
		{
			name: "signed inside signed", header: signedTwiceH, body: signedTwice, layers: "[signed signed]",
			want:      dgst(t, "sha256", write(t, dir, signedOnce)) + ", sha-256",
			wantInner: dgst(t, "sha1", write(t, dir, inner)) + ", sha-1",
		},
		{
			name: "opaque signed inside opaque signed", header: opaqueTwiceH, body: opaqueTwice, layers: "[signed signed]",
			want:      dgst(t, "sha256", write(t, dir, opaqueOnce)) + ", sha-256",
			wantInner: dgst(t, "sha1", write(t, dir, inner)) + ", sha-1",
		},
		{
			name: "compressed twice, content only (the default)", header: compressedTwiceH, body: compressedTwice, layers: "[compressed compressed]",
			want:      dgst(t, "sha256", write(t, dir, []byte(doc))) + ", sha-256",
			wantInner: dgst(t, "sha256", write(t, dir, []byte(doc))) + ", sha-256",
		},
		{
			name: "compressed twice, with headers", header: compressedTwiceH, body: compressedTwice, layers: "[compressed compressed]",
			scope:     as2.MICWithHeaders,
			want:      dgst(t, "sha256", write(t, dir, compressedOnce)) + ", sha-256",
			wantInner: dgst(t, "sha256", write(t, dir, inner)) + ", sha-256",
		},
		{
			name: "encrypted twice", header: encryptedTwiceH, body: encryptedTwice, layers: "[encrypted encrypted]",
			want:      dgst(t, "sha256", write(t, dir, encryptedOnce)) + ", sha-256",
			wantInner: dgst(t, "sha256", write(t, dir, inner)) + ", sha-256",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.UnsignedMIC = tt.scope
			got, err := as2.Unwrap(tt.header, bytes.Clone(tt.body), o)
			if err != nil {
				t.Fatalf("Unwrap() error = %v (disposition %q)", err, as2.Disposition(err))
			}
			if string(got.Payload) != doc || fmt.Sprint(got.Layers) != tt.layers {
				t.Fatalf("Unwrap() = payload %q, layers %v; want %q, %s", got.Payload, got.Layers, doc, tt.layers)
			}
			if got.MIC.String() != tt.want {
				t.Errorf("Unwrap().MIC = %q, want %q (the outer layer's); the inner layer's would be %q", got.MIC, tt.want, tt.wantInner)
			}
			compareStream(t, tt.header, tt.body, o) // the same as a stream
		})
	}
}
