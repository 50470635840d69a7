package cms

import (
	"crypto"
	"encoding/asn1"
	"math/big"
	"time"
)

// Encodings built once: the pieces every signature repeats.
var (
	derOIDData       = mustOID(oidData)
	derOIDSignedData = mustOID(oidSignedData)
	// derInteger1 is INTEGER 1 (the versions of SignedData and SignerInfo).
	derInteger1 = []byte{tagInteger, 1, 1}
	// derDataType is the SEQUENCE holding the data content type of a
	// detached signature's encapContentInfo.
	derDataType = tlv(tagSequence, derOIDData)
	// derAttrContentTypeData is the content-type signed attribute naming
	// data.
	derAttrContentTypeData = attr(oidAttrContentType, derOIDData)
	derOIDSigningTime      = mustOID(oidAttrSigningTime)
	derOIDMessageDigest    = mustOID(oidAttrMessageDigest)
	// derRSASignature is the signatureAlgorithm of a PKCS #1 v1.5
	// signature: rsaEncryption with NULL parameters.
	derRSASignature = algorithmID(oidRSAEncryption, derNull)
	// derDigestAlgs and derECDSASignatures are the digest and ECDSA
	// signature algorithms by hash, absent parameters.
	derDigestAlgs      = algorithmIDs(digestOIDs[:5])
	derECDSASignatures = algorithmIDs([]hashOID{{oidECDSAWithSHA1, crypto.SHA1}, {oidECDSAWithSHA224, crypto.SHA224},
		{oidECDSAWithSHA256, crypto.SHA256}, {oidECDSAWithSHA384, crypto.SHA384}, {oidECDSAWithSHA512, crypto.SHA512}})
)

// algorithmIDs encodes an AlgorithmIdentifier with absent parameters for
// each hash's OID.
func algorithmIDs(ids []hashOID) map[crypto.Hash][]byte {
	m := make(map[crypto.Hash][]byte, len(ids))
	for _, d := range ids {
		m[d.hash] = algorithmID(d.oid, nil)
	}
	return m
}

// tlvSize is the size of a DER element whose content has n bytes.
func tlvSize(n int) int { return 1 + lengthSize(n) + n }

// appendHead appends the identifier and length octets of an element
// whose content of n bytes the caller appends next.
func appendHead(dst []byte, tag byte, n int) []byte {
	return appendLength(append(dst, tag), n)
}

// appendOID appends the DER of an object identifier, as asn1.Marshal
// writes it; ok is false for one asn1.Marshal refuses.
func appendOID(dst []byte, oid asn1.ObjectIdentifier) (_ []byte, ok bool) {
	if len(oid) < 2 || oid[0] > 2 || (oid[0] < 2 && oid[1] >= 40) {
		return dst, false
	}
	n := base128Size(oid[0]*40 + oid[1])
	for _, v := range oid[2:] {
		if v < 0 {
			return dst, false
		}
		n += base128Size(v)
	}
	dst = appendHead(dst, 0x06, n)
	dst = appendBase128(dst, oid[0]*40+oid[1])
	for _, v := range oid[2:] {
		dst = appendBase128(dst, v)
	}
	return dst, true
}

func base128Size(v int) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

func appendBase128(dst []byte, v int) []byte {
	for i := base128Size(v) - 1; i >= 0; i-- {
		b := byte(v>>(7*i)) & 0x7f
		if i > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
	}
	return dst
}

// integerSize is the size of n's DER INTEGER (appendInteger).
func integerSize(n *big.Int) int {
	if n.Sign() < 0 {
		b, _ := asn1.Marshal(n)
		return len(b)
	}
	return tlvSize(integerContentSize(n))
}

// integerContentSize is the content size of a non-negative INTEGER: its
// bytes, and a leading zero when the first has its high bit set.
func integerContentSize(n *big.Int) int {
	bits := n.BitLen()
	if bits == 0 {
		return 1
	}
	return bits/8 + 1
}

// appendInteger appends n's DER INTEGER, as asn1.Marshal writes it.
func appendInteger(dst []byte, n *big.Int) []byte {
	if n.Sign() < 0 {
		b, _ := asn1.Marshal(n) // two's complement; rare, and never an error
		return append(dst, b...)
	}
	size := integerContentSize(n)
	dst = appendHead(dst, tagInteger, size)
	start := len(dst)
	dst = append(dst, make([]byte, size)...)
	n.FillBytes(dst[start:])
	return dst
}

// appendTime appends t (UTC, whole seconds) as asn1.Marshal writes a
// time.Time: UTCTime from 1950 to 2049, else GeneralizedTime.
func appendTime(dst []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 1950 || y >= 2050 {
		b, err := asn1.Marshal(t)
		return append(dst, b...), err
	}
	dst = appendHead(dst, asn1.TagUTCTime, 13)
	return t.AppendFormat(dst, "060102150405Z"), nil
}
