package mdn

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
)

// Parse errors. Every error Parse returns wraps one of them.
var (
	// ErrNotMDN means the message is not an MDN (no multipart/report with
	// a message/disposition-notification part).
	ErrNotMDN = errors.New("mdn: not an MDN")
	// ErrMalformed means the MDN's MIME structure or fields are broken.
	ErrMalformed = errors.New("mdn: malformed MDN")
	// ErrUnsigned means ParseOptions.RequireSigned was set and the MDN is
	// not signed.
	ErrUnsigned = errors.New("mdn: MDN is not signed")
	// ErrSignature means the MDN's signature did not verify with any of
	// the partner's certificates; the wrapped cms error tells why.
	ErrSignature = errors.New("mdn: signature does not verify")
)

// MDN is a parsed MDN.
type MDN struct {
	Report
	// Signed reports a multipart/signed MDN.
	Signed bool
	// Signer is the partner certificate that verified the signature; nil
	// when unsigned or parsed with Unverified.
	Signer *x509.Certificate
	// Header and Raw are the header fields and body as received.
	Header http.Header
	Raw    []byte
}

// ParseOptions configure Parse.
type ParseOptions struct {
	// PartnerCerts verify a signed MDN; certificates inside the MDN are
	// never trusted.
	PartnerCerts []*x509.Certificate
	// RequireSigned rejects an unsigned MDN with ErrUnsigned.
	RequireSigned bool
	// Unverified parses a signed MDN without checking its signature (for
	// storing first and verifying later); Signer stays nil.
	Unverified bool
	// Limits bound the MIME parse.
	Limits as2.Limits
}

// Parse parses the MDN in an HTTP response or request (h supplies its
// Content-Type) leniently: field names in any case, optional spaces,
// historic dispositions (see ParseDisposition), a report nested in
// multipart/signed, parts in base64. A signed MDN is verified against
// o.PartnerCerts unless o.Unverified. Errors wrap ErrNotMDN, ErrMalformed,
// ErrUnsigned or ErrSignature. The MDN aliases body.
func Parse(h http.Header, body []byte, o ParseOptions) (*MDN, error) {
	ct := h.Get("Content-Type")
	if ct == "" {
		return nil, fmt.Errorf("%w: no Content-Type", ErrNotMDN)
	}
	top, err := as2.ParseEntity(withContentType(ct, body), o.Limits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	m := &MDN{Header: h, Raw: body}
	report := top
	if mt, _ := top.MediaType(); mt == "multipart/signed" {
		if len(top.Parts) < 2 {
			return nil, fmt.Errorf("%w: multipart/signed with %d parts", ErrMalformed, len(top.Parts))
		}
		m.Signed = true
		report = top.Parts[0]
		if !o.Unverified {
			sig, err := decodeCMS(top.Parts[1])
			if err != nil {
				return nil, fmt.Errorf("%w: signature part: %w", ErrMalformed, err)
			}
			v, err := cms.Verify(sig, report.Raw, o.PartnerCerts)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSignature, err)
			}
			m.Signer = v.Signer
		}
	}
	if !m.Signed && o.RequireSigned {
		return nil, ErrUnsigned
	}
	if mt, params := report.MediaType(); mt != "multipart/report" || !isDNReport(params) {
		// A multipart/report of another report-type (a delivery status
		// notification, say) is no MDN, whatever parts it carries.
		return nil, fmt.Errorf("%w: content type %q", ErrNotMDN, mt)
	}
	var fields as2.Header
	found := false
	for _, p := range report.Parts {
		mt, _ := p.MediaType()
		switch {
		case mt == "message/disposition-notification" && !found:
			b, err := p.DecodedBody()
			if err != nil {
				return nil, fmt.Errorf("%w: disposition-notification part: %w", ErrMalformed, err)
			}
			e, err := as2.ParseEntity(b, o.Limits)
			if err != nil {
				return nil, fmt.Errorf("%w: disposition-notification fields: %w", ErrMalformed, err)
			}
			fields, found = e.Header, true
		case (mt == "text/plain" || mt == "") && m.Text == "":
			if b, err := p.DecodedBody(); err == nil {
				m.Text = string(b)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no message/disposition-notification part", ErrNotMDN)
	}
	m.ReportingUA = fields.Get("Reporting-UA")
	m.OriginalRecipient = recipient(fields.Get("Original-Recipient"))
	m.FinalRecipient = recipient(fields.Get("Final-Recipient"))
	m.OriginalMessageID = fields.Get("Original-Message-ID")
	m.MIC = fields.Get("Received-content-MIC")
	d := fields.Get("Disposition")
	if d == "" {
		return nil, fmt.Errorf("%w: no Disposition field", ErrMalformed)
	}
	if m.Disposition, err = ParseDisposition(d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}

// MICMatches reports whether the MDN's Received-content-MIC equals want:
// tolerant of format (spacing, padding, algorithm spelling), strict about
// the value and the algorithm.
func (m *MDN) MICMatches(want as2.MIC) bool {
	return as2.MICMatches(m.MIC, want)
}

// withContentType prefixes body with a Content-Type header line so the MIME
// parser sees one entity.
func withContentType(ct string, body []byte) []byte {
	b := make([]byte, 0, len(ct)+len(body)+18)
	b = append(b, "Content-Type: "...)
	b = append(b, ct...)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

func recipient(v string) string {
	if t, addr, ok := strings.Cut(v, ";"); ok && !strings.ContainsAny(t, "\"<") {
		return strings.TrimSpace(addr)
	}
	return strings.TrimSpace(v)
}

// decodeCMS returns the DER of a signature part, base64 decoding it when
// its Content-Transfer-Encoding went missing.
func decodeCMS(p *as2.Entity) ([]byte, error) {
	b, err := p.DecodedBody()
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[0] != 0x30 {
		e := &as2.Entity{Header: as2.Header{{Name: "Content-Transfer-Encoding", Value: "base64"}}, Body: b}
		if d, err := e.DecodedBody(); err == nil {
			return d, nil
		}
	}
	return b, nil
}

// IsMDN reports whether an AS2 request carries an MDN rather than a
// message: a multipart/report with report-type=disposition-notification
// (or without report-type), or a multipart/signed whose first part is one. Only the header of the
// first part is looked at, within a few KiB; the body is not parsed.
func IsMDN(h http.Header, body []byte) bool {
	mt, params := as2.ParseMediaType(h.Get("Content-Type"))
	switch mt {
	case "multipart/report":
		return isDNReport(params)
	case "multipart/signed":
	default:
		return false
	}
	b := params["boundary"]
	if b == "" {
		return false
	}
	const peek = 16 << 10
	delim := []byte("--" + b)
	i := bytes.Index(body[:min(len(body), peek)], delim)
	if i < 0 || (i > 0 && body[i-1] != '\n') {
		return false
	}
	rest := body[i+len(delim):]
	nl := bytes.IndexByte(rest[:min(len(rest), peek)], '\n')
	if nl < 0 {
		return false
	}
	rest = rest[nl+1:]
	rest = rest[:min(len(rest), peek)]
	// The first part's header block, up to its blank line.
	var ct string
	inCT := false
	for len(rest) > 0 {
		line := rest
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			line, rest = rest[:j], rest[j+1:]
		} else {
			rest = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if inCT {
				ct += " " + strings.TrimSpace(string(line))
			}
			continue
		}
		inCT = false
		name, value, ok := bytes.Cut(line, []byte{':'})
		if ok && ct == "" && strings.EqualFold(string(bytes.TrimSpace(name)), "Content-Type") {
			ct, inCT = strings.TrimSpace(string(value)), true
		}
	}
	mt, params = as2.ParseMediaType(ct)
	return mt == "multipart/report" && isDNReport(params)
}

// isDNReport accepts report-type=disposition-notification and, leniently,
// a multipart/report without report-type; other report types are not MDNs.
func isDNReport(params map[string]string) bool {
	rt, ok := params["report-type"]
	return !ok || strings.EqualFold(strings.TrimSpace(rt), "disposition-notification")
}
