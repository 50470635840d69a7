package probe

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
)

// checkMDN runs the mdn, mdn_signature, disposition and mic steps on a 2xx
// answer, as the dispatcher judges a synchronous MDN (mdn.Parse,
// mdn.Judge), one step per question.
func (r *run) checkMDN(resp *http.Response, body []byte) {
	p, id := r.p, r.rep.MessageID
	start := r.o.Now()
	since := func() time.Duration { return r.o.Now().Sub(start) }
	ct := resp.Header.Get("Content-Type")
	if len(body) == 0 {
		r.fail(StepMDN, 0, fmt.Sprintf("HTTP %d with an empty body: no MDN, although the test asked for a synchronous one", resp.StatusCode), noMDNFix(p))
		return
	}
	// First the report alone, signature unchecked: is this an MDN, and
	// for the test message?
	m, err := mdn.Parse(resp.Header, body, mdn.ParseOptions{Unverified: true})
	if err != nil {
		if errors.Is(err, mdn.ErrNotMDN) {
			r.fail(StepMDN, since(), fmt.Sprintf("the answer (%s, %d bytes) is not an MDN", orNone(ct), len(body)),
				fmt.Sprintf("check url in the partner profile (now %s): it may point at a web page or a gateway instead of the partner's AS2 endpoint; else ask the partner to answer with synchronous MDNs", p.RedactedURL()))
			return
		}
		r.fail(StepMDN, since(), "the MDN cannot be read: "+err.Error(), "ask the partner about its malformed MDN to Message-ID "+id)
		return
	}
	if !mdn.SameMessageID(m.OriginalMessageID, id) {
		r.fail(StepMDN, since(), fmt.Sprintf("the MDN answers Original-Message-ID %q, not the test message's %s", m.OriginalMessageID, id),
			"the partner answered for another message: ask the partner (a gateway in front of it may mix up answers)")
		return
	}
	kind := "unsigned MDN"
	if m.Signed {
		kind = "signed MDN"
	}
	detail := fmt.Sprintf("%s, %d bytes, for the test message", kind, len(body))
	if m.ReportingUA != "" {
		detail += ", from " + m.ReportingUA
	}
	r.ok(StepMDN, since(), detail)

	start = r.o.Now()
	m, err = mdn.Parse(resp.Header, body, mdn.ParseOptions{PartnerCerts: p.Certificates, RequireSigned: true})
	if err != nil {
		detail, fix := signatureProblem(err, p)
		r.fail(StepSignature, since(), detail, fix)
		return
	}
	r.ok(StepSignature, since(), "verified with partner certificate "+describeCertSerial(m.Signer))

	v := mdn.Judge(m, mdn.Expectation{MessageID: id, MIC: r.msg.MIC, MICs: r.msg.MICs, SignedReceipt: true})
	if errors.Is(v.Err, mdn.ErrNegative) || errors.Is(v.Err, mdn.ErrWrongMessage) {
		r.fail(StepDisposition, 0, v.Disposition, dispositionFix(m.Disposition, r.o.Station, p, id, r.o.Now()))
		return
	}
	detail = v.Disposition
	if m.Disposition.Kind() == "warning" {
		detail += " (a warning: the message counts as delivered)"
	}
	r.ok(StepDisposition, 0, detail)

	switch {
	case errors.Is(v.Err, mdn.ErrNoMIC):
		r.fail(StepMIC, 0, "the signed MDN carries no Received-content-MIC",
			"ask the partner to return the MIC in signed MDNs (RFC 4130 §7.4.3 requires it): without it the MDN proves nothing about what arrived")
	case v.Err != nil:
		r.fail(StepMIC, 0, fmt.Sprintf("MIC mismatch: the MDN returned %q, edihub computed %q", m.MIC, r.msg.MIC), micFix(p, r.msg.Signed, r.msg.Encrypted))
	default:
		r.ok(StepMIC, 0, "Received-content-MIC "+m.MIC+" matches")
	}
}

// noMDNFix is the fix for a 2xx answer without an MDN.
func noMDNFix(p *config.Partner) string {
	f := "the partner did not return a synchronous MDN: ask it to answer synchronous MDN requests"
	if p.MDN != config.MDNSync {
		f += fmt.Sprintf(" (the profile uses mdn: %s, so real messages may be fine if the partner sends MDNs only that way; the test can check only synchronous ones)", p.MDN)
	}
	return f + "; check that url (now " + p.RedactedURL() + ") is the partner's AS2 endpoint and not a gateway that answers for it"
}

// signatureProblem explains a signed MDN that was asked for and does not
// verify.
func signatureProblem(err error, p *config.Partner) (detail, fix string) {
	certs := certList(p.Certificates)
	switch {
	case errors.Is(err, mdn.ErrUnsigned):
		fix = "ask the partner to sign its MDNs (a signed receipt is the proof of delivery)"
		if !p.MDNSigned {
			fix += "; the profile does not ask for signed MDNs (mdn_signed: false), so real messages accept unsigned ones"
		}
		return "the MDN is not signed, although the test asked for a signed one", fix
	case errors.Is(err, cms.ErrDigestMismatch):
		return "the MDN's signature verifies but its content was changed after signing: " + err.Error(),
			"something between us and the partner (a gateway, a proxy) rewrites the answer: ask the partner"
	case errors.Is(err, mdn.ErrSignature):
		return fmt.Sprintf("the MDN's signature does not verify with the partner certificate(s) %s: %s", certs, err.Error()),
			"the partner signs with another key: ask the partner for its current certificate and add it to the file of certificate in the partner profile (every certificate in the file verifies)"
	}
	return "the MDN's signature cannot be read: " + err.Error(), "ask the partner about the malformed signature of its MDN"
}

// dispositionFix is the fix for a negative disposition, by its
// modifier.
func dispositionFix(d mdn.Disposition, st config.Station, p *config.Partner, id string, now time.Time) string {
	ourCert := "our current station certificate (serial " + serial(st.Certificate) + ")"
	desc := strings.ToLower(d.Description())
	switch {
	case strings.EqualFold(d.Type, mdn.TypeFailed) && strings.Contains(desc, "mic"):
		return "the partner supports none of the MIC algorithms asked for: set sign (the micalg of signed messages) or mdn_micalg in the partner profile to sha-256, or to an algorithm the partner names"
	case desc == "decryption-failed":
		enc := p.EncryptionCertificate(now)
		return fmt.Sprintf("the partner cannot decrypt: edihub encrypted to partner certificate %s; make sure certificate in the partner profile holds the partner's current certificate, and ask whether it supports encrypt: %s and key_encryption: %s; some products also want %s: send it to them",
			describeCertSerial(enc), p.Encrypt, p.KeyEncryption, ourCert)
	case desc == "authentication-failed", desc == "integrity-check-failed":
		return fmt.Sprintf("the partner cannot verify our signature: send them %s and check that they have it under our AS2 ID %q", ourCert, st.AS2ID)
	case desc == "insufficient-message-security":
		return "the partner requires signed and encrypted messages: set sign (sha-256) and encrypt (aes256-cbc) in the partner profile"
	case desc == "decompression-failed":
		return fmt.Sprintf("the partner cannot decompress: set compress: false in the partner profile, or try the other compress_order (now %s)", p.CompressOrder)
	case desc == mdn.UnknownTradingRelationship:
		return fmt.Sprintf("the partner does not know the pair AS2-From %q / AS2-To %q: check station.as2_id and as2_id in the partner profile with the partner (AS2 IDs are case-sensitive)", st.AS2ID, p.AS2ID)
	case desc == "unexpected-processing-error":
		return "the partner failed after receiving the message: ask it to check its logs for Message-ID " + id
	}
	return "ask the partner what this disposition means for Message-ID " + id
}

// micFix lists the profile settings that change the bytes a MIC covers,
// those that apply to how the message was built.
func micFix(p *config.Partner, signed, encrypted bool) string {
	hints := []string{"the partner computed the MIC over other bytes than edihub"}
	if p.Compress {
		other := config.CompressAfterSigning
		if p.CompressOrder == config.CompressAfterSigning {
			other = config.CompressBeforeSigning
		}
		hints = append(hints, fmt.Sprintf("try compress_order: %s (now %s)", other, p.CompressOrder))
	}
	if !signed && !encrypted {
		hints = append(hints, fmt.Sprintf("try mic_include_headers: %t (now %t)", !p.MICIncludeHeaders, p.MICIncludeHeaders))
	}
	other := config.TransferEncodingBase64
	if p.TransferEncoding == config.TransferEncodingBase64 {
		other = config.TransferEncodingBinary
	}
	hints = append(hints, fmt.Sprintf("try transfer_encoding: %s (now %s)", other, p.TransferEncoding))
	covers := "the signed part exactly as sent"
	if !signed {
		covers = "the MIME entity before encryption"
		if !encrypted {
			covers = "the content alone, or the MIME entity with mic_include_headers"
		}
	}
	return strings.Join(hints, "; ") + "; else ask the partner which bytes it digests (edihub digests " + covers + ", RFC 4130 §7.3.1)"
}

// describeCertSerial names a certificate by subject, serial and expiry.
func describeCertSerial(c *x509.Certificate) string {
	if c == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s (serial %s, valid until %s)", subjectOf(c), serial(c), c.NotAfter.UTC().Format(time.DateOnly))
}

// certList names the serials of certs.
func certList(certs []*x509.Certificate) string {
	if len(certs) == 0 {
		return "(none configured)"
	}
	s := make([]string, len(certs))
	for i, c := range certs {
		s[i] = "serial " + serial(c)
	}
	return strings.Join(s, ", ")
}

func orNone(ct string) string {
	if ct == "" {
		return "no Content-Type"
	}
	return ct
}
