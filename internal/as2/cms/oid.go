package cms

import (
	"crypto"
	"encoding/asn1"
)

// Object identifiers used by the package.
var (
	oidData              = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidEnvelopedData     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 3}
	oidCompressedData    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 9}
	oidAuthEnvelopedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 23}
	oidZlibCompress      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 3, 8}
	oidAttrContentType   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidAttrMessageDigest = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidAttrSigningTime   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 5}
	oidAttrAlgProtection = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 52}
	oidRSAEncryption     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidRSAESOAEP         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}
	oidMGF1              = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 8}
	oidPSpecified        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 9}
	oidRSASSAPSS         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 10}
	oidSHA1WithRSA       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 5}
	oidSHA256WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
	oidSHA384WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 12}
	oidSHA512WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 13}
	oidSHA224WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 14}
	oidECPublicKey       = asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1}
	oidECDSAWithSHA1     = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 1}
	oidECDSAWithSHA224   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 1}
	oidECDSAWithSHA256   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidECDSAWithSHA384   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidECDSAWithSHA512   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
	oidSHA1              = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	oidSHA224            = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 4}
	oidSHA256            = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSHA384            = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidSHA512            = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}
	oidAES128CBC         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidAES192CBC         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidAES256CBC         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
	oidAES128GCM         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 6}
	oidAES192GCM         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 26}
	oidAES256GCM         = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 46}
	oidDESEDE3CBC        = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
)

// hashOID is an algorithm identifier and the hash it names.
type hashOID struct {
	oid  asn1.ObjectIdentifier
	hash crypto.Hash
}

// digestOIDs maps digest algorithm identifiers to hashes. The signature
// OIDs are included because some partners put them in digestAlgorithm.
var digestOIDs = []hashOID{
	{oidSHA1, crypto.SHA1},
	{oidSHA224, crypto.SHA224},
	{oidSHA256, crypto.SHA256},
	{oidSHA384, crypto.SHA384},
	{oidSHA512, crypto.SHA512},
	{oidSHA1WithRSA, crypto.SHA1},
	{oidSHA224WithRSA, crypto.SHA224},
	{oidSHA256WithRSA, crypto.SHA256},
	{oidSHA384WithRSA, crypto.SHA384},
	{oidSHA512WithRSA, crypto.SHA512},
	{oidECDSAWithSHA1, crypto.SHA1},
	{oidECDSAWithSHA224, crypto.SHA224},
	{oidECDSAWithSHA256, crypto.SHA256},
	{oidECDSAWithSHA384, crypto.SHA384},
	{oidECDSAWithSHA512, crypto.SHA512},
}

// hashForOID returns the hash named by a digest (or hash-with-signature)
// algorithm identifier.
func hashForOID(oid asn1.ObjectIdentifier) (crypto.Hash, bool) {
	for _, d := range digestOIDs {
		if d.oid.Equal(oid) {
			return d.hash, true
		}
	}
	return 0, false
}

// oidForHash returns the digest algorithm identifier for h.
func oidForHash(h crypto.Hash) (asn1.ObjectIdentifier, bool) {
	for _, d := range digestOIDs[:5] {
		if d.hash == h {
			return d.oid, true
		}
	}
	return nil, false
}
