package as2_test

import (
	"crypto"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// sizeCounter counts what is written to it and keeps nothing.
type sizeCounter struct{ n int64 }

func (c *sizeCounter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// builtSize builds an n-byte payload (written in pieces of 7001 bytes,
// so that no write matches a block or segment) with opts and returns
// the size WrapWriter.Size announced before the payload, whether it
// knew one, and the size of the body written.
func builtSize(t *testing.T, payload []byte, opts as2.WrapOptions) (want int64, known bool, got int64) {
	t.Helper()
	var c sizeCounter
	ww, err := as2.NewWrapWriter(&c, "application/EDI-X12", "po.x12", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ww.Abort()
	want, known = ww.Size(int64(len(payload)))
	header := ww.Header()
	for p := payload; len(p) > 0; {
		k := min(7001, len(p))
		if _, err := ww.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	w, err := ww.Close()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.Header) != fmt.Sprint(header) {
		t.Errorf("Header() = %v before the payload, Close().Header = %v", header, w.Header)
	}
	return want, known, c.n
}

// TestWrapWriterSize checks the body size WrapWriter.Size computes in
// advance against the bodies actually built, for every cipher and RSA
// signing digest, both transfer encodings, and payload sizes around
// every boundary the structure has: cipher blocks (8, 16), base64 lines
// (57 bytes of input), OCTET STRING segments (64 KiB) and the lengths
// of their headers, up to several MiB.
func TestWrapWriterSize(t *testing.T) {
	ids := openssltest.Keys(t)
	sizes := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 56, 57, 58, 113, 114, 115, 127, 128, 129, 255, 256, 257,
		65535 - 16, 65535, 65536, 65537, 65536 + 16, 2*65536 - 1, 2 * 65536, 2*65536 + 1, 57 * 65536, 57*65536 + 1}
	big := []int{3<<20 - 1, 3 << 20, 3<<20 + 17}
	payload := variedPayload(3<<20 + 17)
	ciphers := []cms.Cipher{0, cms.AES128CBC, cms.AES192CBC, cms.AES256CBC, cms.DESEDE3CBC, cms.AES128GCM, cms.AES256GCM}
	digests := []crypto.Hash{0, crypto.SHA1, crypto.SHA256, crypto.SHA384, crypto.SHA512}
	now := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	for _, c := range ciphers {
		for _, h := range digests {
			for _, te := range []as2.TransferEncoding{as2.Binary, as2.Base64} {
				opts := as2.WrapOptions{Time: now, TransferEncoding: te, OneMIC: true}
				if h != 0 {
					opts.Sign, opts.SignerKey, opts.SignerCert = h, ids.A.Key, ids.A.Cert
				}
				if c != 0 {
					opts.Encrypt, opts.RecipientCert = c, ids.B.Cert
					opts.OAEP, opts.OAEPHash = c == cms.AES256GCM, crypto.SHA256
				}
				n := sizes
				if te == as2.Base64 && h == crypto.SHA256 || c == cms.AES256GCM && h == crypto.SHA512 || c == cms.AES128CBC && h == 0 {
					n = append(append([]int(nil), sizes...), big...)
				}
				for _, k := range n {
					want, known, got := builtSize(t, payload[:k], opts)
					if !known || want != got {
						t.Errorf("cipher %v, sign %v, %v: Size(%d) = %d, %v; the body built has %d bytes", c, h, te, k, want, known, got)
					}
				}
			}
		}
	}
}

// TestWrapWriterSizeUnknown: a compressed message, and one signed with
// ECDSA (signatures of varying length), have no size in advance.
func TestWrapWriterSizeUnknown(t *testing.T) {
	ids := openssltest.Keys(t)
	ecKey, ecCert := ecdsaSigner(t)
	tests := []struct {
		name string
		give as2.WrapOptions
	}{
		{"compressed", as2.WrapOptions{Compress: as2.CompressBeforeSigning}},
		{"compressed, encrypted", as2.WrapOptions{Compress: as2.CompressBeforeSigning, Encrypt: cms.AES128CBC, RecipientCert: ids.B.Cert}},
		{"signed, compressed", as2.WrapOptions{Compress: as2.CompressAfterSigning, Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}},
		{"ECDSA", as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ecKey, SignerCert: ecCert}},
		{"ECDSA, encrypted", as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ecKey, SignerCert: ecCert, Encrypt: cms.AES128GCM, RecipientCert: ids.B.Cert}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ww, err := as2.NewWrapWriter(io.Discard, "application/EDI-X12", "", tt.give)
			if err != nil {
				t.Fatal(err)
			}
			defer ww.Abort()
			if n, ok := ww.Size(1000); ok {
				t.Errorf("Size(1000) = %d, true; want unknown", n)
			}
		})
	}
}
