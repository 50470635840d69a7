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
// MIME-Version; the AS2 fields are the caller's) and body, with CRLF line
// ends throughout. Unsigned it is a multipart/report;
// report-type=disposition-notification, signed a multipart/signed whose
// first part is that report. Build is deterministic for a fixed Rand and
// Time. Field values must not contain line breaks.
func Build(r Report, o BuildOptions) (http.Header, []byte, error) {
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	for _, v := range []string{r.ReportingUA, r.OriginalRecipient, r.FinalRecipient, r.OriginalMessageID, r.MIC} {
		if strings.ContainsAny(v, "\r\n") {
			return nil, nil, errors.New("build MDN: line break in a field value")
		}
	}
	b1, err := boundary(rnd)
	if err != nil {
		return nil, nil, err
	}
	reportType := `multipart/report; report-type=disposition-notification; boundary="` + b1 + `"`
	report := reportBody(r, b1)
	h := http.Header{"Mime-Version": {"1.0"}}
	if !o.Sign {
		h.Set("Content-Type", reportType)
		return h, report, nil
	}
	if o.Key == nil || o.Cert == nil {
		return nil, nil, errors.New("build MDN: signing needs Key and Cert")
	}
	alg := o.MICAlg
	if alg == 0 {
		alg = crypto.SHA256
	}
	signed := make([]byte, 0, len(report)+len(reportType)+20)
	signed = append(signed, "Content-Type: "+reportType+"\r\n\r\n"...)
	signed = append(signed, report...)
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
	var b bytes.Buffer
	b.Grow(len(signed) + len(sig)*4/3 + 512)
	b.WriteString("--" + b2 + "\r\n")
	b.Write(signed)
	b.WriteString("\r\n--" + b2 + "\r\n")
	b.WriteString("Content-Type: application/pkcs7-signature; name=smime.p7s\r\n" +
		"Content-Transfer-Encoding: base64\r\n" +
		"Content-Disposition: attachment; filename=smime.p7s\r\n\r\n")
	writeBase64Lines(&b, sig)
	b.WriteString("\r\n--" + b2 + "--\r\n")
	h.Set("Content-Type", `multipart/signed; protocol="application/pkcs7-signature"; micalg=`+as2.MICAlgName(alg)+`; boundary="`+b2+`"`)
	return h, b.Bytes(), nil
}

func reportBody(r Report, boundary string) []byte {
	var b bytes.Buffer
	text := r.Text
	if text == "" {
		text = defaultText(r)
	}
	text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\n", "\r\n")
	if !strings.HasSuffix(text, "\r\n") {
		text += "\r\n"
	}
	b.WriteString("--" + boundary + "\r\n")
	b.WriteString("Content-Type: text/plain; charset=us-ascii\r\nContent-Transfer-Encoding: 7bit\r\n\r\n")
	b.WriteString(text)
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.WriteString("Content-Type: message/disposition-notification\r\nContent-Transfer-Encoding: 7bit\r\n\r\n")
	field := func(name, value string) {
		if value != "" {
			b.WriteString(name + ": " + value + "\r\n")
		}
	}
	field("Reporting-UA", r.ReportingUA)
	if r.OriginalRecipient != "" {
		field("Original-Recipient", "rfc822; "+r.OriginalRecipient)
	}
	if r.FinalRecipient != "" {
		field("Final-Recipient", "rfc822; "+r.FinalRecipient)
	}
	field("Original-Message-ID", r.OriginalMessageID)
	field("Disposition", r.Disposition.String())
	field("Received-content-MIC", r.MIC)
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return b.Bytes()
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
	return "----=_MDN_" + hex.EncodeToString(r[:]), nil
}

func writeBase64Lines(b *bytes.Buffer, p []byte) {
	const lineBytes = 57 // 76 characters
	var line [76]byte
	for len(p) > 0 {
		n := min(lineBytes, len(p))
		base64.StdEncoding.Encode(line[:], p[:n])
		b.Write(line[:base64.StdEncoding.EncodedLen(n)])
		b.WriteString("\r\n")
		p = p[n:]
	}
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
