package as2

import (
	"errors"

	"github.com/edihub/edihub/internal/as2/cms"
)

// MDN disposition modifiers (RFC 4130 §7.4.3) that Unwrap failures map to.
const (
	DispositionDecryptionFailed     = "decryption-failed"
	DispositionAuthenticationFailed = "authentication-failed"
	DispositionIntegrityCheckFailed = "integrity-check-failed"
	DispositionDecompressionFailed  = "decompression-failed"
	DispositionInsufficientSecurity = "insufficient-message-security"
	DispositionUnexpectedProcessing = "unexpected-processing-error"
)

// EDIINTFeatures is the EDIINT-Features header field value (RFC 6017)
// edihub puts on what it sends and answers: only what it supports.
// AS2-Reliability: a resend keeps its Message-ID and bytes, and a
// repeated Message-ID is answered with the MDN stored the first time,
// delivered once. AS2-Restart (draft-harding-as2-restart): a partner
// may resume an interrupted transfer of a large message to edihub
// (receiving; a partner's profile may turn it off with as2_restart).
// Not listed: multiple-attachments (one payload per message) and CEM (no
// certificate exchange messages).
const EDIINTFeatures = "AS2-Reliability, AS2-Restart"

// ErrInsufficientSecurity is for the caller to return when a message lacks
// the signing or encryption its partner profile requires (Unwrap reports
// what it found in Message.Signed and Message.Encrypted).
var ErrInsufficientSecurity = errors.New("as2: insufficient message security")

// Error is an Unwrap failure with the MDN disposition modifier it maps to.
// The text of Err is for logs, never for the partner.
type Error struct {
	// Disposition is one of the Disposition* constants.
	Disposition string
	Err         error
}

// Error returns the disposition and the cause, for logs.
func (e *Error) Error() string { return "as2: " + e.Disposition + ": " + e.Err.Error() }

// Unwrap returns the cause, so errors.Is sees cms and as2 sentinels.
func (e *Error) Unwrap() error { return e.Err }

// Disposition returns the MDN disposition modifier for err: "" for nil,
// the Disposition of an *Error in its chain,
// "insufficient-message-security" for ErrInsufficientSecurity, and
// "unexpected-processing-error" for anything else.
func Disposition(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Disposition
	}
	if errors.Is(err, ErrInsufficientSecurity) {
		return DispositionInsufficientSecurity
	}
	return DispositionUnexpectedProcessing
}

// stage is the Unwrap step an error arose in.
type stage int

const (
	stageMIME stage = iota
	stageDecrypt
	stageVerify
	stageDecompress
)

// classify is the one place Unwrap errors get their disposition. A layer
// that cannot be parsed at all counts as a failure of that layer: garbage
// claiming to be encrypted is decryption-failed, a broken signature part
// authentication-failed.
func classify(s stage, err error) error {
	d := DispositionUnexpectedProcessing
	switch {
	case errors.Is(err, cms.ErrDecompression), errors.Is(err, cms.ErrTooLarge):
		d = DispositionDecompressionFailed
	case s == stageDecrypt:
		d = DispositionDecryptionFailed
	case s == stageVerify && errors.Is(err, cms.ErrDigestMismatch):
		d = DispositionIntegrityCheckFailed
	case s == stageVerify:
		d = DispositionAuthenticationFailed
	case s == stageDecompress:
		d = DispositionDecompressionFailed
	}
	return &Error{Disposition: d, Err: err}
}
