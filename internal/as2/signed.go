package as2

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
)

// VerifyMultipartSigned verifies a multipart/signed entity (for example a
// signed MDN) against certs, splitting its parts if ParseEntity has not.
// It returns the signed bytes — the first part exactly as received, or its
// CRLF-canonical form when only that verifies — and the verification,
// whose Hash is the MIC algorithm. Errors are *Error values with the
// authentication-failed or integrity-check-failed disposition.
func VerifyMultipartSigned(e *Entity, certs []*x509.Certificate, lim Limits) ([]byte, *cms.Verified, error) {
	if mt, _ := e.MediaType(); mt != "multipart/signed" {
		return nil, nil, classify(stageVerify, fmt.Errorf("%w: %q is not multipart/signed", ErrMalformedMIME, mt))
	}
	if e.Parts == nil {
		if err := (&mimeParser{lim: lim.withDefaults()}).multipart(e, 0); err != nil {
			return nil, nil, classify(stageVerify, err)
		}
	}
	v, _, err := verifyMultipart(e, certs)
	if err != nil {
		return nil, nil, err
	}
	return v.Content, v, nil
}

// SignOptions configures SignMultipart.
type SignOptions struct {
	// Hash is the digest (and micalg); zero means SHA-256.
	Hash crypto.Hash
	// AlgorithmProtection adds the RFC 6211 attribute.
	AlgorithmProtection bool
	// Time is the signing time; zero means time.Now().
	Time time.Time
	// Rand supplies the boundary and the signer's randomness; nil means
	// crypto/rand.
	Rand io.Reader
}

// SignMultipart wraps entity (a complete MIME entity with CRLF line ends,
// e.g. an MDN's multipart/report) in multipart/signed with a detached
// signature by key and cert. It returns the Content-Type value, the body
// and the MIC of entity under opts.Hash.
func SignMultipart(entity []byte, key crypto.Signer, cert *x509.Certificate, opts SignOptions) (contentType string, body []byte, mic MIC, err error) {
	h := opts.Hash
	if h == 0 {
		h = crypto.SHA256
	}
	rnd := opts.Rand
	if rnd == nil {
		rnd = randReader
	}
	sig, err := cms.SignDetached(entity, cert, key, cms.SignOptions{
		Hash: h, SigningTime: opts.Time, AlgorithmProtection: opts.AlgorithmProtection, Rand: rnd,
	})
	if err != nil {
		return "", nil, MIC{}, fmt.Errorf("sign: %w", err)
	}
	p, err := multipartSigned(entity, sig, MICAlgName(h), rnd)
	if err != nil {
		return "", nil, MIC{}, err
	}
	return p.header.Get("Content-Type"), p.body, ComputeMIC(h, entity), nil
}
