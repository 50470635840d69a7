package cms

import (
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
	ci, err := parseContentInfo(std)
	if err != nil {
		t.Fatal(err)
	}
	var ad authEnvelopedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &ad); err != nil {
		t.Fatal(err)
	}
	var p gcmParams
	if _, err := asn1.Unmarshal(ad.EncryptedContent.Algorithm.Parameters.FullBytes, &p); err != nil {
		t.Fatal(err)
	}
	ct := ad.EncryptedContent.EncryptedContent.Bytes
	var ris [][]byte
	for _, ri := range ad.RecipientInfos {
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
	withTag := append(append([]byte{}, ct...), ad.MAC...)
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{"standard", std, nil},
		{"declared ICV length 12, tag 16", build(oidAuthEnvelopedData, 12, ct, ad.MAC), nil},
		{"empty mac, tag appended", build(oidAuthEnvelopedData, 16, withTag, nil), nil},
		{"GCM in EnvelopedData, tag appended", build(oidEnvelopedData, 16, withTag, nil), nil},
		{"truncated tag", build(oidAuthEnvelopedData, 16, ct, ad.MAC[:8]), ErrUnsupportedAlgorithm},
		{"wrong tag", build(oidAuthEnvelopedData, 16, ct, make([]byte, 16)), ErrDecryption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decrypt(tt.give, []Recipient{{Cert: cert, Key: crypto.Decrypter(key)}})
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Errorf("Decrypt() error = %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil || string(got) != string(plain) {
				t.Errorf("Decrypt() = %q, %v; want %q", got, err, plain)
			}
		})
	}
}
