package devpki

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNewWritesMatchingKeyAndCertificate(t *testing.T) {
	id, err := New("ACME CORP", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := id.Cert.Subject.CommonName; got != "ACME CORP" {
		t.Errorf("CommonName = %q, want ACME CORP", got)
	}
	if now := time.Now(); now.Before(id.Cert.NotBefore) || now.After(id.Cert.NotAfter) {
		t.Errorf("certificate not valid now: %s .. %s", id.Cert.NotBefore, id.Cert.NotAfter)
	}
	dir := t.TempDir()
	kp, cp := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	if err := id.WriteFiles(kp, cp); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(kp); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v, want 0600", fi.Mode().Perm())
	}
	kb, _ := os.ReadFile(kp)
	block, _ := pem.Decode(kb)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := os.ReadFile(cp)
	block, _ = pem.Decode(cb)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !k.(*rsa.PrivateKey).PublicKey.Equal(c.PublicKey) {
		t.Error("written key and certificate do not match")
	}
}

func TestNewValidity(t *testing.T) {
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	id, err := New("old", Options{NotBefore: from, NotAfter: from.AddDate(1, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !id.Cert.NotAfter.Equal(from.AddDate(1, 0, 0)) {
		t.Errorf("NotAfter = %s, want %s", id.Cert.NotAfter, from.AddDate(1, 0, 0))
	}
}
