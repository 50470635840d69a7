package mdn

import (
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/edihub/edihub/internal/as2"
)

// Judge errors: why an MDN does not confirm delivery. Every error in a
// Verdict wraps one of them. Their text is recorded on the message, so it
// reads without a package prefix.
var (
	// ErrWrongMessage means the MDN answers another Message-ID.
	ErrWrongMessage = errors.New("wrong Original-Message-ID")
	// ErrNegative means the disposition is an error or failure.
	ErrNegative = errors.New("negative MDN")
	// ErrNoMIC means a signed receipt carries no Received-content-MIC
	// (required in signed receipts, RFC 4130 §7.4.3).
	ErrNoMIC = errors.New("signed receipt without Received-content-MIC")
	// ErrMICMismatch means the returned MIC is not the one computed when
	// the message was built (or could not be read).
	ErrMICMismatch = errors.New("MIC mismatch")
)

// Expectation is what an MDN must confirm about the message it answers.
type Expectation struct {
	// MessageID is the Message-ID the message was sent with.
	MessageID string
	// MIC is the MIC computed when the message was built, in
	// Received-content-MIC form ("base64, sha-256").
	MIC string
	// MICs is the message's MIC in every supported algorithm, in the same
	// form, computed when it was built (as2.Wrapped.MICs): a partner may
	// answer with another supported algorithm than the one asked for.
	// A message built as a stream and built again for a later attempt
	// with other bytes (the compressor's output changed) has the rebuilt
	// body's MICs here too: the MDN may match any of them.
	MICs []string
	// SignedReceipt reports that the message asked for a signed receipt.
	SignedReceipt bool
	// Recompute, when set, computes the message's MIC with another
	// algorithm from the bytes sent; it is used only when MICs lacks the
	// partner's algorithm (a message built before MICs were stored). It
	// returns an error when the stored bytes do not allow it (an
	// encrypted message: the MIC covers the content before encryption to
	// the partner's key); the MIC is then compared as returned, and does
	// not match.
	Recompute func(alg crypto.Hash) (as2.MIC, error)
}

// Verdict is the judgement of one MDN.
type Verdict struct {
	// Delivered reports a positive MDN whose MIC matched, or an unsigned
	// positive MDN without MIC for a message that asked for no signed
	// receipt (MICVerified false then).
	Delivered   bool
	MICVerified bool
	// Disposition is the MDN's disposition, as RFC 4130 writes it.
	Disposition string
	// Err says why the MDN does not confirm delivery; nil when Delivered.
	Err error
}

// Judge decides whether m, a parsed (and, when signed, verified) MDN,
// confirms delivery of the message e describes: same Message-ID
// (byte-exact but for the angle brackets), a successful disposition
// (warnings are successful) and the MIC computed at build time. A MIC is
// required in signed receipts and optional in unsigned ones (RFC 4130
// §7.4.3): an unsigned MDN without MIC for a message that asked for no
// signed receipt is a delivery with the MIC unverified. The returned MIC
// is compared tolerant of format, never of value, with the MIC in the
// algorithm the partner used.
//
// Judge does not check that a signed receipt was returned when one was
// asked for: Parse does (ParseOptions.RequireSigned), and the callers
// decide what an unsigned answer means.
func Judge(m *MDN, e Expectation) Verdict {
	v := Verdict{Disposition: m.Disposition.String()}
	if !SameMessageID(m.OriginalMessageID, e.MessageID) {
		v.Err = fmt.Errorf("%w: MDN is for Message-ID %q, not %q", ErrWrongMessage, m.OriginalMessageID, e.MessageID)
		return v
	}
	if !m.Disposition.Successful() {
		v.Err = fmt.Errorf("%w: %s", ErrNegative, v.Disposition)
		return v
	}
	if strings.TrimSpace(m.MIC) == "" {
		if m.Signed || e.SignedReceipt {
			v.Err = ErrNoMIC
			return v
		}
		v.Delivered = true
		return v
	}
	want, err := as2.ParseMIC(e.MIC)
	if err != nil {
		v.Err = fmt.Errorf("%w: stored MIC %q: %w", ErrMICMismatch, e.MIC, err)
		return v
	}
	got, err := as2.ParseMIC(m.MIC)
	if err != nil {
		v.Err = fmt.Errorf("%w: MDN returned %q: %w", ErrMICMismatch, m.MIC, err)
		return v
	}
	if got.Alg != want.Alg {
		if w, ok := storedMIC(e.MICs, got.Alg); ok {
			want = w
		} else if e.Recompute != nil {
			if w, err := e.Recompute(got.Alg); err == nil {
				want = w
			}
		}
	}
	if !got.Equal(want) && !anyMIC(e.MICs, got) {
		v.Err = fmt.Errorf("%w: MDN returned %q, sent %q", ErrMICMismatch, m.MIC, e.MIC)
		return v
	}
	v.Delivered, v.MICVerified = true, true
	return v
}

// storedMIC returns the MIC of mics (Received-content-MIC form) computed
// with alg.
func storedMIC(mics []string, alg crypto.Hash) (as2.MIC, bool) {
	for _, s := range mics {
		if m, err := as2.ParseMIC(s); err == nil && m.Alg == alg {
			return m, true
		}
	}
	return as2.MIC{}, false
}

// anyMIC reports whether one of mics (Received-content-MIC form) is got.
func anyMIC(mics []string, got as2.MIC) bool {
	for _, s := range mics {
		if m, err := as2.ParseMIC(s); err == nil && m.Equal(got) {
			return true
		}
	}
	return false
}

// SameMessageID compares Message-IDs byte-exact, forgiving only the angle
// brackets and surrounding space some products drop or add.
func SameMessageID(got, want string) bool {
	trim := func(s string) string { return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "<"), ">") }
	return got != "" && trim(got) == trim(want)
}

// RecomputeMIC computes, with alg, the MIC of an AS2 message as built and
// sent (h its header fields, body its body), by the rules the receiver
// follows: the first part of a multipart/signed body exactly as sent, else
// what as2.Unwrap digests for an unsigned, unencrypted message in the
// default MIC scope (the content alone). An encrypted message cannot be
// recomputed without the partner's private key: it returns an error.
// Messages built since as2.Wrapped.MICs is stored carry their MIC in
// every algorithm; this serves the ones built before.
func RecomputeMIC(h http.Header, body []byte, alg crypto.Hash, encrypted bool, lim as2.Limits) (as2.MIC, error) {
	if encrypted {
		return as2.MIC{}, errors.New("mdn: the MIC of an encrypted message cannot be recomputed from the bytes sent")
	}
	if !alg.Available() {
		return as2.MIC{}, fmt.Errorf("mdn: MIC algorithm %v unavailable", alg)
	}
	top, err := as2.ParseEntity(withContentType(h.Get("Content-Type"), body), lim)
	if err != nil {
		return as2.MIC{}, fmt.Errorf("mdn: recompute MIC: %w", err)
	}
	if mt, _ := top.MediaType(); mt == "multipart/signed" {
		if len(top.Parts) < 2 {
			return as2.MIC{}, errors.New("mdn: recompute MIC: multipart/signed without parts")
		}
		return as2.ComputeMIC(alg, top.Parts[0].Raw), nil
	}
	msg, err := as2.Unwrap(h, body, as2.UnwrapOptions{MICAlgs: []crypto.Hash{alg}, Limits: lim})
	if err != nil {
		return as2.MIC{}, fmt.Errorf("mdn: recompute MIC: %w", err)
	}
	if msg.Signed || msg.MIC.Alg != alg {
		return as2.MIC{}, errors.New("mdn: recompute MIC: signed after compression; the MIC follows the signature's digest")
	}
	return msg.MIC, nil
}
