package as2_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"runtime"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// ecdsaSigner is a self-signed P-256 signing identity.
func ecdsaSigner(t *testing.T) (crypto.Signer, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "as2-ec"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// variedPayload is n bytes of EDI-like lines that differ from each
// other, so that deflate has real work in every 256 KiB block.
func variedPayload(n int) []byte {
	var b bytes.Buffer
	r := seeded(9)
	var x [4]byte
	for i := 0; b.Len() < n; i++ {
		r.Read(x[:])
		fmt.Fprintf(&b, "LIN*%d*VP*%x*QTY*%d~\n", i, x, x[0])
	}
	return b.Bytes()[:n]
}

// TestWrapWriterReproducible builds every profile twice from the same
// payload, options and time: the second build gets the StreamInputs the
// first recorded (through their JSON form, as the outbox stores them),
// crypto/rand instead of the first's seeded source, other write sizes
// and one core instead of all (the parallel zlib's blocks are split by
// size, not by timing), and must write the same bytes with the same
// MICs. A third build without the inputs must differ for every profile
// that draws something, which shows the inputs are what makes the
// second equal.
func TestWrapWriterReproducible(t *testing.T) {
	ids := openssltest.Keys(t)
	ecKey, ecCert := ecdsaSigner(t)
	payload := variedPayload(1<<20 + 12345)
	at := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	sign := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}
	with := func(o as2.WrapOptions, f func(*as2.WrapOptions)) as2.WrapOptions { f(&o); return o }
	encrypt := func(c cms.Cipher) func(*as2.WrapOptions) {
		return func(o *as2.WrapOptions) { o.Encrypt, o.RecipientCert = c, ids.B.Cert }
	}
	tests := []struct {
		name   string
		opts   as2.WrapOptions
		random bool // the build draws something
	}{
		{"plain", as2.WrapOptions{}, false},
		{"compressed", as2.WrapOptions{Compress: as2.CompressBeforeSigning}, false},
		{"signed", sign, true},
		{"signed ECDSA", as2.WrapOptions{Sign: crypto.SHA384, SignerKey: ecKey, SignerCert: ecCert}, true},
		{"compressed, signed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressBeforeSigning }), true},
		{"signed, compressed", with(sign, func(o *as2.WrapOptions) { o.Compress = as2.CompressAfterSigning }), true},
		{"encrypted AES-256-CBC", with(as2.WrapOptions{}, encrypt(cms.AES256CBC)), true},
		{"encrypted 3DES OAEP", with(as2.WrapOptions{}, func(o *as2.WrapOptions) {
			encrypt(cms.DESEDE3CBC)(o)
			o.OAEP = true
		}), true},
		{"encrypted AES-128-GCM", with(as2.WrapOptions{}, encrypt(cms.AES128GCM)), true},
		{"compressed, signed, encrypted AES-256-CBC", with(sign, func(o *as2.WrapOptions) {
			encrypt(cms.AES256CBC)(o)
			o.Compress = as2.CompressBeforeSigning
		}), true},
		{"compressed, signed, encrypted AES-256-GCM OAEP, base64", with(sign, func(o *as2.WrapOptions) {
			encrypt(cms.AES256GCM)(o)
			o.OAEP, o.Compress, o.TransferEncoding = true, as2.CompressBeforeSigning, as2.Base64
		}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := tt.opts
			first.Time, first.Rand, first.Inputs = at, seeded(1), &as2.StreamInputs{}
			w1 := wrapStream(t, payload, 1000, first)

			stored, err := json.Marshal(first.Inputs)
			if err != nil {
				t.Fatal(err)
			}
			again := tt.opts
			again.Time, again.Inputs = at, &as2.StreamInputs{}
			if err := json.Unmarshal(stored, again.Inputs); err != nil {
				t.Fatal(err)
			}
			prev := runtime.GOMAXPROCS(1)
			w2 := wrapStream(t, payload, 65537, again)
			runtime.GOMAXPROCS(prev)
			if !bytes.Equal(w1.Body, w2.Body) {
				t.Fatalf("rebuilt body differs (%d bytes, first %d) from the first build", len(w2.Body), len(w1.Body))
			}
			if fmt.Sprint(w1.Header) != fmt.Sprint(w2.Header) || !w1.MIC.Equal(w2.MIC) || fmt.Sprint(w1.MICs) != fmt.Sprint(w2.MICs) {
				t.Errorf("rebuilt header %v, MICs %v; want the first build's %v, %v", w2.Header, w2.MICs, w1.Header, w1.MICs)
			}

			fresh := tt.opts
			fresh.Time = at
			w3 := wrapStream(t, payload, 1000, fresh)
			if got := !bytes.Equal(w1.Body, w3.Body); got != tt.random {
				t.Errorf("a build without the inputs differs = %v, want %v", got, tt.random)
			}
		})
	}
}

// TestWrapWriterInputsNewContent rebuilds a signed, encrypted message
// with the inputs recorded for another payload (what a rebuild sees when
// the payload's compression changed): the recorded signature does not
// sign the new content, so the build signs again, and the receiver
// verifies it and finds the new payload.
func TestWrapWriterInputsNewContent(t *testing.T) {
	ids := openssltest.Keys(t)
	opts := as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert,
		Encrypt: cms.AES256CBC, RecipientCert: ids.B.Cert, Time: time.Now(), Inputs: &as2.StreamInputs{}}
	payload := variedPayload(300 << 10)
	w1 := wrapStream(t, payload, 4096, opts)
	other := append(bytes.Clone(payload[:len(payload)-1]), '#')
	w2 := wrapStream(t, other, 4096, opts)
	if w1.MIC.Equal(w2.MIC) {
		t.Fatalf("MIC of another payload = %v, the same as the first's", w2.MIC)
	}
	o := stationOpts(ids)
	o.InPlace = false
	got, err := as2.Unwrap(w2.Header, w2.Body, o)
	if err != nil {
		t.Fatalf("Unwrap(rebuilt with other content) error = %v", err)
	}
	if !bytes.Equal(got.Payload, other) || !got.MIC.Equal(w2.MIC) {
		t.Errorf("Unwrap() = %d bytes, MIC %v; want the other payload's %d, %v", len(got.Payload), got.MIC, len(other), w2.MIC)
	}
}
