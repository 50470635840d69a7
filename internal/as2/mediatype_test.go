package as2_test

import (
	"mime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/as2"
)

// mediaTypeVariants are Content-Type values in the shapes AS2 products put
// on the wire (the product names say whose habit each shape follows), and
// the odd forms partners report. Each must give the type and the
// parameters the peer meant.
var mediaTypeVariants = []struct {
	name       string
	give       string
	wantType   string
	wantParams map[string]string
}{
	{"RFC form (OpenAS2, JavaMail)", `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="----=_Part_0_1234.5678"`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha-256", "boundary": "----=_Part_0_1234.5678"}},
	{"unfolded by HTTP (Mendelson)", `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256;  	boundary="----=_Part_1_12345.1600000000000"`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha-256", "boundary": "----=_Part_1_12345.1600000000000"}},
	{"everything quoted (pyAS2, Python email)", `multipart/signed; protocol="application/pkcs7-signature"; micalg="sha-256"; boundary="===============1234567890=="`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha-256", "boundary": "===============1234567890=="}},
	{"unquoted protocol and boundary (IBM Sterling)", `multipart/signed; protocol=application/pkcs7-signature; micalg=sha256; boundary=----=_Part_5_1234.5678`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha256", "boundary": "----=_Part_5_1234.5678"}},
	{"boundary first, micalg sha1 (Cleo)", `multipart/signed; boundary="_=1234567890ABC=_"; protocol=application/pkcs7-signature; micalg=sha1`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha1", "boundary": "_=1234567890ABC=_"}},
	{"BizTalk order", `multipart/signed; micalg="sha256"; boundary="_96ecfb4d-8c4f-4bd2-a0cb-b7e1b7e4a2c5_"; protocol="application/pkcs7-signature"`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "sha256", "boundary": "_96ecfb4d-8c4f-4bd2-a0cb-b7e1b7e4a2c5_"}},
	{"case and spaces", `Multipart/Signed ; Protocol = "application/pkcs7-signature" ; MicAlg = SHA-256 ; Boundary = abc:def@x ;`,
		"multipart/signed", map[string]string{"protocol": "application/pkcs7-signature", "micalg": "SHA-256", "boundary": "abc:def@x"}},
	{"unquoted x-pkcs7 protocol", `multipart/signed;protocol=application/x-pkcs7-signature;micalg=sha-1;boundary=b1`,
		"multipart/signed", map[string]string{"protocol": "application/x-pkcs7-signature", "micalg": "sha-1", "boundary": "b1"}},
	{"unquoted report boundary", `multipart/report; report-type=disposition-notification; boundary=----=_Part_2_99.1`,
		"multipart/report", map[string]string{"report-type": "disposition-notification", "boundary": "----=_Part_2_99.1"}},
	{"escaped quote", `application/edi-x12; name="a \"b\".edi"`,
		"application/edi-x12", map[string]string{"name": `a "b".edi`}},
	{"junk between parameters", `application/pkcs7-mime; smime-type=enveloped-data; junk; name=smime.p7m`,
		"application/pkcs7-mime", map[string]string{"smime-type": "enveloped-data", "name": "smime.p7m"}},
	{"repeated parameter: the first wins", `multipart/signed; boundary=a=1; boundary=b=2`,
		"multipart/signed", map[string]string{"boundary": "a=1"}},
	{"unterminated quote", `multipart/signed; boundary="abc`,
		"multipart/signed", map[string]string{"boundary": "abc"}},
	{"type only", `Application/EDIFACT`, "application/edifact", map[string]string{}},
}

func TestParseMediaType(t *testing.T) {
	for _, tt := range mediaTypeVariants {
		t.Run(tt.name, func(t *testing.T) {
			mt, params := as2.ParseMediaType(tt.give)
			if mt != tt.wantType {
				t.Errorf("ParseMediaType(%q) type = %q, want %q", tt.give, mt, tt.wantType)
			}
			if diff := cmp.Diff(tt.wantParams, params); diff != "" {
				t.Errorf("ParseMediaType(%q) params (-want +got):\n%s", tt.give, diff)
			}
		})
	}
}

// FuzzParseMediaType: never panics, and a value mime.ParseMediaType would
// format back parses to the same thing.
func FuzzParseMediaType(f *testing.F) {
	for _, tt := range mediaTypeVariants {
		f.Add(tt.give)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 4096 {
			return
		}
		mt, params := as2.ParseMediaType(v)
		if mt != strings.ToLower(mt) || mt != strings.TrimSpace(mt) {
			t.Fatalf("ParseMediaType(%q) type %q not lower-cased and trimmed", v, mt)
		}
		for k := range params {
			if k == "" || k != strings.ToLower(k) || strings.ContainsAny(k, " \t\"") {
				t.Fatalf("ParseMediaType(%q) has parameter name %q", v, k)
			}
		}
		if smt, sparams, err := mime.ParseMediaType(v); err == nil {
			delete(sparams, "") // junk: a continuation without a name ("*0=x")
			if smt != mt || !cmp.Equal(sparams, params) {
				t.Fatalf("ParseMediaType(%q) = %q %v, mime.ParseMediaType = %q %v", v, mt, params, smt, sparams)
			}
		}
	})
}
