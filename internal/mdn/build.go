package mdn

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
)

// Report is the content of an MDN: the fields of its
// message/disposition-notification part and its human-readable text.
type Report struct {
	// ReportingUA names the software that built the MDN.
	ReportingUA string
	// OriginalRecipient and FinalRecipient are AS2 names (the AS2-To of the
	// message), written as "rfc822; name" and returned by Parse without the
	// "rfc822;" prefix.
	OriginalRecipient, FinalRecipient string
	// OriginalMessageID is the Message-ID of the message, byte-exact as
	// received.
	OriginalMessageID string
	Disposition       Disposition
	// MIC is the Received-content-MIC as on the wire: "base64, sha-256".
	MIC string
	// Text is the human-readable first part.
	Text string
}

// BuildOptions choose whether and how Build signs.
type BuildOptions struct {
	// Sign makes a multipart/signed MDN with Key and Cert.
	Sign bool
	// MICAlg is the signature digest: the first supported micalg of the
	// request; zero means SHA-256.
	MICAlg crypto.Hash
	Key    crypto.Signer
	Cert   *x509.Certificate
	// Rand supplies boundaries; nil means crypto/rand.
	Rand io.Reader
	// Time is the signing time; zero means time.Now().
	Time time.Time
	// AlgorithmProtection adds the RFC 6211 attribute to the signature.
	AlgorithmProtection bool
}

// Build returns an MDN: its HTTP header fields (Content-Type and
// MIME-Version; the AS2 fields are the caller's, and the map has room for
// them) and body, with CRLF line ends throughout. Unsigned it is a
// multipart/report; report-type=disposition-notification, signed a
// multipart/signed whose first part is that report. Build is
// deterministic for a fixed Rand and Time. Field values must not contain
// line breaks.
func Build(r Report, o BuildOptions) (http.Header, []byte, error) {
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	for _, v := range [...]string{r.ReportingUA, r.OriginalRecipient, r.FinalRecipient, r.OriginalMessageID, r.MIC} {
		if strings.ContainsAny(v, "\r\n") {
			return nil, nil, errors.New("build MDN: line break in a field value")
		}
	}
	b1, err := boundary(rnd)
	if err != nil {
		return nil, nil, err
	}
	reportType := `multipart/report; report-type=disposition-notification; boundary="` + b1 + `"`
	h := make(http.Header, headerRoom)
	h["Mime-Version"] = []string{"1.0"}
	if !o.Sign {
		h["Content-Type"] = []string{reportType}
		return h, appendReport(make([]byte, 0, reportSize), r, b1), nil
	}
	if o.Key == nil || o.Cert == nil {
		return nil, nil, errors.New("build MDN: signing needs Key and Cert")
	}
	alg := o.MICAlg
	if alg == 0 {
		alg = crypto.SHA256
	}
	// The signed entity: the report under its Content-Type.
	signed := make([]byte, 0, reportSize+len(reportType)+20)
	signed = append(signed, "Content-Type: "...)
	signed = append(signed, reportType...)
	signed = append(signed, "\r\n\r\n"...)
	signed = appendReport(signed, r, b1)
	sig, err := cms.SignDetached(signed, o.Cert, o.Key, cms.SignOptions{
		Hash: alg, SigningTime: o.Time, AlgorithmProtection: o.AlgorithmProtection, Rand: rnd,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("build MDN: %w", err)
	}
	b2, err := boundary(rnd)
	if err != nil {
		return nil, nil, err
	}
	const sigHeader = "Content-Type: application/pkcs7-signature; name=smime.p7s\r\n" +
		"Content-Transfer-Encoding: base64\r\n" +
		"Content-Disposition: attachment; filename=smime.p7s\r\n\r\n"
	b := make([]byte, 0, 3*len(b2)+len(signed)+len(sigHeader)+base64LinesSize(len(sig))+16)
	b = append(b, "--"...)
	b = append(b, b2...)
	b = append(b, "\r\n"...)
	b = append(b, signed...)
	b = append(b, "\r\n--"...)
	b = append(b, b2...)
	b = append(b, "\r\n"...)
	b = append(b, sigHeader...)
	b = appendBase64Lines(b, sig)
	b = append(b, "\r\n--"...)
	b = append(b, b2...)
	b = append(b, "--\r\n"...)
	h["Content-Type"] = []string{`multipart/signed; protocol="application/pkcs7-signature"; micalg=` + as2.MICAlgName(alg) + `; boundary="` + b2 + `"`}
	return h, b, nil
}

// headerRoom is the fields Build's header has room for: its own two and
// the AS2 fields the receiver adds (AS2-Version, AS2-From, AS2-To,
// Message-ID, Date, Subject, EDIINT-Features).
const headerRoom = 9

// reportSize is room for a report with the default text.
const reportSize = 1024

// appendReport appends the multipart/report of r, delimited by boundary.
func appendReport(b []byte, r Report, boundary string) []byte {
	text := r.Text
	if text == "" {
		text = defaultText(r)
	}
	b = append(b, "--"...)
	b = append(b, boundary...)
	b = append(b, "\r\nContent-Type: text/plain; charset=us-ascii\r\nContent-Transfer-Encoding: 7bit\r\n\r\n"...)
	b = appendCRLFText(b, text)
	b = append(b, "\r\n--"...)
	b = append(b, boundary...)
	b = append(b, "\r\nContent-Type: message/disposition-notification\r\nContent-Transfer-Encoding: 7bit\r\n\r\n"...)
	field := func(name, prefix, value string) {
		if value != "" {
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, prefix...)
			b = append(b, value...)
			b = append(b, "\r\n"...)
		}
	}
	field("Reporting-UA", "", r.ReportingUA)
	field("Original-Recipient", "rfc822; ", r.OriginalRecipient)
	field("Final-Recipient", "rfc822; ", r.FinalRecipient)
	field("Original-Message-ID", "", r.OriginalMessageID)
	field("Disposition", "", r.Disposition.String())
	field("Received-content-MIC", "", r.MIC)
	b = append(b, "\r\n--"...)
	b = append(b, boundary...)
	return append(b, "--\r\n"...)
}

// appendCRLFText appends text with every line end CRLF (a bare LF
// becomes CRLF, CRLF stays) and a final line end when it has none.
func appendCRLFText(b []byte, text string) []byte {
	start := len(b)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\r' && i+1 < len(text) && text[i+1] == '\n':
			b = append(b, '\r', '\n')
			i++
		case c == '\n':
			b = append(b, '\r', '\n')
		default:
			b = append(b, c)
		}
	}
	if !bytes.HasSuffix(b[start:], []byte("\r\n")) {
		b = append(b, '\r', '\n')
	}
	return b
}

func defaultText(r Report) string {
	if r.Disposition.Successful() {
		return "The AS2 message " + r.OriginalMessageID + " was received and processed.\n" +
			"This is not a guarantee that the message has been completely processed or understood by the receiving application.\n"
	}
	return "The AS2 message " + r.OriginalMessageID + " was received but could not be processed: " +
		r.Disposition.Type + "/" + r.Disposition.Modifier + ".\n"
}

func boundary(rnd io.Reader) (string, error) {
	var r [12]byte
	if _, err := io.ReadFull(rnd, r[:]); err != nil {
		return "", fmt.Errorf("build MDN: boundary: %w", err)
	}
	var b [10 + 24]byte
	copy(b[:], "----=_MDN_")
	hex.Encode(b[10:], r[:])
	return string(b[:]), nil
}

// base64LinesSize is the size appendBase64Lines gives n bytes.
func base64LinesSize(n int) int {
	const lineBytes = 57
	full, rest := n/lineBytes, n%lineBytes
	size := full * (76 + 2)
	if rest > 0 {
		size += base64.StdEncoding.EncodedLen(rest) + 2
	}
	return size
}

// appendBase64Lines appends p in base64, in CRLF-ended lines of 76
// characters.
func appendBase64Lines(b []byte, p []byte) []byte {
	const lineBytes = 57 // 76 characters
	for len(p) > 0 {
		n := min(lineBytes, len(p))
		b = base64.StdEncoding.AppendEncode(b, p[:n])
		b = append(b, '\r', '\n')
		p = p[n:]
	}
	return b
}

// RequestOptions returns the Disposition-Notification-Options value that
// asks for a signed receipt with micAlgs in order of preference (SHA-256
// when none are given):
//
//	signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256
func RequestOptions(micAlgs ...crypto.Hash) string {
	if len(micAlgs) == 0 {
		micAlgs = []crypto.Hash{crypto.SHA256}
	}
	names := make([]string, 0, len(micAlgs))
	for _, h := range micAlgs {
		if n := as2.MICAlgName(h); n != "" {
			names = append(names, n)
		}
	}
	return "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, " + strings.Join(names, ", ")
}
