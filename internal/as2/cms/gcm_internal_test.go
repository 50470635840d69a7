package cms

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"testing"
	"time"
)

func testIdentity(t *testing.T) (*x509.Certificate, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "gcm-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestGCMNonStandardEncodings rebuilds a standard AuthEnvelopedData in the
// shapes partners emit and checks each still decrypts.
func TestGCMNonStandardEncodings(t *testing.T) {
	cert, key := testIdentity(t)
	plain := []byte("Content-Type: text/plain\r\n\r\nhello gcm")
	std, err := Encrypt(plain, []*x509.Certificate{cert}, EncryptOptions{Cipher: AES128GCM})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := parseEnvelope(std)
	if err != nil {
		t.Fatal(err)
	}
	var p gcmParams
	if _, err := asn1.Unmarshal(ad.alg.Parameters.FullBytes, &p); err != nil {
		t.Fatal(err)
	}
	ct := ad.ciphertext
	var ris [][]byte
	for _, ri := range ad.ris {
		ris = append(ris, ri.FullBytes)
	}
	riSet := tlv(tagSet, ris...)
	ver := tlv(tagInteger, []byte{0})
	build := func(envelope asn1.ObjectIdentifier, icvLen int, content, mac []byte) []byte {
		params := tlv(tagSequence, tlv(tagOctetString, p.Nonce), tlv(tagInteger, []byte{byte(icvLen)}))
		eci := tlv(tagSequence, mustOID(oidData), algorithmID(oidAES128GCM, params), tlv(tagContext0Pri, content))
		if envelope.Equal(oidEnvelopedData) {
			return wrapContentInfo(envelope, tlv(tagSequence, ver, riSet, eci))
		}
		return wrapContentInfo(envelope, tlv(tagSequence, ver, riSet, eci, tlv(tagOctetString, mac)))
	}
	withTag := append(append([]byte{}, ct...), ad.mac...)
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{"standard", std, nil},
		{"declared ICV length 12, tag 16", build(oidAuthEnvelopedData, 12, ct, ad.mac), nil},
		{"empty mac, tag appended", build(oidAuthEnvelopedData, 16, withTag, nil), nil},
		{"GCM in EnvelopedData, tag appended", build(oidEnvelopedData, 16, withTag, nil), nil},
		{"truncated tag", build(oidAuthEnvelopedData, 16, ct, ad.mac[:8]), ErrUnsupportedAlgorithm},
		{"wrong tag", build(oidAuthEnvelopedData, 16, ct, make([]byte, 16)), ErrDecryption},
	}
	decrypters := []struct {
		name string
		fn   func([]byte, []Recipient) ([]byte, error)
	}{{"Decrypt", Decrypt}, {"DecryptInPlace", DecryptInPlace}}
	for _, tt := range tests {
		for _, d := range decrypters {
			t.Run(tt.name+"/"+d.name, func(t *testing.T) {
				got, err := d.fn(bytes.Clone(tt.give), []Recipient{{Cert: cert, Key: crypto.Decrypter(key)}})
				if tt.want != nil {
					if !errors.Is(err, tt.want) {
						t.Errorf("%s() error = %v, want %v", d.name, err, tt.want)
					}
					return
				}
				if err != nil || string(got) != string(plain) {
					t.Errorf("%s() = %q, %v; want %q", d.name, got, err, plain)
				}
			})
		}
	}
}
