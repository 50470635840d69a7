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
// Judge decides whether a parsed MDN confirms delivery of the message it
// answers (Message-ID, disposition, MIC); the dispatcher uses it for
// synchronous MDNs and the Poller for asynchronous ones.
//
// Poller is the leader's MDN poller: a leader-gated worker that applies the
// async MDNs the receivers stored in the MDN inbox, keeps the ones it cannot
// apply as orphans with their reason, and flags, resends or fails messages
// whose MDN is overdue, every write through the fenced path. Apart from the
// Poller the package is a pure library: no I/O, no logging, no global state;
// its functions are safe for concurrent use.
package mdn
