package cms_test

import (
	"crypto"
	"errors"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/openssltest"
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

func FuzzDecrypt(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range opensslSeeds(f) {
		f.Add(s)
	}
	recipients := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := cms.Decrypt(b, recipients); err != nil && !wrapsSentinel(err) {
			t.Fatalf("Decrypt() error %v wraps no sentinel", err)
		}
	})
}

func FuzzVerify(f *testing.F) {
	ids := openssltest.Keys(f)
	for _, s := range opensslSeeds(f) {
		f.Add(s, []byte(content))
	}
	certs := []*x509Cert{ids.A.Cert}
	f.Fuzz(func(t *testing.T, b, detached []byte) {
		if len(detached) == 0 {
			detached = nil // exercise attached content too
		}
		if _, err := cms.Verify(b, detached, certs); err != nil && !wrapsSentinel(err) {
			t.Fatalf("Verify() error %v wraps no sentinel", err)
		}
	})
}

func FuzzDecompress(f *testing.F) {
	for _, s := range opensslSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := cms.Decompress(b, 1<<20)
		if err != nil && !wrapsSentinel(err) {
			t.Fatalf("Decompress() error %v wraps no sentinel", err)
		}
		if len(out) > 1<<20 {
			t.Fatalf("Decompress() returned %d bytes over the limit", len(out))
		}
		cms.Identify(b)
	})
}
