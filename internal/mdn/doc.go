// Package mdn builds, parses and verifies AS2 Message Disposition
// Notifications (RFC 3798 as profiled by RFC 4130 §7).
//
// Build makes the MDN a receiver answers: a multipart/report with a
// human-readable part and a message/disposition-notification part, signed
// as multipart/signed when the sender asked for a signed receipt. Parse
// reads the MDN a partner returns, leniently about format and strictly about
// the signature; IsMDN tells an MDN posted to /as2 from an AS2 message.
// RequestOptions builds the Disposition-Notification-Options a sender
// requests.
//
// The package is a pure library: no I/O, no logging, no global state; its
// functions are safe for concurrent use.
package mdn
