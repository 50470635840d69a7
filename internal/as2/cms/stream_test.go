package cms_test

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// TestDecryptStreamOpenSSL decrypts what openssl encrypts, DER and BER
// streamed, with a content that is not a multiple of the chunk, read a
// byte at a time and in large reads.
func TestDecryptStreamOpenSSL(t *testing.T) {
	ids := openssltest.Keys(t)
	recipients := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef-"), 20000) // 340,000 bytes: several chunks
	tests := []struct {
		name    string
		content []byte
		args    []string
	}{
		{"aes256 DER small", []byte(content), []string{"-aes256"}},
		{"aes128 DER large", big, []string{"-aes128"}},
		{"aes256 BER stream large", big, []string{"-aes256", "-stream"}},
		{"des3 BER stream", big[:100_003], []string{"-des3", "-stream"}},
		{"aes256 oaep sha256", big[:70_000], []string{"-aes256", "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256"}},
		{"one block exactly", []byte("0123456789abcdef"), []string{"-aes128"}},
		{"aes128-gcm DER large", big, []string{"-aes-128-gcm"}},
		{"aes192-gcm DER small", []byte(content), []string{"-aes-192-gcm"}},
		{"aes256-gcm BER stream large", big, []string{"-aes-256-gcm", "-stream"}},
		{"aes256-gcm oaep", big[:70_001], []string{"-aes-256-gcm", "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256"}},
		{"aes256-gcm empty", []byte{}, []string{"-aes-256-gcm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ReplaceAll(tt.name, " ", "_")
			in := openssltest.WriteFile(t, dir, name+".in", tt.content)
			out := filepath.Join(dir, name+".p7m")
			args := append([]string{"cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", out, "-recip", ids.B.CertPath}, tt.args...)
			openssltest.Run(t, nil, args...)
			der := openssltest.ReadFile(t, out)
			for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
				r, err := cms.DecryptStream(wrap(bytes.NewReader(der)), recipients)
				if err != nil {
					t.Fatalf("DecryptStream: %v", err)
				}
				got, err := io.ReadAll(r)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if !bytes.Equal(got, tt.content) {
					t.Fatalf("DecryptStream = %d bytes, want the %d bytes encrypted", len(got), len(tt.content))
				}
			}
		})
	}
}

// TestDecryptStreamFailures: a wrong key surfaces as a decryption error
// at the end at the latest, and a truncated message is an error, never
// a short success.
func TestDecryptStreamFailures(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "in", bytes.Repeat([]byte("x"), 200_000))
	enc := func(name string, args ...string) []byte {
		out := filepath.Join(dir, name)
		openssltest.Run(t, nil, append([]string{"cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", out}, append(args, ids.B.CertPath)...)...)
		return openssltest.ReadFile(t, out)
	}
	good := enc("cbc.p7m", "-aes256")
	readAll := func(der []byte, rs []cms.Recipient) error {
		r, err := cms.DecryptStream(bytes.NewReader(der), rs)
		if err != nil {
			return err
		}
		_, err = io.ReadAll(r)
		return err
	}
	mine := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	if err := readAll(good[:len(good)-100], mine); err == nil {
		t.Error("truncated message: no error")
	}
	if err := readAll(good, []cms.Recipient{{Cert: ids.C.Cert, Key: ids.C.Key.(crypto.Decrypter)}}); !errors.Is(err, cms.ErrNoRecipient) {
		t.Errorf("other recipient: %v, want ErrNoRecipient", err)
	}
	// The last ciphertext byte flipped: bad padding, or (1 in 256) a
	// different last byte; either way never the content as sent.
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0x55
	if err := readAll(bad, mine); !errors.Is(err, cms.ErrDecryption) {
		t.Logf("flipped last byte: %v (padding happened to be valid)", err)
	}
}

// TestDecompressStream inflates CompressedData built by Compress and
// stops a bomb at its limit.
func TestDecompressStream(t *testing.T) {
	want := bytes.Repeat([]byte("ISA*00*~GS*PO~ST*850~"), 50_000)
	der, err := cms.Compress(want)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cms.DecompressStream(iotest.HalfReader(bytes.NewReader(der)), 0)
	if err != nil {
		t.Fatalf("DecompressStream: %v", err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("DecompressStream = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	r, err = cms.DecompressStream(bytes.NewReader(der), int64(len(want)-1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, cms.ErrTooLarge) || !errors.Is(err, cms.ErrDecompression) {
		t.Fatalf("over the limit: %v, want ErrTooLarge and ErrDecompression", err)
	}
}

// TestVerifyDigests verifies an openssl detached signature from digests
// computed apart, and refuses one made with a digest not computed.
func TestVerifyDigests(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "in", []byte(content))
	sig := openssltest.Run(t, nil, "cms", "-sign", "-binary", "-in", in, "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath, "-md", "sha384", "-outform", "DER")
	sum := func(h crypto.Hash, b []byte) []byte { hh := h.New(); hh.Write(b); return hh.Sum(nil) }
	v, err := cms.VerifyDigests(sig, map[crypto.Hash][]byte{crypto.SHA384: sum(crypto.SHA384, []byte(content))}, []*x509.Certificate{ids.A.Cert})
	if err != nil || v.Hash != crypto.SHA384 {
		t.Fatalf("VerifyDigests = %v, %v", v, err)
	}
	if _, err := cms.VerifyDigests(sig, map[crypto.Hash][]byte{crypto.SHA384: sum(crypto.SHA384, []byte("altered"))}, []*x509.Certificate{ids.A.Cert}); !errors.Is(err, cms.ErrDigestMismatch) {
		t.Errorf("altered content: %v, want ErrDigestMismatch", err)
	}
	if _, err := cms.VerifyDigests(sig, map[crypto.Hash][]byte{crypto.SHA256: sum(crypto.SHA256, []byte(content))}, []*x509.Certificate{ids.A.Cert}); !errors.Is(err, cms.ErrUnsupportedAlgorithm) {
		t.Errorf("digest not computed: %v, want ErrUnsupportedAlgorithm", err)
	}
}

// TestDecryptStreamGCMOpenSSL: openssl's AuthEnvelopedData (DER and BER
// streamed) with a ciphertext byte or a tag byte altered, truncated, or
// for another station fails with ErrDecryption (or an error of the
// structure), never io.EOF: the plaintext a reader released before is
// never vouched for.
func TestDecryptStreamGCMOpenSSL(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "in", bytes.Repeat([]byte("ISA*00*GCM~"), 30_000))
	mine := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	for _, form := range []struct {
		name string
		args []string
		tail int // bytes after the tag: end-of-contents octets
	}{{"DER", nil, 0}, {"BER stream", []string{"-stream"}, 6}} {
		t.Run(form.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(form.name, " ", "_")+".p7m")
			openssltest.Run(t, nil, append(append([]string{"cms", "-encrypt", "-binary", "-aes-256-gcm", "-in", in, "-outform", "DER", "-out", out}, form.args...), ids.B.CertPath)...)
			good := openssltest.ReadFile(t, out)
			readAll := func(der []byte, rs []cms.Recipient) ([]byte, error) {
				r, err := cms.DecryptStream(bytes.NewReader(der), rs)
				if err != nil {
					return nil, err
				}
				return io.ReadAll(r)
			}
			if got, err := readAll(good, mine); err != nil || !bytes.Equal(got, openssltest.ReadFile(t, in)) {
				t.Fatalf("good message: %d bytes, %v", len(got), err)
			}
			flip := func(i int) []byte {
				b := bytes.Clone(good)
				b[i] ^= 0x01
				return b
			}
			tagAt := len(good) - form.tail - 16
			for name, der := range map[string][]byte{
				"ciphertext byte":  flip(len(good) / 2),
				"first tag byte":   flip(tagAt),
				"last tag byte":    flip(tagAt + 15),
				"last cipher byte": flip(tagAt - 2 - 1 - 4*min(form.tail, 1)),
			} {
				if _, err := readAll(der, mine); !errors.Is(err, cms.ErrDecryption) {
					t.Errorf("%s altered: %v, want ErrDecryption", name, err)
				}
			}
			if _, err := readAll(good[:tagAt+8], mine); err == nil || errors.Is(err, io.EOF) {
				t.Errorf("truncated in the tag: %v, want an error", err)
			}
			if _, err := readAll(good, []cms.Recipient{{Cert: ids.C.Cert, Key: ids.C.Key.(crypto.Decrypter)}}); !errors.Is(err, cms.ErrNoRecipient) {
				t.Errorf("other recipient: %v, want ErrNoRecipient", err)
			}
		})
	}
}

// decryptErrorClass is the sentinels a decryption error wraps, the class
// a caller tells errors apart by.
func decryptErrorClass(err error) []error {
	var c []error
	for _, s := range []error{cms.ErrMalformed, cms.ErrContentType, cms.ErrUnsupportedAlgorithm, cms.ErrNoRecipient, cms.ErrDecryption} {
		if errors.Is(err, s) {
			c = append(c, s)
		}
	}
	return c
}

// TestDecryptMatchesDecryptStream: Decrypt (kept apart from
// DecryptStream: it decrypts in place, DecryptInPlace) and DecryptStream
// give the same plaintext, or fail with the same class of error, on the
// inputs either is tested with: openssl's ciphers in DER and BER
// segments, OAEP, GCM, our Encrypt's, an empty content, and truncated,
// tampered, foreign and wrongly addressed messages.
func TestDecryptMatchesDecryptStream(t *testing.T) {
	ids := openssltest.Keys(t)
	mine := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef-"), 20000)
	openssl := func(name string, content []byte, args ...string) []byte {
		in := openssltest.WriteFile(t, dir, name+".in", content)
		out := filepath.Join(dir, name+".p7m")
		openssltest.Run(t, nil, append([]string{"cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", out, "-recip", ids.B.CertPath}, args...)...)
		return openssltest.ReadFile(t, out)
	}
	ours := func(c cms.Cipher, content []byte) []byte {
		der, err := cms.Encrypt(content, []*x509.Certificate{ids.B.Cert}, cms.EncryptOptions{Cipher: c})
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	cbc := openssl("cbc", big, "-aes256")
	gcm := openssl("gcm", big, "-aes-128-gcm")
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x55; return b }
	compressed, err := cms.Compress([]byte(content))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		give       []byte
		recipients []cms.Recipient
		want       []byte // the plaintext, when it decrypts
		class      []error
	}{
		{"aes256 DER", cbc, mine, big, nil},
		{"aes256 BER stream", openssl("cbcber", big, "-aes256", "-stream"), mine, big, nil},
		{"des3 BER stream", openssl("des3", big[:100_003], "-des3", "-stream"), mine, big[:100_003], nil},
		{"aes256 oaep sha256", openssl("oaep", big[:70_000], "-aes256", "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256"), mine, big[:70_000], nil},
		{"one block exactly", openssl("block", []byte("0123456789abcdef"), "-aes128"), mine, []byte("0123456789abcdef"), nil},
		{"aes128-gcm DER", gcm, mine, big, nil},
		{"aes256-gcm BER stream", openssl("gcmber", big, "-aes-256-gcm", "-stream"), mine, big, nil},
		{"aes256-gcm empty", openssl("gcmempty", []byte{}, "-aes-256-gcm"), mine, []byte{}, nil},
		{"Encrypt aes256-cbc", ours(cms.AES256CBC, big), mine, big, nil},
		{"Encrypt aes256-gcm", ours(cms.AES256GCM, big), mine, big, nil},
		{"other recipient", cbc, []cms.Recipient{{Cert: ids.C.Cert, Key: ids.C.Key.(crypto.Decrypter)}}, nil, []error{cms.ErrNoRecipient}},
		{"gcm ciphertext tampered", flip(gcm, len(gcm)/2), mine, nil, []error{cms.ErrDecryption}},
		{"gcm tag tampered", flip(gcm, len(gcm)-1), mine, nil, []error{cms.ErrDecryption}},
		{"truncated in the ciphertext", cbc[:len(cbc)/2], mine, nil, []error{cms.ErrMalformed}},
		{"truncated at the end", cbc[:len(cbc)-100], mine, nil, []error{cms.ErrMalformed}},
		{"compressed data", compressed, mine, nil, []error{cms.ErrContentType}},
		{"empty", nil, mine, nil, []error{cms.ErrMalformed}},
		{"text", []byte("hello world"), mine, nil, []error{cms.ErrMalformed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cms.Decrypt(bytes.Clone(tt.give), tt.recipients)
			var streamed []byte
			r, serr := cms.DecryptStream(iotest.HalfReader(bytes.NewReader(tt.give)), tt.recipients)
			if serr == nil {
				streamed, serr = io.ReadAll(r)
			}
			if tt.class == nil {
				if err != nil || !bytes.Equal(got, tt.want) {
					t.Errorf("Decrypt(%s) = %d bytes, %v; want the %d bytes encrypted", tt.name, len(got), err, len(tt.want))
				}
				if serr != nil || !bytes.Equal(streamed, tt.want) {
					t.Errorf("DecryptStream(%s) = %d bytes, %v; want the %d bytes encrypted", tt.name, len(streamed), serr, len(tt.want))
				}
				return
			}
			if c := decryptErrorClass(err); !slices.Equal(c, tt.class) {
				t.Errorf("Decrypt(%s) error = %v, class %v; want class %v", tt.name, err, c, tt.class)
			}
			if c := decryptErrorClass(serr); !slices.Equal(c, tt.class) {
				t.Errorf("DecryptStream(%s) error = %v, class %v; want class %v", tt.name, serr, c, tt.class)
			}
		})
	}
}
