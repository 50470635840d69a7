package mdn

import (
	"errors"
	"fmt"
	"strings"
)

// Disposition modes and types as AS2 uses them (RFC 3798 §3.2.6, RFC 4130
// §7.4.3).
const (
	ActionAutomatic  = "automatic-action"
	SendingAutomatic = "MDN-sent-automatically"
	TypeProcessed    = "processed"
	TypeFailed       = "failed"
)

// Disposition modifier descriptions edihub sends besides the as2.Disposition*
// error constants.
const (
	// UnknownTradingRelationship is not in RFC 4130's list, but is what
	// most AS2 products answer for an unknown AS2-From/AS2-To pair.
	UnknownTradingRelationship = "unknown-trading-relationship"
	// DuplicateDocument is the warning for a repeated Message-ID.
	DuplicateDocument = "duplicate-document"
	// UnsupportedMICAlgorithms is the failure for a required
	// signed-receipt-micalg none of which is supported.
	UnsupportedMICAlgorithms = "unsupported MIC-algorithms"
)

// ErrMalformedDisposition means a Disposition field value could not be
// parsed.
var ErrMalformedDisposition = errors.New("mdn: malformed disposition")

// Disposition is the value of an MDN's Disposition field:
//
//	automatic-action/MDN-sent-automatically; processed/Error: decryption-failed
//
// Modifier is "" or "Kind: description" with Kind one of Error, Warning,
// Failure (capitalised by ParseDisposition whatever the input case).
type Disposition struct {
	Action, Sending, Type, Modifier string
}

// Processed is the disposition of a message received without problems.
func Processed() Disposition {
	return Disposition{Action: ActionAutomatic, Sending: SendingAutomatic, Type: TypeProcessed}
}

// Errored is "processed/Error: description".
func Errored(description string) Disposition {
	d := Processed()
	d.Modifier = "Error: " + description
	return d
}

// Warned is "processed/Warning: description".
func Warned(description string) Disposition {
	d := Processed()
	d.Modifier = "Warning: " + description
	return d
}

// Failed is "failed/Failure: description": the MDN request itself could
// not be honoured.
func Failed(description string) Disposition {
	d := Processed()
	d.Type = TypeFailed
	d.Modifier = "Failure: " + description
	return d
}

// String returns the field value in the form RFC 4130 shows.
func (d Disposition) String() string {
	s := d.Action + "/" + d.Sending + "; " + d.Type
	if d.Modifier != "" {
		s += "/" + d.Modifier
	}
	return s
}

// Kind returns the modifier's kind, lower-cased: "error", "warning",
// "failure", or "" without a modifier.
func (d Disposition) Kind() string {
	k, _, ok := strings.Cut(d.Modifier, ":")
	if !ok {
		return strings.ToLower(strings.TrimSpace(d.Modifier))
	}
	return strings.ToLower(strings.TrimSpace(k))
}

// Description returns the modifier's text after "Kind:", trimmed
// ("decryption-failed"), or "".
func (d Disposition) Description() string {
	_, v, ok := strings.Cut(d.Modifier, ":")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

// Successful reports whether the message was processed without an error or
// failure modifier; a warning (such as duplicate-document) is successful.
func (d Disposition) Successful() bool {
	if !strings.EqualFold(d.Type, TypeProcessed) {
		return false
	}
	switch d.Kind() {
	case "", "warning":
		return true
	}
	return false
}

// ParseDisposition parses a Disposition field value leniently: any case,
// optional or missing spaces (";processed"), folded whitespace, historic
// lower-case modifiers ("processed/error: decryption-failed") and a
// modifier without a kind ("processed/decryption-failed" is read as an
// error). Mode and type are returned as written except for type, which is
// lower-cased; a modifier's kind is capitalised (Error, Warning, Failure).
func ParseDisposition(s string) (Disposition, error) {
	s = strings.Join(strings.Fields(s), " ")
	mode, rest, ok := strings.Cut(s, ";")
	if !ok {
		return Disposition{}, fmt.Errorf("%w: no ';' in %q", ErrMalformedDisposition, s)
	}
	var d Disposition
	action, sending, _ := strings.Cut(strings.TrimSpace(mode), "/")
	d.Action, d.Sending = strings.TrimSpace(action), strings.TrimSpace(sending)
	typ, mod, _ := strings.Cut(strings.TrimSpace(rest), "/")
	d.Type = strings.ToLower(strings.TrimSpace(typ))
	if d.Type == "" || d.Action == "" {
		return Disposition{}, fmt.Errorf("%w: %q", ErrMalformedDisposition, s)
	}
	if mod = strings.TrimSpace(mod); mod != "" {
		kind, desc, ok := strings.Cut(mod, ":")
		if !ok {
			kind, desc = "error", mod
		}
		switch k := strings.ToLower(strings.TrimSpace(kind)); k {
		case "error", "warning", "failure":
			kind = strings.ToUpper(k[:1]) + k[1:]
		default:
			// An unknown kind ("processed/x-foo: bar") is kept; it is
			// not successful.
			kind = strings.TrimSpace(kind)
		}
		d.Modifier = kind + ": " + strings.TrimSpace(desc)
	}
	return d, nil
}
