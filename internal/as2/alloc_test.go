package as2_test

import (
	"testing"

	"github.com/edihub/edihub/internal/as2"
)

// TestParseAllocations bounds what the header parsing of every received
// message allocates (regression guards, not timings): a Content-Type of
// the usual form is read into its parameter map alone (it was 5 and more
// objects through mime.ParseMediaType), an entity's header block is
// copied once for all its fields (two strings a field before), and an
// AS2 name quoted without escapes is not copied.
func TestParseAllocations(t *testing.T) {
	ct := `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="----=_Part_0_1234.5678"`
	raw := []byte("Content-Type: application/edi-x12\r\nContent-Transfer-Encoding: binary\r\nContent-Disposition: attachment; filename=a.edi\r\n\r\nISA*00~")
	for _, tt := range []struct {
		name string
		max  float64
		f    func()
	}{
		{"ParseMediaType", 2, func() { as2.ParseMediaType(ct) }},
		{"ParseEntity, three fields", 4, func() { _, _ = as2.ParseEntity(raw, as2.Limits{}) }},
		{"ParseAS2Name, quoted", 0, func() { _, _ = as2.ParseAS2Name(`"EDIHUB HUB"`) }},
		{"ParseDispositionOptions", 3, func() {
			_, _ = as2.ParseDispositionOptions("signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256")
		}},
		{"ParseMICAlg", 0, func() { _, _ = as2.ParseMICAlg("sha-256") }},
	} {
		if got := testing.AllocsPerRun(100, tt.f); got > tt.max {
			t.Errorf("%s: %.0f allocations, want at most %.0f", tt.name, got, tt.max)
		}
	}
}
