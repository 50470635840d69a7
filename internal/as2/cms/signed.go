package cms

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	_ "crypto/sha256" // register SHA-224/256
	_ "crypto/sha512" // register SHA-384/512
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

type encapsulatedContentInfo struct {
	EContentType asn1.ObjectIdentifier
	EContent     asn1.RawValue `asn1:"optional,explicit,tag:0"`
}

type signedData struct {
	Version          int
	DigestAlgorithms asn1.RawValue
	EncapContentInfo encapsulatedContentInfo
	Certificates     asn1.RawValue   `asn1:"optional,tag:0"`
	CRLs             asn1.RawValue   `asn1:"optional,tag:1"`
	SignerInfos      []asn1.RawValue `asn1:"set"`
}

type signerInfo struct {
	Version            int
	SID                asn1.RawValue
	DigestAlgorithm    pkix.AlgorithmIdentifier
	SignedAttrs        asn1.RawValue `asn1:"optional,tag:0"`
	SignatureAlgorithm pkix.AlgorithmIdentifier
	Signature          []byte
	UnsignedAttrs      asn1.RawValue `asn1:"optional,tag:1"`
}

type attribute struct {
	Type   asn1.ObjectIdentifier
	Values asn1.RawValue
}

type pssParams struct {
	Hash       pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:0"`
	MGF        pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:1"`
	SaltLength int                      `asn1:"optional,explicit,tag:2,default:20"`
	Trailer    int                      `asn1:"optional,explicit,tag:3,default:1"`
}

type algorithmProtection struct {
	DigestAlgorithm    pkix.AlgorithmIdentifier
	SignatureAlgorithm pkix.AlgorithmIdentifier `asn1:"optional,tag:1"`
	MACAlgorithm       pkix.AlgorithmIdentifier `asn1:"optional,tag:2"`
}

// Verified describes a signature that verified.
type Verified struct {
	// Hash is the signer's digest algorithm: the MIC algorithm of a signed
	// AS2 message.
	Hash crypto.Hash
	// Signer is the supplied certificate whose key verified the signature.
	Signer *x509.Certificate
	// Content is the signed content: the detached content passed in, or
	// the encapsulated content of an attached signature.
	Content []byte
	// Digest is the digest of Content under Hash, computed once for the
	// verification: the MIC of a signed AS2 message.
	Digest []byte
	// SigningTime is the signing-time attribute, zero when absent.
	SigningTime time.Time
}

// Verify verifies a SignedData ContentInfo over content (detached) or, when
// content is nil, over the encapsulated content. Only the certificates in
// certs are trusted; certificates embedded in the message are ignored, and
// no chain or validity period is checked: the caller configured these keys
// for this partner. Verify succeeds when any SignerInfo verifies with any
// of certs.
//
// Errors wrap ErrMalformed, ErrContentType, ErrUnsupportedAlgorithm,
// ErrNoSigner, ErrSignature (the signature does not verify) or
// ErrDigestMismatch (signed attributes verify but the content differs).
func Verify(b []byte, content []byte, certs []*x509.Certificate) (*Verified, error) {
	ci, err := parseContentInfo(b)
	if err != nil {
		return nil, err
	}
	if !ci.ContentType.Equal(oidSignedData) {
		return nil, fmt.Errorf("%w: %v is not signed data", ErrContentType, ci.ContentType)
	}
	var sd signedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return nil, fmt.Errorf("%w: signed data: %w", ErrMalformed, err)
	}
	if content == nil {
		if len(sd.EncapContentInfo.EContent.FullBytes) == 0 {
			return nil, fmt.Errorf("%w: detached signature without content", ErrMalformed)
		}
		if content, err = octets(sd.EncapContentInfo.EContent); err != nil {
			return nil, err
		}
		if content == nil {
			content = []byte{}
		}
	}
	digests := map[crypto.Hash][]byte{}
	v, err := verifySignerInfos(&sd, certs, func(h crypto.Hash) ([]byte, error) {
		if digests[h] == nil {
			hh := h.New()
			hh.Write(content)
			digests[h] = hh.Sum(nil)
		}
		return digests[h], nil
	})
	if err != nil {
		return nil, err
	}
	v.Content = content
	return v, nil
}

// VerifyDigests verifies a detached SignedData ContentInfo over content
// already digested, in one pass as it streamed by: digests holds its
// digest under each algorithm computed. A signer whose digest algorithm
// is not among them fails with ErrUnsupportedAlgorithm. The Verified has
// no Content. Errors as Verify's.
func VerifyDigests(b []byte, digests map[crypto.Hash][]byte, certs []*x509.Certificate) (*Verified, error) {
	ci, err := parseContentInfo(b)
	if err != nil {
		return nil, err
	}
	if !ci.ContentType.Equal(oidSignedData) {
		return nil, fmt.Errorf("%w: %v is not signed data", ErrContentType, ci.ContentType)
	}
	var sd signedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return nil, fmt.Errorf("%w: signed data: %w", ErrMalformed, err)
	}
	return verifySignerInfos(&sd, certs, func(h crypto.Hash) ([]byte, error) {
		if d := digests[h]; d != nil {
			return d, nil
		}
		return nil, fmt.Errorf("%w: signed with %v, a digest not computed over the streamed content (the micalg parameter named another)", ErrUnsupportedAlgorithm, h)
	})
}

// verifySignerInfos returns the first signer of sd that verifies with
// any of certs over the content whose digests digest gives.
func verifySignerInfos(sd *signedData, certs []*x509.Certificate, digest func(crypto.Hash) ([]byte, error)) (*Verified, error) {
	if len(sd.SignerInfos) == 0 {
		return nil, fmt.Errorf("%w: no signer infos", ErrNoSigner)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no partner certificate configured", ErrNoSigner)
	}
	var best error
	for _, raw := range sd.SignerInfos {
		var si signerInfo
		if _, err := asn1.Unmarshal(raw.FullBytes, &si); err != nil {
			best = worse(best, fmt.Errorf("%w: signer info: %w", ErrMalformed, err))
			continue
		}
		h, ok := hashForOID(si.DigestAlgorithm.Algorithm)
		if !ok {
			best = worse(best, fmt.Errorf("%w: digest %v", ErrUnsupportedAlgorithm, si.DigestAlgorithm.Algorithm))
			continue
		}
		d, err := digest(h)
		if err != nil {
			best = worse(best, err)
			continue
		}
		// Try the certificate the SignerInfo names first, then the others
		// (partners renew certificates and keep signing with either).
		ordered := certs
		if len(certs) > 1 {
			ordered = slices.Clone(certs)
			slices.SortStableFunc(ordered, func(a, b *x509.Certificate) int {
				ma, mb := matchesCert(si.SID, a), matchesCert(si.SID, b)
				switch {
				case ma && !mb:
					return -1
				case mb && !ma:
					return 1
				}
				return 0
			})
		}
		for _, cert := range ordered {
			v, err := verifySigner(si, sd.EncapContentInfo.EContentType, h, d, cert)
			if err == nil {
				v.Digest = d
				return v, nil
			}
			best = worse(best, err)
		}
	}
	return nil, best
}

// worse keeps the most informative of two errors: a digest mismatch (the
// signer is authentic, the content is not) beats a bad signature, which
// beats everything else.
func worse(a, b error) error {
	rank := func(err error) int {
		switch {
		case err == nil:
			return -1
		case errors.Is(err, ErrDigestMismatch):
			return 4
		case errors.Is(err, ErrSignature):
			return 3
		case errors.Is(err, ErrUnsupportedAlgorithm):
			return 2
		case errors.Is(err, ErrMalformed):
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

func verifySigner(si signerInfo, eContentType asn1.ObjectIdentifier, h crypto.Hash, contentDigest []byte, cert *x509.Certificate) (*Verified, error) {
	v := &Verified{Hash: h, Signer: cert}
	if len(si.SignedAttrs.FullBytes) == 0 {
		if err := checkSignature(cert.PublicKey, si.SignatureAlgorithm, h, contentDigest, si.Signature); err != nil {
			return nil, err
		}
		return v, nil
	}
	// The signature covers the attributes as a SET, not as the [0] they
	// are tagged with here.
	hh := h.New()
	hh.Write([]byte{tagSet})
	hh.Write(si.SignedAttrs.FullBytes[1:])
	if err := checkSignature(cert.PublicKey, si.SignatureAlgorithm, h, hh.Sum(nil), si.Signature); err != nil {
		return nil, err
	}
	var md []byte
	var ct asn1.ObjectIdentifier
	rest := si.SignedAttrs.Bytes
	for len(rest) > 0 {
		var a attribute
		var err error
		if rest, err = asn1.Unmarshal(rest, &a); err != nil {
			return nil, fmt.Errorf("%w: signed attribute: %w", ErrMalformed, err)
		}
		switch {
		case a.Type.Equal(oidAttrMessageDigest):
			if md != nil {
				return nil, fmt.Errorf("%w: repeated message-digest attribute", ErrSignature)
			}
			if _, err := asn1.Unmarshal(a.Values.Bytes, &md); err != nil {
				return nil, fmt.Errorf("%w: message-digest attribute: %w", ErrMalformed, err)
			}
			if md == nil {
				md = []byte{}
			}
		case a.Type.Equal(oidAttrContentType):
			if _, err := asn1.Unmarshal(a.Values.Bytes, &ct); err != nil {
				return nil, fmt.Errorf("%w: content-type attribute: %w", ErrMalformed, err)
			}
		case a.Type.Equal(oidAttrSigningTime):
			if t, ok := signingTime(a.Values.Bytes); ok {
				v.SigningTime = t
			}
		case a.Type.Equal(oidAttrAlgProtection):
			var ap algorithmProtection
			if _, err := asn1.Unmarshal(a.Values.Bytes, &ap); err != nil {
				return nil, fmt.Errorf("%w: algorithm protection attribute: %w", ErrMalformed, err)
			}
			if ah, ok := hashForOID(ap.DigestAlgorithm.Algorithm); !ok || ah != h {
				return nil, fmt.Errorf("%w: algorithm protection names another digest", ErrSignature)
			}
		}
	}
	if md == nil {
		return nil, fmt.Errorf("%w: no message-digest attribute", ErrSignature)
	}
	if ct != nil && eContentType != nil && !ct.Equal(eContentType) {
		return nil, fmt.Errorf("%w: content-type attribute %v, content is %v", ErrSignature, ct, eContentType)
	}
	if !bytes.Equal(md, contentDigest) {
		return nil, ErrDigestMismatch
	}
	return v, nil
}

func checkSignature(pub crypto.PublicKey, alg pkix.AlgorithmIdentifier, h crypto.Hash, digest, sig []byte) error {
	oid := alg.Algorithm
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		switch {
		case oid.Equal(oidRSASSAPSS):
			var p pssParams
			p.SaltLength = 20
			if len(alg.Parameters.FullBytes) > 0 {
				if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &p); err != nil {
					return fmt.Errorf("%w: PSS parameters: %w", ErrMalformed, err)
				}
			}
			ph := crypto.SHA1
			if p.Hash.Algorithm != nil {
				var ok bool
				if ph, ok = hashForOID(p.Hash.Algorithm); !ok {
					return fmt.Errorf("%w: PSS hash %v", ErrUnsupportedAlgorithm, p.Hash.Algorithm)
				}
			}
			if ph != h {
				return fmt.Errorf("%w: PSS hash differs from the digest algorithm", ErrUnsupportedAlgorithm)
			}
			if err := rsa.VerifyPSS(pub, h, digest, sig, &rsa.PSSOptions{SaltLength: p.SaltLength}); err != nil {
				return fmt.Errorf("%w: %w", ErrSignature, err)
			}
			return nil
		case oid.Equal(oidRSAEncryption), oid.Equal(oidSHA1WithRSA), oid.Equal(oidSHA224WithRSA),
			oid.Equal(oidSHA256WithRSA), oid.Equal(oidSHA384WithRSA), oid.Equal(oidSHA512WithRSA):
			if err := rsa.VerifyPKCS1v15(pub, h, digest, sig); err != nil {
				return fmt.Errorf("%w: %w", ErrSignature, err)
			}
			return nil
		}
	case *ecdsa.PublicKey:
		if _, ok := hashForOID(oid); ok || oid.Equal(oidECPublicKey) {
			if !ecdsa.VerifyASN1(pub, digest, sig) {
				return ErrSignature
			}
			return nil
		}
	default:
		return fmt.Errorf("%w: public key %T", ErrUnsupportedAlgorithm, pub)
	}
	return fmt.Errorf("%w: signature algorithm %v", ErrUnsupportedAlgorithm, oid)
}

// SignOptions configures SignDetached.
type SignOptions struct {
	// Hash is the digest algorithm: SHA-1, SHA-224, SHA-256, SHA-384 or
	// SHA-512; zero means SHA-256.
	Hash crypto.Hash
	// SigningTime is put in the signing-time attribute; zero means now.
	SigningTime time.Time
	// AlgorithmProtection adds the RFC 6211 CMS algorithm protection
	// attribute. Off by default: some AS2 products reject it.
	AlgorithmProtection bool
	// Rand is passed to the signer; nil means crypto/rand.
	Rand io.Reader
}

// SignDetached returns a DER SignedData ContentInfo without encapsulated
// content whose one SignerInfo signs content with key, carrying the
// content-type, signing-time and message-digest signed attributes and
// cert. RSA keys sign with PKCS#1 v1.5, ECDSA keys with ECDSA.
func SignDetached(content []byte, cert *x509.Certificate, key crypto.Signer, opts SignOptions) ([]byte, error) {
	h := opts.Hash
	if h == 0 {
		h = crypto.SHA256
	}
	if !h.Available() {
		return nil, fmt.Errorf("%w: sign with digest %v", ErrUnsupportedAlgorithm, h)
	}
	hh := h.New()
	hh.Write(content)
	return SignDigest(hh.Sum(nil), cert, key, opts)
}

// SignDigest is SignDetached for content the caller digested itself with
// opts.Hash (SHA-256 when zero), as it streamed it: md is that digest.
func SignDigest(md []byte, cert *x509.Certificate, key crypto.Signer, opts SignOptions) ([]byte, error) {
	h := opts.Hash
	if h == 0 {
		h = crypto.SHA256
	}
	if len(md) != h.Size() {
		return nil, fmt.Errorf("sign: a %v digest has %d bytes, got %d", h, h.Size(), len(md))
	}
	digestAlg, ok := derDigestAlgs[h]
	if !ok {
		return nil, fmt.Errorf("%w: sign with digest %v", ErrUnsupportedAlgorithm, h)
	}
	rnd := opts.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	t := opts.SigningTime
	if t.IsZero() {
		t = time.Now()
	}
	var sigAlg []byte
	switch key.Public().(type) {
	case *rsa.PublicKey:
		sigAlg = derRSASignature
	case *ecdsa.PublicKey:
		sigAlg = derECDSASignatures[h]
	default:
		return nil, fmt.Errorf("%w: sign with key %T", ErrUnsupportedAlgorithm, key.Public())
	}

	signingTime, err := appendTime(make([]byte, 0, 17), t.UTC().Truncate(time.Second))
	if err != nil {
		return nil, fmt.Errorf("sign: signing time: %w", err)
	}
	attrs := [][]byte{
		derAttrContentTypeData,
		attr(oidAttrSigningTime, signingTime),
		attr(oidAttrMessageDigest, tlv(tagOctetString, md)),
	}
	if opts.AlgorithmProtection {
		// signatureAlgorithm is [1] IMPLICIT AlgorithmIdentifier.
		sigAlgImplicit := append([]byte{tagContext1}, sigAlg[1:]...)
		attrs = append(attrs, attr(oidAttrAlgProtection, tlv(tagSequence, digestAlg, sigAlgImplicit)))
	}
	attrSet := tlv(tagSet, sortedSet(attrs)...)
	hh := h.New()
	hh.Write(attrSet)
	sig, err := key.Sign(rnd, hh.Sum(nil), h)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return signedDataDER(cert, digestAlg, attrSet, sigAlg, sig), nil
}

// signedDataDER assembles the ContentInfo of a detached signature in one
// buffer: SignedData version 1, digestAlg, the data content type, cert
// and one SignerInfo (version 1, cert's issuer and serial number,
// digestAlg, the signed attributes attrSet as [0], sigAlg, sig).
func signedDataDER(cert *x509.Certificate, digestAlg, attrSet, sigAlg, sig []byte) []byte {
	iasLen := len(cert.RawIssuer) + integerSize(cert.SerialNumber)
	siLen := len(derInteger1) + tlvSize(iasLen) + len(digestAlg) + len(attrSet) + len(sigAlg) + tlvSize(len(sig))
	sdLen := len(derInteger1) + tlvSize(len(digestAlg)) + len(derDataType) + tlvSize(len(cert.Raw)) + tlvSize(tlvSize(siLen))
	ciLen := len(derOIDSignedData) + tlvSize(tlvSize(sdLen))
	out := make([]byte, 0, tlvSize(ciLen))
	out = appendHead(out, tagSequence, ciLen)
	out = append(out, derOIDSignedData...)
	out = appendHead(out, tagContext0, tlvSize(sdLen))
	out = appendHead(out, tagSequence, sdLen)
	out = append(out, derInteger1...)
	out = appendHead(out, tagSet, len(digestAlg))
	out = append(out, digestAlg...)
	out = append(out, derDataType...)
	out = appendHead(out, tagContext0, len(cert.Raw))
	out = append(out, cert.Raw...)
	out = appendHead(out, tagSet, tlvSize(siLen))
	out = appendHead(out, tagSequence, siLen)
	out = append(out, derInteger1...)
	out = appendHead(out, tagSequence, iasLen)
	out = append(out, cert.RawIssuer...)
	out = appendInteger(out, cert.SerialNumber)
	out = append(out, digestAlg...)
	out = append(out, tagContext0) // signedAttrs: the SET as [0] IMPLICIT
	out = append(out, attrSet[1:]...)
	out = append(out, sigAlg...)
	out = appendHead(out, tagOctetString, len(sig))
	return append(out, sig...)
}

// attr encodes an Attribute of one value.
func attr(oid asn1.ObjectIdentifier, value []byte) []byte {
	var o []byte
	switch {
	case oid.Equal(oidAttrSigningTime):
		o = derOIDSigningTime
	case oid.Equal(oidAttrMessageDigest):
		o = derOIDMessageDigest
	default:
		o = mustOID(oid)
	}
	n := len(o) + tlvSize(len(value))
	out := appendHead(make([]byte, 0, tlvSize(n)), tagSequence, n)
	out = append(out, o...)
	out = appendHead(out, tagSet, len(value))
	return append(out, value...)
}

// sortedSet orders DER encodings as a DER SET OF requires.
func sortedSet(elems [][]byte) [][]byte {
	out := slices.Clone(elems)
	slices.SortFunc(out, bytes.Compare)
	return out
}

// signingTime reads the time at the start of b (a signing-time
// attribute's values) as asn1.Unmarshal into a time.Time reads it. The
// usual form, a UTCTime with seconds in UTC, is read without the failed
// parse of the form without seconds that asn1 tries first.
func signingTime(b []byte) (time.Time, bool) {
	if len(b) >= 15 && b[0] == asn1.TagUTCTime && b[1] == 13 && b[14] == 'Z' {
		var n [6]int
		ok := true
		for i := range n {
			hi, lo := b[2+2*i], b[3+2*i]
			ok = ok && hi >= '0' && hi <= '9' && lo >= '0' && lo <= '9'
			n[i] = int(hi-'0')*10 + int(lo-'0')
		}
		year := 2000 + n[0]
		if n[0] >= 50 {
			year = 1900 + n[0] // UTCTime: 1950 to 2049
		}
		month, day, hour, minute, second := time.Month(n[1]), n[2], n[3], n[4], n[5]
		if ok && month >= 1 && month <= 12 && day >= 1 && hour <= 23 && minute <= 59 && second <= 59 {
			t := time.Date(year, month, day, hour, minute, second, 0, time.UTC)
			if t.Day() == day { // not past the end of the month
				return t, true
			}
		}
	}
	var t time.Time
	if _, err := asn1.Unmarshal(b, &t); err != nil {
		return time.Time{}, false
	}
	return t, true
}
