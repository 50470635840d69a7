package cms

import "errors"

// Sentinel errors. Every error returned by the package wraps one of them
// (ErrTooLarge is returned together with ErrDecompression).
var (
	// ErrMalformed means the input is not a well-formed CMS structure of the
	// expected kind.
	ErrMalformed = errors.New("cms: malformed structure")
	// ErrContentType means a well-formed ContentInfo holds a different
	// content type than the operation expects.
	ErrContentType = errors.New("cms: unexpected content type")
	// ErrUnsupportedAlgorithm means an algorithm identifier (cipher, key
	// transport, digest, signature, compression) is not implemented.
	ErrUnsupportedAlgorithm = errors.New("cms: unsupported algorithm")
	// ErrNoRecipient means no RecipientInfo matches any of the given keys.
	ErrNoRecipient = errors.New("cms: no matching recipient")
	// ErrDecryption means key transport or content decryption did not
	// succeed (wrong key, bad padding, authentication tag mismatch).
	ErrDecryption = errors.New("cms: decryption error")
	// ErrNoSigner means no certificate was supplied that could verify the
	// signature, or the SignedData carries no signer.
	ErrNoSigner = errors.New("cms: no usable signer certificate")
	// ErrSignature means the signature value does not verify.
	ErrSignature = errors.New("cms: signature verification error")
	// ErrDigestMismatch means the signature verifies but the signed
	// message-digest attribute does not match the content: the content was
	// altered.
	ErrDigestMismatch = errors.New("cms: content digest mismatch")
	// ErrDecompression means compressed content could not be inflated.
	ErrDecompression = errors.New("cms: decompression error")
	// ErrTooLarge means decompressed content exceeds the caller's limit.
	ErrTooLarge = errors.New("cms: decompressed content too large")
)
