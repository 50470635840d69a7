package cms_test

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// TestECDSAOpenSSL covers ECDSA signers in both directions.
func TestECDSAOpenSSL(t *testing.T) {
	openssltest.Require(t)
	dir := t.TempDir()
	keyPath, certPath := filepath.Join(dir, "ec.key"), filepath.Join(dir, "ec.crt")
	openssltest.Run(t, nil, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
		"-keyout", keyPath, "-out", certPath, "-days", "1", "-subj", "/CN=as2-ec")
	blk, _ := pem.Decode(openssltest.ReadFile(t, certPath))
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ = pem.Decode(openssltest.ReadFile(t, keyPath))
	key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	in := openssltest.WriteFile(t, dir, "in", []byte(content))

	sigPath := filepath.Join(dir, "openssl.p7s")
	openssltest.Run(t, nil, "cms", "-sign", "-binary", "-in", in, "-signer", certPath, "-inkey", keyPath,
		"-md", "sha384", "-outform", "DER", "-out", sigPath)
	if _, err := cms.Verify(openssltest.ReadFile(t, sigPath), []byte(content), []*x509Cert{cert}); err != nil {
		t.Errorf("Verify(openssl ECDSA) error = %v", err)
	}

	der, err := cms.SignDetached([]byte(content), cert, key.(crypto.Signer), cms.SignOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := openssltest.WriteFile(t, dir, "go.p7s", der)
	openssltest.Run(t, nil, "cms", "-verify", "-binary", "-inform", "DER", "-in", p, "-content", in,
		"-CAfile", certPath, "-purpose", "any", "-out", os.DevNull)
}
