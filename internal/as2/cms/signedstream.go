package cms

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"hash"
	"io"
)

// VerifyReader reads the content an opaque SignedData encapsulates as it
// streams, digesting it, and verifies the signature that follows it once
// the content was read to its end. Build it with VerifyStream; it is not
// safe for concurrent use.
type VerifyReader struct {
	s            *berStream
	content      io.Reader
	hashes       map[crypto.Hash]hash.Hash
	eContentType asn1.ObjectIdentifier
	// ends are the end-of-contents octets that close the content's
	// [0] and the encapContentInfo, when their lengths are indefinite.
	ends     int
	certs    []*x509.Certificate
	verified *Verified
	digests  map[crypto.Hash][]byte
	err      error
}

// VerifyStream reads a SignedData ContentInfo from r up to its
// encapsulated content and returns a reader of that content, as it
// streams and unverified. The content is digested in every digest
// algorithm the SignedData lists and in extra; once the reader reached
// its end, the signer infos after the content are read and verified with
// certs as Verify does it, and the reader returns io.EOF only when a
// signer verified (Verified and Digests then tell which, and the
// content's digests): the caller must not act on the content before, and
// discards what it wrote of it on any error. A signer whose digest
// algorithm was not computed fails with ErrUnsupportedAlgorithm. Bytes
// after the signer infos are left unread. Errors wrap ErrMalformed,
// ErrContentType, ErrUnsupportedAlgorithm, ErrNoSigner, ErrSignature or
// ErrDigestMismatch, as Verify's; a detached signature is ErrMalformed.
func VerifyStream(r io.Reader, certs []*x509.Certificate, extra ...crypto.Hash) (*VerifyReader, error) {
	s, _, err := openStream(r, "signed data", "is not signed data", oidSignedData)
	if err != nil {
		return nil, err
	}
	v := &VerifyReader{s: s, certs: certs, hashes: map[crypto.Hash]hash.Hash{}}
	if err := v.digestAlgorithms(extra); err != nil {
		return nil, err
	}
	if err := v.encapsulated(); err != nil {
		return nil, err
	}
	return v, nil
}

// digestAlgorithms reads the digestAlgorithms SET and starts a digest
// for each one known, and for each of extra.
func (v *VerifyReader) digestAlgorithms(extra []crypto.Hash) error {
	raw, err := v.s.element(maxStreamField)
	if err != nil {
		return err
	}
	var algs []pkix.AlgorithmIdentifier
	if der, err := normalize(raw); err != nil {
		return malformed("digest algorithms", err)
	} else if _, err := asn1.UnmarshalWithParams(der, &algs, "set"); err != nil {
		return malformed("digest algorithms", err)
	}
	for _, a := range algs {
		if h, ok := hashForOID(a.Algorithm); ok {
			extra = append(extra, h)
		}
	}
	for _, h := range extra {
		if h.Available() && v.hashes[h] == nil {
			v.hashes[h] = h.New()
		}
	}
	return nil
}

// encapsulated reads the encapContentInfo up to its content and sets the
// digesting reader of the content.
func (v *VerifyReader) encapsulated() error {
	eci, err := v.s.expect(tagSequence, "encapsulated content info")
	if err != nil {
		return err
	}
	raw, err := v.s.element(256)
	if err != nil {
		return err
	}
	if _, err := asn1.Unmarshal(raw, &v.eContentType); err != nil {
		return malformed("encapsulated content type", err)
	}
	if eci.length == int64(len(raw)) {
		return malformed("detached signature without content", nil)
	}
	explicit, err := v.s.header()
	if err != nil {
		return err
	}
	switch {
	case explicit.isEOC() && eci.length < 0:
		return malformed("detached signature without content", nil)
	case explicit.tag != tagContext0:
		return malformed("encapsulated content", nil)
	}
	h, err := v.s.header()
	if err != nil {
		return err
	}
	if h.tag&0x20 != 0 && h.tag != tagOctetString|0x20 {
		return malformed(fmt.Sprintf("encapsulated content: tag 0x%02x", h.tag), nil)
	}
	for _, l := range []int64{explicit.length, eci.length} {
		if l < 0 {
			v.ends++
		}
	}
	w := make([]io.Writer, 0, len(v.hashes))
	for _, hh := range v.hashes {
		w = append(w, hh)
	}
	v.content = io.TeeReader(v.s.octetStream(h), io.MultiWriter(w...))
	return nil
}

// Read reads the content; at its end it verifies the signature.
func (v *VerifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.content.Read(p)
	if err == io.EOF {
		err = v.verify()
		if err == nil {
			err = io.EOF
		}
	}
	if err != nil {
		v.err = err
	}
	return n, err
}

// verify reads what follows the content and verifies its signers.
func (v *VerifyReader) verify() error {
	for range v.ends {
		h, err := v.s.header()
		if err != nil {
			return err
		}
		if !h.isEOC() {
			return malformed("encapsulated content info: trailing field", nil)
		}
	}
	sd := signedData{EncapContentInfo: encapsulatedContentInfo{EContentType: v.eContentType}}
	for {
		h, err := v.s.header()
		if err != nil {
			return err
		}
		raw, err := v.s.rest(h, maxStreamField)
		if err != nil {
			return err
		}
		switch h.tag {
		case tagContext0, tagContext1: // certificates (never trusted), crls
			continue
		case tagSet:
		default:
			return malformed(fmt.Sprintf("signed data: field of tag 0x%02x", h.tag), nil)
		}
		der, err := normalize(raw)
		if err != nil {
			return malformed("signer infos", err)
		}
		if _, err := asn1.UnmarshalWithParams(der, &sd.SignerInfos, "set"); err != nil {
			return malformed("signer infos", err)
		}
		break
	}
	v.digests = map[crypto.Hash][]byte{}
	for alg, hh := range v.hashes {
		v.digests[alg] = hh.Sum(nil)
	}
	verified, err := verifySignerInfos(&sd, v.certs, func(h crypto.Hash) ([]byte, error) {
		if d := v.digests[h]; d != nil {
			return d, nil
		}
		return nil, fmt.Errorf("%w: signed with %v, a digest the SignedData does not list", ErrUnsupportedAlgorithm, h)
	})
	if err != nil {
		return err
	}
	v.verified = verified
	return nil
}

// Verified is the signer that verified, once Read returned io.EOF (nil
// before); it has no Content.
func (v *VerifyReader) Verified() *Verified { return v.verified }

// Digests are the content's digests in every algorithm computed, once
// Read returned io.EOF (nil before).
func (v *VerifyReader) Digests() map[crypto.Hash][]byte {
	if v.verified == nil {
		return nil
	}
	return v.digests
}
