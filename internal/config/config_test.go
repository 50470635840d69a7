package config

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadFileErrors(t *testing.T) {
	tests := []errorCase{
		{name: "empty file", give: "", wantMsg: "the file is empty"},
		{name: "comments only", give: "# nothing yet\n", wantMsg: "the file is empty"},
		{name: "no station", give: acmeYAML, wantField: "station", wantMsg: "no station section"},
		{name: "null station", give: "station:\n" + acmeYAML, wantField: "station", wantMsg: "no station section"},
		{name: "bad YAML unclosed flow", give: "station: {as2_id: EDIHUB\n", wantLine: 1, wantMsg: "invalid YAML"},
		{name: "bad YAML indentation", give: stationYAML + "partners:\n  - as2_id: A\n     url: x\n", wantLine: 4, wantMsg: "invalid YAML"},
		{name: "bad YAML tab", give: "station:\n\tas2_id: EDIHUB\n", wantLine: 2, wantMsg: "invalid YAML"},
		{name: "unknown top-level key", give: validYAML + "partner: []\n", wantField: "partner", wantLine: 6, wantMsg: `unknown key "partner"`},
		{name: "unknown station key", give: "station:\n  as2_id: EDIHUB\n  privat_key: station.key\n", wantField: "station.privat_key", wantLine: 3, wantMsg: `unknown key "privat_key"`},
		{name: "unknown partner key", give: acmeWith("sgin: sha-256"), wantField: "partners[0].sgin", wantLine: 6, wantMsg: "accepts as2_id, station, url, certificate"},
		{name: "unknown key in second partner", give: validYAML + "  - as2_id: B\n    url: https://b.example/as2\n    certificate: beta.crt\n    extra_certificates: [x.crt]\n", wantField: "partners[1].extra_certificates", wantLine: 9, wantMsg: `unknown key "extra_certificates"`},
		{name: "duplicate key", give: acmeWith("mdn: sync", "mdn: async"), wantField: "partners[0].mdn", wantLine: 7, wantMsg: "appears twice (first at line 6)"},
		{name: "top level is a list", give: "- station\n", wantLine: 1, wantMsg: "a mapping with station and partners"},
		{name: "station is a string", give: "station: EDIHUB\n", wantField: "station", wantLine: 1, wantMsg: "where a mapping is expected"},
		{name: "partners is a mapping", give: stationYAML + "partners: {as2_id: A}\n", wantField: "partners", wantLine: 2, wantMsg: "a list"},
		{name: "bool is not a bool", give: acmeWith("compress: yes please"), wantField: "partners[0].compress", wantLine: 6, wantMsg: "true or false"},
		{name: "string is a list", give: acmeWith("sign: [sha-256]"), wantField: "partners[0].sign", wantLine: 6, wantMsg: "a list where a single value is expected"},
		{name: "two documents", give: validYAML + "---\n" + validYAML, wantMsg: "more than one YAML document"},
	}
	runErrorCases(t, tests)
}

func TestLoadMissingOrUnreadableFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		give    string
		wantMsg string
		wantIs  error
	}{
		{name: "missing", give: filepath.Join(dir, "nope.yaml"), wantMsg: "no such file or directory", wantIs: fs.ErrNotExist},
		{name: "directory", give: dir, wantMsg: "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.give, Options{})
			checkError(t, tt.name, got, err, tt.give, "", 0, tt.wantMsg)
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Load(%s) = %v, want errors.Is %v", tt.name, err, tt.wantIs)
			}
		})
	}

	t.Run("no path", func(t *testing.T) {
		_, err := Load("", Options{})
		if err == nil || !strings.Contains(err.Error(), "EDIHUB_CONFIG") {
			t.Errorf("Load(\"\") = %v, want an error pointing at EDIHUB_CONFIG", err)
		}
	})

	t.Run("permission denied", func(t *testing.T) {
		// Root reads every file, and the tests run as root in CI, so the
		// phrasing is checked on the error the open would return.
		err := &fs.PathError{Op: "open", Path: "/etc/edihub/locked.yaml", Err: fs.ErrPermission}
		got := describeReadError(err, "locked.yaml")
		if want := "open locked.yaml: permission denied"; got != want {
			t.Errorf("describeReadError(permission) = %q, want %q", got, want)
		}
	})
}

func TestLoadPaths(t *testing.T) {
	f := newFixture(t)
	abs := filepath.Join(f.dir, "station.crt")
	f.write("keys/nested.key", pkcs1PEM(stationKey))
	tests := []struct {
		name string
		give string
	}{
		{name: "relative to config dir", give: validYAML},
		{name: "relative subdirectory", give: strings.Replace(validYAML, "private_key: station.key", "private_key: keys/nested.key", 1)},
		{name: "absolute", give: strings.Replace(validYAML, "certificate: station.crt", "certificate: "+abs, 1)},
	}
	// Run from another directory: relative paths must not depend on it.
	t.Chdir(t.TempDir())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.load(tt.give)
			if err != nil {
				t.Fatalf("Load(%s) = %v, want no error", tt.name, err)
			}
			if got.Station.PrivateKey == nil || got.Station.Certificate == nil {
				t.Errorf("Load(%s) station = %+v, want key and certificate", tt.name, got.Station)
			}
		})
	}

	t.Run("Parse resolves against dir", func(t *testing.T) {
		got, err := Parse([]byte(validYAML), f.dir, "inline.yaml", Options{Now: func() time.Time { return testNow }})
		if err != nil {
			t.Fatalf("Parse(validYAML) = %v, want no error", err)
		}
		if got.Path != "inline.yaml" {
			t.Errorf("Parse(validYAML).Path = %q, want %q", got.Path, "inline.yaml")
		}
	})
}

func TestLoadReferencedFileErrors(t *testing.T) {
	tests := []errorCase{
		{name: "station key missing file", give: strings.Replace(validYAML, "private_key: station.key", "private_key: gone.key", 1), wantField: "station.private_key", wantLine: 1, wantMsg: "open gone.key: no such file or directory"},
		{name: "station key not set", give: "station: {as2_id: EDIHUB, certificate: station.crt}\n", wantField: "station.private_key", wantLine: 1, wantMsg: "missing"},
		{name: "station key is a directory", give: strings.Replace(validYAML, "private_key: station.key", "private_key: .", 1), wantField: "station.private_key", wantMsg: "not a regular file"},
		{name: "station certificate missing file", give: strings.Replace(validYAML, "certificate: station.crt", "certificate: gone.crt", 1), wantField: "station.certificate", wantMsg: "open gone.crt: no such file or directory"},
		{name: "partner certificate missing file", give: strings.Replace(validYAML, "acme.crt", "gone.crt", 1), wantField: "partners[0].certificate", wantLine: 5, wantMsg: "relative paths are resolved against the config file's directory"},
		{name: "partner certificate not set", give: strings.Replace(validYAML, "    certificate: acme.crt\n", "", 1), wantField: "partners[0].certificate", wantLine: 3, wantMsg: "missing"},
	}
	runErrorCases(t, tests)
}

func TestLoadPrivateKeyErrors(t *testing.T) {
	testKeys(t)
	stationDER := certDER(t, stationKey, "EDIHUB", validFrom, validUntil)
	legacyEncrypted := pem.EncodeToMemory(&pem.Block{
		Type:    "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-256-CBC,00112233445566778899AABBCCDDEEFF"},
		Bytes:   []byte("ciphertext that edihub must not try to use"),
	})
	pkcs8Encrypted := pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("ciphertext")})
	ecSEC1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8DER, err := x509.MarshalPKCS8PrivateKey(stationKey)
	if err != nil {
		t.Fatal(err)
	}
	const field = "station.private_key"
	tests := []errorCase{
		{name: "not PEM", files: map[string][]byte{"station.key": []byte("hello\n")}, wantMsg: "station.key is not PEM"},
		{name: "DER key", files: map[string][]byte{"station.key": pkcs8DER}, wantMsg: "DER-encoded"},
		{name: "certificate instead of key", files: map[string][]byte{"station.key": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: stationDER})}, wantMsg: "holds no private key (PEM blocks found: CERTIFICATE)"},
		{name: "ECDSA PKCS#8", files: map[string][]byte{"station.key": pkcs8PEM(t, ecKey)}, wantMsg: "ECDSA key; AS2 interoperability here needs RSA"},
		{name: "ECDSA SEC1", files: map[string][]byte{"station.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecSEC1})}, wantMsg: "needs RSA"},
		{name: "legacy encrypted PEM", files: map[string][]byte{"station.key": legacyEncrypted}, wantMsg: "encrypted private key"},
		{name: "encrypted PKCS#8", files: map[string][]byte{"station.key": pkcs8Encrypted}, wantMsg: "decrypt it"},
		{name: "corrupt PKCS#1", files: map[string][]byte{"station.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte{0x30, 0x03, 0x02, 0x01, 0x00}})}, wantMsg: "not a valid PKCS#1 key"},
		{name: "corrupt PKCS#8", files: map[string][]byte{"station.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")})}, wantMsg: "not a valid PKCS#8 key"},
		{name: "OpenSSH key", files: map[string][]byte{"station.key": pem.EncodeToMemory(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: []byte("openssh-key-v1")})}, wantMsg: "OpenSSH key"},
	}
	for i := range tests {
		tests[i].give = validYAML
		tests[i].wantField = field
		tests[i].wantLine = 1
	}
	runErrorCases(t, tests)
}

func TestLoadPrivateKeyForms(t *testing.T) {
	testKeys(t)
	bundle := append(certPEM(t, stationKey, "EDIHUB", validFrom, validUntil), pkcs1PEM(stationKey)...)
	tests := []struct {
		name string
		key  []byte
	}{
		{name: "PKCS#8", key: pkcs8PEM(t, stationKey)},
		{name: "PKCS#1", key: pkcs1PEM(stationKey)},
		{name: "PKCS#1 labelled PRIVATE KEY", key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(stationKey)})},
		{name: "certificate and key in one file", key: bundle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write("station.key", tt.key)
			got, err := f.load(validYAML)
			if err != nil {
				t.Fatalf("Load(%s) = %v, want no error", tt.name, err)
			}
			if !got.Station.PrivateKey.Equal(stationKey) {
				t.Errorf("Load(%s) station key differs from the one written", tt.name)
			}
		})
	}
}

func TestLoadCertificateErrors(t *testing.T) {
	testKeys(t)
	stationDER := certDER(t, stationKey, "EDIHUB", validFrom, validUntil)
	ecCert := certPEM(t, ecKey, "EC PARTNER", validFrom, validUntil)
	tests := []errorCase{
		{name: "station not PEM", files: map[string][]byte{"station.crt": []byte("not a certificate")}, wantField: "station.certificate", wantMsg: "station.crt is not a PEM certificate"},
		{name: "station DER", files: map[string][]byte{"station.crt": stationDER}, wantField: "station.certificate", wantMsg: "DER certificate"},
		{name: "station key instead of certificate", files: map[string][]byte{"station.crt": pkcs8PEM(t, stationKey)}, wantField: "station.certificate", wantMsg: "holds no certificate (PEM blocks found: PRIVATE KEY)"},
		{name: "station corrupt certificate", files: map[string][]byte{"station.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})}, wantField: "station.certificate", wantMsg: "certificate 1 in station.crt does not parse"},
		{name: "station key and certificate do not match", files: map[string][]byte{"station.crt": certPEM(t, partnerKey, "EDIHUB", validFrom, validUntil)}, wantField: "station.certificate", wantLine: 1, wantMsg: "does not match the key in station.key"},
		{name: "station ECDSA certificate", files: map[string][]byte{"station.crt": ecCert}, wantField: "station.certificate", wantMsg: "needs RSA"},
		{name: "partner not PEM", files: map[string][]byte{"acme.crt": []byte("-----BEGIN NOTHING")}, wantField: "partners[0].certificate", wantLine: 5, wantMsg: "acme.crt is not a PEM certificate"},
		{name: "partner ECDSA certificate", files: map[string][]byte{"acme.crt": ecCert}, wantField: "partners[0].certificate", wantMsg: "ECDSA public key; AS2 interoperability here needs RSA"},
		{name: "partner second certificate corrupt", files: map[string][]byte{"acme.crt": append(certPEM(t, partnerKey, "ACME", validFrom, validUntil), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})...)}, wantField: "partners[0].certificate", wantMsg: "certificate 2 in acme.crt does not parse"},
	}
	for i := range tests {
		tests[i].give = validYAML
	}
	runErrorCases(t, tests)
}

func TestLoadCertificateValidityWarnings(t *testing.T) {
	testKeys(t)
	past := [2]time.Time{time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	future := [2]time.Time{time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)}
	tests := []struct {
		name         string
		files        map[string][]byte
		wantWarnings []string
	}{
		{name: "all valid", wantWarnings: nil},
		{
			name:         "station expired",
			files:        map[string][]byte{"station.crt": certPEM(t, stationKey, "EDIHUB", past[0], past[1])},
			wantWarnings: []string{"station.certificate: certificate (subject \"EDIHUB\", serial"},
		},
		{
			name:         "station not yet valid",
			files:        map[string][]byte{"station.crt": certPEM(t, stationKey, "EDIHUB", future[0], future[1])},
			wantWarnings: []string{"station.certificate: certificate (subject \"EDIHUB\", serial", "is not valid before 2026-07-01"},
		},
		{
			name:         "partner expired",
			files:        map[string][]byte{"acme.crt": certPEM(t, partnerKey, "ACME CORP", past[0], past[1])},
			wantWarnings: []string{"partners[0].certificate: certificate (subject \"ACME CORP\"", "expired on 2025-01-01", "no certificate is valid now"},
		},
		{
			name:         "partner rollover with one expired",
			files:        map[string][]byte{"acme.crt": append(certPEM(t, partnerKey, "ACME OLD", past[0], past[1]), certPEM(t, partnerKey, "ACME NEW", validFrom, validUntil)...)},
			wantWarnings: []string{"partners[0].certificate: certificate 1 of 2 (subject \"ACME OLD\""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for name, data := range tt.files {
				f.write(name, data)
			}
			got, err := f.load(validYAML)
			if err != nil {
				t.Fatalf("Load(%s) = %v, want warnings only", tt.name, err)
			}
			all := strings.Join(got.Warnings, "\n")
			if len(tt.wantWarnings) == 0 && len(got.Warnings) != 0 {
				t.Errorf("Load(%s).Warnings = %q, want none", tt.name, got.Warnings)
			}
			for _, w := range tt.wantWarnings {
				if !strings.Contains(all, w) {
					t.Errorf("Load(%s).Warnings = %q, want one containing %q", tt.name, got.Warnings, w)
				}
			}
			for _, w := range got.Warnings {
				if !strings.HasPrefix(w, f.path()+": ") {
					t.Errorf("Load(%s) warning %q, want it to start with the file", tt.name, w)
				}
			}
			if tt.name == "partner rollover with one expired" && strings.Contains(all, "no certificate is valid now") {
				t.Errorf("Load(%s).Warnings = %q, want no \"no certificate is valid\" with one valid", tt.name, got.Warnings)
			}
		})
	}
}

func TestLoadAS2IDErrors(t *testing.T) {
	long := strings.Repeat("A", 129)
	tests := []errorCase{
		{name: "station empty", give: strings.Replace(validYAML, `as2_id: "EDIHUB"`, `as2_id: ""`, 1), wantField: "station.as2_id", wantLine: 1, wantMsg: "missing or empty"},
		{name: "station absent", give: "station: {private_key: station.key, certificate: station.crt}\n" + acmeYAML, wantField: "station.as2_id", wantMsg: "missing or empty"},
		{name: "station too long", give: strings.Replace(validYAML, `"EDIHUB"`, long, 1), wantField: "station.as2_id", wantMsg: "129 bytes long; RFC 4130 allows at most 128"},
		{name: "partner empty", give: strings.Replace(validYAML, `"ACME CORP"`, `""`, 1), wantField: "partners[0].as2_id", wantLine: 3, wantMsg: "missing or empty"},
		{name: "partner too long", give: strings.Replace(validYAML, `"ACME CORP"`, long, 1), wantField: "partners[0].as2_id", wantMsg: "at most 128"},
		{name: "partner tab", give: strings.Replace(validYAML, `"ACME CORP"`, `"ACME\tCORP"`, 1), wantField: "partners[0].as2_id", wantMsg: "outside printable ASCII at byte 4"},
		{name: "partner non-ASCII", give: strings.Replace(validYAML, `"ACME CORP"`, `"ACMÉ"`, 1), wantField: "partners[0].as2_id", wantMsg: "outside printable ASCII at byte 3"},
		{name: "partner leading space", give: strings.Replace(validYAML, `"ACME CORP"`, `" ACME"`, 1), wantField: "partners[0].as2_id", wantMsg: "starts or ends with a space"},
		{name: "partner equals station", give: strings.Replace(validYAML, `"ACME CORP"`, `EDIHUB`, 1), wantField: "partners[0].as2_id", wantMsg: "the station's own AS2 ID"},
		{
			name:      "duplicate partners",
			give:      validYAML + "  - as2_id: B\n    url: https://b.example/as2\n    certificate: beta.crt\n  - as2_id: \"ACME CORP\"\n    url: https://c.example/as2\n    certificate: beta.crt\n",
			wantField: "partners[2].as2_id", wantLine: 9, wantMsg: `AS2 ID "ACME CORP" is also the AS2 ID of partners[0]`,
		},
	}
	runErrorCases(t, tests)

	t.Run("case differs is not a duplicate", func(t *testing.T) {
		f := newFixture(t)
		got, err := f.load(validYAML + "  - as2_id: acme corp\n    url: https://c.example/as2\n    certificate: beta.crt\n")
		if err != nil {
			t.Fatalf("Load(case differs) = %v, want no error", err)
		}
		if len(got.Partners) != 2 {
			t.Errorf("Load(case differs) partners = %d, want 2", len(got.Partners))
		}
	})
}

func TestLoadAS2IDAccepted(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{name: "spaces", yaml: `"ACME CORP EUROPE"`, want: "ACME CORP EUROPE"},
		{name: "quotes and backslash", yaml: `'ACME "EU" \ 1'`, want: `ACME "EU" \ 1`},
		{name: "unquoted with space", yaml: `ACME CORP 2`, want: "ACME CORP 2"},
		{name: "128 characters", yaml: strings.Repeat("x", 128), want: strings.Repeat("x", 128)},
		{name: "punctuation", yaml: `"a!#$%&'()*+,-./:;<=>?@[]^_{|}~"`, want: `a!#$%&'()*+,-./:;<=>?@[]^_{|}~`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			got, err := f.load(strings.Replace(validYAML, `"ACME CORP"`, tt.yaml, 1))
			if err != nil {
				t.Fatalf("Load(as2_id: %s) = %v, want no error", tt.yaml, err)
			}
			if got.Partners[0].AS2ID != tt.want {
				t.Errorf("Load(as2_id: %s) AS2ID = %q, want %q", tt.yaml, got.Partners[0].AS2ID, tt.want)
			}
			if p, ok := got.Partner(tt.want); !ok || p.AS2ID != tt.want {
				t.Errorf("Partner(%q) = %v, %v; want the partner", tt.want, p, ok)
			}
		})
	}
}

func TestLoadURLErrors(t *testing.T) {
	const acmeURL = "url: https://as2.acme.example/as2"
	tests := []errorCase{
		{name: "missing", give: strings.Replace(validYAML, "    "+acmeURL+"\n", "", 1), wantField: "partners[0].url", wantLine: 3, wantMsg: "missing"},
		{name: "unparsable", give: strings.Replace(validYAML, acmeURL, `url: "https://as2.acme.example:port/as2"`, 1), wantField: "partners[0].url", wantLine: 4, wantMsg: "not a valid URL"},
		{name: "ftp scheme", give: strings.Replace(validYAML, acmeURL, "url: ftp://as2.acme.example/as2", 1), wantField: "partners[0].url", wantMsg: `scheme "ftp" is not http or https`},
		{name: "no scheme", give: strings.Replace(validYAML, acmeURL, "url: as2.acme.example/as2", 1), wantField: "partners[0].url", wantMsg: `scheme "" is not http or https`},
		{name: "no host", give: strings.Replace(validYAML, acmeURL, "url: https:///as2", 1), wantField: "partners[0].url", wantMsg: "no host"},
		{name: "station async MDN URL", give: strings.Replace(validYAML, "certificate: station.crt}", "certificate: station.crt, async_mdn_url: mailto:x@example.com}", 1), wantField: "station.async_mdn_url", wantMsg: `scheme "mailto"`},
		{name: "partner async MDN URL", give: acmeWith("async_mdn_url: /as2"), wantField: "partners[0].async_mdn_url", wantLine: 6, wantMsg: "is not http or https"},
	}
	runErrorCases(t, tests)

	t.Run("password not echoed", func(t *testing.T) {
		f := newFixture(t)
		_, err := f.load(strings.Replace(validYAML, acmeURL, "url: gopher://user:s3cret@as2.acme.example/as2", 1))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load(url with password) = %v, want an error without the password", err)
		}
	})

	t.Run("http accepted", func(t *testing.T) {
		f := newFixture(t)
		got, err := f.load(strings.Replace(validYAML, acmeURL, "url: http://as2.acme.example:8080/as2", 1))
		if err != nil {
			t.Fatalf("Load(http url) = %v, want no error", err)
		}
		if s := got.Partners[0].URL.String(); s != "http://as2.acme.example:8080/as2" {
			t.Errorf("Load(http url) URL = %q, want %q", s, "http://as2.acme.example:8080/as2")
		}
	})
}

func TestLoadAlgorithmErrors(t *testing.T) {
	tests := []errorCase{
		{name: "sign sha-1", give: acmeWith("sign: SHA-1"), wantField: "partners[0].sign", wantLine: 6, wantMsg: "not offered for outbound signatures (fix: use one of sha-256, sha-384, sha-512, or \"\" (none))"},
		{name: "sign md5", give: acmeWith("sign: md5"), wantField: "partners[0].sign", wantMsg: `unsupported signing digest "md5" (fix: use one of sha-256, sha-384, sha-512`},
		{name: "encrypt des", give: acmeWith("encrypt: des-cbc"), wantField: "partners[0].encrypt", wantMsg: "use one of aes128-cbc, aes192-cbc, aes256-cbc, 3des, aes128-gcm, aes256-gcm, or \"\" (none)"},
		{name: "mdn bogus", give: acmeWith("mdn: later"), wantField: "partners[0].mdn", wantMsg: "use one of sync, async, none"},
		{name: "mdn_micalg md5", give: acmeWith("mdn_micalg: md5"), wantField: "partners[0].mdn_micalg", wantMsg: "use one of sha-256, sha-384, sha-512, sha-1"},
		{name: "key_encryption oaep", give: acmeWith("key_encryption: rsa-oaep"), wantField: "partners[0].key_encryption", wantMsg: "rsa-pkcs1v15, rsa-oaep-sha1, rsa-oaep-sha256, rsa-oaep-sha384, rsa-oaep-sha512"},
		{name: "transfer_encoding 7bit", give: acmeWith("transfer_encoding: 7bit"), wantField: "partners[0].transfer_encoding", wantMsg: "use one of binary, base64"},
		{name: "compress_order", give: acmeWith("compress: true", "compress_order: sometimes"), wantField: "partners[0].compress_order", wantLine: 7, wantMsg: "use one of before-signing, after-signing"},
	}
	runErrorCases(t, tests)
}

func TestLoadNumberErrors(t *testing.T) {
	tests := []errorCase{
		{name: "timeout zero", give: acmeWith("timeout: 0s"), wantField: "partners[0].timeout", wantLine: 6, wantMsg: `"0s" is not a positive duration`},
		{name: "timeout negative", give: acmeWith("timeout: -5s"), wantField: "partners[0].timeout", wantMsg: "not a positive duration"},
		{name: "timeout without unit", give: acmeWith("timeout: 60"), wantField: "partners[0].timeout", wantMsg: "with a unit, like 60s"},
		{name: "timeout words", give: acmeWith("timeout: a minute"), wantField: "partners[0].timeout", wantMsg: "not a positive duration"},
		{name: "max_attempts zero", give: acmeWith("max_attempts: 0"), wantField: "partners[0].max_attempts", wantLine: 6, wantMsg: "0 is not positive"},
		{name: "max_attempts negative", give: acmeWith("max_attempts: -3"), wantField: "partners[0].max_attempts", wantMsg: "-3 is not positive"},
		{name: "max_attempts words", give: acmeWith("max_attempts: many"), wantField: "partners[0].max_attempts", wantLine: 6, wantMsg: "a whole number"},
		{name: "resend_overdue negative", give: acmeWith("resend_overdue: -1"), wantField: "partners[0].resend_overdue", wantLine: 6, wantMsg: "-1 is out of range"},
		{name: "resend_overdue too many", give: acmeWith("resend_overdue: 11"), wantField: "partners[0].resend_overdue", wantLine: 6, wantMsg: "11 is out of range"},
		{name: "retry_window zero", give: acmeWith("retry_window: 0s"), wantField: "partners[0].retry_window", wantLine: 6, wantMsg: `"0s" is not a positive duration`},
		{name: "retry_window without unit", give: acmeWith("retry_window: 24"), wantField: "partners[0].retry_window", wantMsg: "like 24h"},
	}
	runErrorCases(t, tests)
}

func TestLoadAsyncMDNURL(t *testing.T) {
	withStationURL := strings.Replace(validYAML, "certificate: station.crt}", "certificate: station.crt, async_mdn_url: https://edihub.example/as2}", 1)
	tests := []struct {
		name    string
		give    string
		want    string
		wantErr string
	}{
		{name: "async without any URL", give: acmeWith("mdn: async"), wantErr: "partners[0].async_mdn_url: missing: mdn is async"},
		{name: "async uses the station URL", give: withStationURL + "    mdn: async\n", want: "https://edihub.example/as2"},
		{name: "partner URL wins", give: withStationURL + "    mdn: async\n    async_mdn_url: https://edge.example/as2\n", want: "https://edge.example/as2"},
		{name: "sync needs none", give: acmeWith("mdn: sync"), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			got, err := f.load(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load(%s) = %v, want error containing %q", tt.name, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%s) = %v, want no error", tt.name, err)
			}
			if got.Partners[0].AsyncMDNURL != tt.want {
				t.Errorf("Load(%s) AsyncMDNURL = %q, want %q", tt.name, got.Partners[0].AsyncMDNURL, tt.want)
			}
		})
	}
}

// partnerView is Partner without the parsed certificates, for comparison.
type partnerView struct {
	AS2ID, URL                                                                    string
	Certificates                                                                  int
	Sign, Encrypt, MDN, MDNMICAlg, KeyEncryption, TransferEncoding, CompressOrder string
	Compress, MDNSigned, RequireSigned, RequireEncrypted, Chunked                 bool
	AsyncMDNURL                                                                   string
	Timeout                                                                       time.Duration
	MaxAttempts, ResendOverdue                                                    int
	RetryWindow                                                                   time.Duration
}

func view(p Partner) partnerView {
	return partnerView{
		AS2ID: p.AS2ID, URL: p.URL.String(), Certificates: len(p.Certificates),
		Sign: p.Sign, Encrypt: p.Encrypt, MDN: p.MDN, MDNMICAlg: p.MDNMICAlg, KeyEncryption: p.KeyEncryption,
		TransferEncoding: p.TransferEncoding, CompressOrder: p.CompressOrder,
		Compress: p.Compress, MDNSigned: p.MDNSigned, RequireSigned: p.RequireSigned, RequireEncrypted: p.RequireEncrypted, Chunked: p.Chunked,
		AsyncMDNURL: p.AsyncMDNURL, Timeout: p.Timeout, MaxAttempts: p.MaxAttempts, ResendOverdue: p.ResendOverdue, RetryWindow: p.RetryWindow,
	}
}

func TestLoadFull(t *testing.T) {
	const give = `# edihub station and partners
station:
  as2_id: "EDIHUB"
  private_key: station.key
  certificate: station.crt
  async_mdn_url: https://edihub.example/as2
partners:
  - as2_id: "ACME CORP"          # any RFC 4130 name, spaces allowed
    url: https://as2.acme.example/as2
    certificate: acme.crt        # verifies their signatures, encrypts to them
    sign: sha-256                # outbound digest; "" = unsigned
    encrypt: aes256-cbc          # outbound cipher; "" = none
    compress: false
    mdn: sync                    # sync | async | none, requested on outbound
    mdn_signed: true
  - as2_id: BETA
    url: http://beta.example:4080/as2
    certificate: beta.crt
    sign: sha-512
    encrypt: aes128-gcm
    compress: true
    compress_order: after-signing
    mdn: async
    mdn_signed: true
    mdn_micalg: sha-1
    require_signed: true
    require_encrypted: true
    key_encryption: rsa-oaep-sha256
    transfer_encoding: base64
    chunked: true
    async_mdn_url: https://edge.example/as2/beta
    timeout: 5m
    max_attempts: 3
    resend_overdue: 2
    retry_window: 36h
  - as2_id: MINIMAL
    url: https://minimal.example/
    certificate: acme.crt
`
	f := newFixture(t)
	got, err := f.load(give)
	if err != nil {
		t.Fatalf("Load(full) = %v, want no error", err)
	}
	if got.Path != f.path() {
		t.Errorf("Load(full).Path = %q, want %q", got.Path, f.path())
	}
	// Async MDNs are applied by the leader's MDN poller: no warning.
	if len(got.Warnings) != 0 {
		t.Errorf("Load(full).Warnings = %q, want none", got.Warnings)
	}
	st := got.Station
	if st.AS2ID != "EDIHUB" || !st.PrivateKey.Equal(stationKey) || st.Certificate.Subject.CommonName != "EDIHUB" || st.AsyncMDNURL != "https://edihub.example/as2" {
		t.Errorf("Load(full).Station = {%q, key, %q, %q}, want EDIHUB with its key, certificate and async URL", st.AS2ID, st.Certificate.Subject.CommonName, st.AsyncMDNURL)
	}
	var views []partnerView
	for _, p := range got.Partners {
		views = append(views, view(p))
	}
	want := []partnerView{
		{
			AS2ID: "ACME CORP", URL: "https://as2.acme.example/as2", Certificates: 1,
			Sign: "sha-256", Encrypt: "aes256-cbc", MDN: "sync", MDNMICAlg: "sha-256", KeyEncryption: "rsa-pkcs1v15",
			TransferEncoding: "binary", CompressOrder: "before-signing", MDNSigned: true,
			RequireSigned: true, RequireEncrypted: true, // the defaults: signed, and encrypted since it encrypts
			Timeout: 60 * time.Second, MaxAttempts: 8,
		},
		{
			AS2ID: "BETA", URL: "http://beta.example:4080/as2", Certificates: 1,
			Sign: "sha-512", Encrypt: "aes128-gcm", MDN: "async", MDNMICAlg: "sha-1", KeyEncryption: "rsa-oaep-sha256",
			TransferEncoding: "base64", CompressOrder: "after-signing",
			Compress: true, MDNSigned: true, RequireSigned: true, RequireEncrypted: true, Chunked: true,
			AsyncMDNURL: "https://edge.example/as2/beta", Timeout: 5 * time.Minute, MaxAttempts: 3, ResendOverdue: 2,
			RetryWindow: 36 * time.Hour,
		},
		{
			AS2ID: "MINIMAL", URL: "https://minimal.example/", Certificates: 1,
			Sign: "", Encrypt: "", MDN: "sync", MDNMICAlg: "sha-256", KeyEncryption: "rsa-pkcs1v15",
			TransferEncoding: "binary", CompressOrder: "before-signing", RequireSigned: true,
			Timeout: 60 * time.Second, MaxAttempts: 8,
		},
	}
	if diff := cmp.Diff(want, views); diff != "" {
		t.Errorf("Load(full) partners mismatch (-want +got):\n%s", diff)
	}
}

// TestLoadSecurityDefaults: signatures are required unless a partner opts
// out, and encryption when the partner's profile encrypts.
func TestLoadSecurityDefaults(t *testing.T) {
	tests := []struct {
		name                      string
		give                      string
		wantSigned, wantEncrypted bool
		wantWarning               bool
	}{
		{"defaults", "", true, false, false},
		{"encrypting profile", "encrypt: aes256-cbc", true, true, false},
		{"opt out of signatures", "require_signed: false", false, false, true},
		{"opt out of encryption", "encrypt: aes128-cbc\n    require_encrypted: false", true, false, false},
		{"encryption without encrypting", "require_encrypted: true", true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			give := "station: {as2_id: EDIHUB, private_key: station.key, certificate: station.crt}\npartners:\n  - as2_id: P\n    url: https://p.example/as2\n    certificate: acme.crt\n"
			if tt.give != "" {
				give += "    " + tt.give + "\n"
			}
			got, err := f.load(give)
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			p := got.Partners[0]
			if p.RequireSigned != tt.wantSigned || p.RequireEncrypted != tt.wantEncrypted {
				t.Errorf("Load(%q) RequireSigned, RequireEncrypted = %v, %v, want %v, %v", tt.give, p.RequireSigned, p.RequireEncrypted, tt.wantSigned, tt.wantEncrypted)
			}
			warned := strings.Contains(strings.Join(got.Warnings, "\n"), "require_signed")
			if warned != tt.wantWarning {
				t.Errorf("Load(%q).Warnings = %q, want a require_signed warning: %v", tt.give, got.Warnings, tt.wantWarning)
			}
		})
	}
}

func TestLoadNormalisesNames(t *testing.T) {
	tests := []struct {
		key, give, want string
		get             func(Partner) string
	}{
		{key: "sign", give: "SHA-256", want: DigestSHA256},
		{key: "sign", give: "Sha384", want: DigestSHA384},
		{key: "sign", give: "sha512", want: DigestSHA512},
		{key: "sign", give: `""`, want: ""},
		{key: "sign", give: "None", want: ""},
		{key: "encrypt", give: "AES256-CBC", want: CipherAES256CBC},
		{key: "encrypt", give: "AES-128-CBC", want: CipherAES128CBC},
		{key: "encrypt", give: "3DES", want: Cipher3DES},
		{key: "encrypt", give: "Aes128-Gcm", want: CipherAES128GCM},
		{key: "encrypt", give: "NONE", want: ""},
		{key: "mdn", give: "ASYNC", want: MDNAsync},
		{key: "mdn", give: "None", want: MDNNone},
		{key: "mdn_micalg", give: "SHA1", want: DigestSHA1},
		{key: "mdn_micalg", give: "SHA-512", want: DigestSHA512},
		{key: "key_encryption", give: "RSA-OAEP-SHA512", want: KeyEncryptionOAEPSHA512},
		{key: "transfer_encoding", give: "Base64", want: TransferEncodingBase64},
		{key: "compress_order", give: "After-Signing", want: CompressAfterSigning},
	}
	get := map[string]func(Partner) string{
		"sign":              func(p Partner) string { return p.Sign },
		"encrypt":           func(p Partner) string { return p.Encrypt },
		"mdn":               func(p Partner) string { return p.MDN },
		"mdn_micalg":        func(p Partner) string { return p.MDNMICAlg },
		"key_encryption":    func(p Partner) string { return p.KeyEncryption },
		"transfer_encoding": func(p Partner) string { return p.TransferEncoding },
		"compress_order":    func(p Partner) string { return p.CompressOrder },
	}
	f := newFixture(t)
	for _, tt := range tests {
		give := validYAML + "    " + tt.key + ": " + tt.give + "\n"
		if tt.key == "mdn" && strings.EqualFold(tt.give, "async") {
			give += "    async_mdn_url: https://edihub.example/as2\n"
		}
		got, err := f.load(give)
		if err != nil {
			t.Errorf("Load(%s: %s) = %v, want no error", tt.key, tt.give, err)
			continue
		}
		if v := get[tt.key](got.Partners[0]); v != tt.want {
			t.Errorf("Load(%s: %s) = %q, want %q", tt.key, tt.give, v, tt.want)
		}
	}
}

func TestLoadMDNSignedWithMDNNone(t *testing.T) {
	f := newFixture(t)
	got, err := f.load(acmeWith("mdn: none", "mdn_signed: true"))
	if err != nil {
		t.Fatalf("Load(mdn none, mdn_signed true) = %v, want no error", err)
	}
	if p := got.Partners[0]; p.MDN != MDNNone {
		t.Errorf("Load(mdn none) MDN = %q, want %q", p.MDN, MDNNone)
	}
}

func TestLoadNoPartnersWarns(t *testing.T) {
	f := newFixture(t)
	got, err := f.load(stationYAML)
	if err != nil {
		t.Fatalf("Load(station only) = %v, want no error", err)
	}
	if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], "partners: no partners configured") {
		t.Errorf("Load(station only).Warnings = %q, want one about no partners", got.Warnings)
	}
}

func TestLoadCertificateRollover(t *testing.T) {
	testKeys(t)
	f := newFixture(t)
	oldCert := certPEM(t, partnerKey, "ACME 2025", validFrom, time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))
	newCert := certPEM(t, stationKey, "ACME 2026", validFrom, validUntil)
	f.write("acme.crt", append(oldCert, newCert...))
	got, err := f.load(validYAML)
	if err != nil {
		t.Fatalf("Load(two certificates) = %v, want no error", err)
	}
	p, ok := got.Partner("ACME CORP")
	if !ok {
		t.Fatalf("Partner(%q) = _, false; want the partner", "ACME CORP")
	}
	var names []string
	for _, c := range p.Certificates {
		names = append(names, c.Subject.CommonName)
	}
	if diff := cmp.Diff([]string{"ACME 2025", "ACME 2026"}, names); diff != "" {
		t.Errorf("Load(two certificates) certificates mismatch (-want +got):\n%s", diff)
	}
	if c := p.EncryptionCertificate(testNow); c.Subject.CommonName != "ACME 2025" {
		t.Errorf("EncryptionCertificate(%v) = %q, want %q", testNow, c.Subject.CommonName, "ACME 2025")
	}
	later := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	if c := p.EncryptionCertificate(later); c.Subject.CommonName != "ACME 2026" {
		t.Errorf("EncryptionCertificate(%v) = %q, want %q", later, c.Subject.CommonName, "ACME 2026")
	}
}

func TestEncryptionCertificate(t *testing.T) {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	cert := func(name string, from, until time.Time) *x509.Certificate {
		return &x509.Certificate{NotBefore: from, NotAfter: until, Subject: pkix.Name{CommonName: name}}
	}
	expiredA := cert("expired-a", day(2020, 1, 1), day(2021, 1, 1))
	expiredB := cert("expired-b", day(2020, 1, 1), day(2022, 1, 1))
	valid1 := cert("valid-1", day(2025, 1, 1), day(2027, 1, 1))
	valid2 := cert("valid-2", day(2026, 1, 1), day(2028, 1, 1))
	future := cert("future", day(2027, 1, 1), day(2029, 1, 1))
	tests := []struct {
		name  string
		certs []*x509.Certificate
		want  string
	}{
		{name: "expired then valid", certs: []*x509.Certificate{expiredA, valid1}, want: "valid-1"},
		{name: "two valid picks the first", certs: []*x509.Certificate{valid2, valid1}, want: "valid-2"},
		{name: "future then valid", certs: []*x509.Certificate{future, valid1}, want: "valid-1"},
		{name: "all expired picks the latest", certs: []*x509.Certificate{expiredB, expiredA}, want: "expired-b"},
		{name: "only future", certs: []*x509.Certificate{expiredA, future}, want: "future"},
		{name: "none", certs: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Partner{Certificates: tt.certs}
			got := ""
			if c := p.EncryptionCertificate(testNow); c != nil {
				got = c.Subject.CommonName
			}
			if got != tt.want {
				t.Errorf("EncryptionCertificate(%s) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestFilePartner(t *testing.T) {
	f := newFixture(t)
	loaded, err := f.load(validYAML + "  - as2_id: B\n    url: https://b.example/as2\n    certificate: beta.crt\n")
	if err != nil {
		t.Fatalf("Load(two partners) = %v, want no error", err)
	}
	built := &File{Partners: loaded.Partners} // no index: the linear path
	tests := []struct {
		give string
		want bool
	}{
		{give: "ACME CORP", want: true},
		{give: "B", want: true},
		{give: "acme corp", want: false},
		{give: "ACME CORP ", want: false},
		{give: "EDIHUB", want: false},
		{give: "", want: false},
	}
	for _, file := range []*File{loaded, built} {
		for _, tt := range tests {
			p, ok := file.Partner(tt.give)
			if ok != tt.want || ok && p.AS2ID != tt.give {
				t.Errorf("Partner(%q) = %v, %v; want ok=%v", tt.give, p, ok, tt.want)
			}
		}
	}
	p, _ := loaded.Partner("B")
	if p != &loaded.Partners[1] {
		t.Errorf("Partner(%q) = %p, want a pointer into File.Partners (%p)", "B", p, &loaded.Partners[1])
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		give Error
		want string
	}{
		{
			give: Error{File: "edihub.yaml", Field: "partners[1].certificate", Msg: "open acme.crt: no such file or directory", Fix: "check the path"},
			want: "edihub.yaml: partners[1].certificate: open acme.crt: no such file or directory (fix: check the path)",
		},
		{
			give: Error{File: "edihub.yaml", Line: 7, Field: "partners[0].sgin", Msg: `unknown key "sgin"`, Fix: "remove it"},
			want: `edihub.yaml:7: partners[0].sgin: unknown key "sgin" (fix: remove it)`,
		},
		{
			give: Error{File: "edihub.yaml", Msg: "the file is empty"},
			want: "edihub.yaml: the file is empty",
		},
	}
	for _, tt := range tests {
		if got := tt.give.Error(); got != tt.want {
			t.Errorf("Error(%+v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	fx := newFixture(f)
	for _, seed := range []string{
		validYAML,
		acmeWith("sign: SHA-1"),
		acmeWith("mdn: async", "async_mdn_url: https://x.example/as2", "timeout: 5s", "max_attempts: 2"),
		acmeWith("profile: biztalk", "compress: false"),
		acmeWith("profile: amazon-vendor-central", "sign: sha-256"),
		"station: {as2_id: [1]}\n",
		"- a\n",
		"a: &x [*x]\n",
		"station: {as2_id: \"EDIHUB\", private_key: station.crt, certificate: station.key}\n",
		"",
		"---\n---\n",
	} {
		f.Add([]byte(seed))
	}
	opts := Options{Now: func() time.Time { return testNow }}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Parse(data, fx.dir, "fuzz.yaml", opts)
		if err == nil {
			if got == nil || got.Station.PrivateKey == nil || got.Station.Certificate == nil {
				t.Fatalf("Parse(%q) = %+v, nil; want a complete station", data, got)
			}
			for _, p := range got.Partners {
				if p.URL == nil || len(p.Certificates) == 0 || p.Timeout <= 0 || p.MaxAttempts <= 0 {
					t.Fatalf("Parse(%q) partner %q incomplete", data, p.AS2ID)
				}
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.File != "fuzz.yaml" || e.Msg == "" {
			t.Fatalf("Parse(%q) = %v, want a *config.Error for fuzz.yaml", data, err)
		}
	})
}
