package as2_test

import (
	"crypto"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edihub/edihub/internal/as2"
)

func TestParseMICAlg(t *testing.T) {
	tests := []struct {
		give    string
		want    crypto.Hash
		wantErr bool
	}{
		{give: "sha1", want: crypto.SHA1},
		{give: "sha-1", want: crypto.SHA1},
		{give: "SHA1", want: crypto.SHA1},
		{give: "rsa-sha1", want: crypto.SHA1},
		{give: "sha224", want: crypto.SHA224},
		{give: "SHA256", want: crypto.SHA256},
		{give: "sha-256", want: crypto.SHA256},
		{give: " rsa-sha256 ", want: crypto.SHA256},
		{give: `"sha-384"`, want: crypto.SHA384},
		{give: "SHA-512", want: crypto.SHA512},
		{give: "md5", wantErr: true},
		{give: "sha3-256", wantErr: true},
		{give: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := as2.ParseMICAlg(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseMICAlg(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, as2.ErrUnsupportedMICAlg) {
			t.Errorf("ParseMICAlg(%q) error = %v, want ErrUnsupportedMICAlg", tt.give, err)
		}
		if err == nil {
			if back, _ := as2.ParseMICAlg(as2.MICAlgName(got)); back != got {
				t.Errorf("ParseMICAlg(MICAlgName(%v)) = %v", got, back)
			}
		}
	}
	if got := as2.MICAlgName(crypto.SHA256); got != "sha-256" {
		t.Errorf("MICAlgName(SHA256) = %q, want sha-256", got)
	}
}

func TestParseAS2Name(t *testing.T) {
	tests := []struct {
		give    string
		want    string
		wantErr bool
	}{
		{give: "EDIHUB", want: "EDIHUB"},
		{give: "  edihub\t", want: "edihub"},
		{give: `"ACME CORP"`, want: "ACME CORP"},
		{give: `ACME CORP`, want: "ACME CORP"},
		{give: `"say \"hi\""`, want: `say "hi"`},
		{give: `"back\\slash"`, want: `back\slash`},
		{give: `"a"b"`, wantErr: true},
		{give: "", wantErr: true},
		{give: `""`, wantErr: true},
		{give: strings.Repeat("x", 128), want: strings.Repeat("x", 128)},
		{give: strings.Repeat("x", 129), wantErr: true},
		{give: "caf\xc3\xa9", wantErr: true},
		{give: "tab\tinside", wantErr: true},
	}
	for _, tt := range tests {
		got, err := as2.ParseAS2Name(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseAS2Name(%q) = %q, %v; want %q, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFormatAS2Name(t *testing.T) {
	tests := []struct {
		give    string
		want    string
		wantErr bool
	}{
		{give: "EDIHUB", want: "EDIHUB"},
		{give: "ACME CORP", want: `"ACME CORP"`},
		{give: `say "hi"`, want: `"say \"hi\""`},
		{give: `a\b`, want: `"a\\b"`},
		{give: "x<y>@z", want: "x<y>@z"},
		{give: "", wantErr: true},
		{give: "new\nline", wantErr: true},
	}
	for _, tt := range tests {
		got, err := as2.FormatAS2Name(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("FormatAS2Name(%q) = %q, %v; want %q, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if back, err := as2.ParseAS2Name(got); err != nil || back != tt.give {
				t.Errorf("ParseAS2Name(FormatAS2Name(%q)) = %q, %v", tt.give, back, err)
			}
		}
	}
}

func TestParseDispositionOptions(t *testing.T) {
	tests := []struct {
		give       string
		want       as2.DispositionOptions
		wantAlg    crypto.Hash
		wantSigned bool
		wantErr    bool
	}{
		{
			give: "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256, sha-1",
			want: as2.DispositionOptions{ProtocolImportance: "optional", Protocols: []string{"pkcs7-signature"},
				MICAlgImportance: "optional", MICAlgs: []string{"sha-256", "sha-1"}},
			wantAlg: crypto.SHA256, wantSigned: true,
		},
		{
			give: "Signed-Receipt-Protocol = Required,PKCS7-Signature ;signed-receipt-micalg=REQUIRED,md5,SHA1, sha256;",
			want: as2.DispositionOptions{ProtocolImportance: "required", Protocols: []string{"pkcs7-signature"},
				MICAlgImportance: "required", MICAlgs: []string{"md5", "SHA1", "sha256"}},
			wantAlg: crypto.SHA1, wantSigned: true,
		},
		{
			give: `signed-receipt-protocol=optional,"pkcs7-signature"; signed-receipt-micalg=optional,"sha-512"`,
			want: as2.DispositionOptions{ProtocolImportance: "optional", Protocols: []string{"pkcs7-signature"},
				MICAlgImportance: "optional", MICAlgs: []string{"sha-512"}},
			wantAlg: crypto.SHA512, wantSigned: true,
		},
		{
			give:    "signed-receipt-micalg=sha-384",
			want:    as2.DispositionOptions{MICAlgs: []string{"sha-384"}},
			wantAlg: crypto.SHA384,
		},
		{give: "", want: as2.DispositionOptions{}},
		{
			give:    "garbage; signed-receipt-micalg=optional, md5",
			want:    as2.DispositionOptions{MICAlgImportance: "optional", MICAlgs: []string{"md5"}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		got, err := as2.ParseDispositionOptions(tt.give)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDispositionOptions(%q) error = %v, want error %v", tt.give, err, tt.wantErr)
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("ParseDispositionOptions(%q) mismatch (-want +got):\n%s", tt.give, diff)
		}
		alg, ok := got.MICAlg()
		if alg != tt.wantAlg || ok != (tt.wantAlg != 0) {
			t.Errorf("ParseDispositionOptions(%q).MICAlg() = %v, %v; want %v", tt.give, alg, ok, tt.wantAlg)
		}
		if got.SignedReceipt() != tt.wantSigned {
			t.Errorf("ParseDispositionOptions(%q).SignedReceipt() = %v, want %v", tt.give, got.SignedReceipt(), tt.wantSigned)
		}
	}
}

func TestParseMIC(t *testing.T) {
	want := as2.ComputeMIC(crypto.SHA256, []byte("hello"))
	s := want.String()
	if !strings.HasSuffix(s, ", sha-256") {
		t.Fatalf("MIC.String() = %q", s)
	}
	b64, _, _ := strings.Cut(s, ",")
	sha1MIC := as2.ComputeMIC(crypto.SHA1, []byte("hello"))
	tests := []struct {
		give      string
		wantMatch bool
	}{
		{give: s, wantMatch: true},
		{give: b64 + ",sha256", wantMatch: true},
		{give: "  " + b64 + " ,  SHA-256  ", wantMatch: true},
		{give: b64[:20] + "\r\n " + b64[20:] + ", sha-256", wantMatch: true},
		{give: strings.TrimRight(b64, "=") + ", sha-256", wantMatch: true},
		{give: b64, wantMatch: false},
		{give: b64 + ", sha-1", wantMatch: false},
		{give: sha1MIC.String(), wantMatch: false},
		{give: "AAAA" + b64[4:] + ", sha-256", wantMatch: false},
		{give: "", wantMatch: false},
	}
	for _, tt := range tests {
		if got := as2.MICMatches(tt.give, want); got != tt.wantMatch {
			t.Errorf("MICMatches(%q, %v) = %v, want %v", tt.give, want, got, tt.wantMatch)
		}
	}
}
