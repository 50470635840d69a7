package as2_test

import (
	"bytes"
	"compress/flate"
	"crypto"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/inflate"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// streamOpts are the options both unwrappers get in the differential
// tests: station B decrypts, partner A signs.
func streamOpts(ids *openssltest.Identities, micAlgs []crypto.Hash, scope as2.MICScope) as2.UnwrapOptions {
	return as2.UnwrapOptions{
		Keys:         []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}},
		PartnerCerts: []*x509.Certificate{ids.A.Cert},
		MICAlgs:      micAlgs,
		UnsignedMIC:  scope,
	}
}

// compareStream unwraps body with Unwrap and UnwrapStream (reading a
// few bytes at a time) and fails on any difference: the payload, the
// MIC, the layers, the disposition of an error. Every layer streams
// (AES-GCM included).
func compareStream(t *testing.T, h http.Header, body []byte, opts as2.UnwrapOptions) {
	t.Helper()
	want, wantErr := as2.Unwrap(h, bytes.Clone(body), opts)
	var payload bytes.Buffer
	got, err := as2.UnwrapStream(h, iotest.HalfReader(bytes.NewReader(body)), opts, &payload)
	if (err == nil) != (wantErr == nil) || as2.Disposition(err) != as2.Disposition(wantErr) {
		t.Fatalf("UnwrapStream error %v (%s), Unwrap %v (%s)", err, as2.Disposition(err), wantErr, as2.Disposition(wantErr))
	}
	if err != nil {
		return
	}
	if !bytes.Equal(payload.Bytes(), want.Payload) || got.PayloadSize != int64(len(want.Payload)) {
		t.Errorf("payload: %d bytes (size %d), want %d", payload.Len(), got.PayloadSize, len(want.Payload))
	}
	if !got.MIC.Equal(want.MIC) {
		t.Errorf("MIC = %s, want %s", got.MIC, want.MIC)
	}
	if strings.Join(layerNames(got.Layers), ",") != strings.Join(layerNames(want.Layers), ",") ||
		got.Signed != want.Signed || got.Encrypted != want.Encrypted || got.Compressed != want.Compressed {
		t.Errorf("layers %v, want %v", got.Layers, want.Layers)
	}
	if got.ContentType != want.ContentType || got.Filename != want.Filename {
		t.Errorf("content type %q filename %q, want %q %q", got.ContentType, got.Filename, want.ContentType, want.Filename)
	}
	if want.Signed {
		sum := crypto.SHA256.New()
		sum.Write(want.SignedContent)
		if !bytes.Equal(got.SignedDigests[crypto.SHA256], sum.Sum(nil)) {
			t.Error("SignedDigests[SHA-256] is not the digest of the signed content")
		}
	}
	compareZlib(t, h, body, opts, want)
}

// compareZlib unwraps body as a stream with a CompressedOutput: a
// payload kept as its zlib stream inflates, past its Skip bytes, to
// exactly Unwrap's payload, which Plain got; one not kept went to the
// payload writer and Stream got nothing.
func compareZlib(t *testing.T, h http.Header, body []byte, opts as2.UnwrapOptions, want *as2.Message) {
	t.Helper()
	var payload, stream, plain bytes.Buffer
	opts.Compressed = &as2.CompressedOutput{Stream: &stream, Plain: &plain}
	got, err := as2.UnwrapStream(h, iotest.HalfReader(bytes.NewReader(body)), opts, &payload)
	if err != nil {
		t.Fatalf("UnwrapStream with CompressedOutput: %v", err)
	}
	if got.Zlib == nil {
		if stream.Len() != 0 || plain.Len() != 0 || !bytes.Equal(payload.Bytes(), want.Payload) {
			t.Errorf("payload not kept compressed: stream %d, plain %d, payload %d bytes, want 0, 0, %d", stream.Len(), plain.Len(), payload.Len(), len(want.Payload))
		}
		return
	}
	if payload.Len() != 0 || !bytes.Equal(plain.Bytes(), want.Payload) {
		t.Errorf("payload kept compressed: payload writer %d bytes, plain %d, want 0, %d", payload.Len(), plain.Len(), len(want.Payload))
	}
	// The reader the store reads such a payload back with.
	inflated, err := io.ReadAll(inflate.NewReader(&stream))
	if err != nil {
		t.Fatal(err)
	}
	if got.Zlib.Skip <= 0 || got.Zlib.Skip > int64(len(inflated)) || !bytes.Equal(inflated[got.Zlib.Skip:], want.Payload) {
		t.Errorf("zlib stream inflates to %d bytes, skip %d: not the payload (%d bytes)", len(inflated), got.Zlib.Skip, len(want.Payload))
	}
}

// TestUnwrapStreamKeepsZlib: a payload compressed before signing (the
// bench's large message) is kept as its zlib stream, one compressed
// after signing (its signature inside the compression) is not.
func TestUnwrapStreamKeepsZlib(t *testing.T) {
	ids := openssltest.Keys(t)
	for _, c := range []struct {
		comp string
		kept bool
	}{{"before", true}, {"after", false}} {
		m := buildOpenSSL(t, ids, "sha256", "aes256", c.comp, "binary")
		var payload bytes.Buffer
		opts := streamOpts(ids, nil, as2.MICContentOnly)
		opts.Compressed = &as2.CompressedOutput{Stream: io.Discard, Plain: io.Discard}
		got, err := as2.UnwrapStream(m.Header, bytes.NewReader(m.Body), opts, &payload)
		if err != nil {
			t.Fatal(err)
		}
		if (got.Zlib != nil) != c.kept {
			t.Errorf("compressed %s signing: kept as zlib = %v, want %v", c.comp, got.Zlib != nil, c.kept)
		}
	}
}

func layerNames(ls []as2.Layer) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l)
	}
	return out
}

// TestUnwrapStreamMatchesUnwrap: every message of the openssl matrix
// (signatures, ciphers, compression before and after signing, binary and
// base64) unwraps as a stream to what Unwrap gives, with the MIC in the
// signature's digest and in another one asked for, and in both scopes of
// unsigned MICs.
func TestUnwrapStreamMatchesUnwrap(t *testing.T) {
	ids := openssltest.Keys(t)
	for _, sign := range signings {
		for _, enc := range encryptions {
			for _, comp := range compresses {
				for _, cte := range ctes {
					name := strings.Join([]string{"sign=" + sign, "enc=" + enc, "comp=" + comp, cte}, "/")
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						m := buildOpenSSL(t, ids, sign, enc, comp, cte)
						for _, o := range []as2.UnwrapOptions{
							streamOpts(ids, nil, as2.MICContentOnly),
							streamOpts(ids, []crypto.Hash{crypto.SHA384}, as2.MICWithHeaders),
						} {
							compareStream(t, m.Header, m.Body, o)
						}
					})
				}
			}
		}
	}
}

// TestUnwrapStreamFailures: tampered, truncated and wrongly keyed
// messages fail as a stream with Unwrap's disposition.
func TestUnwrapStreamFailures(t *testing.T) {
	ids := openssltest.Keys(t)
	signed := buildOpenSSL(t, ids, "sha256", "", "none", "binary")
	enc := buildOpenSSL(t, ids, "sha256", "aes256", "before", "binary")
	opts := streamOpts(ids, nil, as2.MICContentOnly)
	tamper := func(b []byte) []byte {
		b = bytes.Clone(b)
		i := bytes.Index(b, []byte("BEG*00"))
		b[i] = 'X'
		return b
	}
	t.Run("altered signed content", func(t *testing.T) { compareStream(t, signed.Header, tamper(signed.Body), opts) })
	t.Run("truncated signature", func(t *testing.T) { compareStream(t, signed.Header, signed.Body[:len(signed.Body)-200], opts) })
	t.Run("no signature part", func(t *testing.T) {
		compareStream(t, signed.Header, signed.Body[:bytes.Index(signed.Body, []byte("application/pkcs7-signature"))], opts)
	})
	t.Run("truncated ciphertext", func(t *testing.T) { compareStream(t, enc.Header, enc.Body[:len(enc.Body)-40], opts) })
	t.Run("flipped ciphertext", func(t *testing.T) {
		b := bytes.Clone(enc.Body)
		b[len(b)/2] ^= 1
		compareStream(t, enc.Header, b, opts)
	})
	gcm := buildOpenSSL(t, ids, "", "aes128-gcm", "before", "binary")
	gcmSigned := buildOpenSSL(t, ids, "sha256", "aes128-gcm", "none", "base64")
	for _, m := range []struct {
		name string
		msg  openssltest.Message
	}{{"GCM", gcm}, {"signed GCM", gcmSigned}} {
		der := m.msg.Body
		if m.msg.Header.Get("Content-Transfer-Encoding") == "base64" {
			var err error
			if der, err = base64.StdEncoding.DecodeString(string(der)); err != nil {
				t.Fatal(err)
			}
		}
		h := m.msg.Header.Clone()
		h.Del("Content-Transfer-Encoding")
		flip := func(i int) []byte {
			b := bytes.Clone(der)
			b[i] ^= 1
			return b
		}
		// DER: the tag is the last 16 bytes.
		t.Run(m.name+" flipped ciphertext", func(t *testing.T) { compareStream(t, h, flip(len(der)/2), opts) })
		t.Run(m.name+" flipped tag", func(t *testing.T) { compareStream(t, h, flip(len(der)-1), opts) })
		t.Run(m.name+" truncated", func(t *testing.T) { compareStream(t, h, der[:len(der)-8], opts) })
		t.Run(m.name+" intact", func(t *testing.T) { compareStream(t, h, der, opts) })
	}
	t.Run("other station", func(t *testing.T) {
		o := opts
		o.Keys = []cms.Recipient{{Cert: ids.C.Cert, Key: ids.C.Key.(crypto.Decrypter)}}
		compareStream(t, enc.Header, enc.Body, o)
	})
	t.Run("other signer", func(t *testing.T) {
		o := opts
		o.PartnerCerts = []*x509.Certificate{ids.C.Cert}
		compareStream(t, enc.Header, enc.Body, o)
	})
}

// TestUnwrapStreamOpaque: opaque signed-data (application/pkcs7-mime,
// the content inside the signature) streams, alone, compressed before or
// after signing, and encrypted (CBC and GCM), binary and base64, to what
// Unwrap gives, its MIC openssl's digest of the signed content; altered
// content, another signer and a truncated signature fail with Unwrap's
// disposition.
func TestUnwrapStreamOpaque(t *testing.T) {
	ids := openssltest.Keys(t)
	for _, sign := range []string{"sha1", "sha256"} {
		for _, enc := range []string{"", "aes256", "aes128-gcm"} {
			for _, comp := range compresses {
				for _, cte := range ctes {
					name := strings.Join([]string{"sign=" + sign, "enc=" + enc, "comp=" + comp, cte}, "/")
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						m := openssltest.Build(t, openssltest.Spec{Sign: sign, Opaque: true, Enc: enc, Comp: comp, CTE: cte, Signer: ids.A, Recipient: ids.B, Payload: doc})
						var payload bytes.Buffer
						got, err := as2.UnwrapStream(m.Header, bytes.NewReader(m.Body), streamOpts(ids, nil, as2.MICContentOnly), &payload)
						if err != nil {
							t.Fatalf("UnwrapStream: %v", err)
						}
						if want := dgst(t, sign, m.MICFile) + ", " + micName(sign); got.MIC.String() != want || payload.String() != doc {
							t.Errorf("UnwrapStream = MIC %s, %d payload bytes; want openssl's %s, %d bytes", got.MIC, payload.Len(), want, len(doc))
						}
						for _, o := range []as2.UnwrapOptions{
							streamOpts(ids, nil, as2.MICContentOnly),
							streamOpts(ids, []crypto.Hash{crypto.SHA384}, as2.MICWithHeaders),
						} {
							compareStream(t, m.Header, m.Body, o)
						}
					})
				}
			}
		}
	}
	opaque := openssltest.Build(t, openssltest.Spec{Sign: "sha256", Opaque: true, Signer: ids.A, Payload: doc})
	opts := streamOpts(ids, nil, as2.MICContentOnly)
	altered := bytes.Clone(opaque.Body)
	altered[bytes.Index(altered, []byte("BEG*00"))] = 'X'
	t.Run("altered content", func(t *testing.T) { compareStream(t, opaque.Header, altered, opts) })
	t.Run("truncated signature", func(t *testing.T) { compareStream(t, opaque.Header, opaque.Body[:len(opaque.Body)-100], opts) })
	t.Run("other signer", func(t *testing.T) {
		o := opts
		o.PartnerCerts = []*x509.Certificate{ids.C.Cert}
		compareStream(t, opaque.Header, opaque.Body, o)
	})
	for name, want := range map[string]string{"altered content": as2.DispositionIntegrityCheckFailed} {
		_, err := as2.UnwrapStream(opaque.Header, bytes.NewReader(altered), opts, io.Discard)
		if as2.Disposition(err) != want {
			t.Errorf("%s: %v, want %s", name, err, want)
		}
	}
}

// rawDeflateMessage is an AS2 body whose compressed layer holds raw
// DEFLATE instead of a zlib stream (no header, no Adler-32), as some
// implementations send it, around an EDI entity of payload.
func rawDeflateMessage(t *testing.T, payload []byte) (http.Header, []byte) {
	t.Helper()
	var z bytes.Buffer
	w, err := flate.NewWriter(&z, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("Content-Type: application/EDI-X12\r\nContent-Transfer-Encoding: binary\r\n\r\n"))
	w.Write(payload)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	type encap struct {
		Type    asn1.ObjectIdentifier
		Content []byte `asn1:"explicit,tag:0"`
	}
	type compressedData struct {
		Version   int
		Algorithm struct{ Algorithm asn1.ObjectIdentifier }
		Encap     encap
	}
	var cd compressedData
	cd.Algorithm.Algorithm = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 3, 8} // zlib
	cd.Encap = encap{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}, z.Bytes()}
	der, err := asn1.Marshal(struct {
		Type    asn1.ObjectIdentifier
		Content compressedData `asn1:"explicit,tag:0"`
	}{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 9}, cd})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z"}}
	h.Set("Content-Transfer-Encoding", "binary")
	return h, der
}

// TestUnwrapRawDeflate: a compressed layer of raw DEFLATE unwraps to its
// payload in memory (Unwrap) and as a stream (UnwrapStream, the path of a
// message above the spool threshold), which refused it before, and kept
// as its stream (stored compressed) it inflates back with the reader the
// store uses.
func TestUnwrapRawDeflate(t *testing.T) {
	ids := openssltest.Keys(t)
	payload := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), 3000)
	h, body := rawDeflateMessage(t, payload)
	opts := streamOpts(ids, nil, as2.MICContentOnly)
	m, err := as2.Unwrap(h, bytes.Clone(body), opts)
	if err != nil || !bytes.Equal(m.Payload, payload) {
		t.Fatalf("Unwrap(raw DEFLATE) = %v; want the %d-byte payload", err, len(payload))
	}
	var streamed bytes.Buffer
	if _, err := as2.UnwrapStream(h, bytes.NewReader(body), opts, &streamed); err != nil || !bytes.Equal(streamed.Bytes(), payload) {
		t.Fatalf("UnwrapStream(raw DEFLATE) = %d bytes, %v; want the %d-byte payload", streamed.Len(), err, len(payload))
	}
	compareStream(t, h, body, opts)
	cut := body[:len(body)-len(body)/3]
	m, err = as2.Unwrap(h, bytes.Clone(cut), opts)
	if as2.Disposition(err) != as2.DispositionDecompressionFailed {
		t.Fatalf("Unwrap(raw DEFLATE cut short) error = %v (%s), want %s", err, as2.Disposition(err), as2.DispositionDecompressionFailed)
	}
	compareStream(t, h, cut, opts)
}
