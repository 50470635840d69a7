package as2

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// plainMediaTypes are values of the form parsePlainMediaType reads, and
// near misses it must leave to the lenient reading.
var plainMediaTypes = []string{
	`multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="----=_Part_0_1234.5678"`,
	`multipart/signed;protocol=application/pkcs7-signature;micalg=sha-1;boundary=b1`,
	`Multipart/Signed ; Protocol = "application/pkcs7-signature" ; MicAlg = SHA-256 ; Boundary = abc:def@x ;`,
	`application/pkcs7-mime; smime-type=enveloped-data; name="smime.p7m"`,
	`application/pkcs7-signature; name=smime.p7s`,
	`multipart/report; report-type=disposition-notification; boundary="----=_MDN_0123456789abcdef01234567"`,
	`application/edi-x12`, `Application/EDIFACT`, `attachment; filename="a b.edi"`, `attachment; filename=a.edi`,
	`text/plain; charset=us-ascii`, `text/plain;`, `text/plain ; `, `text/plain;;`, `text/plain; ;`, `text/plain; x=""`,
	`text/plain; x="a"b`, `text/plain; x="a\"b"`, `text/plain; x="a`, `text/plain; x=`, `text/plain; =y`, `text/plain; x`,
	`text/plain; x=y; x=y`, `text/plain; x=y; X=z`, `text/plain; x*=utf-8''a%20b`, `text/plain; x*0=a; x*1=b`,
	`text/plain; *0=a`, "text/plain;\u00a0x=y", "text/plain\u00a0; x=y", "text/plain; x=\"\u00e9\"", "text/pl\u00e9in",
	`text/plain/x`, `text/`, `/plain`, `text /plain`, `text/plain x`, `text/plain; x=y z`, `text/plain; x="y" ; z=w`,
	"text/plain; x=\"a\tb\"", "text/plain; x=\"a\r\nb\"", "text/plain;\tx=y", "text/plain; x=y\t;\tz=\"w\"\t",
	`text/plain; boundary=----=_Part_5_1234.5678`, `multipart/signed; boundary=a=1; boundary=b=2`, `x`, `;`, `; x=y`,
	`text/plain; x=(y)`, `text/plain; x=y,z`, `text/plain; x=a@b`, `text/plain; x="(a)"`,
}

// TestPlainMediaTypeAsLenient: where parsePlainMediaType reads a value, it
// reads what the lenient reading (mime.ParseMediaType first) reads.
func TestPlainMediaTypeAsLenient(t *testing.T) {
	read := 0
	for _, v := range append(plainMediaTypes, fuzzSeeds(t, "FuzzParseMediaType")...) {
		if samePlainAsLenient(t, v) {
			read++
		}
	}
	if read < 15 {
		t.Errorf("parsePlainMediaType read %d of the values, want the common forms", read)
	}
}

func FuzzPlainMediaTypeAsLenient(f *testing.F) {
	for _, v := range plainMediaTypes {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) { samePlainAsLenient(t, v) })
}

// samePlainAsLenient checks v and reports whether the plain reading took it.
func samePlainAsLenient(t *testing.T, v string) bool {
	t.Helper()
	v = strings.TrimSpace(v)
	if v == "" {
		return false
	}
	mt, params, ok := parsePlainMediaType(v)
	if !ok {
		return false
	}
	wantType, wantParams := parseMediaTypeLenient(v)
	if mt != wantType {
		t.Errorf("%q: plain type %q, lenient %q", v, mt, wantType)
	}
	if diff := cmp.Diff(wantParams, params); diff != "" {
		t.Errorf("%q: parameters (-lenient +plain):\n%s", v, diff)
	}
	return true
}

// fuzzSeeds returns the string values of the fuzz corpus of target.
func fuzzSeeds(t *testing.T, target string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if q, ok := strings.CutPrefix(l, "string("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					out = append(out, s)
				}
			}
		}
	}
	return out
}
