package as2_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"testing"
	"unsafe"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// fuzzSeeds are AS2 bodies built by openssl plus Wrap outputs.
func fuzzSeeds(f *testing.F) []openssltest.Message {
	ids := openssltest.Keys(f)
	var seeds []openssltest.Message
	for _, c := range []struct{ sign, enc, comp, cte string }{
		{"sha256", "aes128", "none", "binary"},
		{"sha1", "", "before", "base64"},
		{"sha512", "aes128-gcm", "after", "binary"},
		{"", "des3", "none", "base64"},
		{"", "", "before", "binary"},
	} {
		seeds = append(seeds, buildOpenSSL(f, ids, c.sign, c.enc, c.comp, c.cte))
	}
	w, err := as2.Wrap([]byte(doc), "application/EDI-X12", "a.edi", as2.WrapOptions{
		Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256GCM, OAEP: true, RecipientCert: ids.B.Cert, Compress: as2.CompressBeforeSigning,
	})
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds, openssltest.Message{Header: w.Header, Body: w.Body})
	return seeds
}

// FuzzParseEntity parses arbitrary bytes and checks that errors wrap a
// sentinel and that the tree is made of the input: the top Raw is the
// input, each Body lies within its entity's Raw, and each part's Raw lies
// within its parent's Body, after the part before it.
func FuzzParseEntity(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(append(writeHTTPHeader(s.Header), s.Body...))
	}
	f.Add([]byte("Content-Type: multipart/mixed; boundary=b\n\n--b\n\nx\n--b--"))
	f.Add([]byte("Content-Type: text/plain\r\n folded\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3D"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := as2.ParseEntity(data, as2.Limits{MaxParts: 64, MaxDepth: 8})
		if err != nil {
			if !errors.Is(err, as2.ErrMalformedMIME) && !errors.Is(err, as2.ErrLimit) {
				t.Fatalf("ParseEntity() error %v wraps no sentinel", err)
			}
			return
		}
		if !bytes.Equal(e.Raw, data) {
			t.Fatal("Raw differs from the input")
		}
		var walk func(*as2.Entity)
		walk = func(e *as2.Entity) {
			e.DecodedBody()
			e.MediaType()
			if !within(e.Body, e.Raw) {
				t.Fatalf("Body (%d bytes) does not lie within the entity's Raw (%d bytes)", len(e.Body), len(e.Raw))
			}
			if len(e.Parts) > 0 && len(e.Body) == 0 {
				t.Fatalf("%d parts in an empty body", len(e.Parts))
			}
			end := 0 // where the part before ended in e.Body: parts follow one another
			for i, p := range e.Parts {
				if !within(p.Raw, e.Body) {
					t.Fatalf("part %d Raw (%d bytes) does not lie within its parent's Body (%d bytes)", i, len(p.Raw), len(e.Body))
				}
				if len(p.Raw) > 0 {
					start := offset(p.Raw, e.Body)
					if start < end {
						t.Fatalf("part %d starts at %d of its parent's Body, before part %d ended (%d)", i, start, i-1, end)
					}
					end = start + len(p.Raw)
				}
				walk(p)
			}
		}
		walk(e)
	})
}

func FuzzAS2Headers(f *testing.F) {
	for _, s := range []string{
		`"ACME CORP"`, "EDIHUB", `"a\"b\\c"`, "  x  ",
		"signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256, sha-1",
		"signed-receipt-micalg=required,md5;;=",
		"kBCi+cST+oW3TCNaJpplawnFBleIPTI2BFwGyOW3ggI=, sha-256", "rsa-sha1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if name, err := as2.ParseAS2Name(s); err == nil {
			q, err := as2.FormatAS2Name(name)
			if err != nil {
				t.Fatalf("FormatAS2Name(%q) error = %v for a parsed name", name, err)
			}
			if back, err := as2.ParseAS2Name(q); err != nil || back != name {
				t.Fatalf("ParseAS2Name(FormatAS2Name(%q)) = %q, %v", name, back, err)
			}
		}
		o, _ := as2.ParseDispositionOptions(s)
		o.MICAlg()
		o.SignedReceipt()
		if m, err := as2.ParseMIC(s); err == nil {
			if back, err := as2.ParseMIC(m.String()); err != nil || !back.Equal(m) {
				t.Fatalf("ParseMIC(%q) does not round-trip: %v", m.String(), err)
			}
		}
		as2.ParseMICAlg(s)
	})
}

var knownDispositions = map[string]bool{
	as2.DispositionDecryptionFailed: true, as2.DispositionAuthenticationFailed: true,
	as2.DispositionIntegrityCheckFailed: true, as2.DispositionDecompressionFailed: true,
	as2.DispositionUnexpectedProcessing: true,
}

func FuzzUnwrap(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s.Header.Get("Content-Type"), s.Header.Get("Content-Transfer-Encoding"), s.Body)
	}
	opts := stationOpts(ids)
	opts.Limits = as2.Limits{MaxDecompressedSize: 1 << 20, MaxDepth: 8, MaxParts: 64}
	f.Fuzz(func(t *testing.T, contentType, cte string, body []byte) {
		h := http.Header{"Content-Type": {contentType}}
		if cte != "" {
			h.Set("Content-Transfer-Encoding", cte)
		}
		m, err := as2.Unwrap(h, bytes.Clone(body), opts) // InPlace: the fuzzer's input is not ours
		if err != nil {
			var e *as2.Error
			if !errors.As(err, &e) || !knownDispositions[e.Disposition] {
				t.Fatalf("Unwrap() error = %v, not an *as2.Error with a known disposition", err)
			}
			return
		}
		if m.MIC.IsZero() {
			t.Fatal("Unwrap() succeeded without a MIC")
		}
	})
}

func BenchmarkUnwrap(b *testing.B) {
	ids := openssltest.Keys(b)
	line := []byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n")
	payload := bytes.Repeat(line, 4096/len(line)+1)[:4096]
	w, err := as2.Wrap(payload, "application/EDI-X12", "", as2.WrapOptions{
		Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert,
	})
	if err != nil {
		b.Fatal(err)
	}
	opts := stationOpts(ids)
	b.Run("4KiB-signed-encrypted", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := as2.Unwrap(w.Header, bytes.Clone(w.Body), opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWrap(b *testing.B) {
	ids := openssltest.Keys(b)
	for _, size := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		payload := bytes.Repeat([]byte("x"), size.n)
		b.Run(size.name+"-signed-encrypted", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := as2.Wrap(payload, "application/EDI-X12", "", as2.WrapOptions{
					Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
					Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert,
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkComputeMICs measures the MIC in every supported algorithm,
// which Wrap computes for each message, against the one MIC it computed
// before (the reference, in the same run): the difference is the cost of
// accepting a partner's MDN in any algorithm; compare it with
// BenchmarkWrap/1MiB.
func BenchmarkComputeMICs(b *testing.B) {
	payload := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), (1<<20)/38)
	b.Run("1MiB-sha-256-only", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			as2.ComputeMIC(crypto.SHA256, payload)
		}
	})
	b.Run("1MiB-all", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			as2.ComputeMICs(payload)
		}
	})
}

// BenchmarkRSA2048PrivateKeyOp is the yardstick for the benchmarks above:
// one RSA-2048 private-key operation dominates Unwrap and Wrap.
func BenchmarkRSA2048PrivateKeyOp(b *testing.B) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	ct, err := rsa.EncryptPKCS1v15(rand.Reader, &key.PublicKey, make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	digest := make([]byte, 32)
	b.Run("decrypt", func(b *testing.B) {
		for b.Loop() {
			if _, err := rsa.DecryptPKCS1v15(rand.Reader, key, ct); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// within reports whether inner is a slice of outer's memory (an empty
// inner is anywhere).
func within(inner, outer []byte) bool {
	if len(inner) == 0 {
		return true
	}
	if len(outer) == 0 {
		return false
	}
	i, o := uintptr(unsafe.Pointer(unsafe.SliceData(inner))), uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	return i >= o && i+uintptr(len(inner)) <= o+uintptr(len(outer))
}

// offset is where inner, a slice of outer's memory, starts in outer.
func offset(inner, outer []byte) int {
	if len(inner) == 0 || len(outer) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(inner))) - uintptr(unsafe.Pointer(unsafe.SliceData(outer))))
}

// FuzzUnwrapStream unwraps arbitrary bodies as a stream: every error is
// an *as2.Error with a known disposition, nothing panics, the payload written stays within the limits, and when Unwrap
// succeeds too both give the same payload and MIC.
func FuzzUnwrapStream(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s.Header.Get("Content-Type"), s.Header.Get("Content-Transfer-Encoding"), s.Body)
	}
	opts := stationOpts(ids)
	opts.Limits = as2.Limits{MaxDecompressedSize: 1 << 20, MaxDepth: 8, MaxParts: 64}
	f.Fuzz(func(t *testing.T, contentType, cte string, body []byte) {
		h := http.Header{"Content-Type": {contentType}}
		if cte != "" {
			h.Set("Content-Transfer-Encoding", cte)
		}
		var payload bytes.Buffer
		m, err := as2.UnwrapStream(h, bytes.NewReader(body), opts, &payload)
		if int64(payload.Len()) > opts.Limits.MaxDecompressedSize+int64(len(body)) {
			t.Fatalf("UnwrapStream wrote %d payload bytes from a %d-byte body", payload.Len(), len(body))
		}
		if err != nil {
			var e *as2.Error
			if !errors.As(err, &e) || !knownDispositions[e.Disposition] {
				t.Fatalf("UnwrapStream() error = %v, not an *as2.Error with a known disposition", err)
			}
			return
		}
		if m.MIC.IsZero() || m.PayloadSize != int64(payload.Len()) {
			t.Fatalf("UnwrapStream() succeeded with MIC %v, size %d for %d bytes written", m.MIC, m.PayloadSize, payload.Len())
		}
		if want, err := as2.Unwrap(h, bytes.Clone(body), opts); err == nil && (!bytes.Equal(want.Payload, payload.Bytes()) || !want.MIC.Equal(m.MIC)) {
			t.Fatalf("UnwrapStream() = %d bytes, MIC %v; Unwrap() = %d bytes, MIC %v", payload.Len(), m.MIC, len(want.Payload), want.MIC)
		}
	})
}
