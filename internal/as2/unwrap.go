package as2

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/edihub/edihub/internal/as2/cms"
)

// MICScope chooses what the MIC of a message that is neither signed nor
// encrypted covers (see docs/as2.md).
type MICScope int

const (
	// MICContentOnly digests the payload content alone, after transfer
	// decoding and decompression, without MIME header fields: RFC 4130
	// §7.3.1 ("calculated over the message contents without the MIME or
	// any other RFC 2822 headers, since these are sometimes altered or
	// reordered"). The default.
	MICContentOnly MICScope = iota
	// MICWithHeaders digests the MIME entity, header fields included (for
	// compressed messages the uncompressed entity, RFC 5402 §4, of the
	// outermost compressed layer when there are several). For a plain message
	// the entity is rebuilt from the HTTP Content-Type,
	// Content-Transfer-Encoding and Content-Disposition fields, in that
	// order, as "Name: value" CRLF lines. A compatibility setting for
	// peers that compute it this way (mic_include_headers).
	MICWithHeaders
)

// Layer names one S/MIME layer found by Unwrap.
type Layer string

// Layers, outermost first in Message.Layers.
const (
	LayerEncrypted  Layer = "encrypted"
	LayerSigned     Layer = "signed"
	LayerCompressed Layer = "compressed"
)

// UnwrapOptions holds the keys and limits Unwrap works with.
type UnwrapOptions struct {
	// Keys are the station's decryption identities (several during a
	// certificate rollover).
	Keys []cms.Recipient
	// PartnerCerts verify the partner's signature. Certificates inside the
	// message are never trusted.
	PartnerCerts []*x509.Certificate
	// MICAlgs is the partner's signed-receipt-micalg list, supported
	// algorithms only, in order (DispositionOptions.SupportedMICAlgs). Its
	// first entry is the MIC algorithm; when empty, the signature's digest
	// (signed messages) or SHA-256.
	MICAlgs []crypto.Hash
	// UnsignedMIC selects the MIC scope of unsigned, unencrypted messages.
	UnsignedMIC MICScope
	// Limits bound the parse.
	Limits Limits
	// Reserve, when set, is called before decompression allocates or
	// grows its output, with the bytes about to be added; an error stops
	// Unwrap, which returns it in its error chain (errors.Is finds it)
	// instead of a decompression failure. It accounts decompression
	// against a memory budget shared by concurrent messages.
	Reserve func(n int64) error
	// InPlace lets Unwrap decrypt into body instead of a copy, so that a
	// large message is held once: the caller owns body and does not use
	// it after Unwrap returns (its bytes are then undefined). The
	// Message's Payload may alias body either way.
	InPlace bool
	// Stats, when set, receives where UnwrapStream's time went.
	Stats *StreamStats
	// Compressed, when set, asks UnwrapStream for a payload that arrived
	// compressed in the form it arrived in (CompressedOutput).
	Compressed *CompressedOutput
}

// Message is the result of Unwrap.
type Message struct {
	// Payload is the content after all layers and the payload's transfer
	// encoding were removed.
	Payload []byte
	// ContentType is the payload's Content-Type value as received
	// ("application/octet-stream" when absent).
	ContentType string
	// Filename is the filename parameter of the payload's
	// Content-Disposition, or "".
	Filename string
	// Header holds the payload entity's header fields.
	Header Header
	// Signed, Encrypted and Compressed report the layers found; compare
	// them with the partner profile and answer ErrInsufficientSecurity.
	Signed, Encrypted, Compressed bool
	// Layers lists the layers outermost first.
	Layers []Layer
	// MIC is the Received-content-MIC to return in the MDN.
	MIC MIC
	// Signer is the partner certificate that verified the signature.
	Signer *x509.Certificate
	// SignedContent is what the outermost signature covers (it may alias
	// body), for recognising the same signed content sent again. nil from
	// UnwrapStream, which gives SignedDigests instead.
	SignedContent []byte
	// SignedDigests are the digests of what the outermost signature covers
	// (SHA-256 among them), set by UnwrapStream.
	SignedDigests map[crypto.Hash][]byte
	// PayloadSize is the payload's size in bytes.
	PayloadSize int64
	// Zlib is set when UnwrapStream wrote the payload's zlib stream to
	// UnwrapOptions.Compressed.
	Zlib *ZlibPayload
}

// Unwrap runs the receive pipeline on an AS2 request: h supplies the
// Content-Type (required), Content-Transfer-Encoding and
// Content-Disposition of the body. It peels encrypted (EnvelopedData,
// AuthEnvelopedData), compressed and signed (multipart/signed, or opaque
// application/pkcs7-mime signed-data) layers in any order and nesting up
// to opts.Limits.MaxDepth, verifies signatures against opts.PartnerCerts,
// and computes the MIC:
//
//   - signed: over the outermost signed content exactly as received (the
//     first part of multipart/signed, headers included); algorithm = the
//     first of opts.MICAlgs, else the signature's digest;
//   - else encrypted: over the outermost decrypted MIME entity;
//   - else: per opts.UnsignedMIC.
//
// Every error is an *Error whose Disposition is the MDN modifier to send.
// Every failure under an encrypted layer before a signature has verified
// is decryption-failed, whatever its cause (which stays in the error's
// text, for logs): distinct answers for a padding error and for altered
// content would make a CBC decryption oracle.
// body is not modified unless opts.InPlace; the Message may alias it.
func Unwrap(h http.Header, body []byte, opts UnwrapOptions) (_ *Message, err error) {
	top, err := requestEntity(h, body)
	if err != nil {
		return nil, err
	}
	u := newUnwrapping(top, opts)
	defer func() {
		if err != nil && u.blind {
			err = &Error{Disposition: DispositionDecryptionFailed, Err: err}
		}
	}()
	ent := top
	for depth := 0; ; depth++ {
		if depth > u.lim.MaxDepth {
			return nil, classify(stageMIME, fmt.Errorf("%w: more than %d S/MIME layers", ErrLimit, u.lim.MaxDepth))
		}
		mt, params := ent.MediaType()
		switch mt {
		case "multipart/signed":
			ent, err = u.multipartSigned(ent)
		case "application/pkcs7-mime", "application/x-pkcs7-mime":
			ent, err = u.pkcs7(ent, params["smime-type"])
		default:
			return u.payload(ent)
		}
		if err != nil {
			return nil, err
		}
	}
}

// requestEntity is the outermost MIME entity: body under the HTTP header
// fields that describe it, which must include a Content-Type.
func requestEntity(h http.Header, body []byte) (*Entity, error) {
	top := &Entity{Body: body}
	for _, name := range []string{"Content-Type", "Content-Transfer-Encoding", "Content-Disposition"} {
		if vs := h.Values(name); len(vs) > 0 {
			top.Header = append(top.Header, Field{Name: name, Value: strings.TrimSpace(vs[0])})
		}
	}
	if top.Header.Get("Content-Type") == "" {
		return nil, &Error{Disposition: DispositionUnexpectedProcessing, Err: fmt.Errorf("%w: no Content-Type", ErrMalformedMIME)}
	}
	return top, nil
}

// unwrapping is the state of one Unwrap call while it peels layers. Each
// layer method returns its error already classified for the MDN (but for
// a Reserve failure, which is not the message's); Unwrap only adds the
// blanket decryption-failed of a blind failure.
type unwrapping struct {
	opts   UnwrapOptions
	lim    Limits
	micAlg crypto.Hash // for MICs that no signature fixes
	top    *Entity     // the request entity, for a plain message's MIC
	m      *Message

	// blind is set while the bytes in hand came out of a decryption that
	// no signature has yet vouched for.
	blind bool
	// owned is set when the current entity's bytes may be overwritten:
	// they are a buffer of Unwrap's own, or the caller's with InPlace.
	owned bool
	// decompressBudget is shared by nested compressed layers: each may
	// be held at once.
	decompressBudget int64

	// The MIC inputs: a signed layer's MIC is the verifier's digest; the
	// bytes of the outermost encrypted or compressed layer are digested
	// only when needed, or before a decryption in place would overwrite
	// them.
	signedMIC, encryptedMIC, compressedMIC MIC
	encryptedRaw, compressedRaw            []byte
	encryptedSeen, compressedSeen          bool
}

func newUnwrapping(top *Entity, opts UnwrapOptions) *unwrapping {
	u := &unwrapping{
		opts:   opts,
		lim:    opts.Limits.withDefaults(),
		micAlg: crypto.SHA256,
		top:    top,
		m:      &Message{},
		owned:  opts.InPlace,
	}
	if len(opts.MICAlgs) > 0 {
		u.micAlg = opts.MICAlgs[0]
	}
	u.decompressBudget = u.lim.MaxDecompressedSize
	return u
}

// digestPending digests the layer bytes kept for the MIC, before they
// are overwritten or when the MIC needs them.
func (u *unwrapping) digestPending() {
	if u.encryptedRaw != nil {
		u.encryptedMIC, u.encryptedRaw = ComputeMIC(u.micAlg, u.encryptedRaw), nil
	}
	if u.compressedRaw != nil {
		u.compressedMIC, u.compressedRaw = ComputeMIC(u.micAlg, u.compressedRaw), nil
	}
}

// multipartSigned verifies a multipart/signed layer and returns its
// signed part.
func (u *unwrapping) multipartSigned(ent *Entity) (*Entity, error) {
	// Split only now: a broken multipart/signed is a failed
	// authentication, not a generic MIME error.
	if ent.Parts == nil {
		if err := (&mimeParser{lim: u.lim}).multipart(ent, 0); err != nil {
			return nil, classify(stageVerify, err)
		}
	}
	v, covered, err := verifyMultipart(ent, u.opts.PartnerCerts)
	if err != nil {
		return nil, err
	}
	u.verified(v, covered)
	return ent.Parts[0], nil
}

// pkcs7 peels an application/pkcs7-mime layer of whatever CMS type it
// holds and returns the inner entity. smimeType is the Content-Type's
// smime-type parameter, only a hint when the CMS type cannot be told.
func (u *unwrapping) pkcs7(ent *Entity, smimeType string) (*Entity, error) {
	der, fresh, err := cmsBody(ent)
	if err != nil {
		return nil, classify(stageFor(smimeType), err)
	}
	typ, err := cms.Identify(der)
	if err != nil {
		return nil, classify(stageFor(smimeType), err)
	}
	var inner []byte
	var s stage
	switch typ {
	case cms.TypeEnvelopedData, cms.TypeAuthEnvelopedData:
		s = stageDecrypt
		inner, err = u.decrypt(der, fresh)
	case cms.TypeCompressedData:
		s = stageDecompress
		inner, err = u.decompress(der)
	case cms.TypeSignedData:
		s = stageVerify
		inner, err = u.verify(der, fresh)
	default:
		return nil, classify(stageFor(smimeType), fmt.Errorf("%w: CMS content type %v", cms.ErrContentType, typ))
	}
	if err != nil {
		return nil, err
	}
	// Header only: parts are split when a layer needs them.
	next, err := parseHeaderOnly(inner, u.lim)
	if err != nil {
		return nil, classify(s, fmt.Errorf("inner entity: %w", err))
	}
	return next, nil
}

// decrypt opens an EnvelopedData or AuthEnvelopedData, in place when der
// is ours to overwrite (fresh: a buffer of our own).
func (u *unwrapping) decrypt(der []byte, fresh bool) ([]byte, error) {
	u.blind = u.blind || !u.m.Signed
	var inner []byte
	var err error
	if u.owned || fresh {
		u.digestPending() // they may alias der
		inner, err = cms.DecryptInPlace(der, u.opts.Keys)
	} else {
		inner, err = cms.Decrypt(der, u.opts.Keys)
	}
	if err != nil {
		return nil, classify(stageDecrypt, fmt.Errorf("decrypt: %w", err))
	}
	u.m.Encrypted = true
	u.m.Layers = append(u.m.Layers, LayerEncrypted)
	if !u.encryptedSeen {
		u.encryptedSeen, u.encryptedRaw = true, inner
	}
	u.owned = true
	return inner, nil
}

// decompress inflates a CompressedData within what is left of the
// message's budget, accounting it through opts.Reserve.
func (u *unwrapping) decompress(der []byte) ([]byte, error) {
	if u.decompressBudget <= 0 { // 0 would mean Decompress's default
		return nil, classify(stageDecompress, fmt.Errorf("%w: %w: decompressed more than %d bytes in all", cms.ErrDecompression, cms.ErrTooLarge, u.lim.MaxDecompressedSize))
	}
	var reserveErr error
	reserve := u.opts.Reserve
	if reserve != nil {
		reserve = func(n int64) error {
			reserveErr = u.opts.Reserve(n)
			return reserveErr
		}
	}
	inner, err := cms.DecompressReserving(der, u.decompressBudget, reserve)
	if err != nil {
		if reserveErr != nil {
			// Not the message's fault: the process is busy.
			return nil, fmt.Errorf("decompress: %w", reserveErr)
		}
		return nil, classify(stageDecompress, fmt.Errorf("decompress: %w", err))
	}
	u.decompressBudget -= int64(len(inner))
	u.m.Compressed = true
	u.m.Layers = append(u.m.Layers, LayerCompressed)
	if !u.compressedSeen {
		u.compressedSeen, u.compressedRaw = true, inner
	}
	u.owned = true
	return inner, nil
}

// verify checks an opaque SignedData and returns its content.
func (u *unwrapping) verify(der []byte, fresh bool) ([]byte, error) {
	v, err := cms.Verify(der, nil, u.opts.PartnerCerts)
	if err != nil {
		return nil, classify(stageVerify, fmt.Errorf("verify: %w", err))
	}
	u.verified(v, v.Content)
	u.owned = u.owned || fresh // the content aliases der or is new
	return v.Content, nil
}

// verified records a signature that verified over covered. The outermost
// one gives the MIC, the Signer and the SignedContent.
func (u *unwrapping) verified(v *cms.Verified, covered []byte) {
	u.m.Signed = true
	u.blind = false
	u.m.Layers = append(u.m.Layers, LayerSigned)
	if u.signedMIC.IsZero() {
		u.signedMIC, u.m.Signer = signatureMIC(v, covered, u.opts.MICAlgs), v.Signer
		u.m.SignedContent = covered
	}
}

// payload completes the Message from the innermost entity, which is no
// S/MIME layer.
func (u *unwrapping) payload(ent *Entity) (*Message, error) {
	payload, err := ent.DecodedBody()
	if err != nil {
		return nil, classify(stageMIME, fmt.Errorf("payload: %w", err))
	}
	m := u.m
	m.Payload = payload
	m.PayloadSize = int64(len(payload))
	m.Header = ent.Header
	m.ContentType = ent.Header.Get("Content-Type")
	if m.ContentType == "" {
		m.ContentType = "application/octet-stream"
	}
	m.Filename = filename(ent.Header.Get("Content-Disposition"))
	m.MIC = u.mic(payload)
	return m, nil
}

// mic chooses the Received-content-MIC by the rules in Unwrap's doc.
func (u *unwrapping) mic(payload []byte) MIC {
	switch {
	case !u.signedMIC.IsZero():
		return u.signedMIC
	case u.encryptedSeen:
		u.digestPending()
		return u.encryptedMIC
	case u.opts.UnsignedMIC == MICContentOnly:
		return ComputeMIC(u.micAlg, payload)
	case u.compressedSeen:
		u.digestPending()
		return u.compressedMIC
	}
	return plainMIC(u.micAlg, u.top)
}

// stageFor guesses the failing layer from the smime-type parameter when the
// CMS body cannot even be identified.
func stageFor(smimeType string) stage {
	switch strings.ToLower(smimeType) {
	case "compressed-data":
		return stageDecompress
	case "signed-data":
		return stageVerify
	}
	return stageDecrypt
}

// plainMIC digests the MIME entity of an unsigned, unencrypted,
// uncompressed message as rebuilt from its HTTP header fields, without
// copying the body (which may be hundreds of MiB).
func plainMIC(alg crypto.Hash, top *Entity) MIC {
	h := alg.New()
	h.Write(writeHeader(nil, top.Header))
	h.Write([]byte{'\r', '\n'})
	h.Write(top.Body)
	return MIC{Alg: alg, Digest: h.Sum(nil)}
}

// signatureMIC is the MIC of a signed message: in the first supported
// algorithm the sender asked for (RFC 4130 §7.3: signed-receipt-micalg is
// honoured left to right, also when the message was signed with another
// digest), else the signature's own digest. covered are the bytes the
// signature verified over.
func signatureMIC(v *cms.Verified, covered []byte, micAlgs []crypto.Hash) MIC {
	if len(micAlgs) > 0 && micAlgs[0] != v.Hash {
		return ComputeMIC(micAlgs[0], covered)
	}
	return MIC{Alg: v.Hash, Digest: v.Digest}
}

// verifyMultipart verifies a multipart/signed entity over its first part
// exactly as received or, when only that verifies, over its CRLF-canonical
// form (a partner whose transport turned CRLF into LF). It returns the
// bytes that verified (the MIC covers them) and the Verified, whose Digest
// is theirs.
func verifyMultipart(ent *Entity, certs []*x509.Certificate) (*cms.Verified, []byte, error) {
	if len(ent.Parts) < 2 {
		return nil, nil, classify(stageVerify, fmt.Errorf("%w: multipart/signed with %d parts", ErrMalformedMIME, len(ent.Parts)))
	}
	sig, _, err := cmsBody(ent.Parts[1])
	if err != nil {
		return nil, nil, classify(stageVerify, fmt.Errorf("signature part: %w", err))
	}
	signed := ent.Parts[0].Raw
	v, err := cms.Verify(sig, signed, certs)
	if err != nil && hasBareLF(signed) && (errors.Is(err, cms.ErrSignature) || errors.Is(err, cms.ErrDigestMismatch)) {
		crlf := toCRLF(signed)
		if v2, err2 := cms.Verify(sig, crlf, certs); err2 == nil {
			return v2, crlf, nil
		}
	}
	if err != nil {
		return nil, nil, classify(stageVerify, fmt.Errorf("verify: %w", err))
	}
	return v, signed, nil
}

// cmsBody returns the DER of an application/pkcs7-* entity, undoing its
// transfer encoding, and base64 even when the Content-Transfer-Encoding
// field went missing. fresh reports a new buffer, not a slice of e.Body.
func cmsBody(e *Entity) (der []byte, fresh bool, err error) {
	b, err := e.DecodedBody()
	if err != nil {
		return nil, false, err
	}
	fresh = e.TransferEncoding() != "binary" && e.TransferEncoding() != "7bit" && e.TransferEncoding() != "8bit"
	if len(b) > 0 && b[0] != 0x30 && isBase64Text(b) {
		if d, err := decodeBase64(b); err == nil {
			return d, true, nil
		}
	}
	return b, fresh, nil
}
