package mdn_test

import (
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
)

// seeds are built MDNs, signed and unsigned, plus a few odd forms.
func seeds(f *testing.F) {
	key, cert := testKey(f)
	errReport := goldenReport
	errReport.Disposition = mdn.Errored("decryption-failed")
	for _, o := range []mdn.BuildOptions{{}, {Sign: true, Key: key, Cert: cert}} {
		for _, r := range []mdn.Report{goldenReport, errReport} {
			o.Rand, o.Time = &counter{}, time.Unix(0, 0)
			h, body, err := mdn.Build(r, o)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(h.Get("Content-Type"), body)
		}
	}
	f.Add(`multipart/report; report-type=disposition-notification; boundary=b`,
		[]byte("--b\nContent-Type: message/disposition-notification\n\ndisposition:a/b;processed/error:x\n--b--"))
	f.Add(`multipart/signed; boundary=b`, []byte("--b\r\nContent-Type: multipart/report;\r\n report-type=disposition-notification; boundary=c\r\n\r\n--c--\r\n--b--"))
	f.Add("multipart/report", []byte{})
}

// FuzzParse: Parse never panics, and what it accepts is consistent.
func FuzzParse(f *testing.F) {
	seeds(f)
	_, cert := testKey(f)
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		h := http.Header{"Content-Type": {ct}}
		m, err := mdn.Parse(h, body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{cert}, Limits: as2.Limits{MaxDecompressedSize: 1 << 20}})
		if err != nil {
			return
		}
		if m.Signed && m.Signer == nil {
			t.Fatalf("signed MDN accepted without a verifying signer")
		}
		if _, err := mdn.ParseDisposition(m.Disposition.String()); err != nil {
			t.Fatalf("ParseDisposition(%q) error = %v", m.Disposition.String(), err)
		}
		_, _ = mdn.Parse(h, body, mdn.ParseOptions{Unverified: true})
	})
}

// FuzzIsMDN: IsMDN never panics and agrees with Parse on what Parse
// accepts.
func FuzzIsMDN(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		h := http.Header{"Content-Type": {ct}}
		is := mdn.IsMDN(h, body)
		if _, err := mdn.Parse(h, body, mdn.ParseOptions{Unverified: true}); err == nil && !is {
			// Parse is more lenient (it unfolds and tolerates junk);
			// IsMDN must still see plain multipart/report MDNs.
			if mt, _ := (&as2.Entity{Header: as2.Header{{Name: "Content-Type", Value: ct}}}).MediaType(); mt == "multipart/report" {
				t.Fatalf("IsMDN() = false for an MDN Parse accepts (%q)", ct)
			}
		}
	})
}
