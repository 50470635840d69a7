package cms

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
)

// Type is the content type of a CMS ContentInfo.
type Type int

// Content types recognised by Identify.
const (
	TypeUnknown Type = iota
	TypeData
	TypeSignedData
	TypeEnvelopedData
	TypeAuthEnvelopedData
	TypeCompressedData
)

// String returns the S/MIME smime-type style name of t.
func (t Type) String() string {
	switch t {
	case TypeData:
		return "data"
	case TypeSignedData:
		return "signed-data"
	case TypeEnvelopedData:
		return "enveloped-data"
	case TypeAuthEnvelopedData:
		return "authEnveloped-data"
	case TypeCompressedData:
		return "compressed-data"
	}
	return "unknown"
}

type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,optional,tag:0"`
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial asn1.RawValue
}

// parseContentInfo normalises BER input and splits the ContentInfo.
func parseContentInfo(b []byte) (contentInfo, error) {
	der, err := normalize(b)
	if err != nil {
		return contentInfo{}, err
	}
	var ci contentInfo
	if _, err := asn1.Unmarshal(der, &ci); err != nil {
		return contentInfo{}, fmt.Errorf("%w: content info: %w", ErrMalformed, err)
	}
	return ci, nil
}

// Identify reports the content type of a DER or BER encoded ContentInfo.
// It returns ErrMalformed when b does not start like a ContentInfo. It
// reads the content type only: nothing is copied, and the content is
// checked by whoever parses it.
func Identify(b []byte) (Type, error) {
	var p berParser
	ci, _, err := p.next(b, 0)
	if err == nil && ci.tag != tagSequence {
		err = fmt.Errorf("%w: content info is not a SEQUENCE", ErrMalformed)
	}
	var first berElement
	if err == nil {
		if first, _, err = p.next(ci.content, 1); err == nil && first.tag != 0x06 {
			err = fmt.Errorf("%w: content info without a content type", ErrMalformed)
		}
	}
	var ct asn1.ObjectIdentifier
	if err == nil {
		err = first.unmarshal(&ct, "")
	}
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			err = fmt.Errorf("%w: content info: %w", ErrMalformed, err)
		}
		return TypeUnknown, err
	}
	switch {
	case ct.Equal(oidData):
		return TypeData, nil
	case ct.Equal(oidSignedData):
		return TypeSignedData, nil
	case ct.Equal(oidEnvelopedData):
		return TypeEnvelopedData, nil
	case ct.Equal(oidAuthEnvelopedData):
		return TypeAuthEnvelopedData, nil
	case ct.Equal(oidCompressedData):
		return TypeCompressedData, nil
	}
	return TypeUnknown, nil
}

// octets returns the value of an OCTET STRING that may be encoded
// primitive or, under an implicit tag, constructed from segments.
func octets(v asn1.RawValue) ([]byte, error) {
	if !v.IsCompound {
		return v.Bytes, nil
	}
	var out []byte
	rest := v.Bytes
	for len(rest) > 0 {
		var seg asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &seg); err != nil {
			return nil, fmt.Errorf("%w: octet string segment: %w", ErrMalformed, err)
		}
		if seg.Class != asn1.ClassUniversal || seg.Tag != asn1.TagOctetString {
			return nil, fmt.Errorf("%w: octet string segment of tag %d", ErrMalformed, seg.Tag)
		}
		out = append(out, seg.Bytes...)
	}
	return out, nil
}

// matchesCert reports whether a RecipientIdentifier or SignerIdentifier
// (issuerAndSerialNumber or [0] subjectKeyIdentifier) names cert.
func matchesCert(id asn1.RawValue, cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	switch {
	case id.Class == asn1.ClassUniversal && id.Tag == asn1.TagSequence:
		var ias issuerAndSerial
		if _, err := asn1.Unmarshal(id.FullBytes, &ias); err != nil {
			return false
		}
		return serialMatches(ias.Serial, cert.SerialNumber) && issuerMatches(ias.Issuer.FullBytes, cert.RawIssuer)
	case id.Class == asn1.ClassContextSpecific && id.Tag == 0:
		return bytes.Equal(id.Bytes, subjectKeyID(cert))
	}
	return false
}

func serialMatches(v asn1.RawValue, n *big.Int) bool {
	if v.Tag != asn1.TagInteger || n == nil {
		return false
	}
	want, err := asn1.Marshal(n)
	if err == nil && bytes.Equal(v.FullBytes, want) {
		return true
	}
	// Tolerate a non-minimal encoding of a positive serial.
	if n.Sign() > 0 && len(v.Bytes) > 0 && v.Bytes[0]&0x80 == 0 {
		return new(big.Int).SetBytes(v.Bytes).Cmp(n) == 0
	}
	return false
}

// issuerMatches compares names byte for byte, then by their string form to
// tolerate partners that re-encode the issuer with other string types.
func issuerMatches(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ra, rb pkix.RDNSequence
	if _, err := asn1.Unmarshal(a, &ra); err != nil {
		return false
	}
	if _, err := asn1.Unmarshal(b, &rb); err != nil {
		return false
	}
	return ra.String() == rb.String()
}

// subjectKeyID returns the certificate's subject key identifier, or the
// RFC 5280 method 1 value (SHA-1 of the public key bits) when it has none.
func subjectKeyID(cert *x509.Certificate) []byte {
	if len(cert.SubjectKeyId) > 0 {
		return cert.SubjectKeyId
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(cert.RawSubjectPublicKeyInfo, &spki); err != nil {
		return nil
	}
	return sha1Sum(spki.PublicKey.Bytes)
}

// issuerAndSerialDER encodes the IssuerAndSerialNumber of cert.
func issuerAndSerialDER(cert *x509.Certificate) ([]byte, error) {
	serial, err := asn1.Marshal(cert.SerialNumber)
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return tlv(tagSequence, cert.RawIssuer, serial), nil
}

// algorithmID encodes an AlgorithmIdentifier; params may be nil (absent).
func algorithmID(oid asn1.ObjectIdentifier, params []byte) []byte {
	o, _ := appendOID(nil, oid)
	return tlv(tagSequence, o, params)
}

var derNull = []byte{tagNull, 0}

func mustOID(oid asn1.ObjectIdentifier) []byte {
	b, ok := appendOID(nil, oid)
	if !ok {
		panic("cms: invalid object identifier " + oid.String()) // static OIDs only
	}
	return b
}

// wrapContentInfo encodes ContentInfo{oid, [0] EXPLICIT content}.
func wrapContentInfo(oid asn1.ObjectIdentifier, content []byte) []byte {
	return tlv(tagSequence, mustOID(oid), tlv(tagContext0, content))
}
