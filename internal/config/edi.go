package config

import (
	"fmt"
	"strings"
	"time"
)

// EDISettings are a partner's EDI settings.
type EDISettings struct {
	// Acks generates functional acknowledgements for the interchanges
	// the partner sends (edi_acks; off by default): X12 TA1 on envelope
	// errors and X12Ack per group, EDIFACT CONTRL.
	Acks bool
	// X12Ack is "997" (the default) or "999" (edi_x12_ack).
	X12Ack string
	// AckDue is how long after sending an interchange its functional
	// acknowledgement is expected (edi_ack_due); 0, the default, expects
	// none: nothing is flagged overdue.
	AckDue time.Duration
	// RefuseDuplicates refuses an interchange received again (same
	// sender, receiver and control number within DuplicateWindow) with
	// the MDN disposition "processed/warning: duplicate-document" and
	// does not deliver it (edi_duplicates: refuse); by default it is
	// flagged and counted only (edi_duplicates: flag).
	RefuseDuplicates bool
	// DuplicateWindow is how far back duplicates are looked for
	// (edi_duplicate_window, default DefaultEDIDuplicateWindow); 0 turns
	// the check off.
	DuplicateWindow time.Duration
}

// DefaultEDIDuplicateWindow is how far back a repeated interchange
// control number counts as a duplicate by default.
const DefaultEDIDuplicateWindow = 30 * 24 * time.Hour

// partnerEDI reads the edi_* keys.
func (p *parser) partnerEDI(field string, raw *rawPartner, pa *Partner) error {
	e := EDISettings{Acks: raw.EDIAcks, X12Ack: "997", DuplicateWindow: DefaultEDIDuplicateWindow}
	switch v := strings.TrimSpace(raw.EDIX12Ack); v {
	case "", "997":
	case "999":
		e.X12Ack = v
	default:
		return p.fail(field+".edi_x12_ack", fmt.Sprintf("%q is not an X12 acknowledgement", raw.EDIX12Ack), "write 997 (the default) or 999")
	}
	switch v := strings.TrimSpace(raw.EDIDuplicates); v {
	case "", "flag":
	case "refuse":
		e.RefuseDuplicates = true
	default:
		return p.fail(field+".edi_duplicates", fmt.Sprintf("%q is not flag or refuse", raw.EDIDuplicates),
			"write flag (record and count duplicate interchanges; the default) or refuse (also answer duplicate-document and deliver nothing)")
	}
	if raw.EDIAckDue != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw.EDIAckDue))
		if err != nil || d < 0 {
			return p.failErr(field+".edi_ack_due", err, fmt.Sprintf("%q is not a duration", raw.EDIAckDue),
				"write a duration with a unit, like 4h, or 0s to expect no acknowledgement (the default)")
		}
		e.AckDue = d
	}
	if raw.EDIDuplicateWindow != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw.EDIDuplicateWindow))
		if err != nil || d < 0 {
			return p.failErr(field+".edi_duplicate_window", err, fmt.Sprintf("%q is not a duration", raw.EDIDuplicateWindow),
				"write a duration with a unit, like 720h (the default), or 0s to turn the duplicate check off")
		}
		e.DuplicateWindow = d
	}
	pa.EDI = e
	return nil
}
