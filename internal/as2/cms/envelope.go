package cms

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
)

// Recipient is one of our own decryption identities: a private key and the
// certificate partners encrypt to.
type Recipient struct {
	// Cert identifies the recipient (issuer and serial, subject key id).
	Cert *x509.Certificate
	// Key decrypts the content-encryption key. *rsa.PrivateKey satisfies
	// it; other Decrypters must accept *rsa.OAEPOptions and
	// *rsa.PKCS1v15DecryptOptions.
	Key crypto.Decrypter
}

// Cipher is a content-encryption algorithm.
type Cipher int

// Content-encryption algorithms. The GCM ciphers produce AuthEnvelopedData
// (RFC 5083/5084); the others EnvelopedData.
const (
	AES128CBC Cipher = iota + 1
	AES192CBC
	AES256CBC
	DESEDE3CBC
	AES128GCM
	AES256GCM
)

type cipherInfo struct {
	c      Cipher
	oid    asn1.ObjectIdentifier
	keyLen int
	gcm    bool
	name   string
}

var ciphers = []cipherInfo{
	{AES128CBC, oidAES128CBC, 16, false, "aes128-cbc"},
	{AES192CBC, oidAES192CBC, 24, false, "aes192-cbc"},
	{AES256CBC, oidAES256CBC, 32, false, "aes256-cbc"},
	{DESEDE3CBC, oidDESEDE3CBC, 24, false, "des-ede3-cbc"},
	{AES128GCM, oidAES128GCM, 16, true, "aes128-gcm"},
	{0, oidAES192GCM, 24, true, "aes192-gcm"}, // decrypt only
	{AES256GCM, oidAES256GCM, 32, true, "aes256-gcm"},
}

// String returns the conventional name of c, e.g. "aes256-cbc".
func (c Cipher) String() string {
	for _, ci := range ciphers {
		if ci.c == c && c != 0 {
			return ci.name
		}
	}
	return fmt.Sprintf("Cipher(%d)", int(c))
}

// ParseCipher parses the names String returns (case-insensitive, also
// "3des", "des3", "aes256", "aes-256-cbc" style spellings).
func ParseCipher(s string) (Cipher, error) {
	switch normalizeName(s) {
	case "aes128cbc", "aes128":
		return AES128CBC, nil
	case "aes192cbc", "aes192":
		return AES192CBC, nil
	case "aes256cbc", "aes256":
		return AES256CBC, nil
	case "desede3cbc", "3des", "des3", "tripledes", "desede3", "3descbc":
		return DESEDE3CBC, nil
	case "aes128gcm":
		return AES128GCM, nil
	case "aes256gcm":
		return AES256GCM, nil
	}
	return 0, fmt.Errorf("%w: cipher %q", ErrUnsupportedAlgorithm, s)
}

// normalizeName lower-cases s and drops everything but letters and digits.
func normalizeName(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		}
	}
	return string(b)
}

func cipherByOID(oid asn1.ObjectIdentifier) (cipherInfo, bool) {
	for _, ci := range ciphers {
		if ci.oid.Equal(oid) {
			return ci, true
		}
	}
	return cipherInfo{}, false
}

type encryptedContentInfo struct {
	ContentType      asn1.ObjectIdentifier
	Algorithm        pkix.AlgorithmIdentifier
	EncryptedContent asn1.RawValue `asn1:"optional,tag:0"`
}

type envelopedData struct {
	Version          int
	OriginatorInfo   asn1.RawValue   `asn1:"optional,tag:0"`
	RecipientInfos   []asn1.RawValue `asn1:"set"`
	EncryptedContent encryptedContentInfo
	UnprotectedAttrs asn1.RawValue `asn1:"optional,tag:1"`
}

type authEnvelopedData struct {
	Version          int
	OriginatorInfo   asn1.RawValue   `asn1:"optional,tag:0"`
	RecipientInfos   []asn1.RawValue `asn1:"set"`
	EncryptedContent encryptedContentInfo
	AuthAttrs        asn1.RawValue `asn1:"optional,tag:1"`
	MAC              []byte
	UnauthAttrs      asn1.RawValue `asn1:"optional,tag:2"`
}

type keyTransRecipientInfo struct {
	Version      int
	RID          asn1.RawValue
	Algorithm    pkix.AlgorithmIdentifier
	EncryptedKey []byte
}

type oaepParams struct {
	Hash    pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:0"`
	MGF     pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:1"`
	PSource pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:2"`
}

type gcmParams struct {
	Nonce  []byte
	ICVLen int `asn1:"optional,default:12"`
}

// Decrypt decrypts an EnvelopedData or AuthEnvelopedData ContentInfo for
// the first recipient whose certificate the message names, and returns
// the content. Errors wrap ErrMalformed, ErrContentType,
// ErrUnsupportedAlgorithm, ErrNoRecipient or ErrDecryption.
func Decrypt(b []byte, recipients []Recipient) ([]byte, error) {
	ci, err := parseContentInfo(b)
	if err != nil {
		return nil, err
	}
	switch {
	case ci.ContentType.Equal(oidEnvelopedData):
		var ed envelopedData
		if _, err := asn1.Unmarshal(ci.Content.Bytes, &ed); err != nil {
			return nil, fmt.Errorf("%w: enveloped data: %w", ErrMalformed, err)
		}
		return decryptContent(ed.RecipientInfos, ed.EncryptedContent, recipients, nil)
	case ci.ContentType.Equal(oidAuthEnvelopedData):
		var ad authEnvelopedData
		if _, err := asn1.Unmarshal(ci.Content.Bytes, &ad); err != nil {
			return nil, fmt.Errorf("%w: auth enveloped data: %w", ErrMalformed, err)
		}
		return decryptContent(ad.RecipientInfos, ad.EncryptedContent, recipients, &ad)
	}
	return nil, fmt.Errorf("%w: %v is not enveloped data", ErrContentType, ci.ContentType)
}

func decryptContent(ris []asn1.RawValue, eci encryptedContentInfo, recipients []Recipient, ad *authEnvelopedData) ([]byte, error) {
	ciph, ok := cipherByOID(eci.Algorithm.Algorithm)
	if !ok {
		return nil, fmt.Errorf("%w: content encryption %v", ErrUnsupportedAlgorithm, eci.Algorithm.Algorithm)
	}
	if !ciph.gcm && ad != nil {
		return nil, fmt.Errorf("%w: cipher %s in AuthEnvelopedData", ErrUnsupportedAlgorithm, ciph.name)
	}
	if ciph.gcm && ad == nil {
		// Non-standard but seen in the wild (e.g. smallstep/pkcs7): GCM in
		// EnvelopedData with the tag appended to the ciphertext.
		ad = &authEnvelopedData{}
	}
	ciphertext, err := octets(eci.EncryptedContent)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for _, raw := range ris {
		if raw.Class != asn1.ClassUniversal || raw.Tag != asn1.TagSequence {
			continue // kari, kekri, pwri, ori: not for RSA keys
		}
		var ktri keyTransRecipientInfo
		if _, err := asn1.Unmarshal(raw.FullBytes, &ktri); err != nil {
			return nil, fmt.Errorf("%w: recipient info: %w", ErrMalformed, err)
		}
		for _, r := range recipients {
			if r.Key == nil || !matchesCert(ktri.RID, r.Cert) {
				continue
			}
			cek, err := unwrapKey(ktri, r.Key, ciph.keyLen)
			if err != nil {
				lastErr = err
				continue
			}
			var plain []byte
			if ad != nil {
				plain, err = openGCM(cek, eci.Algorithm, ciphertext, ad)
			} else {
				plain, err = openCBC(ciph, cek, eci.Algorithm, ciphertext)
			}
			if err != nil {
				lastErr = err
				continue
			}
			return plain, nil
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, ErrNoRecipient
}

// unwrapKey recovers the content-encryption key. With PKCS#1 v1.5 a
// padding failure yields a random key (RFC 3218 countermeasure) so that it
// surfaces as a content decryption error, indistinguishable to a partner.
func unwrapKey(ktri keyTransRecipientInfo, key crypto.Decrypter, keyLen int) ([]byte, error) {
	alg := ktri.Algorithm.Algorithm
	switch {
	case alg.Equal(oidRSAEncryption):
		cek, err := key.Decrypt(rand.Reader, ktri.EncryptedKey, &rsa.PKCS1v15DecryptOptions{SessionKeyLen: keyLen})
		if err != nil {
			return nil, fmt.Errorf("%w: key transport: %w", ErrDecryption, err)
		}
		return cek, nil
	case alg.Equal(oidRSAESOAEP):
		opts, err := parseOAEPParams(ktri.Algorithm.Parameters)
		if err != nil {
			return nil, err
		}
		cek, err := key.Decrypt(rand.Reader, ktri.EncryptedKey, opts)
		if err != nil {
			return nil, fmt.Errorf("%w: key transport: %w", ErrDecryption, err)
		}
		return cek, nil
	}
	return nil, fmt.Errorf("%w: key transport %v", ErrUnsupportedAlgorithm, alg)
}

func parseOAEPParams(raw asn1.RawValue) (*rsa.OAEPOptions, error) {
	opts := &rsa.OAEPOptions{Hash: crypto.SHA1, MGFHash: crypto.SHA1}
	if len(raw.FullBytes) == 0 || raw.Tag == asn1.TagNull {
		return opts, nil
	}
	var p oaepParams
	if _, err := asn1.Unmarshal(raw.FullBytes, &p); err != nil {
		return nil, fmt.Errorf("%w: OAEP parameters: %w", ErrMalformed, err)
	}
	if p.Hash.Algorithm != nil {
		h, ok := hashForOID(p.Hash.Algorithm)
		if !ok {
			return nil, fmt.Errorf("%w: OAEP hash %v", ErrUnsupportedAlgorithm, p.Hash.Algorithm)
		}
		opts.Hash = h
	}
	if p.MGF.Algorithm != nil {
		if !p.MGF.Algorithm.Equal(oidMGF1) {
			return nil, fmt.Errorf("%w: OAEP mask generation %v", ErrUnsupportedAlgorithm, p.MGF.Algorithm)
		}
		var mh pkix.AlgorithmIdentifier
		if _, err := asn1.Unmarshal(p.MGF.Parameters.FullBytes, &mh); err != nil {
			return nil, fmt.Errorf("%w: MGF1 parameters: %w", ErrMalformed, err)
		}
		h, ok := hashForOID(mh.Algorithm)
		if !ok {
			return nil, fmt.Errorf("%w: MGF1 hash %v", ErrUnsupportedAlgorithm, mh.Algorithm)
		}
		opts.MGFHash = h
	}
	if p.PSource.Algorithm != nil {
		if !p.PSource.Algorithm.Equal(oidPSpecified) {
			return nil, fmt.Errorf("%w: OAEP label source %v", ErrUnsupportedAlgorithm, p.PSource.Algorithm)
		}
		var label []byte
		if len(p.PSource.Parameters.FullBytes) > 0 {
			if _, err := asn1.Unmarshal(p.PSource.Parameters.FullBytes, &label); err != nil {
				return nil, fmt.Errorf("%w: OAEP label: %w", ErrMalformed, err)
			}
		}
		opts.Label = label
	}
	return opts, nil
}

func newBlock(c cipherInfo, key []byte) (cipher.Block, error) {
	if c.oid.Equal(oidDESEDE3CBC) {
		return des.NewTripleDESCipher(key)
	}
	return aes.NewCipher(key)
}

func openCBC(c cipherInfo, key []byte, alg pkix.AlgorithmIdentifier, ciphertext []byte) ([]byte, error) {
	block, err := newBlock(c, key)
	if err != nil {
		return nil, fmt.Errorf("%w: content key: %w", ErrDecryption, err)
	}
	var iv []byte
	if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &iv); err != nil || len(iv) != block.BlockSize() {
		return nil, fmt.Errorf("%w: CBC initialisation vector", ErrMalformed)
	}
	bs := block.BlockSize()
	if len(ciphertext) == 0 || len(ciphertext)%bs != 0 {
		return nil, fmt.Errorf("%w: ciphertext length %d", ErrDecryption, len(ciphertext))
	}
	plain := make([]byte, len(ciphertext))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(plain, ciphertext)
	pad := int(plain[len(plain)-1])
	if pad == 0 || pad > bs {
		return nil, fmt.Errorf("%w: bad padding", ErrDecryption)
	}
	want := make([]byte, pad)
	for i := range want {
		want[i] = byte(pad)
	}
	if subtle.ConstantTimeCompare(plain[len(plain)-pad:], want) != 1 {
		return nil, fmt.Errorf("%w: bad padding", ErrDecryption)
	}
	return plain[:len(plain)-pad], nil
}

// openGCM decrypts AuthEnvelopedData content. Partners differ in how they
// encode the tag: the standard puts it in mac with aes-ICVlen in the
// parameters; some omit mac and append the tag to the ciphertext, some
// declare an ICV length that does not match mac. The bytes actually present
// win over the declared length.
func openGCM(key []byte, alg pkix.AlgorithmIdentifier, ciphertext []byte, ad *authEnvelopedData) ([]byte, error) {
	var p gcmParams
	if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &p); err != nil {
		return nil, fmt.Errorf("%w: GCM parameters: %w", ErrMalformed, err)
	}
	tag := ad.MAC
	if len(tag) == 0 && p.ICVLen >= 12 && p.ICVLen <= 16 && len(ciphertext) >= p.ICVLen {
		tag = ciphertext[len(ciphertext)-p.ICVLen:]
		ciphertext = ciphertext[:len(ciphertext)-p.ICVLen]
	}
	if len(tag) < 12 || len(tag) > 16 {
		return nil, fmt.Errorf("%w: GCM tag length %d", ErrUnsupportedAlgorithm, len(tag))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: content key: %w", ErrDecryption, err)
	}
	var aead cipher.AEAD
	switch {
	case len(p.Nonce) == 12:
		aead, err = cipher.NewGCMWithTagSize(block, len(tag))
	case len(tag) == 16 && len(p.Nonce) > 0:
		aead, err = cipher.NewGCMWithNonceSize(block, len(p.Nonce))
	default:
		return nil, fmt.Errorf("%w: GCM nonce length %d with tag length %d", ErrUnsupportedAlgorithm, len(p.Nonce), len(tag))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: GCM: %w", ErrUnsupportedAlgorithm, err)
	}
	var aad []byte
	if len(ad.AuthAttrs.FullBytes) > 0 {
		aad = append([]byte{tagSet}, ad.AuthAttrs.FullBytes[1:]...)
	}
	sealed := make([]byte, 0, len(ciphertext)+len(tag))
	sealed = append(append(sealed, ciphertext...), tag...)
	plain, err := aead.Open(sealed[:0], p.Nonce, sealed, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: GCM: %w", ErrDecryption, err)
	}
	return plain, nil
}

// EncryptOptions selects the algorithms of Encrypt.
type EncryptOptions struct {
	// Cipher is the content-encryption algorithm; zero means AES256CBC.
	Cipher Cipher
	// OAEP selects RSAES-OAEP key transport instead of PKCS#1 v1.5.
	OAEP bool
	// OAEPHash is the OAEP and MGF1 hash; zero means SHA-256.
	OAEPHash crypto.Hash
	// Rand is the source of keys and IVs; nil means crypto/rand.
	Rand io.Reader
}

// Encrypt encrypts content for the recipients' RSA certificates and returns
// a DER ContentInfo: EnvelopedData for the CBC ciphers, AuthEnvelopedData
// for the GCM ciphers. The inner content type is id-data.
func Encrypt(content []byte, recipients []*x509.Certificate, opts EncryptOptions) ([]byte, error) {
	if len(recipients) == 0 {
		return nil, errors.New("encrypt: no recipients")
	}
	if opts.Cipher == 0 {
		opts.Cipher = AES256CBC
	}
	if opts.OAEPHash == 0 {
		opts.OAEPHash = crypto.SHA256
	}
	rnd := opts.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	var c cipherInfo
	for _, ci := range ciphers {
		if ci.c == opts.Cipher {
			c = ci
		}
	}
	if c.oid == nil {
		return nil, fmt.Errorf("encrypt: %w: cipher %d", ErrUnsupportedAlgorithm, opts.Cipher)
	}
	cek := make([]byte, c.keyLen)
	if _, err := io.ReadFull(rnd, cek); err != nil {
		return nil, fmt.Errorf("encrypt: content key: %w", err)
	}
	var ris [][]byte
	for _, cert := range recipients {
		ri, err := keyTransRecipient(cert, cek, opts, rnd)
		if err != nil {
			return nil, fmt.Errorf("encrypt: %w", err)
		}
		ris = append(ris, ri)
	}
	ver := tlv(tagInteger, []byte{0})
	riSet := tlv(tagSet, sortedSet(ris)...)
	block, err := newBlock(c, cek)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	if c.gcm {
		nonce := make([]byte, 12)
		if _, err := io.ReadFull(rnd, nonce); err != nil {
			return nil, fmt.Errorf("encrypt: nonce: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("encrypt: %w", err)
		}
		sealed := aead.Seal(nil, nonce, content, nil)
		ct, mac := sealed[:len(content)], sealed[len(content):]
		params := tlv(tagSequence, tlv(tagOctetString, nonce), tlv(tagInteger, []byte{byte(len(mac))}))
		eci := tlv(tagSequence, mustOID(oidData), algorithmID(c.oid, params), tlv(tagContext0Pri, ct))
		aed := tlv(tagSequence, ver, riSet, eci, tlv(tagOctetString, mac))
		return wrapContentInfo(oidAuthEnvelopedData, aed), nil
	}
	bs := block.BlockSize()
	iv := make([]byte, bs)
	if _, err := io.ReadFull(rnd, iv); err != nil {
		return nil, fmt.Errorf("encrypt: iv: %w", err)
	}
	pad := bs - len(content)%bs
	buf := make([]byte, len(content)+pad)
	copy(buf, content)
	for i := len(content); i < len(buf); i++ {
		buf[i] = byte(pad)
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(buf, buf)
	eci := tlv(tagSequence, mustOID(oidData), algorithmID(c.oid, tlv(tagOctetString, iv)), tlv(tagContext0Pri, buf))
	ed := tlv(tagSequence, ver, riSet, eci)
	return wrapContentInfo(oidEnvelopedData, ed), nil
}

func keyTransRecipient(cert *x509.Certificate, cek []byte, opts EncryptOptions, rnd io.Reader) ([]byte, error) {
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: recipient key %T", ErrUnsupportedAlgorithm, cert.PublicKey)
	}
	ias, err := issuerAndSerialDER(cert)
	if err != nil {
		return nil, err
	}
	var alg, ek []byte
	if opts.OAEP {
		hashOID, ok := oidForHash(opts.OAEPHash)
		if !ok {
			return nil, fmt.Errorf("%w: OAEP hash %v", ErrUnsupportedAlgorithm, opts.OAEPHash)
		}
		var params []byte
		if opts.OAEPHash != crypto.SHA1 { // SHA-1 is the DEFAULT, omitted in DER
			hashAlg := algorithmID(hashOID, nil)
			params = append(tlv(tagContext0, hashAlg), tlv(tagContext1, algorithmID(oidMGF1, hashAlg))...)
		}
		alg = algorithmID(oidRSAESOAEP, tlv(tagSequence, params))
		ek, err = rsa.EncryptOAEP(opts.OAEPHash.New(), rnd, pub, cek, nil)
	} else {
		alg = algorithmID(oidRSAEncryption, derNull)
		ek, err = rsa.EncryptPKCS1v15(rnd, pub, cek)
	}
	if err != nil {
		return nil, fmt.Errorf("key transport: %w", err)
	}
	return tlv(tagSequence, tlv(tagInteger, []byte{0}), ias, alg, tlv(tagOctetString, ek)), nil
}

func sha1Sum(b []byte) []byte {
	s := sha1.Sum(b)
	return s[:]
}
