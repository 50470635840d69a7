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
	// RFC3851MICAlg writes the micalg parameter of multipart/signed in
	// the RFC 3851 spelling ("sha1", "sha256") instead of RFC 5751's
	// ("sha-1", "sha-256"), for receivers that predate RFC 5751.
	RFC3851MICAlg bool

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
	// OneMIC computes the MIC in its own algorithm only (Wrapped.MICs
	// then holds just MIC) instead of in every algorithm of
	// MICAlgorithms. The others serve only to judge an MDN that answers
	// in another algorithm than the one asked for: a caller that asks for
	// no MDN sets it, and a large streamed build then skips four more
	// digests of every byte.
	OneMIC bool

	// Time is the signing time; zero means time.Now().
	Time time.Time
	// Rand supplies boundaries, keys and IVs; nil means crypto/rand.
	Rand io.Reader
	// Inputs, for NewWrapWriter only, makes a streamed build
	// reproducible (see StreamInputs): empty, the build records in it
	// what it drew; filled, the build uses it instead of drawing, so
	// that the same payload, options and Time build the same bytes.
	// Wrap ignores it.
	Inputs *StreamInputs
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
	// recomputed from the bytes sent. With WrapOptions.OneMIC it holds
	// MIC only.
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
	w := newWrapping(opts)
	payloadEntity := w.payloadEntity(payload, contentType, filename)
	ent := payloadEntity
	var err error
	if opts.Compress == CompressBeforeSigning || (opts.Compress == CompressAfterSigning && opts.Sign == 0) {
		if ent, err = w.compress(ent); err != nil {
			return nil, err
		}
	}
	if opts.Sign != 0 {
		if ent, err = w.sign(ent); err != nil {
			return nil, err
		}
		if opts.Compress == CompressAfterSigning {
			if ent, err = w.compress(ent); err != nil {
				return nil, err
			}
		}
	}
	if opts.Encrypt != 0 {
		if ent, err = w.encrypt(ent); err != nil {
			return nil, err
		}
	}
	mic, mics := w.mic(payload, payloadEntity)
	return &Wrapped{Header: w.header(ent), Body: ent.body, MIC: mic, MICs: mics}, nil
}

// wrapping is the state of one Wrap call while it builds layers.
type wrapping struct {
	opts WrapOptions
	rnd  io.Reader
	te   string // Content-Transfer-Encoding of the payload and S/MIME bodies
	// micBytes is what the MIC covers once a layer fixed it (signing, or
	// else encryption), micHash the algorithm asked for.
	micBytes []byte
	micHash  crypto.Hash
	// compressedSrc is the entity the first compression took in.
	compressedSrc []byte
}

func newWrapping(opts WrapOptions) *wrapping {
	w := &wrapping{opts: opts, rnd: opts.Rand, te: "binary", micHash: opts.MICAlg}
	if w.rnd == nil {
		w.rnd = randReader
	}
	if w.micHash == 0 {
		w.micHash = crypto.SHA256
	}
	if opts.TransferEncoding == Base64 {
		w.te = "base64"
	}
	return w
}

// payloadEntity is the innermost MIME entity, the payload in w.te.
func (w *wrapping) payloadEntity(payload []byte, contentType, filename string) part {
	ent := part{header: Header{
		{"Content-Type", contentType},
		{"Content-Transfer-Encoding", w.te},
	}}
	if filename != "" {
		ent.header = append(ent.header, Field{"Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename})})
	}
	ent.body = payload
	if w.te == "base64" {
		ent.body = encodeBase64Lines(payload)
	}
	return ent
}

// compress wraps p in a compressed-data entity.
func (w *wrapping) compress(p part) (part, error) {
	src := p.bytes()
	der, err := cms.Compress(src)
	if err != nil {
		return part{}, fmt.Errorf("wrap: %w", err)
	}
	if w.compressedSrc == nil {
		w.compressedSrc = src
	}
	return smimePart("compressed-data", "smime.p7z", der, w.te), nil
}

// sign wraps p in a multipart/signed entity; the MIC covers p as signed.
func (w *wrapping) sign(p part) (part, error) {
	if w.opts.SignerKey == nil || w.opts.SignerCert == nil {
		return part{}, errors.New("wrap: signing needs SignerKey and SignerCert")
	}
	signed := p.bytes()
	sig, err := cms.SignDetached(signed, w.opts.SignerCert, w.opts.SignerKey, cms.SignOptions{
		Hash: w.opts.Sign, SigningTime: w.opts.Time, AlgorithmProtection: w.opts.AlgorithmProtection, Rand: w.rnd,
	})
	if err != nil {
		return part{}, fmt.Errorf("wrap: %w", err)
	}
	w.micBytes, w.micHash = signed, w.opts.Sign
	micalg := MICAlgName(w.opts.Sign)
	if w.opts.RFC3851MICAlg {
		micalg = MICAlgNameRFC3851(w.opts.Sign)
	}
	return multipartSigned(signed, sig, micalg, w.rnd)
}

// encrypt wraps p in an enveloped-data (CBC) or authEnveloped-data (GCM)
// entity. Unless signed, the MIC covers p as encrypted: the receiver
// digests the entity it decrypts.
func (w *wrapping) encrypt(p part) (part, error) {
	if w.opts.RecipientCert == nil {
		return part{}, errors.New("wrap: encryption needs RecipientCert")
	}
	plain := p.bytes()
	der, err := cms.Encrypt(plain, []*x509.Certificate{w.opts.RecipientCert}, cms.EncryptOptions{
		Cipher: w.opts.Encrypt, OAEP: w.opts.OAEP, OAEPHash: w.opts.OAEPHash, Rand: w.rnd,
	})
	if err != nil {
		return part{}, fmt.Errorf("wrap: %w", err)
	}
	if w.opts.Sign == 0 {
		w.micBytes = plain
	}
	smimeType := "enveloped-data"
	if w.opts.Encrypt == cms.AES128GCM || w.opts.Encrypt == cms.AES256GCM {
		smimeType = "authEnveloped-data"
	}
	return smimePart(smimeType, "smime.p7m", der, w.te), nil
}

// mic returns the MIC the partner's MDN must return and the same bytes'
// MIC in every algorithm. Without signing or encryption it follows
// opts.UnsignedMIC as Unwrap does.
func (w *wrapping) mic(payload []byte, payloadEntity part) (MIC, []MIC) {
	micBytes := w.micBytes
	if micBytes == nil {
		switch {
		case w.opts.UnsignedMIC == MICContentOnly:
			micBytes = payload
		case w.compressedSrc != nil:
			micBytes = w.compressedSrc
		default:
			micBytes = payloadEntity.bytes()
		}
	}
	if w.opts.OneMIC {
		mic := ComputeMIC(w.micHash, micBytes)
		return mic, []MIC{mic}
	}
	mics := ComputeMICs(micBytes)
	mic, ok := FindMIC(mics, w.micHash)
	if !ok {
		mic = ComputeMIC(w.micHash, micBytes)
	}
	return mic, mics
}

// header is the HTTP header of the outermost entity ent.
func (w *wrapping) header(ent part) http.Header {
	h := http.Header{"Mime-Version": {"1.0"}}
	for _, f := range ent.header {
		if f.Name == "Content-Transfer-Encoding" && f.Value == "binary" {
			continue // binary is the HTTP default; omit like most AS2 products
		}
		h[http.CanonicalHeaderKey(f.Name)] = []string{f.Value}
	}
	o := w.opts
	if o.Sign == 0 && o.Encrypt == 0 && o.Compress == CompressNone && o.UnsignedMIC == MICWithHeaders {
		// The receiver rebuilds the entity from what it gets, so the MIC
		// covers exactly the fields sent.
		h.Set("Content-Transfer-Encoding", w.te)
	}
	return h
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

// multipartSigned builds the multipart/signed entity; micalg is the name
// written in its Content-Type.
func multipartSigned(signed, sig []byte, micalg string, rnd io.Reader) (part, error) {
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
	sigPart := signatureEntity(sig)
	var b bytes.Buffer
	b.Grow(len(signed) + len(sigPart) + 3*len(boundary) + 32)
	b.WriteString("--" + boundary + "\r\n")
	b.Write(signed)
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.Write(sigPart)
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return part{
		header: Header{{"Content-Type", `multipart/signed; protocol="application/pkcs7-signature"; micalg=` +
			micalg + `; boundary="` + boundary + `"`}},
		body: b.Bytes(),
	}, nil
}

// signatureEntity is the entity of a multipart/signed's detached signature
// sig (DER), header and base64 body.
func signatureEntity(sig []byte) []byte {
	return part{
		header: Header{
			{"Content-Type", "application/pkcs7-signature; name=smime.p7s"},
			{"Content-Transfer-Encoding", "base64"},
			{"Content-Disposition", "attachment; filename=smime.p7s"},
		},
		body: encodeBase64Lines(sig),
	}.bytes()
}
