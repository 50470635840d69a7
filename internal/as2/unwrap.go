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
	// body), for recognising the same signed content sent again.
	SignedContent []byte
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
	// blind is set while the bytes in hand came out of a decryption that
	// no signature has yet vouched for.
	blind := false
	defer func() {
		if err != nil && blind {
			err = &Error{Disposition: DispositionDecryptionFailed, Err: err}
		}
	}()
	lim := opts.Limits.withDefaults()
	top := &Entity{Body: body}
	for _, name := range []string{"Content-Type", "Content-Transfer-Encoding", "Content-Disposition"} {
		if vs := h.Values(name); len(vs) > 0 {
			top.Header = append(top.Header, Field{Name: name, Value: strings.TrimSpace(vs[0])})
		}
	}
	if top.Header.Get("Content-Type") == "" {
		return nil, &Error{Disposition: DispositionUnexpectedProcessing, Err: fmt.Errorf("%w: no Content-Type", ErrMalformedMIME)}
	}
	micAlg := crypto.SHA256
	if len(opts.MICAlgs) > 0 {
		micAlg = opts.MICAlgs[0]
	}

	m := &Message{}
	// The MIC inputs: a signed layer's MIC is the verifier's digest; the
	// bytes of an encrypted or compressed layer are digested only when
	// needed, or before a decryption in place would overwrite them.
	var signedMIC, encryptedMIC, compressedMIC MIC
	var encryptedRaw, compressedRaw []byte
	digestPending := func() {
		if encryptedRaw != nil {
			encryptedMIC, encryptedRaw = ComputeMIC(micAlg, encryptedRaw), nil
		}
		if compressedRaw != nil {
			compressedMIC, compressedRaw = ComputeMIC(micAlg, compressedRaw), nil
		}
	}
	encryptedSeen, compressedSeen := false, false
	// Nested compressed layers share one budget: each may be held at once.
	decompressBudget := lim.MaxDecompressedSize
	ent := top
	owned := opts.InPlace // ent's bytes may be overwritten
	for depth := 0; ; depth++ {
		if depth > lim.MaxDepth {
			return nil, classify(stageMIME, fmt.Errorf("%w: more than %d S/MIME layers", ErrLimit, lim.MaxDepth))
		}
		mt, params := ent.MediaType()
		switch {
		case mt == "multipart/signed":
			// Split only now: a broken multipart/signed is a failed
			// authentication, not a generic MIME error.
			if ent.Parts == nil {
				if err := (&mimeParser{lim: lim}).multipart(ent, 0); err != nil {
					return nil, classify(stageVerify, err)
				}
			}
			v, covered, err := verifyMultipart(ent, opts.PartnerCerts)
			if err != nil {
				return nil, err
			}
			m.Signed = true
			blind = false
			m.Layers = append(m.Layers, LayerSigned)
			if signedMIC.IsZero() {
				signedMIC, m.Signer = signatureMIC(v, covered, opts.MICAlgs), v.Signer
				m.SignedContent = covered
			}
			ent = ent.Parts[0]

		case mt == "application/pkcs7-mime" || mt == "application/x-pkcs7-mime":
			der, fresh, err := cmsBody(ent)
			if err != nil {
				return nil, classify(stageFor(params["smime-type"]), err)
			}
			typ, err := cms.Identify(der)
			if err != nil {
				return nil, classify(stageFor(params["smime-type"]), err)
			}
			var inner []byte
			var s stage
			switch typ {
			case cms.TypeEnvelopedData, cms.TypeAuthEnvelopedData:
				s = stageDecrypt
				blind = blind || !m.Signed
				if owned || fresh {
					digestPending() // they may alias der
					inner, err = cms.DecryptInPlace(der, opts.Keys)
				} else {
					inner, err = cms.Decrypt(der, opts.Keys)
				}
				if err != nil {
					return nil, classify(s, fmt.Errorf("decrypt: %w", err))
				}
				m.Encrypted = true
				m.Layers = append(m.Layers, LayerEncrypted)
				if !encryptedSeen {
					encryptedSeen, encryptedRaw = true, inner
				}
				owned = true
			case cms.TypeCompressedData:
				s = stageDecompress
				if decompressBudget <= 0 { // 0 would mean Decompress's default
					return nil, classify(s, fmt.Errorf("decompress: %w: %w: more than %d bytes in all", cms.ErrDecompression, cms.ErrTooLarge, lim.MaxDecompressedSize))
				}
				var reserveErr error
				reserve := opts.Reserve
				if reserve != nil {
					reserve = func(n int64) error {
						reserveErr = opts.Reserve(n)
						return reserveErr
					}
				}
				if inner, err = cms.DecompressReserving(der, decompressBudget, reserve); err != nil {
					if reserveErr != nil {
						// Not the message's fault: the process is busy.
						return nil, fmt.Errorf("decompress: %w", reserveErr)
					}
					return nil, classify(s, fmt.Errorf("decompress: %w", err))
				}
				decompressBudget -= int64(len(inner))
				m.Compressed = true
				m.Layers = append(m.Layers, LayerCompressed)
				if !compressedSeen {
					compressedSeen, compressedRaw = true, inner
				}
				owned = true
			case cms.TypeSignedData:
				s = stageVerify
				v, err := cms.Verify(der, nil, opts.PartnerCerts)
				if err != nil {
					return nil, classify(s, fmt.Errorf("verify: %w", err))
				}
				inner = v.Content
				m.Signed = true
				blind = false
				m.Layers = append(m.Layers, LayerSigned)
				if signedMIC.IsZero() {
					signedMIC, m.Signer = signatureMIC(v, v.Content, opts.MICAlgs), v.Signer
					m.SignedContent = v.Content
				}
				owned = owned || fresh // the content aliases der or is new
			default:
				return nil, classify(stageFor(params["smime-type"]), fmt.Errorf("%w: CMS content type %v", cms.ErrContentType, typ))
			}
			// Header only: parts are split when a layer needs them.
			if ent, err = parseHeaderOnly(inner, lim); err != nil {
				return nil, classify(s, fmt.Errorf("inner entity: %w", err))
			}

		default:
			payload, err := ent.DecodedBody()
			if err != nil {
				return nil, classify(stageMIME, fmt.Errorf("payload: %w", err))
			}
			m.Payload = payload
			m.Header = ent.Header
			m.ContentType = ent.Header.Get("Content-Type")
			if m.ContentType == "" {
				m.ContentType = "application/octet-stream"
			}
			m.Filename = filename(ent.Header.Get("Content-Disposition"))
			switch {
			case !signedMIC.IsZero():
				m.MIC = signedMIC
			case encryptedSeen:
				digestPending()
				m.MIC = encryptedMIC
			case opts.UnsignedMIC == MICContentOnly:
				m.MIC = ComputeMIC(micAlg, payload)
			case compressedSeen:
				digestPending()
				m.MIC = compressedMIC
			default:
				m.MIC = plainMIC(micAlg, top)
			}
			return m, nil
		}
	}
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
