package cms_test

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// TestEncryptWriterGCM streams AES-GCM AuthEnvelopedData (BER, the tag
// in mac after the content) for contents around the segment size,
// written in odd pieces: openssl decrypts it (and checks its tag), and so
// do Decrypt and DecryptStream.
func TestEncryptWriterGCM(t *testing.T) {
	ids := openssltest.Keys(t)
	dir := t.TempDir()
	mine := []cms.Recipient{{Cert: ids.B.Cert, Key: ids.B.Key.(crypto.Decrypter)}}
	seg := 64 << 10
	for _, c := range []struct {
		cipher cms.Cipher
		size   int
		oaep   bool
	}{{cms.AES256GCM, 0, false}, {cms.AES128GCM, 1, false}, {cms.AES256GCM, seg - 1, true}, {cms.AES256GCM, seg, false},
		{cms.AES128GCM, seg + 1, false}, {cms.AES256GCM, 3*seg + 17, false}} {
		name := fmt.Sprintf("%s/%d", c.cipher, c.size)
		t.Run(name, func(t *testing.T) {
			content := bytes.Repeat([]byte("ISA*00*GCM*WRITER~\n"), c.size/19+1)[:c.size]
			var der bytes.Buffer
			w, err := cms.NewEncryptWriter(&der, []*x509.Certificate{ids.B.Cert}, cms.EncryptOptions{Cipher: c.cipher, OAEP: c.oaep})
			if err != nil {
				t.Fatal(err)
			}
			for p := content; len(p) > 0; {
				n := min(len(p), 1000+len(p)%7)
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			in := openssltest.WriteFile(t, dir, fmt.Sprintf("gcm-%d-%d.p7m", c.cipher, c.size), der.Bytes())
			out := filepath.Join(dir, fmt.Sprintf("gcm-%d-%d.out", c.cipher, c.size))
			openssltest.Run(t, nil, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", in, "-inkey", ids.B.KeyPath, "-recip", ids.B.CertPath, "-out", out)
			if got := openssltest.ReadFile(t, out); !bytes.Equal(got, content) {
				t.Fatalf("openssl decrypted %d bytes, want the %d written", len(got), len(content))
			}
			if got, err := cms.Decrypt(der.Bytes(), mine); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("Decrypt = %d bytes, %v", len(got), err)
			}
			r, err := cms.DecryptStream(bytes.NewReader(der.Bytes()), mine)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("DecryptStream = %d bytes, %v", len(got), err)
			}
			// A flipped tag byte: openssl refuses it too.
			bad := bytes.Clone(der.Bytes())
			bad[len(bad)-6-1] ^= 1
			if _, err := cms.Decrypt(bad, mine); err == nil {
				t.Error("Decrypt accepted a flipped tag")
			}
			badIn := openssltest.WriteFile(t, dir, fmt.Sprintf("bad-%d-%d.p7m", c.cipher, c.size), bad)
			if _, err := openssltest.TryRun(nil, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", badIn, "-inkey", ids.B.KeyPath, "-recip", ids.B.CertPath); err == nil {
				t.Error("openssl accepted a flipped tag")
			}
		})
	}
}
