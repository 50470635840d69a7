package cms_test

import (
	"bytes"
	"crypto"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// sentinels lists every error the package promises to wrap.
var sentinels = []error{cms.ErrMalformed, cms.ErrContentType, cms.ErrUnsupportedAlgorithm, cms.ErrNoRecipient,
	cms.ErrDecryption, cms.ErrNoSigner, cms.ErrSignature, cms.ErrDigestMismatch, cms.ErrDecompression, cms.ErrTooLarge}

func wrapsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// opensslSeeds returns CMS structures made by openssl, DER and BER.
func opensslSeeds(f *testing.F) [][]byte {
	ids := openssltest.Keys(f)
	dir := f.TempDir()
	in := openssltest.WriteFile(f, dir, "in", []byte(content))
	var seeds [][]byte
	for i, args := range [][]string{
		{"-encrypt", "-aes128", ids.B.CertPath},
		{"-encrypt", "-des3", "-stream", ids.B.CertPath},
		{"-encrypt", "-aes-128-gcm", ids.B.CertPath},
		{"-encrypt", "-aes256", "-recip", ids.B.CertPath, "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256"},
		{"-sign", "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath, "-md", "sha256"},
		{"-sign", "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath, "-md", "sha1", "-noattr", "-stream"},
		{"-sign", "-nodetach", "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath, "-md", "sha512", "-stream"},
	} {
		out := filepath.Join(dir, "seed"+string(rune('a'+i)))
		openssltest.Run(f, nil, append([]string{"cms", "-binary", "-in", in, "-outform", "DER", "-out", out}, args...)...)
		seeds = append(seeds, openssltest.ReadFile(f, out))
	}
	c, err := cms.Compress([]byte(content))
	if err != nil {
		f.Fatal(err)
	}
	return append(seeds, c)
}

// FuzzDecrypt feeds Decrypt arbitrary bytes and checks:
//   - every error wraps a sentinel;
//   - a successful decryption gives the same content in place as copied;
//   - the fuzzed bytes, as content, survive Encrypt → Decrypt for the
//     station (cipher and key transport chosen by the input), and a
//     certificate the message does not name gets ErrNoRecipient.
func FuzzDecrypt(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range opensslSeeds(f) {
		f.Add(s)
	}
	recipients := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	stranger := []cms.Recipient{{Cert: ids.C.Cert, Key: ids.C.Key.(crypto.Decrypter)}}
	ciphers := []cms.Cipher{cms.AES128CBC, cms.AES192CBC, cms.AES256CBC, cms.DESEDE3CBC, cms.AES128GCM, cms.AES256GCM}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := cms.Decrypt(b, recipients)
		if err != nil && !wrapsSentinel(err) {
			t.Fatalf("Decrypt() error %v wraps no sentinel", err)
		}
		if err == nil {
			in, err := cms.DecryptInPlace(bytes.Clone(b), recipients)
			if err != nil || !bytes.Equal(in, out) {
				t.Fatalf("DecryptInPlace() = %d bytes, %v; Decrypt() gave %d bytes", len(in), err, len(out))
			}
		}

		opts := cms.EncryptOptions{Cipher: ciphers[len(b)%len(ciphers)], OAEP: len(b)%2 == 1}
		ct, err := cms.Encrypt(b, []*x509Cert{ids.B.Cert}, opts)
		if err != nil {
			t.Fatalf("Encrypt(%d bytes, %v, OAEP %v) error = %v", len(b), opts.Cipher, opts.OAEP, err)
		}
		got, err := cms.Decrypt(ct, recipients)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Decrypt(Encrypt(%d bytes, %v, OAEP %v)) = %d bytes, %v; want the content back", len(b), opts.Cipher, opts.OAEP, len(got), err)
		}
		if _, err := cms.Decrypt(ct, stranger); !errors.Is(err, cms.ErrNoRecipient) {
			t.Fatalf("Decrypt() for a certificate the message does not name = %v, want ErrNoRecipient", err)
		}
		fuzzDecryptStream(t, b, out, recipients, opts)
	})
}

// fuzzDecryptStream checks DecryptStream against Decrypt's result out on
// the fuzzed bytes b: a stream that ends in io.EOF gives what Decrypt
// gave, or Decrypt refused b's structure (the stream leaves what follows
// the encrypted content unread); and b as content survives EncryptWriter
// → DecryptStream with opts.
func fuzzDecryptStream(t *testing.T, b, out []byte, recipients []cms.Recipient, opts cms.EncryptOptions) {
	t.Helper()
	if r, err := cms.DecryptStream(bytes.NewReader(b), recipients); err == nil {
		got, err := io.ReadAll(r)
		switch {
		case err != nil && !wrapsSentinel(err):
			t.Fatalf("DecryptStream() read error %v wraps no sentinel", err)
		case err == nil && out != nil && !bytes.Equal(got, out):
			t.Fatalf("DecryptStream() = %d bytes, Decrypt() %d bytes", len(got), len(out))
		case err == nil && out == nil:
			if _, derr := cms.Decrypt(b, recipients); !errors.Is(derr, cms.ErrMalformed) {
				t.Fatalf("DecryptStream() gave %d bytes where Decrypt() fails with %v", len(got), derr)
			}
		}
	} else if !wrapsSentinel(err) {
		t.Fatalf("DecryptStream() error %v wraps no sentinel", err)
	}
	var ct bytes.Buffer
	w, err := cms.NewEncryptWriter(&ct, []*x509Cert{recipients[0].Cert}, opts)
	if err != nil {
		t.Fatalf("NewEncryptWriter(%v) error = %v", opts.Cipher, err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := cms.DecryptStream(&ct, recipients)
	if err != nil {
		t.Fatalf("DecryptStream(EncryptWriter(%v)) error = %v", opts.Cipher, err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("DecryptStream(EncryptWriter(%d bytes, %v)) = %d bytes, %v; want the content back", len(b), opts.Cipher, len(got), err)
	}
}

// FuzzVerify feeds Verify arbitrary signatures and content and checks:
//   - every error wraps a sentinel;
//   - a successful verification names a signer among the given
//     certificates, returns the detached content when one was given, and
//     a Digest that is the digest of Content under Hash;
//   - the fuzzed content, signed by A with SignDetached, verifies with A
//     among the certificates and names A, fails when A is not among them,
//     and fails when one byte of the content changes.
func FuzzVerify(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range opensslSeeds(f) {
		f.Add(s, []byte(content))
	}
	certs := []*x509Cert{ids.C.Cert, ids.A.Cert}
	hashes := []crypto.Hash{crypto.SHA1, crypto.SHA256, crypto.SHA384, crypto.SHA512}
	f.Fuzz(func(t *testing.T, b, detached []byte) {
		if len(detached) == 0 {
			detached = nil // exercise attached content too
		}
		v, err := cms.Verify(b, detached, certs)
		if err != nil && !wrapsSentinel(err) {
			t.Fatalf("Verify() error %v wraps no sentinel", err)
		}
		if err == nil {
			checkVerified(t, v, certs, detached)
		}
		if detached == nil {
			fuzzVerifyStream(t, b, v, err, certs)
		}

		h := hashes[len(detached)%len(hashes)]
		sig, err := cms.SignDetached(detached, ids.A.Cert, ids.A.Key, cms.SignOptions{Hash: h})
		if err != nil {
			t.Fatalf("SignDetached(%d bytes, %v) error = %v", len(detached), h, err)
		}
		content := detached
		if content == nil {
			content = []byte{} // nil would mean "attached"
		}
		v, err = cms.Verify(sig, content, certs)
		if err != nil {
			t.Fatalf("Verify(SignDetached(%d bytes, %v)) error = %v", len(content), h, err)
		}
		checkVerified(t, v, certs, content)
		if v.Signer != ids.A.Cert || v.Hash != h {
			t.Fatalf("Verify(signed by %s with %v) = signer %s, hash %v", ids.A.Cert.Subject, h, v.Signer.Subject, v.Hash)
		}
		if _, err := cms.Verify(sig, content, []*x509Cert{ids.C.Cert}); !errors.Is(err, cms.ErrSignature) && !errors.Is(err, cms.ErrNoSigner) {
			t.Fatalf("Verify() without the signer's certificate = %v, want ErrSignature or ErrNoSigner", err)
		}
		tampered := append(bytes.Clone(content), 0)
		tampered[len(tampered)/2] ^= 1
		if _, err := cms.Verify(sig, tampered, certs); err == nil || !wrapsSentinel(err) {
			t.Fatalf("Verify() of changed content = %v, want a sentinel error", err)
		}
	})
}

// fuzzVerifyStream checks VerifyStream against what Verify gave for the
// fuzzed bytes b with their content attached (v, or err): a stream that
// ends in io.EOF gives Verify's content and signer, or Verify refused
// b's structure (the stream leaves what follows the signer infos
// unread).
func fuzzVerifyStream(t *testing.T, b []byte, v *cms.Verified, err error, certs []*x509Cert) {
	t.Helper()
	vr, serr := cms.VerifyStream(bytes.NewReader(b), certs)
	if serr != nil {
		if !wrapsSentinel(serr) {
			t.Fatalf("VerifyStream() error %v wraps no sentinel", serr)
		}
		return
	}
	got, serr := io.ReadAll(vr)
	switch {
	case serr != nil && !wrapsSentinel(serr):
		t.Fatalf("VerifyStream() read error %v wraps no sentinel", serr)
	case serr != nil:
	case err != nil && !errors.Is(err, cms.ErrMalformed):
		t.Fatalf("VerifyStream() verified %d bytes where Verify() fails with %v", len(got), err)
	case err == nil && (!bytes.Equal(got, v.Content) || vr.Verified().Signer != v.Signer):
		t.Fatalf("VerifyStream() = %d bytes by %v, Verify() %d bytes by %v", len(got), vr.Verified().Signer.Subject, len(v.Content), v.Signer.Subject)
	}
}

// checkVerified checks what a successful Verify promises.
func checkVerified(t *testing.T, v *cms.Verified, certs []*x509Cert, detached []byte) {
	t.Helper()
	if !slices.Contains(certs, v.Signer) {
		t.Fatalf("Verify() succeeded with signer %v, not one of the given certificates", v.Signer)
	}
	if detached != nil && !bytes.Equal(v.Content, detached) {
		t.Fatalf("Verify() Content = %d bytes, want the %d detached bytes", len(v.Content), len(detached))
	}
	if !v.Hash.Available() {
		t.Fatalf("Verify() succeeded with hash %v", v.Hash)
	}
	d := v.Hash.New()
	d.Write(v.Content)
	if !bytes.Equal(v.Digest, d.Sum(nil)) {
		t.Fatalf("Verify() Digest = %x, want %v of Content %x", v.Digest, v.Hash, d.Sum(nil))
	}
}

// FuzzDecompress feeds Decompress arbitrary bytes and checks that errors
// wrap a sentinel, the limit holds and DecompressStream gives the same
// content or fails too; and that the fuzzed bytes, as content, survive
// Compress → Decompress with a limit of their size, and not with one
// byte less (ErrTooLarge). testdata/fuzz/FuzzDecompress holds a
// CompressedData of raw DEFLATE.
func FuzzDecompress(f *testing.F) {
	for _, s := range opensslSeeds(f) {
		f.Add(s)
	}
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := cms.Decompress(b, limit)
		if err != nil && !wrapsSentinel(err) {
			t.Fatalf("Decompress() error %v wraps no sentinel", err)
		}
		if len(out) > limit {
			t.Fatalf("Decompress() returned %d bytes over the limit", len(out))
		}
		var streamed []byte
		r, serr := cms.DecompressStream(bytes.NewReader(b), limit)
		if serr == nil {
			streamed, serr = io.ReadAll(r)
		}
		if (err == nil) != (serr == nil) || !bytes.Equal(out, streamed) && err == nil {
			t.Fatalf("Decompress() = %d bytes, %v; DecompressStream() = %d bytes, %v; want the same", len(out), err, len(streamed), serr)
		}
		cms.Identify(b)

		c, err := cms.Compress(b)
		if err != nil {
			t.Fatalf("Compress(%d bytes) error = %v", len(b), err)
		}
		if typ, err := cms.Identify(c); err != nil || typ != cms.TypeCompressedData {
			t.Fatalf("Identify(Compress()) = %v, %v; want CompressedData", typ, err)
		}
		got, err := cms.Decompress(c, int64(max(len(b), 1))) // 0 would mean the default limit
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Decompress(Compress(%d bytes), limit %d) = %d bytes, %v; want the content back", len(b), max(len(b), 1), len(got), err)
		}
		if len(b) > 1 {
			if _, err := cms.Decompress(c, int64(len(b)-1)); !errors.Is(err, cms.ErrTooLarge) {
				t.Fatalf("Decompress(Compress(%d bytes), limit %d) = %v, want ErrTooLarge", len(b), len(b)-1, err)
			}
		}
	})
}
