package as2_test

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// wrapStream builds payload with a WrapWriter, written in pieces of
// piece bytes, and returns the message with its body.
func wrapStream(t *testing.T, payload []byte, piece int, opts as2.WrapOptions) *as2.Wrapped {
	t.Helper()
	var body bytes.Buffer
	ww, err := as2.NewWrapWriter(&body, "application/EDI-X12", "po.x12", opts)
	if err != nil {
		t.Fatal(err)
	}
	for p := payload; len(p) > 0; {
		n := min(piece, len(p))
		if _, err := ww.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	w, err := ww.Close()
	if err != nil {
		t.Fatal(err)
	}
	if w.Body != nil {
		t.Fatalf("Close().Body = %d bytes, want nil (the body went to the destination)", len(w.Body))
	}
	w.Body = body.Bytes()
	return w
}

// TestWrapWriter builds every layering with a WrapWriter and checks it
// against the receiver, in memory (Unwrap) and streamed (UnwrapStream):
// the payload comes back, every layer is there, the receiver's MIC in
// every algorithm is the one the writer computed, and the header fields
// are Wrap's (but for the drawn boundary).
func TestWrapWriter(t *testing.T) {
	ids := openssltest.Keys(t)
	payload := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), 3000)
	sign := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}
	with := func(o as2.WrapOptions, f func(*as2.WrapOptions)) as2.WrapOptions { f(&o); return o }
	encrypt := func(o *as2.WrapOptions) { o.Encrypt, o.RecipientCert = cms.AES256CBC, ids.B.Cert }
	base64Body := func(o *as2.WrapOptions) { o.TransferEncoding = as2.Base64 }
	tests := []struct {
		name   string
		opts   as2.WrapOptions
		scope  as2.MICScope
		layers string
	}{
		{"plain", as2.WrapOptions{}, as2.MICContentOnly, "[]"},
		{"plain, MIC with headers", as2.WrapOptions{UnsignedMIC: as2.MICWithHeaders}, as2.MICWithHeaders, "[]"},
		{"plain base64", with(as2.WrapOptions{}, base64Body), as2.MICContentOnly, "[]"},
		{"compressed", as2.WrapOptions{Compress: as2.CompressBeforeSigning}, as2.MICContentOnly, "[compressed]"},
		{"signed", sign, 0, "[signed]"},
		{"signed SHA-512 base64", with(sign, func(o *as2.WrapOptions) { o.Sign = crypto.SHA512; base64Body(o) }), 0, "[signed]"},
		{"compressed, signed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressBeforeSigning }), 0, "[signed compressed]"},
		{"signed, compressed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressAfterSigning }), 0, "[compressed signed]"},
		{"encrypted", with(as2.WrapOptions{}, encrypt), 0, "[encrypted]"},
		{"encrypted 3DES OAEP, asked SHA-512", with(as2.WrapOptions{MICAlg: crypto.SHA512}, func(o *as2.WrapOptions) {
			encrypt(o)
			o.Encrypt, o.OAEP = cms.DESEDE3CBC, true
		}), 0, "[encrypted]"},
		{"signed, encrypted", with(sign, encrypt), 0, "[encrypted signed]"},
		{"encrypted AES-128-GCM", with(as2.WrapOptions{}, func(o *as2.WrapOptions) {
			encrypt(o)
			o.Encrypt = cms.AES128GCM
		}), 0, "[encrypted]"},
		{"compressed, signed, encrypted AES-256-GCM OAEP, base64", with(sign, func(o *as2.WrapOptions) {
			encrypt(o)
			base64Body(o)
			o.Encrypt, o.OAEP, o.Compress = cms.AES256GCM, true, as2.CompressBeforeSigning
		}), 0, "[encrypted signed compressed]"},
		{"compressed, signed, encrypted", with(sign, func(o *as2.WrapOptions) {
			encrypt(o)
			o.Compress = as2.CompressBeforeSigning
		}), 0, "[encrypted signed compressed]"},
		{"compressed, signed, encrypted, base64", with(sign, func(o *as2.WrapOptions) {
			encrypt(o)
			base64Body(o)
			o.Compress = as2.CompressBeforeSigning
		}), 0, "[encrypted signed compressed]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := wrapStream(t, payload, 1000, tt.opts)
			ref, err := as2.Wrap(payload, "application/EDI-X12", "po.x12", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := stripBoundary(w.Header), stripBoundary(ref.Header); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("header = %v, want Wrap's %v", got, want)
			}
			if len(w.MICs) != len(as2.MICAlgorithms) {
				t.Fatalf("MICs = %v, want one per algorithm", w.MICs)
			}
			for _, alg := range as2.MICAlgorithms {
				o := stationOpts(ids)
				o.InPlace = false
				o.MICAlgs, o.UnsignedMIC = []crypto.Hash{alg}, tt.scope
				got, err := as2.Unwrap(w.Header, bytes.Clone(w.Body), o)
				if err != nil {
					t.Fatalf("Unwrap() error = %v", err)
				}
				if fmt.Sprint(got.Layers) != tt.layers {
					t.Fatalf("Unwrap().Layers = %v, want %s", got.Layers, tt.layers)
				}
				if !bytes.Equal(got.Payload, payload) {
					t.Fatalf("Unwrap().Payload = %d bytes, want the %d written", len(got.Payload), len(payload))
				}
				want, _ := as2.FindMIC(w.MICs, alg)
				if !got.MIC.Equal(want) {
					t.Errorf("%s: receiver's MIC = %v, the writer's %v", as2.MICAlgName(alg), got.MIC, want)
				}
				if alg == w.MIC.Alg && !got.MIC.Equal(w.MIC) {
					t.Errorf("receiver's MIC = %v, the writer's MIC %v", got.MIC, w.MIC)
				}
			}
			o := stationOpts(ids)
			o.UnsignedMIC = tt.scope
			o.MICAlgs = []crypto.Hash{w.MIC.Alg}
			var streamed bytes.Buffer
			got, err := as2.UnwrapStream(w.Header, bytes.NewReader(w.Body), o, &streamed)
			if err != nil {
				t.Fatalf("UnwrapStream() error = %v", err)
			}
			if !bytes.Equal(streamed.Bytes(), payload) || !got.MIC.Equal(w.MIC) {
				t.Errorf("UnwrapStream() = %d payload bytes, MIC %v; want %d, %v", streamed.Len(), got.MIC, len(payload), w.MIC)
			}
		})
	}
}

// stripBoundary is h with the boundary parameter of a multipart/signed
// Content-Type removed (drawn anew on every build).
func stripBoundary(h http.Header) http.Header {
	h = h.Clone()
	if ct, _, ok := strings.Cut(h.Get("Content-Type"), `; boundary=`); ok {
		h.Set("Content-Type", ct)
	}
	return h
}

// TestWrapWriterBoundaryInContent checks that content holding the
// multipart boundary drawn before it is refused, also across writes.
func TestWrapWriterBoundaryInContent(t *testing.T) {
	ids := openssltest.Keys(t)
	// The boundary comes from Rand: 12 bytes of zeros.
	boundary := "----=_Part_" + strings.Repeat("00", 12)
	opts := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert, Rand: zeros{}}
	ww, err := as2.NewWrapWriter(io.Discard, "text/plain", "", opts)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("before " + boundary + " after")
	for _, b := range content { // one byte a write: the boundary spans writes
		if _, err := ww.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ww.Close(); !errors.Is(err, as2.ErrBoundaryInContent) {
		t.Fatalf("Close() = %v, want ErrBoundaryInContent", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestWrapWriterOpenSSL has openssl, the independent peer, decrypt a
// compressed, signed and encrypted message built by a WrapWriter (BER
// with indefinite lengths) and verify its signature over the signed
// entity, whose SHA-256 is the writer's MIC; the compressed entity (its
// zlib stream deflated in blocks on several cores) inflates to the
// payload entity.
func TestWrapWriterOpenSSL(t *testing.T) {
	ids := openssltest.Keys(t)
	var payload []byte
	for i := 0; len(payload) < 3<<20; i++ { // several blocks of the parallel deflate
		payload = fmt.Appendf(payload, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	w := wrapStream(t, payload, 4096, as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert, Compress: as2.CompressBeforeSigning})
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "body.p7m", w.Body)
	dec := filepath.Join(dir, "signed.mime")
	openssltest.Run(t, nil, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", in, "-recip", ids.B.CertPath, "-inkey", ids.B.KeyPath, "-out", dec)
	signedPart, sig := splitSigned(t, openssltest.ReadFile(t, dec))
	part1 := openssltest.WriteFile(t, dir, "part1", signedPart)
	sigFile := openssltest.WriteFile(t, dir, "sig.der", sig)
	openssltest.Run(t, nil, "cms", "-verify", "-binary", "-inform", "DER", "-in", sigFile, "-content", part1, "-CAfile", ids.A.CertPath, "-out", filepath.Join(dir, "verified"))
	if got := dgst(t, "sha256", part1) + ", sha-256"; got != w.MIC.String() {
		t.Errorf("openssl dgst of the signed entity = %s, writer's MIC %s", got, w.MIC)
	}
	_, compressed := splitEntity(t, signedPart)
	zr, err := cms.DecompressStream(bytes.NewReader(compressed), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if _, got := splitEntity(t, inner); !bytes.Equal(got, payload) {
		t.Errorf("the compressed entity inflates to %d payload bytes, want the %d written", len(got), len(payload))
	}
}

// splitSigned splits a multipart/signed entity (header included) per RFC
// 2046: the first part exactly as sent and the decoded signature.
func splitSigned(t *testing.T, ent []byte) (part1, sig []byte) {
	t.Helper()
	head, body, ok := bytes.Cut(ent, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no header in %.100q", ent)
	}
	_, params, err := mime.ParseMediaType(strings.TrimPrefix(string(head), "Content-Type: "))
	if err != nil {
		t.Fatal(err)
	}
	delim := "\r\n--" + params["boundary"]
	body, ok = bytes.CutPrefix(body, []byte(delim[2:]+"\r\n"))
	if !ok {
		t.Fatalf("no opening delimiter in %.100q", body)
	}
	part1, rest, ok := bytes.Cut(body, []byte(delim+"\r\n"))
	if !ok {
		t.Fatal("no second part")
	}
	sigEnt, _, ok := bytes.Cut(rest, []byte(delim+"--"))
	if !ok {
		t.Fatal("no closing delimiter")
	}
	_, b64, _ := bytes.Cut(sigEnt, []byte("\r\n\r\n"))
	sig, err = base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b64)))
	if err != nil {
		t.Fatal(err)
	}
	return part1, sig
}

// BenchmarkWrapWriter builds a compressed, signed and encrypted message
// of 64 MiB of X12-like lines as a stream into io.Discard.
func BenchmarkWrapWriter(b *testing.B) {
	ids := openssltest.Keys(b)
	var payload []byte
	for i := 0; len(payload) < 64<<20; i++ {
		payload = fmt.Appendf(payload, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	opts := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert, Compress: as2.CompressBeforeSigning}
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		ww, err := as2.NewWrapWriter(io.Discard, "application/EDI-X12", "", opts)
		if err != nil {
			b.Fatal(err)
		}
		for p := payload; len(p) > 0; p = p[min(len(p), 1<<20):] {
			if _, err := ww.Write(p[:min(len(p), 1<<20)]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := ww.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// seeded is a deterministic Rand: two builds with the same seed draw the
// same boundary, content key and IV.
func seeded(seed byte) io.Reader { return rand.NewChaCha8([32]byte{seed}) }

// TestWrapWriterOneMIC: OneMIC changes nothing of the message but MICs,
// which holds the MIC alone, for every place the MIC is taken; the
// parallel compression makes the same bytes however the payload is
// written.
func TestWrapWriterOneMIC(t *testing.T) {
	ids := openssltest.Keys(t)
	var payload []byte
	for i := 0; len(payload) < 3<<20; i++ {
		payload = fmt.Appendf(payload, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	sign := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}
	for _, tt := range []struct {
		name string
		opts as2.WrapOptions
	}{
		{"plain", as2.WrapOptions{MICAlg: crypto.SHA384}},
		{"compressed", as2.WrapOptions{Compress: as2.CompressBeforeSigning}},
		{"encrypted", as2.WrapOptions{Encrypt: cms.AES128CBC, RecipientCert: ids.B.Cert}},
		{"compressed, signed, encrypted", func() as2.WrapOptions {
			o := sign
			o.Compress, o.Encrypt, o.RecipientCert = as2.CompressBeforeSigning, cms.AES256CBC, ids.B.Cert
			return o
		}()},
		{"signed SHA-512, compressed", func() as2.WrapOptions {
			o := sign
			o.Sign, o.Compress = crypto.SHA512, as2.CompressAfterSigning
			return o
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			all, one := tt.opts, tt.opts
			all.Rand, all.Time = seeded(7), time.Unix(1e9, 0)
			one.Rand, one.Time, one.OneMIC = seeded(7), all.Time, true
			wAll := wrapStream(t, payload, 1<<20, all)
			wOne := wrapStream(t, payload, 12345, one)
			if tt.opts.Encrypt == 0 && !bytes.Equal(wAll.Body, wOne.Body) {
				t.Fatalf("OneMIC body (%d bytes) differs from the body with every MIC (%d bytes)", len(wOne.Body), len(wAll.Body))
			}
			if tt.opts.Encrypt != 0 { // the key transport's padding is random: unwrap both
				for _, w := range []*as2.Wrapped{wAll, wOne} {
					o := stationOpts(ids)
					o.MICAlgs = []crypto.Hash{w.MIC.Alg}
					got, err := as2.Unwrap(w.Header, bytes.Clone(w.Body), o)
					if err != nil || !bytes.Equal(got.Payload, payload) || !got.MIC.Equal(w.MIC) {
						t.Fatalf("Unwrap = %v; want the payload and MIC %v", err, w.MIC)
					}
				}
			}
			if len(wAll.MICs) != len(as2.MICAlgorithms) {
				t.Errorf("MICs = %v, want one per algorithm", wAll.MICs)
			}
			if len(wOne.MICs) != 1 || !wOne.MICs[0].Equal(wOne.MIC) || !wOne.MIC.Equal(wAll.MIC) {
				t.Errorf("OneMIC: MIC %v, MICs %v; want the MIC %v alone", wOne.MIC, wOne.MICs, wAll.MIC)
			}
			if m, ok := as2.FindMIC(wAll.MICs, wAll.MIC.Alg); !ok || !m.Equal(wAll.MIC) {
				t.Errorf("MICs %v lack the MIC %v", wAll.MICs, wAll.MIC)
			}
		})
	}
}

// TestWrapWriterAbort: a build given up mid-way (Abort), or failing on
// its destination, ends every goroutine it started (parallel
// compression, the MIC in other algorithms), and later writes fail.
func TestWrapWriterAbort(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ids := openssltest.Keys(t)
	opts := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert, Compress: as2.CompressBeforeSigning}
	payload := bytes.Repeat([]byte("LIN*1*VP*0123456789abcdef*PRICE*42~\n"), 100_000)
	ww, err := as2.NewWrapWriter(io.Discard, "application/EDI-X12", "", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ww.Write(payload); err != nil {
		t.Fatal(err)
	}
	ww.Abort()
	ww.Abort()
	if _, err := ww.Write([]byte("more")); err == nil {
		t.Error("Write after Abort: no error")
	}
	if _, err := ww.Close(); err == nil {
		t.Error("Close after Abort: no error")
	}

	failing := errors.New("spool full")
	ww, err = as2.NewWrapWriter(&failAfter{n: 4096, err: failing}, "application/EDI-X12", "", opts)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := ww.Write(payload)
	_, cerr := ww.Close()
	if !errors.Is(cerr, failing) && !errors.Is(werr, failing) {
		t.Errorf("destination failing: Write %v, Close %v; want %v", werr, cerr, failing)
	}
}

// failAfter accepts n bytes, then fails every write with err.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, f.err
	}
	f.n -= len(p)
	return len(p), nil
}
