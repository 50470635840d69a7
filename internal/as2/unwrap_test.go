package as2_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

func stationOpts(ids *openssltest.Identities) as2.UnwrapOptions {
	return as2.UnwrapOptions{
		Keys:         []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}},
		PartnerCerts: []*x509Cert{ids.A.Cert},
		InPlace:      true, // as the receiver does
	}
}

// TestUnwrapInPlace checks that decrypting in place leaves the MIC of
// every layering intact (a layer's bytes may hold a later layer's
// ciphertext) and that without InPlace the body stays as it was.
func TestUnwrapInPlace(t *testing.T) {
	ids := openssltest.Keys(t)
	payload := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), 300)
	encrypt := func(t *testing.T, b []byte, ct string, o as2.WrapOptions) *as2.Wrapped {
		t.Helper()
		w, err := as2.Wrap(b, ct, "", o)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	enc := as2.WrapOptions{Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert}
	sign := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}
	inner := encrypt(t, payload, "application/EDI-X12", as2.WrapOptions{Encrypt: cms.AES128GCM, RecipientCert: ids.B.Cert})
	innerCT := inner.Header.Get("Content-Type")
	b64 := enc
	b64.TransferEncoding = as2.Base64
	tests := []struct {
		name   string
		give   *as2.Wrapped
		layers string
	}{
		{"encrypted", encrypt(t, payload, "application/EDI-X12", enc), "[encrypted]"},
		{"encrypted base64", encrypt(t, payload, "application/EDI-X12", b64), "[encrypted]"},
		{"encrypted twice", encrypt(t, inner.Body, innerCT, enc), "[encrypted encrypted]"},
		{"signed over encrypted", encrypt(t, inner.Body, innerCT, sign), "[signed encrypted]"},
	}
	for _, tt := range tests {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/in place %v", tt.name, inPlace), func(t *testing.T) {
				o := stationOpts(ids)
				o.InPlace = inPlace
				body := bytes.Clone(tt.give.Body)
				got, err := as2.Unwrap(tt.give.Header, body, o)
				if err != nil {
					t.Fatalf("Unwrap() error = %v", err)
				}
				if !bytes.Equal(got.Payload, payload) || fmt.Sprint(got.Layers) != tt.layers {
					t.Errorf("Unwrap() = payload of %d bytes, layers %v; want %d bytes, %s", len(got.Payload), got.Layers, len(payload), tt.layers)
				}
				if !got.MIC.Equal(tt.give.MIC) {
					t.Errorf("Unwrap().MIC = %v, want %v", got.MIC, tt.give.MIC)
				}
				if !inPlace && !bytes.Equal(body, tt.give.Body) {
					t.Error("Unwrap() without InPlace modified the body")
				}
			})
		}
	}
}

// signWithOpenSSL signs entity with openssl and returns the HTTP header
// and body of the resulting multipart/signed.
func signWithOpenSSL(t testing.TB, signer *openssltest.Identity, entity []byte, extra ...string) (http.Header, []byte) {
	t.Helper()
	in := write(t, t.TempDir(), entity)
	args := append([]string{"cms", "-sign", "-in", in, "-signer", signer.CertPath, "-inkey", signer.KeyPath,
		"-md", "sha256", "-binary", "-crlfeol"}, extra...)
	out := openssltest.Run(t, nil, args...)
	h, body := splitEntity(t, out)
	return http.Header(h), body
}

func TestUnwrapPitfalls(t *testing.T) {
	ids := openssltest.Keys(t)
	opts := stationOpts(ids)

	t.Run("folded headers and CTE missing", func(t *testing.T) {
		entity := []byte("Content-Type: application/EDI-X12;\r\n name=\"po.edi\"\r\nContent-Disposition: attachment;\r\n\tfilename=\"po 7.edi\"\r\n\r\n" + doc)
		h, body := signWithOpenSSL(t, ids.A, entity)
		got, err := as2.Unwrap(h, body, opts)
		if err != nil {
			t.Fatalf("Unwrap() error = %v", err)
		}
		if string(got.Payload) != doc || got.Filename != "po 7.edi" {
			t.Errorf("Unwrap() = payload %q filename %q", got.Payload, got.Filename)
		}
		want := dgst(t, "sha256", write(t, t.TempDir(), entity)) + ", sha-256"
		if got.MIC.String() != want {
			t.Errorf("Unwrap().MIC = %q, want %q", got.MIC, want)
		}
	})

	t.Run("signature part without CTE header", func(t *testing.T) {
		h, body := signWithOpenSSL(t, ids.A, openssltest.InnerMIME("binary", doc))
		body = bytes.Replace(body, []byte("Content-Transfer-Encoding: base64\r\n"), nil, 1)
		if _, err := as2.Unwrap(h, body, opts); err != nil {
			t.Errorf("Unwrap() error = %v", err)
		}
	})

	t.Run("transport turned CRLF into LF", func(t *testing.T) {
		entity := []byte("Content-Type: application/EDI-X12\r\n\r\nline one\r\nline two\r\n")
		h, body := signWithOpenSSL(t, ids.A, entity)
		body = bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n"))
		got, err := as2.Unwrap(h, body, opts)
		if err != nil {
			t.Fatalf("Unwrap() error = %v", err)
		}
		want := dgst(t, "sha256", write(t, t.TempDir(), entity)) + ", sha-256"
		if got.MIC.String() != want {
			t.Errorf("Unwrap().MIC = %q, want the MIC of the CRLF entity %q", got.MIC, want)
		}
	})

	t.Run("micalg spelled sha1 in the header", func(t *testing.T) {
		h, body := signWithOpenSSL(t, ids.A, openssltest.InnerMIME("binary", doc))
		h.Set("Content-Type", strings.Replace(h.Get("Content-Type"), `micalg="sha-256"`, "micalg=SHA256", 1))
		got, err := as2.Unwrap(h, body, opts)
		if err != nil || got.MIC.Alg != crypto.SHA256 {
			t.Errorf("Unwrap() = %v, %v; want a sha-256 MIC", got, err)
		}
	})

	t.Run("unsigned MIC uses the first requested algorithm", func(t *testing.T) {
		o := opts
		o.MICAlgs = []crypto.Hash{crypto.SHA1, crypto.SHA256}
		h := http.Header{"Content-Type": {"application/EDI-X12"}}
		got, err := as2.Unwrap(h, []byte(doc), o)
		if err != nil || got.MIC.Alg != crypto.SHA1 {
			t.Errorf("Unwrap() = %v, %v; want a sha-1 MIC", got, err)
		}
		if got.ContentType != "application/EDI-X12" || got.Filename != "" {
			t.Errorf("Unwrap() content type %q filename %q", got.ContentType, got.Filename)
		}
	})
}

func TestUnwrapErrors(t *testing.T) {
	ids := openssltest.Keys(t)
	opts := stationOpts(ids)
	dir := t.TempDir()
	inner := openssltest.InnerMIME("binary", doc)

	signedH, signedBody := signWithOpenSSL(t, ids.A, inner)
	noattrH, noattrBody := signWithOpenSSL(t, ids.A, inner, "-noattr")
	otherH, otherBody := signWithOpenSSL(t, ids.C, inner)
	tamper := func(b []byte) []byte {
		return bytes.Replace(bytes.Clone(b), []byte("PO-1"), []byte("PO-9"), 1)
	}
	encToC := openssltest.Run(t, nil, "cms", "-encrypt", "-in", write(t, dir, inner), "-binary", "-outform", "DER", "-aes256", ids.C.CertPath)
	encToB := openssltest.Run(t, nil, "cms", "-encrypt", "-in", write(t, dir, inner), "-binary", "-outform", "DER", "-aes256", ids.B.CertPath)
	badCT := bytes.Clone(encToB)
	badCT[len(badCT)-17] ^= 1

	bomb, err := cms.Compress(bytes.Repeat([]byte("A"), 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 512)
	rand.Read(garbage)
	enveloped := http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=enveloped-data"}}
	compressed := http.Header{"Content-Type": {"application/pkcs7-mime; smime-type=compressed-data"}}

	nested := inner
	for range 20 {
		nested = openssltest.CompressedEntity(t, nested, "binary")
	}
	nestedH, nestedBody := splitEntity(t, nested)

	// Two compressed layers of 600 KB each (random, so incompressible):
	// each under a 1 MiB limit, together over it.
	noise := make([]byte, 600<<10)
	rand.Read(noise)
	twice := openssltest.CompressedEntity(t, openssltest.CompressedEntity(t, append([]byte("Content-Type: application/octet-stream\r\n\r\n"), noise...), "binary"), "binary")
	twiceH, twiceBody := splitEntity(t, twice)

	tests := []struct {
		name    string
		header  http.Header
		body    []byte
		lim     as2.Limits
		want    string
		wantErr error
	}{
		{"tampered payload, signed attributes", signedH, tamper(signedBody), as2.Limits{}, as2.DispositionIntegrityCheckFailed, cms.ErrDigestMismatch},
		{"tampered payload, no signed attributes", noattrH, tamper(noattrBody), as2.Limits{}, as2.DispositionAuthenticationFailed, cms.ErrSignature},
		{"signed by someone else", otherH, otherBody, as2.Limits{}, as2.DispositionAuthenticationFailed, cms.ErrSignature},
		{"garbage signature", signedH, bytes.Replace(bytes.Clone(signedBody), []byte("MII"), []byte("XYZ"), 1), as2.Limits{}, as2.DispositionAuthenticationFailed, cms.ErrMalformed},
		{"multipart/signed without parts", signedH, []byte("no boundary here"), as2.Limits{}, as2.DispositionAuthenticationFailed, as2.ErrMalformedMIME},
		{"encrypted for another key", enveloped, encToC, as2.Limits{}, as2.DispositionDecryptionFailed, cms.ErrNoRecipient},
		{"tampered ciphertext", enveloped, badCT, as2.Limits{}, as2.DispositionDecryptionFailed, cms.ErrDecryption},
		{"garbage claiming encryption", enveloped, garbage, as2.Limits{}, as2.DispositionDecryptionFailed, cms.ErrMalformed},
		{"garbage claiming compression", compressed, garbage, as2.Limits{}, as2.DispositionDecompressionFailed, cms.ErrMalformed},
		{"zip bomb", compressed, bomb, as2.Limits{MaxDecompressedSize: 1 << 20}, as2.DispositionDecompressionFailed, cms.ErrTooLarge},
		{"compressed layers over the limit together", http.Header(twiceH), twiceBody, as2.Limits{MaxDecompressedSize: 1 << 20}, as2.DispositionDecompressionFailed, cms.ErrTooLarge},
		{"too many layers", http.Header(nestedH), nestedBody, as2.Limits{MaxDepth: 8}, as2.DispositionUnexpectedProcessing, as2.ErrLimit},
		{"no content type", http.Header{}, []byte(doc), as2.Limits{}, as2.DispositionUnexpectedProcessing, as2.ErrMalformedMIME},
		{"bad payload base64", http.Header{"Content-Type": {"text/plain"}, "Content-Transfer-Encoding": {"base64"}}, []byte("*"), as2.Limits{}, as2.DispositionUnexpectedProcessing, as2.ErrMalformedMIME},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Limits = tt.lim
			_, err := as2.Unwrap(tt.header, tt.body, o)
			if got := as2.Disposition(err); got != tt.want {
				t.Errorf("Disposition(Unwrap()) = %q, want %q (err %v)", got, tt.want, err)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Unwrap() error = %v, want %v", err, tt.wantErr)
			}
			var e *as2.Error
			if !errors.As(err, &e) {
				t.Errorf("Unwrap() error %T is not *as2.Error", err)
			}
		})
	}
}

func TestDisposition(t *testing.T) {
	tests := []struct {
		give error
		want string
	}{
		{nil, ""},
		{as2.ErrInsufficientSecurity, as2.DispositionInsufficientSecurity},
		{fmt.Errorf("receive: %w", as2.ErrInsufficientSecurity), as2.DispositionInsufficientSecurity},
		{errors.New("boom"), as2.DispositionUnexpectedProcessing},
		{fmt.Errorf("x: %w", &as2.Error{Disposition: as2.DispositionDecryptionFailed, Err: cms.ErrDecryption}), as2.DispositionDecryptionFailed},
	}
	for _, tt := range tests {
		if got := as2.Disposition(tt.give); got != tt.want {
			t.Errorf("Disposition(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestWrapOptions(t *testing.T) {
	ids := openssltest.Keys(t)
	t.Run("algorithm protection verifies with openssl and Unwrap", func(t *testing.T) {
		w, err := as2.Wrap([]byte(doc), "application/EDI-X12", "", as2.WrapOptions{
			Sign: crypto.SHA384, SignerKey: ids.A.Key, SignerCert: ids.A.Cert, AlgorithmProtection: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := as2.Unwrap(w.Header, w.Body, stationOpts(ids))
		if err != nil || !got.MIC.Equal(w.MIC) || got.MIC.Alg != crypto.SHA384 {
			t.Errorf("Unwrap(Wrap()) = %v, %v", got, err)
		}
	})
	t.Run("RFC 3851 micalg names round trip", func(t *testing.T) {
		for _, tt := range []struct {
			h    crypto.Hash
			want string
		}{{crypto.SHA256, "sha256"}, {crypto.SHA384, "sha384"}, {crypto.SHA512, "sha512"}} {
			w, err := as2.Wrap([]byte(doc), "application/EDI-X12", "", as2.WrapOptions{
				Sign: tt.h, SignerKey: ids.A.Key, SignerCert: ids.A.Cert, RFC3851MICAlg: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, params, err := mime.ParseMediaType(w.Header.Get("Content-Type"))
			if err != nil || params["micalg"] != tt.want {
				t.Errorf("Wrap(RFC3851MICAlg, %v) Content-Type = %q, want micalg=%s", tt.h, w.Header.Get("Content-Type"), tt.want)
			}
			got, err := as2.Unwrap(w.Header, w.Body, stationOpts(ids))
			if err != nil || !got.MIC.Equal(w.MIC) || got.MIC.Alg != tt.h {
				t.Errorf("Unwrap(Wrap(RFC3851MICAlg, %v)) = %v, %v", tt.h, got, err)
			}
		}
	})
	t.Run("unsigned content-only MIC", func(t *testing.T) {
		w, err := as2.Wrap([]byte(doc), "application/EDI-X12", "", as2.WrapOptions{UnsignedMIC: as2.MICContentOnly, MICAlg: crypto.SHA512})
		if err != nil {
			t.Fatal(err)
		}
		if want := as2.ComputeMIC(crypto.SHA512, []byte(doc)); !w.MIC.Equal(want) {
			t.Errorf("Wrap().MIC = %v, want %v", w.MIC, want)
		}
	})
	t.Run("quoted filename round trip", func(t *testing.T) {
		w, err := as2.Wrap([]byte(doc), "application/EDI-X12", `we "quote".edi`, as2.WrapOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := as2.Unwrap(w.Header, w.Body, stationOpts(ids))
		if err != nil || got.Filename != `we "quote".edi` {
			t.Errorf("Unwrap(Wrap()).Filename = %q, %v", got.Filename, err)
		}
		if !got.MIC.Equal(w.MIC) {
			t.Errorf("Unwrap(Wrap()).MIC = %v, want %v", got.MIC, w.MIC)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, o := range []as2.WrapOptions{
			{Sign: crypto.SHA256},
			{Encrypt: cms.AES128CBC},
			{Sign: crypto.MD5, SignerKey: ids.A.Key, SignerCert: ids.A.Cert},
		} {
			if _, err := as2.Wrap([]byte(doc), "text/plain", "", o); err == nil {
				t.Errorf("Wrap(%+v) error = nil", o)
			}
		}
		if _, err := as2.Wrap([]byte(doc), "", "", as2.WrapOptions{}); err == nil {
			t.Error("Wrap(no content type) error = nil")
		}
	})
}

func TestWrapBase64Body(t *testing.T) {
	ids := openssltest.Keys(t)
	w, err := as2.Wrap([]byte(doc), "application/EDI-X12", "", as2.WrapOptions{
		Encrypt: cms.AES128CBC, RecipientCert: ids.B.Cert, TransferEncoding: as2.Base64,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Header.Get("Content-Transfer-Encoding") != "base64" {
		t.Errorf("Content-Transfer-Encoding = %q", w.Header.Get("Content-Transfer-Encoding"))
	}
	if _, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(string(w.Body), "\r\n", "")); err != nil {
		t.Errorf("body is not base64: %v", err)
	}
}

// TestSignMultipartOpenSSL signs an MDN-like report the way the MDN
// package will and checks it with openssl and VerifyMultipartSigned.
func TestSignMultipartOpenSSL(t *testing.T) {
	ids := openssltest.Keys(t)
	report := []byte("Content-Type: multipart/report; report-type=disposition-notification; boundary=r\r\n\r\n" +
		"--r\r\nContent-Type: text/plain\r\n\r\nok\r\n--r\r\nContent-Type: message/disposition-notification\r\n\r\n" +
		"Disposition: automatic-action/MDN-sent-automatically; processed\r\n--r--\r\n")
	ct, body, mic, err := as2.SignMultipart(report, ids.B.Key, ids.B.Cert, as2.SignOptions{Hash: crypto.SHA512})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ct, "micalg=sha-512") {
		t.Errorf("SignMultipart() content type %q lacks micalg=sha-512", ct)
	}
	full := append([]byte("Content-Type: "+ct+"\r\n\r\n"), body...)
	dir := t.TempDir()
	openssltest.Run(t, nil, "cms", "-verify", "-in", write(t, dir, full), "-CAfile", ids.B.CertPath, "-purpose", "any", "-out", write(t, dir, nil))
	e, err := as2.ParseEntity(full, as2.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	signed, v, err := as2.VerifyMultipartSigned(e, []*x509Cert{ids.B.Cert}, as2.Limits{})
	if err != nil {
		t.Fatalf("VerifyMultipartSigned() error = %v", err)
	}
	if !bytes.Equal(signed, report) || v.Hash != crypto.SHA512 || !as2.ComputeMIC(v.Hash, signed).Equal(mic) {
		t.Errorf("VerifyMultipartSigned() = %q, %v", signed, v.Hash)
	}
	if _, _, err := as2.VerifyMultipartSigned(e, []*x509Cert{ids.A.Cert}, as2.Limits{}); as2.Disposition(err) != as2.DispositionAuthenticationFailed {
		t.Errorf("VerifyMultipartSigned(wrong cert) disposition = %q, want authentication-failed", as2.Disposition(err))
	}
}

// TestWrapMICs checks the MIC Wrap computes in every supported algorithm
// against the receiver's: for each layering and each algorithm, Unwrap
// asked for that algorithm (signed-receipt-micalg) at the partner returns
// the MIC Wrap stored for it. The MIC of an encrypted message cannot be
// recomputed from the bytes sent, so these are what a partner's MDN in
// another algorithm is checked against.
func TestWrapMICs(t *testing.T) {
	ids := openssltest.Keys(t)
	payload := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), 40)
	sign := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}
	with := func(o as2.WrapOptions, f func(*as2.WrapOptions)) as2.WrapOptions { f(&o); return o }
	encrypt := func(o *as2.WrapOptions) { o.Encrypt, o.RecipientCert = cms.AES256CBC, ids.B.Cert }
	tests := []struct {
		name   string
		opts   as2.WrapOptions
		scope  as2.MICScope
		layers string
	}{
		{"plain", as2.WrapOptions{}, as2.MICContentOnly, "[]"},
		{"plain, MIC with headers", as2.WrapOptions{UnsignedMIC: as2.MICWithHeaders}, as2.MICWithHeaders, "[]"},
		{"compressed", as2.WrapOptions{Compress: as2.CompressBeforeSigning}, as2.MICContentOnly, "[compressed]"},
		{"signed", sign, 0, "[signed]"},
		{"signed SHA-1", with(sign, func(o *as2.WrapOptions) { o.Sign = crypto.SHA1 }), 0, "[signed]"},
		{"compressed, signed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressBeforeSigning }), 0, "[signed compressed]"},
		{"signed, compressed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressAfterSigning }), 0, "[compressed signed]"},
		{"encrypted", with(as2.WrapOptions{}, encrypt), 0, "[encrypted]"},
		{"encrypted, asked SHA-512", with(as2.WrapOptions{MICAlg: crypto.SHA512}, encrypt), 0, "[encrypted]"},
		{"signed, encrypted", with(sign, encrypt), 0, "[encrypted signed]"},
		{"compressed, signed, encrypted, base64", with(sign, func(o *as2.WrapOptions) {
			encrypt(o)
			o.Compress, o.TransferEncoding = as2.CompressBeforeSigning, as2.Base64
		}), 0, "[encrypted signed compressed]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := as2.Wrap(payload, "application/EDI-X12", "po.x12", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.MICs) != len(as2.MICAlgorithms) {
				t.Fatalf("Wrap().MICs = %v, want one per algorithm of %v", w.MICs, as2.MICAlgorithms)
			}
			if m, ok := as2.FindMIC(w.MICs, w.MIC.Alg); !ok || !m.Equal(w.MIC) {
				t.Errorf("Wrap().MICs lack its MIC %v: %v", w.MIC, w.MICs)
			}
			for _, alg := range as2.MICAlgorithms {
				o := stationOpts(ids)
				o.MICAlgs, o.UnsignedMIC = []crypto.Hash{alg}, tt.scope
				got, err := as2.Unwrap(w.Header, bytes.Clone(w.Body), o)
				if err != nil {
					t.Fatalf("Unwrap() error = %v", err)
				}
				if fmt.Sprint(got.Layers) != tt.layers {
					t.Fatalf("Unwrap().Layers = %v, want %s", got.Layers, tt.layers)
				}
				want, _ := as2.FindMIC(w.MICs, alg)
				if !got.MIC.Equal(want) {
					t.Errorf("%s: receiver's MIC = %v, Wrap().MICs has %v", as2.MICAlgName(alg), got.MIC, want)
				}
			}
		})
	}
}
