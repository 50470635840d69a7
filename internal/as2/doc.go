// Package as2 implements the MIME and S/MIME side of AS2 (RFC 4130): a MIME
// parser that keeps bytes exactly as received, the receive pipeline
// (Unwrap: decrypt, decompress, verify, compute the MIC), the send pipeline
// (Wrap: compress, sign, encrypt, compute the MIC the partner's MDN must
// return), and the header grammar AS2 adds (AS2 names, MIC algorithm names,
// Disposition-Notification-Options).
//
// The package is a pure library: no I/O, no logging, no global state. The
// CMS layer lives in the cms subpackage. Failures of Unwrap are *Error
// values whose Disposition is the MDN disposition modifier to report; see
// Disposition.
package as2
