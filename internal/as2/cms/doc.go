// Package cms implements the parts of the Cryptographic Message Syntax
// (RFC 5652) that AS2 needs: EnvelopedData and AuthEnvelopedData (RFC 5083,
// 5084) with RSA key transport, detached SignedData, and CompressedData
// (RFC 3274).
//
// It is built on encoding/asn1 and the standard crypto packages only. Input
// may be BER (indefinite lengths, constructed OCTET STRINGs) as emitted by
// OpenSSL and Java partners; it is normalised to definite-length form before
// parsing. Output is DER.
//
// Every error returned by this package wraps exactly one of the sentinel
// errors declared in errors.go, so callers can map failures with errors.Is.
// The functions are safe for concurrent use; they keep no state.
package cms
