package cms_test

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// bigMessages returns a 1 MiB payload and its encryption for ids.B in DER
// (our Encrypt, CBC and GCM) and in BER with segmented content (openssl
// -stream).
func bigMessages(t testing.TB, ids *openssltest.Identities) (payload []byte, msgs map[string][]byte) {
	t.Helper()
	payload = bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), (1<<20)/38+1)[:1<<20]
	msgs = map[string][]byte{}
	for name, c := range map[string]cms.Cipher{"DER aes256-cbc": cms.AES256CBC, "DER aes256-gcm": cms.AES256GCM} {
		der, err := cms.Encrypt(payload, []*x509Cert{ids.B.Cert}, cms.EncryptOptions{Cipher: c})
		if err != nil {
			t.Fatal(err)
		}
		msgs[name] = der
	}
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "in", payload)
	out := filepath.Join(dir, "ber.p7m")
	openssltest.Run(t, nil, "cms", "-encrypt", "-binary", "-aes256", "-stream", "-in", in, "-outform", "DER", "-out", out, ids.B.CertPath)
	ber := openssltest.ReadFile(t, out)
	if len(ber) < 2 || ber[1] != 0x80 {
		t.Fatalf("openssl -stream wrote %x…, want indefinite-length BER", ber[:min(len(ber), 8)])
	}
	msgs["BER aes256-cbc"] = ber
	return payload, msgs
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecryptAllocations bounds what decrypting a 1 MiB message allocates,
// in multiples of the payload: in place nothing proportional to it unless
// the content arrived in BER segments (gathered once); a copying Decrypt
// one buffer. Before in-place decryption a BER message cost a normalised
// copy plus the plaintext (> 2×).
func TestDecryptAllocations(t *testing.T) {
	ids := openssltest.Keys(t)
	payload, msgs := bigMessages(t, ids)
	recipients := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	tests := []struct {
		msg     string
		inPlace bool
		max     float64 // allocated bytes / payload bytes
	}{
		{"DER aes256-cbc", true, 0.05},
		{"DER aes256-gcm", true, 0.05},
		{"BER aes256-cbc", true, 1.1},
		{"DER aes256-cbc", false, 1.1},
		{"DER aes256-gcm", false, 1.1},
		{"BER aes256-cbc", false, 1.1},
	}
	for _, tt := range tests {
		name := tt.msg + "/Decrypt"
		decrypt := cms.Decrypt
		if tt.inPlace {
			name, decrypt = tt.msg+"/DecryptInPlace", cms.DecryptInPlace
		}
		t.Run(name, func(t *testing.T) {
			in := bytes.Clone(msgs[tt.msg])
			var got []byte
			var err error
			n := allocated(func() { got, err = decrypt(in, recipients) })
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("%s = %d bytes, %v; want the %d byte payload", name, len(got), err, len(payload))
			}
			if f := float64(n) / float64(len(payload)); f > tt.max {
				t.Errorf("%s allocated %d bytes = %.2f× the payload, want <= %.2f×", name, n, f, tt.max)
			}
		})
	}
}

// TestDecryptInPlaceTriesEveryKey: a failed attempt with one matching key
// must not destroy the ciphertext the next key decrypts. GCM makes the
// failure deterministic (the tag check), and a failed Open clears its
// output.
func TestDecryptInPlaceTriesEveryKey(t *testing.T) {
	ids := openssltest.Keys(t)
	der, err := cms.Encrypt([]byte(content), []*x509Cert{ids.B.Cert}, cms.EncryptOptions{Cipher: cms.AES128GCM})
	if err != nil {
		t.Fatal(err)
	}
	recipients := []cms.Recipient{
		{Cert: ids.B.Cert, Key: ids.C.Key.(crypto.Decrypter)}, // the old key of a rollover
		{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)},
	}
	got, err := cms.DecryptInPlace(bytes.Clone(der), recipients)
	if err != nil || string(got) != content {
		t.Errorf("DecryptInPlace() = %q, %v; want %q", got, err, content)
	}
	_, err = cms.DecryptInPlace(bytes.Clone(der), recipients[:1])
	if !errors.Is(err, cms.ErrDecryption) {
		t.Errorf("DecryptInPlace(wrong key) error = %v, want ErrDecryption", err)
	}
}

func BenchmarkDecrypt(b *testing.B) {
	ids := openssltest.Keys(b)
	payload, msgs := bigMessages(b, ids)
	recipients := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	for _, name := range []string{"DER aes256-cbc", "DER aes256-gcm", "BER aes256-cbc"} {
		for _, d := range []struct {
			name string
			fn   func([]byte, []cms.Recipient) ([]byte, error)
		}{{"Decrypt", cms.Decrypt}, {"DecryptInPlace", cms.DecryptInPlace}} {
			b.Run(name+"/"+d.name, func(b *testing.B) {
				buf := make([]byte, len(msgs[name]))
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, msgs[name]) // in place overwrites it
					if _, err := d.fn(buf, recipients); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecompress inflates CompressedData of EDI-like payloads in
// memory (Decompress) and as a stream over the same bytes
// (DecompressStream), so that the two paths' costs and allocations read
// side by side.
func BenchmarkDecompress(b *testing.B) {
	// X12-like lines with codes that do not repeat, which zlib about
	// halves (the bench's catalogue), and one line repeated, which it
	// shrinks a hundredfold.
	var catalogue []byte
	for i := 0; len(catalogue) < 1<<20; i++ {
		catalogue = fmt.Appendf(catalogue, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	repeated := bytes.Repeat([]byte("ST*850*0001~BEG*00*SA*PO-1**20260101~N1*ST*ACME*92*0042~\n"), 1<<20/50)
	for _, size := range []struct {
		name string
		data []byte
	}{{"4KiB", catalogue[:4<<10]}, {"1MiB", catalogue[:1<<20]}, {"1MiB-repeated", repeated[:1<<20]}} {
		payload := size.data
		der, err := cms.Compress(payload)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(size.name+"/Decompress", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cms.Decompress(der, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/DecompressStream", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := cms.DecompressStream(bytes.NewReader(der), 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
