package as2

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
)

// Compression selects whether and where Wrap compresses.
type Compression int

const (
	// CompressNone sends the payload uncompressed.
	CompressNone Compression = iota
	// CompressBeforeSigning compresses the payload entity and signs the
	// compressed entity (RFC 5402 recommends this order).
	CompressBeforeSigning
	// CompressAfterSigning compresses the multipart/signed entity.
	CompressAfterSigning
)

// TransferEncoding selects the Content-Transfer-Encoding Wrap writes.
type TransferEncoding int

const (
	// Binary sends raw bytes (the AS2 default).
	Binary TransferEncoding = iota
	// Base64 encodes the payload and the S/MIME bodies in base64, for
	// partners that require it.
	Base64
)

// WrapOptions is a partner's outbound profile plus the keys it needs.
type WrapOptions struct {
	// Sign is the signature digest; zero sends unsigned.
	Sign crypto.Hash
	// SignerKey and SignerCert are the station's signing identity.
	SignerKey  crypto.Signer
	SignerCert *x509.Certificate
	// AlgorithmProtection adds the RFC 6211 attribute to the signature.
	AlgorithmProtection bool

	// Encrypt is the content cipher; zero sends unencrypted.
	Encrypt cms.Cipher
	// OAEP selects RSAES-OAEP key transport with OAEPHash (default
	// SHA-256) instead of PKCS#1 v1.5.
	OAEP     bool
	OAEPHash crypto.Hash
	// RecipientCert is the partner's encryption certificate.
	RecipientCert *x509.Certificate

	// Compress selects compression and its order relative to signing.
	// Without signing both orders mean "compress the payload entity".
	Compress Compression
	// TransferEncoding is the Content-Transfer-Encoding of the payload and
	// of S/MIME bodies.
	TransferEncoding TransferEncoding

	// MICAlg is the MIC algorithm of unsigned messages (the micalg Wrap's
	// caller requests in Disposition-Notification-Options); default
	// SHA-256. Signed messages use Sign.
	MICAlg crypto.Hash
	// UnsignedMIC is the MIC scope of unsigned, unencrypted messages; it
	// must match what the partner computes.
	UnsignedMIC MICScope

	// Time is the signing time; zero means time.Now().
	Time time.Time
	// Rand supplies boundaries, keys and IVs; nil means crypto/rand.
	Rand io.Reader
}

// Wrapped is an AS2 message ready to POST.
type Wrapped struct {
	// Header holds MIME-Version, Content-Type and, unless binary,
	// Content-Transfer-Encoding (plus Content-Disposition for a plain
	// payload). AS2 and HTTP fields are the caller's.
	Header http.Header
	// Body is the HTTP request body.
	Body []byte
	// MIC is the MIC the partner's MDN must return.
	MIC MIC
	// MICs is the MIC in every algorithm of MICAlgorithms, over the same
	// bytes as MIC: a partner may answer in another supported algorithm
	// than the one asked for, and an encrypted message's MIC cannot be
	// recomputed from the bytes sent.
	MICs []MIC
}

var randReader = rand.Reader

type part struct {
	header Header
	body   []byte
}

func (p part) bytes() []byte {
	n := len(p.body) + 2
	for _, f := range p.header {
		n += len(f.Name) + len(f.Value) + 4
	}
	b := writeHeader(make([]byte, 0, n), p.header)
	b = append(b, '\r', '\n')
	return append(b, p.body...)
}

// Wrap runs the send pipeline: it builds the payload entity (Content-Type
// contentType, Content-Disposition with filename when not empty), then
// compresses, signs and encrypts per opts, and computes the MIC by the same
// rules as Unwrap. Header fields are emitted unfolded with CRLF line ends.
func Wrap(payload []byte, contentType, filename string, opts WrapOptions) (*Wrapped, error) {
	if contentType == "" {
		return nil, errors.New("wrap: empty content type")
	}
	rnd := opts.Rand
	if rnd == nil {
		rnd = randReader
	}
	micAlg := opts.MICAlg
	if micAlg == 0 {
		micAlg = crypto.SHA256
	}
	te := "binary"
	if opts.TransferEncoding == Base64 {
		te = "base64"
	}
	ent := part{header: Header{
		{"Content-Type", contentType},
		{"Content-Transfer-Encoding", te},
	}}
	if filename != "" {
		ent.header = append(ent.header, Field{"Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename})})
	}
	ent.body = payload
	if te == "base64" {
		ent.body = encodeBase64Lines(payload)
	}
	payloadEntity := ent

	// micBytes is what the MIC covers, micHash the algorithm asked for.
	var micBytes []byte
	micHash := micAlg
	var compressedSrc []byte
	compress := func(p part) (part, error) {
		src := p.bytes()
		der, err := cms.Compress(src)
		if err != nil {
			return part{}, fmt.Errorf("wrap: %w", err)
		}
		if compressedSrc == nil {
			compressedSrc = src
		}
		return smimePart("compressed-data", "smime.p7z", der, te), nil
	}
	var err error
	if opts.Compress == CompressBeforeSigning || (opts.Compress == CompressAfterSigning && opts.Sign == 0) {
		if ent, err = compress(ent); err != nil {
			return nil, err
		}
	}
	if opts.Sign != 0 {
		if opts.SignerKey == nil || opts.SignerCert == nil {
			return nil, errors.New("wrap: signing needs SignerKey and SignerCert")
		}
		signed := ent.bytes()
		sig, err := cms.SignDetached(signed, opts.SignerCert, opts.SignerKey, cms.SignOptions{
			Hash: opts.Sign, SigningTime: opts.Time, AlgorithmProtection: opts.AlgorithmProtection, Rand: rnd,
		})
		if err != nil {
			return nil, fmt.Errorf("wrap: %w", err)
		}
		micBytes, micHash = signed, opts.Sign
		if ent, err = multipartSigned(signed, sig, opts.Sign, rnd); err != nil {
			return nil, err
		}
		if opts.Compress == CompressAfterSigning {
			if ent, err = compress(ent); err != nil {
				return nil, err
			}
		}
	}
	if opts.Encrypt != 0 {
		if opts.RecipientCert == nil {
			return nil, errors.New("wrap: encryption needs RecipientCert")
		}
		plain := ent.bytes()
		der, err := cms.Encrypt(plain, []*x509.Certificate{opts.RecipientCert}, cms.EncryptOptions{
			Cipher: opts.Encrypt, OAEP: opts.OAEP, OAEPHash: opts.OAEPHash, Rand: rnd,
		})
		if err != nil {
			return nil, fmt.Errorf("wrap: %w", err)
		}
		if opts.Sign == 0 {
			micBytes = plain
		}
		smimeType := "enveloped-data"
		if opts.Encrypt == cms.AES128GCM || opts.Encrypt == cms.AES256GCM {
			smimeType = "authEnveloped-data"
		}
		ent = smimePart(smimeType, "smime.p7m", der, te)
	}
	if micBytes == nil {
		switch {
		case opts.UnsignedMIC == MICContentOnly:
			micBytes = payload
		case compressedSrc != nil:
			micBytes = compressedSrc
		default:
			micBytes = payloadEntity.bytes()
		}
	}
	mics := ComputeMICs(micBytes)
	mic, ok := FindMIC(mics, micHash)
	if !ok {
		mic = ComputeMIC(micHash, micBytes)
	}
	h := http.Header{"Mime-Version": {"1.0"}}
	for _, f := range ent.header {
		if f.Name == "Content-Transfer-Encoding" && f.Value == "binary" {
			continue // binary is the HTTP default; omit like most AS2 products
		}
		h[http.CanonicalHeaderKey(f.Name)] = []string{f.Value}
	}
	if opts.Sign == 0 && opts.Encrypt == 0 && opts.Compress == CompressNone && opts.UnsignedMIC == MICWithHeaders {
		// The receiver rebuilds the entity from what it gets, so the MIC
		// covers exactly the fields sent.
		h.Set("Content-Transfer-Encoding", te)
	}
	return &Wrapped{Header: h, Body: ent.body, MIC: mic, MICs: mics}, nil
}

func smimePart(smimeType, name string, der []byte, te string) part {
	body := der
	if te == "base64" {
		body = encodeBase64Lines(der)
	}
	return part{
		header: Header{
			{"Content-Type", "application/pkcs7-mime; smime-type=" + smimeType + "; name=" + name},
			{"Content-Transfer-Encoding", te},
			{"Content-Disposition", "attachment; filename=" + name},
		},
		body: body,
	}
}

func multipartSigned(signed, sig []byte, h crypto.Hash, rnd io.Reader) (part, error) {
	var boundary string
	for {
		var r [12]byte
		if _, err := io.ReadFull(rnd, r[:]); err != nil {
			return part{}, fmt.Errorf("wrap: boundary: %w", err)
		}
		boundary = "----=_Part_" + hex.EncodeToString(r[:])
		if !bytes.Contains(signed, []byte(boundary)) {
			break
		}
	}
	sigPart := part{
		header: Header{
			{"Content-Type", "application/pkcs7-signature; name=smime.p7s"},
			{"Content-Transfer-Encoding", "base64"},
			{"Content-Disposition", "attachment; filename=smime.p7s"},
		},
		body: encodeBase64Lines(sig),
	}.bytes()
	var b bytes.Buffer
	b.Grow(len(signed) + len(sigPart) + 3*len(boundary) + 32)
	b.WriteString("--" + boundary + "\r\n")
	b.Write(signed)
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.Write(sigPart)
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return part{
		header: Header{{"Content-Type", `multipart/signed; protocol="application/pkcs7-signature"; micalg=` +
			MICAlgName(h) + `; boundary="` + boundary + `"`}},
		body: b.Bytes(),
	}, nil
}
