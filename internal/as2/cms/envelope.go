package cms

import (
	"bytes"
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

	"github.com/edihub/edihub/internal/aescbc"
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
// the content. b is not modified; the content is a new buffer. Errors wrap
// ErrMalformed, ErrContentType, ErrUnsupportedAlgorithm, ErrNoRecipient or
// ErrDecryption.
func Decrypt(b []byte, recipients []Recipient) ([]byte, error) {
	return decrypt(b, recipients, false)
}

// DecryptInPlace is Decrypt for a caller that owns b and does not need it
// afterwards: the content is decrypted where the ciphertext lies in b and
// the result aliases b, so a large message is not held twice. Only
// content encoded in BER segments is gathered into one new buffer first.
// The bytes of b are undefined after DecryptInPlace returns, error or not.
func DecryptInPlace(b []byte, recipients []Recipient) ([]byte, error) {
	return decrypt(b, recipients, true)
}

// envelope is an EnvelopedData or AuthEnvelopedData located in its input
// without normalising (copying) the whole structure: only the small
// fields are decoded, the encrypted content is a slice of the input.
type envelope struct {
	auth       bool
	ris        []asn1.RawValue
	alg        pkix.AlgorithmIdentifier
	ciphertext []byte // nil when absent
	gathered   bool   // ciphertext is a new buffer, not a slice of the input
	authAttrs  []byte // DER of [1] authAttrs, nil when absent
	mac        []byte // a copy
}

// gcmTagSpace is spare capacity for appending a GCM tag to the ciphertext.
const gcmTagSpace = 16

// parseEnvelope locates the fields of an EnvelopedData or
// AuthEnvelopedData ContentInfo in b. Errors wrap ErrMalformed or
// ErrContentType.
func parseEnvelope(b []byte) (*envelope, error) {
	var p berParser
	auth, list, err := envelopeFields(&p, b)
	if err != nil {
		return nil, err
	}
	env := &envelope{auth: auth}
	fields := berFields(list)
	if _, ok := fields.take(tagInteger); !ok {
		return nil, malformed("enveloped data: version", nil)
	}
	fields.take(tagContext0) // originatorInfo
	set, ok := fields.take(tagSet)
	if !ok {
		return nil, malformed("enveloped data: recipient infos", nil)
	}
	if err := set.unmarshal(&env.ris, "set"); err != nil {
		return nil, malformed("recipient infos", err)
	}
	eci, ok := fields.take(tagSequence)
	if !ok {
		return nil, malformed("encrypted content info", nil)
	}
	if err := env.parseEncryptedContentInfo(&p, eci); err != nil {
		return nil, err
	}
	if env.auth {
		if err := env.parseAuthFields(&fields); err != nil {
			return nil, err
		}
	} else {
		fields.take(tagContext1) // unprotectedAttrs
	}
	if len(fields) > 0 {
		return nil, malformed("enveloped data: unexpected trailing field", nil)
	}
	return env, nil
}

// malformed is a parse error of the part what, wrapping ErrMalformed once
// and err (which may be nil) after it.
func malformed(what string, err error) error {
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, what, err)
	}
	return fmt.Errorf("%w: %s", ErrMalformed, what)
}

// envelopeFields unpacks the ContentInfo at the start of b and returns
// whether it holds AuthEnvelopedData and the fields of its
// (Auth)EnvelopedData SEQUENCE.
func envelopeFields(p *berParser, b []byte) (auth bool, fields []berElement, err error) {
	ci, _, err := p.next(b, 0) // bytes after the ContentInfo are ignored
	if err != nil || ci.tag != tagSequence {
		return false, nil, malformed("content info", err)
	}
	kids, err := p.children(ci, 0)
	if err != nil || len(kids) == 0 {
		return false, nil, malformed("content info", err)
	}
	var ct asn1.ObjectIdentifier
	if err := kids[0].unmarshal(&ct, ""); err != nil {
		return false, nil, malformed("content type", err)
	}
	switch {
	case ct.Equal(oidEnvelopedData):
	case ct.Equal(oidAuthEnvelopedData):
		auth = true
	default:
		return false, nil, fmt.Errorf("%w: %v is not enveloped data", ErrContentType, ct)
	}
	if len(kids) != 2 || kids[1].tag != tagContext0 {
		return false, nil, malformed("enveloped data: no content", nil)
	}
	inner, err := p.children(kids[1], 1)
	if err != nil || len(inner) != 1 || inner[0].tag != tagSequence {
		return false, nil, malformed("enveloped data", err)
	}
	fields, err = p.children(inner[0], 2)
	if err != nil {
		return false, nil, malformed("enveloped data", err)
	}
	return auth, fields, nil
}

// berFields are the fields of a SEQUENCE not consumed yet, in order.
type berFields []berElement

// take consumes the next field if it has the given tag, so that an
// absent OPTIONAL field is skipped.
func (f *berFields) take(tag byte) (berElement, bool) {
	if len(*f) > 0 && (*f)[0].tag == tag {
		e := (*f)[0]
		*f = (*f)[1:]
		return e, true
	}
	return berElement{}, false
}

// parseEncryptedContentInfo reads the content-encryption algorithm and
// locates the encrypted content of the EncryptedContentInfo e: a slice of
// the input when primitive, gathered into a new buffer with room for a
// GCM tag when in constructed segments.
func (env *envelope) parseEncryptedContentInfo(p *berParser, e berElement) error {
	eci, err := p.children(e, 3)
	if err != nil || len(eci) < 2 || len(eci) > 3 {
		return malformed("encrypted content info", err)
	}
	var inner0 asn1.ObjectIdentifier
	if err := eci[0].unmarshal(&inner0, ""); err != nil {
		return malformed("encrypted content type", err)
	}
	if err := eci[1].unmarshal(&env.alg, ""); err != nil {
		return malformed("content encryption algorithm", err)
	}
	if len(eci) < 3 {
		return nil
	}
	switch ec := eci[2]; ec.tag {
	case tagContext0Pri:
		env.ciphertext = ec.content
	case tagContext0:
		if env.ciphertext, err = p.gather(ec, gcmTagSpace); err != nil {
			return malformed("encrypted content", err)
		}
		env.gathered = true
	default:
		return malformed("encrypted content", nil)
	}
	return nil
}

// parseAuthFields consumes the fields that follow the
// EncryptedContentInfo in AuthEnvelopedData: authAttrs, the mac and
// unauthAttrs.
func (env *envelope) parseAuthFields(fields *berFields) error {
	if a, ok := fields.take(tagContext1); ok {
		var err error
		if env.authAttrs, err = normalize(a.full); err != nil {
			return malformed("authenticated attributes", err)
		}
	}
	m, ok := fields.take(tagOctetString)
	if !ok {
		m, ok = fields.take(tagOctetString | 0x20)
	}
	if !ok {
		return malformed("auth enveloped data: mac", nil)
	}
	if err := m.unmarshal(&env.mac, ""); err != nil {
		return malformed("mac", err)
	}
	env.mac = bytes.Clone(env.mac)
	fields.take(tagContext2) // unauthAttrs
	return nil
}

func decrypt(b []byte, recipients []Recipient, inPlace bool) ([]byte, error) {
	b = b[:len(b):len(b)] // a GCM tag written in place stays within b
	env, err := parseEnvelope(b)
	if err != nil {
		return nil, err
	}
	ciph, ok := cipherByOID(env.alg.Algorithm)
	if !ok {
		return nil, fmt.Errorf("%w: content encryption %v", ErrUnsupportedAlgorithm, env.alg.Algorithm)
	}
	if !ciph.gcm && env.auth {
		return nil, fmt.Errorf("%w: cipher %s in AuthEnvelopedData", ErrUnsupportedAlgorithm, ciph.name)
	}
	// Non-standard but seen in the wild (e.g. smallstep/pkcs7): GCM in
	// EnvelopedData with the tag appended to the ciphertext; openGCM
	// handles a missing mac.

	// The candidates are the (recipient info, key) pairs whose certificate
	// the message names; usually one. Each but the last is tried on a copy
	// of the ciphertext, since a failed attempt leaves garbage behind.
	type candidate struct {
		ktri keyTransRecipientInfo
		key  crypto.Decrypter
	}
	var cands []candidate
	var parseErr error
	for _, raw := range env.ris {
		if raw.Class != asn1.ClassUniversal || raw.Tag != asn1.TagSequence {
			continue // kari, kekri, pwri, ori: not for RSA keys
		}
		var ktri keyTransRecipientInfo
		if _, err := asn1.Unmarshal(raw.FullBytes, &ktri); err != nil {
			parseErr = fmt.Errorf("%w: recipient info: %w", ErrMalformed, err)
			break
		}
		for _, r := range recipients {
			if r.Key != nil && matchesCert(ktri.RID, r.Cert) {
				cands = append(cands, candidate{ktri, r.Key})
			}
		}
	}
	buf := env.ciphertext
	if !inPlace && !env.gathered && buf != nil {
		buf = append(make([]byte, 0, len(buf)+gcmTagSpace), buf...)
	}
	var lastErr error
	for i, c := range cands {
		cek, err := unwrapKey(c.ktri, c.key, ciph.keyLen)
		if err != nil {
			lastErr = err
			continue
		}
		work := buf
		if i < len(cands)-1 && buf != nil {
			work = append(make([]byte, 0, len(buf)+gcmTagSpace), buf...)
		}
		var plain []byte
		if ciph.gcm {
			plain, err = openGCM(cek, env.alg, work, env)
		} else {
			plain, err = openCBC(ciph, cek, env.alg, work)
		}
		if err != nil {
			lastErr = err
			continue
		}
		return plain, nil
	}
	switch {
	case parseErr != nil:
		return nil, parseErr
	case lastErr != nil:
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

// newCBC is c's CBC mode under key (block is that key's) from iv:
// crypto/cipher's, but for AES decryption aescbc's, whose assembly
// decrypts eight blocks at a time on amd64 (several times crypto/cipher's
// speed; encryption, serial by construction, gains too little for an
// assembly loop of its own). iv is block-sized.
func newCBC(c cipherInfo, block cipher.Block, key, iv []byte, encrypt bool) (cipher.BlockMode, error) {
	switch {
	case encrypt:
		return cipher.NewCBCEncrypter(block, iv), nil
	case c.oid.Equal(oidDESEDE3CBC):
		return cipher.NewCBCDecrypter(block, iv), nil
	}
	return aescbc.NewDecrypter(key, iv)
}

// openCBC decrypts buf in place and strips the padding by reslicing.
func openCBC(c cipherInfo, key []byte, alg pkix.AlgorithmIdentifier, buf []byte) ([]byte, error) {
	block, err := newBlock(c, key)
	if err != nil {
		return nil, fmt.Errorf("%w: content key: %w", ErrDecryption, err)
	}
	var iv []byte
	if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &iv); err != nil || len(iv) != block.BlockSize() {
		return nil, fmt.Errorf("%w: CBC initialisation vector", ErrMalformed)
	}
	bs := block.BlockSize()
	if len(buf) == 0 || len(buf)%bs != 0 {
		return nil, fmt.Errorf("%w: ciphertext length %d", ErrDecryption, len(buf))
	}
	mode, err := newCBC(c, block, key, iv, false)
	if err != nil {
		return nil, fmt.Errorf("%w: content key: %w", ErrDecryption, err)
	}
	mode.CryptBlocks(buf, buf)
	pad := int(buf[len(buf)-1])
	if pad == 0 || pad > bs {
		return nil, fmt.Errorf("%w: bad padding", ErrDecryption)
	}
	var want [aes.BlockSize]byte
	for i := range pad {
		want[i] = byte(pad)
	}
	if subtle.ConstantTimeCompare(buf[len(buf)-pad:], want[:pad]) != 1 {
		return nil, fmt.Errorf("%w: bad padding", ErrDecryption)
	}
	return buf[:len(buf)-pad], nil
}

// openGCM decrypts AuthEnvelopedData content in buf, in place. Partners
// differ in how they encode the tag: the standard puts it in mac with
// aes-ICVlen in the parameters; some omit mac and append the tag to the
// ciphertext, some declare an ICV length that does not match mac. The
// bytes actually present win over the declared length. A tag from mac is
// written after the ciphertext when buf has the capacity (the bytes after
// the ciphertext were already decoded), so that the AEAD opens in place.
func openGCM(key []byte, alg pkix.AlgorithmIdentifier, buf []byte, env *envelope) ([]byte, error) {
	var p gcmParams
	if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &p); err != nil {
		return nil, fmt.Errorf("%w: GCM parameters: %w", ErrMalformed, err)
	}
	tag := env.mac
	if len(tag) == 0 && p.ICVLen >= 12 && p.ICVLen <= 16 && len(buf) >= p.ICVLen {
		tag = buf[len(buf)-p.ICVLen:]
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
	if len(env.authAttrs) > 0 {
		aad = append([]byte{tagSet}, env.authAttrs[1:]...)
	}
	var sealed []byte
	switch {
	case len(env.mac) == 0:
		sealed = buf // the tag follows the ciphertext already
	case cap(buf)-len(buf) >= len(tag):
		sealed = append(buf, tag...)
	default:
		sealed = append(append(make([]byte, 0, len(buf)+len(tag)), buf...), tag...)
	}
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
	// Key, for NewEncryptWriter only, makes an encryption reproducible:
	// when it holds a key, the writer uses it (its content key, IV and
	// recipient infos) instead of drawing one, and writes the same bytes
	// for the same content; when it is empty, the writer fills it with
	// what it drew. Encrypt ignores it.
	Key *ContentKey
}

// ContentKey is what an encryption drew: the content-encryption key, the
// IV (AES-GCM: the nonce) and the encoded RecipientInfos that carry the
// key to the recipients. Key transport is randomized (PKCS#1 v1.5 and
// OAEP padding), and crypto/rsa draws that randomness itself, so the
// RecipientInfos are kept as produced rather than derived again. It is a
// secret: it decrypts the content.
type ContentKey struct {
	CEK            []byte   `json:"cek"`
	IV             []byte   `json:"iv"`
	RecipientInfos [][]byte `json:"recipient_infos"`
}

// empty reports a ContentKey to be filled.
func (k *ContentKey) empty() bool { return len(k.CEK) == 0 }

// Encrypt encrypts content for the recipients' RSA certificates and returns
// a DER ContentInfo: EnvelopedData for the CBC ciphers, AuthEnvelopedData
// for the GCM ciphers. The inner content type is id-data.
func Encrypt(content []byte, recipients []*x509.Certificate, opts EncryptOptions) ([]byte, error) {
	c, rnd, opts, err := encryptSetup(recipients, opts)
	if err != nil {
		return nil, err
	}
	cek, ris, err := newContentKey(c, recipients, opts, rnd)
	if err != nil {
		return nil, err
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
	mode, err := newCBC(c, block, cek, iv, true)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	mode.CryptBlocks(buf, buf)
	eci := tlv(tagSequence, mustOID(oidData), algorithmID(c.oid, tlv(tagOctetString, iv)), tlv(tagContext0Pri, buf))
	ed := tlv(tagSequence, ver, riSet, eci)
	return wrapContentInfo(oidEnvelopedData, ed), nil
}

// encryptSetup checks recipients, fills opts' defaults and looks up its
// cipher for Encrypt and NewEncryptWriter; it returns the cipher, the
// source of randomness and the completed options.
func encryptSetup(recipients []*x509.Certificate, opts EncryptOptions) (cipherInfo, io.Reader, EncryptOptions, error) {
	if len(recipients) == 0 {
		return cipherInfo{}, nil, opts, errors.New("encrypt: no recipients")
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
		return cipherInfo{}, nil, opts, fmt.Errorf("%w: encrypt with cipher %d", ErrUnsupportedAlgorithm, opts.Cipher)
	}
	return c, rnd, opts, nil
}

// newContentKey draws a content key for c from rnd and wraps it for each
// recipient (key transport); it returns the key and the encoded
// RecipientInfos in recipients' order.
func newContentKey(c cipherInfo, recipients []*x509.Certificate, opts EncryptOptions, rnd io.Reader) ([]byte, [][]byte, error) {
	cek := make([]byte, c.keyLen)
	if _, err := io.ReadFull(rnd, cek); err != nil {
		return nil, nil, fmt.Errorf("encrypt: content key: %w", err)
	}
	var ris [][]byte
	for _, cert := range recipients {
		ri, err := keyTransRecipient(cert, cek, opts, rnd)
		if err != nil {
			return nil, nil, fmt.Errorf("encrypt: %w", err)
		}
		ris = append(ris, ri)
	}
	return cek, ris, nil
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
