// Package devpki makes the RSA keys and self-signed certificates of
// development stations and test partners: the local stack's stations, the
// tests' trading partners, the benchmarks' peers. Nothing here is meant for
// production keys, which operators bring themselves.
package devpki

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"time"
)

// Identity is an RSA-2048 key and its self-signed certificate.
type Identity struct {
	Key  *rsa.PrivateKey
	Cert *x509.Certificate
}

// Options tune New; the zero value gives a certificate valid from an hour
// ago for two years.
type Options struct {
	NotBefore, NotAfter time.Time
}

// New makes an identity whose certificate names commonName.
func New(commonName string, opts Options) (*Identity, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	if opts.NotBefore.IsZero() {
		opts.NotBefore = time.Now().Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = opts.NotBefore.AddDate(2, 0, 0)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"edihub development"}},
		NotBefore:             opts.NotBefore,
		NotAfter:              opts.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return &Identity{Key: key, Cert: cert}, nil
}

// KeyPEM is the key as a PKCS#8 "PRIVATE KEY" PEM block.
func (id *Identity) KeyPEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(id.Key)
	if err != nil {
		panic(err) // an RSA key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// CertPEM is the certificate as a PEM block.
func (id *Identity) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: id.Cert.Raw})
}

// WriteFiles writes the key (mode 0600) and the certificate (0644).
func (id *Identity) WriteFiles(keyPath, certPath string) error {
	if err := os.WriteFile(keyPath, id.KeyPEM(), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, id.CertPEM(), 0o644)
}
