package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretsFixture is a station file without partners, loaded with a
// secrets directory holding acme-password, a directory, and a symbolic
// link to a file outside it; the station directory holds outside.pw, a
// one-line file no profile may reach.
type secretsFixture struct {
	f       *fixture
	base    *File
	secrets string
	outside string
	certPEM string
}

func newSecretsFixture(t *testing.T, secretsDir bool) *secretsFixture {
	t.Helper()
	f := newFixture(t)
	s := &secretsFixture{f: f, secrets: t.TempDir(), outside: filepath.Join(f.dir, "outside.pw")}
	f.write("outside.pw", []byte("outside-secret\n"))
	if err := os.WriteFile(filepath.Join(s.secrets, "acme-password"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.secrets, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.outside, filepath.Join(s.secrets, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(f.dir)+"/outside.pw", filepath.Join(s.secrets, "escape-relative")); err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(filepath.Join(f.dir, "acme.crt"))
	if err != nil {
		t.Fatal(err)
	}
	s.certPEM = string(cert)
	f.write("edihub.yaml", []byte(stationYAML))
	opts := Options{Now: func() time.Time { return testNow }}
	if secretsDir {
		opts.SecretsDir = s.secrets
	}
	if s.base, err = Load(f.path(), opts); err != nil {
		t.Fatal(err)
	}
	return s
}

// entry is a partner entry as the API takes it, with extra YAML lines.
func (s *secretsFixture) entry(lines ...string) string {
	e := "as2_id: ACME\nurl: https://as2.acme.example/as2\ncertificate: |\n"
	for _, l := range strings.Split(strings.TrimRight(s.certPEM, "\n"), "\n") {
		e += "  " + l + "\n"
	}
	for _, l := range lines {
		e += l + "\n"
	}
	return e
}

// parse validates entry as a document that came over the network.
func (s *secretsFixture) parse(entry string) (*PartnerDoc, error) {
	return ParsePartnerDoc(EntryDoc(entry), s.f.dir, "request", s.base, PartnerDocOptions{Now: func() time.Time { return testNow }, InlineOnly: true})
}

// TestPartnerDocSecretReferences: a profile for the database names its
// secrets by name in the secrets directory. A path, a name that leaves
// the directory, or a symbolic link out of it is refused, and whatever
// the file system says, the message names the reference alone and is
// the same for every file that cannot be read: no answer tells a file
// outside the directory exists, or what it holds.
func TestPartnerDocSecretReferences(t *testing.T) {
	s := newSecretsFixture(t, true)
	const notName, notFound = `secret reference %q: not a name in the secrets directory`, `secret reference %q: not found in the secrets directory`
	tests := []struct {
		name      string
		give      []string
		wantField string
		wantMsg   string // with %q for the reference
		wantRef   string
	}{
		{"etc passwd", []string{"auth: {user: edi, password_file: /etc/passwd}"}, "auth.password_file", notName, "/etc/passwd"},
		{"absolute path of a one-line file", []string{"auth: {user: edi, password_file: " + s.outside + "}"}, "auth.password_file", notName, s.outside},
		{"parent directory", []string{"auth: {user: edi, password_file: ../outside.pw}"}, "auth.password_file", notName, "../outside.pw"},
		{"subdirectory path", []string{"auth: {user: edi, password_file: subdir/x}"}, "auth.password_file", notName, "subdir/x"},
		{"kubernetes data directory", []string{"auth: {user: edi, password_file: ..data}"}, "auth.password_file", notName, "..data"},
		{"symbolic link out of the directory", []string{"auth: {user: edi, password_file: escape}"}, "auth.password_file", notFound, "escape"},
		{"relative symbolic link out of the directory", []string{"auth: {user: edi, password_file: escape-relative}"}, "auth.password_file", notFound, "escape-relative"},
		{"missing", []string{"auth: {user: edi, password_file: nope}"}, "auth.password_file", notFound, "nope"},
		{"a directory", []string{"auth: {user: edi, password_file: subdir}"}, "auth.password_file", notFound, "subdir"},
		{"client certificate path", []string{"tls: {cert_file: " + s.outside + ", key_file: acme-password}"}, "tls.cert_file", notName, s.outside},
		{"client key path", []string{"tls: {cert_file: acme-password, key_file: /etc/passwd}"}, "tls.key_file", notName, "/etc/passwd"},
		{"client key behind a link", []string{"tls: {cert_file: acme-password, key_file: escape}"}, "tls.key_file", notFound, "escape"},
	}
	var fixes = map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := s.parse(s.entry(tt.give...))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("ParsePartnerDoc(%s) = %+v, %v; want *Error", tt.name, doc, err)
			}
			e := EntryError(err)
			if want := fmt.Sprintf(tt.wantMsg, tt.wantRef); e.Field != tt.wantField || e.Msg != want {
				t.Errorf("ParsePartnerDoc(%s) = field %q, %q; want field %q, %q", tt.name, e.Field, e.Msg, tt.wantField, want)
			}
			if ce.Err != nil {
				t.Errorf("ParsePartnerDoc(%s) wraps %v, want no operating-system error", tt.name, ce.Err)
			}
			// The fix is the same for every reference of a kind: with
			// the reference itself taken out, nothing is left that
			// depends on the file system.
			fix := strings.ReplaceAll(e.Fix, tt.wantRef, "REF")
			if prev, ok := fixes[tt.wantMsg]; ok && prev != fix {
				t.Errorf("ParsePartnerDoc(%s) fix = %q, want the same as the other references of its kind: %q", tt.name, fix, prev)
			}
			fixes[tt.wantMsg] = fix
			// Beyond the reference as given, nothing about a file.
			text := strings.ReplaceAll(err.Error(), tt.wantRef, "REF")
			for _, leak := range []string{s.f.dir, s.secrets, "outside-secret", "permission", "no such file", "escapes", "not a regular"} {
				if strings.Contains(text, leak) {
					t.Errorf("ParsePartnerDoc(%s) = %v, want nothing about %q", tt.name, err, leak)
				}
			}
		})
	}

	t.Run("a name in the secrets directory", func(t *testing.T) {
		doc, err := s.parse(s.entry("auth: {user: edi, password_file: acme-password}"))
		if err != nil {
			t.Fatalf("ParsePartnerDoc = %v, want the profile", err)
		}
		if a := doc.Partners[0].BasicAuth; a == nil || a.User != "edi" || a.Password != "s3cret" {
			t.Errorf("ParsePartnerDoc BasicAuth = %+v, want edi with the password of acme-password", a)
		}
		if got := doc.Specs[0].Auth.PasswordFile; got != "acme-password" {
			t.Errorf("ParsePartnerDoc spec auth.password_file = %q, want the name acme-password stored", got)
		}
	})
}

// TestPartnerDocWithoutSecretsDir: with no secrets directory configured,
// a profile for the database may name no secret, and the message says
// which setting to set; with SecretsOptional (the command line away from
// the replicas) a name is a warning, a path still an error.
func TestPartnerDocWithoutSecretsDir(t *testing.T) {
	s := newSecretsFixture(t, false)
	_, err := s.parse(s.entry("auth: {user: edi, password_file: acme-password}"))
	e := EntryError(err)
	if e == nil || e.Field != "auth.password_file" || e.Msg != `secret reference "acme-password": no secrets directory is configured` || !strings.Contains(e.Fix, "EDIHUB_SECRETS_DIR") {
		t.Errorf("ParsePartnerDoc without a secrets directory = %v, want auth.password_file refused, naming EDIHUB_SECRETS_DIR", err)
	}

	opts := PartnerDocOptions{Now: func() time.Time { return testNow }, SecretsOptional: true}
	doc, err := ParsePartnerDoc(EntryDoc(s.entry("auth: {user: edi, password_file: acme-password}")), s.f.dir, "partners.yaml", s.base, opts)
	if err != nil || len(doc.Warnings) != 1 || !strings.Contains(doc.Warnings[0], "EDIHUB_SECRETS_DIR") {
		t.Errorf("ParsePartnerDoc(SecretsOptional) = %+v, %v; want one warning naming EDIHUB_SECRETS_DIR", doc, err)
	}
	_, err = ParsePartnerDoc(EntryDoc(s.entry("auth: {user: edi, password_file: "+s.outside+"}")), s.f.dir, "partners.yaml", s.base, opts)
	if e := EntryError(err); e == nil || e.Field != "auth.password_file" || !strings.Contains(e.Msg, "not a name in the secrets directory") {
		t.Errorf("ParsePartnerDoc(SecretsOptional) of a path = %v, want it refused", err)
	}
}

// TestBuildPartnerStoredPaths: a replica builds a stored spec only with
// names in its secrets directory and inline certificates; a spec stored
// with a path (before secrets were names) is refused with the way to
// convert it, and nothing of the file is read.
func TestBuildPartnerStoredPaths(t *testing.T) {
	s := newSecretsFixture(t, true)
	tests := []struct {
		name      string
		give      string
		wantField string
		wantMsg   string
	}{
		{"password as a path", s.entry("auth: {user: edi, password_file: " + s.outside + "}"), "partner.auth.password_file", "not a name in the secrets directory"},
		{"password behind a link", s.entry("auth: {user: edi, password_file: escape}"), "partner.auth.password_file", "not found in the secrets directory"},
		{"certificate as a path", "as2_id: ACME\nurl: https://as2.acme.example/as2\ncertificate: acme.crt\n", "partner.certificate", "not PEM text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := DecodeSpec("stored", tt.give)
			if err != nil {
				t.Fatal(err)
			}
			pa, _, err := BuildPartner(s.base, spec, "stored", testNow)
			var e *Error
			if !errors.As(err, &e) || e.Field != tt.wantField || !strings.Contains(e.Msg, tt.wantMsg) {
				t.Fatalf("BuildPartner(%s) = %+v, %v; want field %s: %s", tt.name, pa.BasicAuth, err, tt.wantField, tt.wantMsg)
			}
			if tt.wantMsg == "not a name in the secrets directory" && !strings.Contains(e.Fix, "copy the file into the secrets directory") {
				t.Errorf("BuildPartner(%s) fix = %q, want how to convert the path", tt.name, e.Fix)
			}
		})
	}
	spec, err := DecodeSpec("stored", s.entry("auth: {user: edi, password_file: acme-password}"))
	if err != nil {
		t.Fatal(err)
	}
	pa, _, err := BuildPartner(s.base, spec, "stored", testNow)
	if err != nil || pa.BasicAuth == nil || pa.BasicAuth.Password != "s3cret" {
		t.Errorf("BuildPartner(a name) = %+v, %v; want the password of acme-password", pa.BasicAuth, err)
	}
}
