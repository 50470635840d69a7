package cms_test

import (
	"bytes"
	"crypto"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// readVerified reads a VerifyStream of der to its end.
func readVerified(der []byte, wrap func(io.Reader) io.Reader, certs []*x509Cert, extra ...crypto.Hash) ([]byte, *cms.VerifyReader, error) {
	v, err := cms.VerifyStream(wrap(bytes.NewReader(der)), certs, extra...)
	if err != nil {
		return nil, nil, err
	}
	got, err := io.ReadAll(v)
	return got, v, err
}

// TestVerifyStreamOpenSSL verifies openssl's opaque signatures (DER and
// BER streamed, with and without signed attributes and certificates,
// RSA-PSS), read a byte at a time and in halves, to what Verify gives:
// the content, the signer, the digest; and the content's digest in the
// extra algorithms asked for.
func TestVerifyStreamOpenSSL(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	big := bytes.Repeat([]byte("ISA*00*OPAQUE~\r\n"), 20_000)
	tests := []struct {
		name    string
		content []byte
		args    []string
	}{
		{"sha256 DER", []byte(content), []string{"-md", "sha256"}},
		{"sha1 BER stream large", big, []string{"-md", "sha1", "-stream"}},
		{"sha512 noattr nocerts", big[:70_001], []string{"-md", "sha512", "-noattr", "-nocerts"}},
		{"sha384 PSS", []byte(content), []string{"-md", "sha384", "-keyopt", "rsa_padding_mode:pss"}},
		{"empty content", []byte{}, []string{"-md", "sha256"}},
	}
	certs := []*x509Cert{ids.C.Cert, ids.A.Cert}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ReplaceAll(tt.name, " ", "_")
			in := openssltest.WriteFile(t, dir, name+".in", tt.content)
			out := filepath.Join(dir, name+".p7m")
			openssltest.Run(t, nil, append([]string{"cms", "-sign", "-nodetach", "-binary", "-in", in, "-signer", ids.A.CertPath,
				"-inkey", ids.A.KeyPath, "-outform", "DER", "-out", out}, tt.args...)...)
			der := openssltest.ReadFile(t, out)
			want, err := cms.Verify(der, nil, certs)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			for _, wrap := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader} {
				got, v, err := readVerified(der, wrap, certs, crypto.SHA256, crypto.SHA384)
				if err != nil {
					t.Fatalf("VerifyStream: %v", err)
				}
				if !bytes.Equal(got, tt.content) {
					t.Fatalf("VerifyStream = %d bytes, want the %d signed", len(got), len(tt.content))
				}
				vd := v.Verified()
				if vd.Signer != want.Signer || vd.Hash != want.Hash || !bytes.Equal(vd.Digest, want.Digest) {
					t.Errorf("Verified = %v %v %x, Verify's %v %v %x", vd.Signer.Subject, vd.Hash, vd.Digest, want.Signer.Subject, want.Hash, want.Digest)
				}
				for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA384, want.Hash} {
					d := h.New()
					d.Write(tt.content)
					if !bytes.Equal(v.Digests()[h], d.Sum(nil)) {
						t.Errorf("Digests()[%v] is not the content's digest", h)
					}
				}
			}
		})
	}
}

// TestVerifyStreamFailures: altered content, another signer, a detached
// signature and a truncated one fail as Verify's do, and never end in
// io.EOF.
func TestVerifyStreamFailures(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	in := openssltest.WriteFile(t, dir, "in", bytes.Repeat([]byte("BEG*00*SA*PO-1~\n"), 10_000))
	sign := func(name string, args ...string) []byte {
		out := filepath.Join(dir, name)
		openssltest.Run(t, nil, append([]string{"cms", "-sign", "-binary", "-in", in, "-signer", ids.A.CertPath, "-inkey", ids.A.KeyPath,
			"-md", "sha256", "-outform", "DER", "-out", out}, args...)...)
		return openssltest.ReadFile(t, out)
	}
	for _, form := range []struct {
		name string
		args []string
	}{{"DER", []string{"-nodetach"}}, {"BER stream", []string{"-nodetach", "-stream"}}} {
		t.Run(form.name, func(t *testing.T) {
			der := sign(strings.ReplaceAll(form.name, " ", "_")+".p7m", form.args...)
			mine := []*x509Cert{ids.A.Cert}
			altered := bytes.Clone(der)
			i := bytes.Index(altered, []byte("PO-1"))
			altered[i] = 'X'
			check := func(name string, der []byte, certs []*x509Cert, want ...error) {
				t.Helper()
				_, v, err := readVerified(der, func(r io.Reader) io.Reader { return r }, certs)
				if err == nil || errors.Is(err, io.EOF) || (v != nil && v.Verified() != nil) {
					t.Fatalf("%s: %v, want an error", name, err)
				}
				_, memErr := cms.Verify(der, nil, certs)
				ok := false
				for _, w := range want {
					ok = ok || (errors.Is(err, w) && errors.Is(memErr, w))
				}
				if !ok {
					t.Errorf("%s: VerifyStream %v, Verify %v; want %v", name, err, memErr, want)
				}
			}
			check("altered content", altered, mine, cms.ErrDigestMismatch)
			check("other signer", der, []*x509Cert{ids.C.Cert}, cms.ErrSignature, cms.ErrNoSigner)
			check("truncated", der[:len(der)-40], mine, cms.ErrMalformed)
		})
	}
	if _, err := cms.VerifyStream(bytes.NewReader(sign("detached.p7s")), []*x509Cert{ids.A.Cert}); !errors.Is(err, cms.ErrMalformed) {
		t.Errorf("detached signature: %v, want ErrMalformed", err)
	}
}
