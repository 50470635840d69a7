package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// profiledKey reads the setting a profile key controls from a loaded
// partner, in the spelling the profile table writes it.
var profiledKey = map[string]func(Partner) string{
	"sign":                func(p Partner) string { return p.Sign },
	"encrypt":             func(p Partner) string { return p.Encrypt },
	"compress":            func(p Partner) string { return strconv.FormatBool(p.Compress) },
	"compress_order":      func(p Partner) string { return p.CompressOrder },
	"mdn":                 func(p Partner) string { return p.MDN },
	"mdn_signed":          func(p Partner) string { return strconv.FormatBool(p.MDNSigned) },
	"mdn_micalg":          func(p Partner) string { return p.MDNMICAlg },
	"key_encryption":      func(p Partner) string { return p.KeyEncryption },
	"transfer_encoding":   func(p Partner) string { return p.TransferEncoding },
	"chunked":             func(p Partner) string { return strconv.FormatBool(p.Chunked) },
	"mic_include_headers": func(p Partner) string { return strconv.FormatBool(p.MICIncludeHeaders) },
	"micalg_names":        func(p Partner) string { return p.MICAlgNames },
}

// TestLoadProfiles: each profile sets exactly the defaults its row lists,
// leaves every other setting as an entry without the profile has it, and
// loses to every key the entry sets itself.
func TestLoadProfiles(t *testing.T) {
	tests := []struct {
		name string
		// lines the entry needs besides the profile (keys it requires)
		lines []string
		// want is every setting the profile sets
		want map[string]string
		// override are explicit keys that must win over the profile
		override map[string]string
	}{
		{name: "sterling", want: map[string]string{}},
		{name: "biztalk", want: map[string]string{"compress": "true"}, override: map[string]string{"compress": "false"}},
		{name: "seeburger", want: map[string]string{"micalg_names": MICAlgNamesRFC3851}, override: map[string]string{"micalg_names": MICAlgNamesRFC5751}},
		{
			name:     "openas2",
			want:     map[string]string{"transfer_encoding": TransferEncodingBinary, "mic_include_headers": "false"},
			override: map[string]string{"transfer_encoding": TransferEncodingBase64, "mic_include_headers": "true"},
		},
		{name: "mendelson", want: map[string]string{"transfer_encoding": TransferEncodingBinary}, override: map[string]string{"transfer_encoding": TransferEncodingBase64}},
		{
			name:     "amazon-vendor-central",
			lines:    []string{"sign: sha-256", "encrypt: aes256-cbc"},
			want:     map[string]string{"compress": "false", "transfer_encoding": TransferEncodingBinary},
			override: map[string]string{"compress": "true", "transfer_encoding": TransferEncodingBase64},
		},
	}
	infos := map[string]ProfileInfo{}
	for _, info := range Profiles() {
		infos[info.Name] = info
	}
	var names []string
	for _, tt := range tests {
		names = append(names, tt.name)
	}
	if diff := cmp.Diff(names, profileNames()); diff != "" {
		t.Errorf("profiles without a row here, or rows without a profile (-rows +profiles):\n%s", diff)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := infos[tt.name]
			if diff := cmp.Diff(tt.want, info.Settings); diff != "" {
				t.Errorf("Profiles()[%s].Settings (-row +table):\n%s", tt.name, diff)
			}
			f := newFixture(t)
			baseline, err := f.load(acmeWith(tt.lines...))
			if err != nil {
				t.Fatalf("Load(without profile) = %v", err)
			}
			got, err := f.load(acmeWith(append([]string{"profile: " + tt.name}, tt.lines...)...))
			if err != nil {
				t.Fatalf("Load(profile: %s) = %v", tt.name, err)
			}
			p, base := got.Partners[0], baseline.Partners[0]
			if p.Profile != tt.name {
				t.Errorf("Load(profile: %s).Profile = %q", tt.name, p.Profile)
			}
			for key, get := range profiledKey {
				want, set := tt.want[key]
				if !set {
					want = get(base)
				}
				if v := get(p); v != want {
					t.Errorf("Load(profile: %s) %s = %q, want %q", tt.name, key, v, want)
				}
			}
			if p.RequireSigned != base.RequireSigned || p.RequireEncrypted != base.RequireEncrypted || p.MDNSigned != base.MDNSigned {
				t.Errorf("Load(profile: %s) changed the inbound requirements", tt.name)
			}
			for key, value := range tt.override {
				if value == tt.want[key] {
					t.Fatalf("override %s: %s is the profile's own value; it proves nothing", key, value)
				}
				got, err := f.load(acmeWith(append([]string{"profile: " + tt.name, key + ": " + value}, tt.lines...)...))
				if err != nil {
					t.Fatalf("Load(profile: %s, %s: %s) = %v", tt.name, key, value, err)
				}
				if v := profiledKey[key](got.Partners[0]); v != value {
					t.Errorf("Load(profile: %s, %s: %s) %s = %q, want the entry's %q", tt.name, key, value, key, v, value)
				}
			}
			if len(info.Sources) == 0 || info.Summary == "" {
				t.Errorf("profile %s: summary %q, sources %q; want both", tt.name, info.Summary, info.Sources)
			}
			for _, s := range info.Sources {
				if !strings.HasPrefix(s, "https://") {
					t.Errorf("profile %s: source %q is not an address", tt.name, s)
				}
			}
		})
	}
}

// TestLoadProfileErrors: an unknown profile names the field and lists the
// profiles; a profile's required keys are named when left out.
func TestLoadProfileErrors(t *testing.T) {
	runErrorCases(t, []errorCase{
		{
			name: "unknown profile", give: acmeWith("profile: websphere"), wantField: "partners[0].profile", wantLine: 6,
			wantMsg: `unknown profile "websphere" (fix: use one of sterling, biztalk, seeburger, openas2, mendelson, amazon-vendor-central, or remove profile)`,
		},
		{
			name: "amazon without sign", give: acmeWith("profile: amazon-vendor-central", "encrypt: aes256-cbc"), wantField: "partners[0].sign", wantLine: 3,
			wantMsg: "missing: profile amazon-vendor-central needs it (Amazon requires signed messages) (fix: set sign to the digest",
		},
		{
			name: "amazon without encrypt", give: acmeWith("profile: amazon-vendor-central", "sign: sha-256"), wantField: "partners[0].encrypt",
			wantMsg: "profile amazon-vendor-central needs it (Amazon requires encrypted messages)",
		},
		{
			name: "micalg_names", give: acmeWith("micalg_names: sha1"), wantField: "partners[0].micalg_names", wantLine: 6,
			wantMsg: `unsupported micalg spelling "sha1" (fix: use one of rfc5751, rfc3851)`,
		},
	})
}

// TestLoadProfileSpelling: profile names are matched like algorithm
// names, in any case and with spaces around; an explicit "none" for a
// required key counts as set (the entry's keys win).
func TestLoadProfileSpelling(t *testing.T) {
	f := newFixture(t)
	for give, want := range map[string]string{" BizTalk ": "biztalk", "AMAZON-Vendor-Central": "amazon-vendor-central", `""`: ""} {
		got, err := f.load(acmeWith("profile: "+give, "sign: none", "encrypt: none"))
		if err != nil {
			t.Errorf("Load(profile: %s) = %v", give, err)
			continue
		}
		if p := got.Partners[0]; p.Profile != want || p.Sign != "" || p.Encrypt != "" {
			t.Errorf("Load(profile: %s) = profile %q, sign %q, encrypt %q; want %q and neither", give, p.Profile, p.Sign, p.Encrypt, want)
		}
	}
}

func TestLoadMICAlgNames(t *testing.T) {
	f := newFixture(t)
	for give, want := range map[string]string{"": MICAlgNamesRFC5751, "micalg_names: RFC3851": MICAlgNamesRFC3851, "micalg_names: rfc5751": MICAlgNamesRFC5751} {
		var lines []string
		if give != "" {
			lines = append(lines, give)
		}
		got, err := f.load(acmeWith(lines...))
		if err != nil {
			t.Fatalf("Load(%q) = %v", give, err)
		}
		if v := got.Partners[0].MICAlgNames; v != want {
			t.Errorf("Load(%q).MICAlgNames = %q, want %q", give, v, want)
		}
	}
}

// TestProfiles: the table is usable as documented: every key a profile
// sets or requires is a partner key it knows how to set, and Profiles
// hands out copies.
func TestProfiles(t *testing.T) {
	for _, info := range Profiles() {
		if info.Name != strings.ToLower(strings.TrimSpace(info.Name)) {
			t.Errorf("profile name %q is not lower-case", info.Name)
		}
		for key := range info.Settings {
			if _, ok := profileKeys[key]; !ok || !slices.Contains(partnerKeys, key) {
				t.Errorf("profile %s sets %q, not a partner key it can set", info.Name, key)
			}
		}
		for _, key := range info.Requires {
			if _, ok := profileKeys[key]; !ok {
				t.Errorf("profile %s requires %q, not a partner key it can check", info.Name, key)
			}
		}
	}
	for key := range profileKeys {
		if _, ok := profiledKey[key]; !ok || !slices.Contains(partnerKeys, key) {
			t.Errorf("profileKeys[%q] has no reader in this test or is not a partner key", key)
		}
	}
	a := Profiles()
	a[1].Settings["compress"] = "false"
	a[1].Sources[0] = "changed"
	if b := Profiles(); b[1].Settings["compress"] != "true" || b[1].Sources[0] == "changed" {
		t.Errorf("Profiles() shares its maps and slices with the table")
	}
}
