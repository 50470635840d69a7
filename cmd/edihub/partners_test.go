package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// partnersEnv is the environment of edihub partners against a fresh
// database and a station file with one partner (ACME CORP).
func partnersEnv(t *testing.T) (getenv func(string) string, cfgPath string) {
	t.Helper()
	cfgPath = writeConfig(t, "")
	return env("EDIHUB_DATABASE_URL", pgtest.URL(t), "EDIHUB_CONFIG", cfgPath), cfgPath
}

// TestPartnersUpgradeFromFile: the upgrade from a configuration file is one
// command: edihub partners apply -f edihub.yaml stores its partners as
// they are, and a second apply changes nothing.
func TestPartnersUpgradeFromFile(t *testing.T) {
	getenv, cfgPath := partnersEnv(t)
	out, _, err := runCmd(t, getenv, "partners", "apply", "-f", cfgPath)
	if err != nil {
		t.Fatalf("partners apply -f edihub.yaml = %v\n%s", err, out)
	}
	for _, want := range []string{"ACME CORP: create", `+ url: "http://127.0.0.1:1/as2"`, "+ certificate: [certificate", "applied 1 change(s): partner set revision 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("partners apply output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCmd(t, getenv, "partners", "apply", "-f", cfgPath)
	if err != nil || !strings.Contains(out, "ACME CORP: unchanged (version 1)") || !strings.Contains(out, "nothing to apply") {
		t.Errorf("second apply = %v\n%s\nwant ACME CORP unchanged and nothing applied", err, out)
	}

	// The stored profile is the file's: loaded from the database it equals
	// the one the file makes.
	base, err := config.Load(cfgPath, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, getenv, "partners", "get", "ACME CORP")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "# ACME CORP version 1 (revision 1)") || !strings.Contains(out, "-----BEGIN CERTIFICATE-----") || !strings.Contains(out, "by cli:") {
		t.Errorf("partners get ACME CORP =\n%s\nwant version 1, the certificate inline and the actor", out)
	}
	spec, err := config.DecodeSpec("stored", out[strings.Index(out, "\n")+1:])
	if err != nil {
		t.Fatal(err)
	}
	pa, _, err := config.BuildPartner(base, spec, "stored", base.Partners[0].Certificates[0].NotBefore)
	if err != nil {
		t.Fatal(err)
	}
	want := base.Partners[0]
	if pa.URL.String() != want.URL.String() || pa.Sign != want.Sign || pa.Encrypt != want.Encrypt || pa.MDN != want.MDN ||
		!pa.MDNSigned || len(pa.Certificates) != 1 || !pa.Certificates[0].Equal(want.Certificates[0]) {
		t.Errorf("stored profile = %+v, want the file's %+v", pa, want)
	}
}

// TestPartnersBrokenApplyChangesNothing: a document with an error in its
// second partner is refused whole, with the file, line, field and fix of
// the configuration file's errors; -dry-run of a good one stores nothing.
func TestPartnersBrokenApplyChangesNothing(t *testing.T) {
	getenv, cfgPath := partnersEnv(t)
	dir := filepath.Dir(cfgPath)
	doc := filepath.Join(dir, "partners.yaml")
	write := func(s string) {
		if err := os.WriteFile(doc, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`partners:
  - as2_id: GLOBEX
    url: https://as2.globex.example/as2
    certificate: partner.crt
  - as2_id: INITECH
    url: https://as2.initech.example/as2
    certificate: partner.crt
    sign: md5
`)
	out, _, err := runCmd(t, getenv, "partners", "apply", "-f", doc)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "partners[1].sign" || ce.Line != 8 || ce.Fix == "" {
		t.Fatalf("apply of a broken document = %v (%#v)\n%s\nwant a config error at partners[1].sign, line 8, with a fix", err, ce, out)
	}
	assertNoPartners(t, getenv)

	write(`partners:
  - as2_id: GLOBEX
    url: https://as2.globex.example/as2
    certificate: partner.crt
`)
	out, _, err = runCmd(t, getenv, "partners", "apply", "-dry-run", "-f", doc)
	if err != nil || !strings.Contains(out, "GLOBEX: create") || !strings.Contains(out, "dry run: 1 change(s) checked, nothing applied") {
		t.Fatalf("apply -dry-run = %v\n%s", err, out)
	}
	assertNoPartners(t, getenv)
}

func assertNoPartners(t *testing.T, getenv func(string) string) {
	t.Helper()
	out, _, err := runCmd(t, getenv, "partners", "history")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("partners history = %v %q, want no change recorded", err, out)
	}
}

// TestPartnersLifecycle: diff, export (applied back: unchanged), history
// with the actor and the diff, restore, delete with a stale version
// refused, delete.
func TestPartnersLifecycle(t *testing.T) {
	getenv, cfgPath := partnersEnv(t)
	if _, _, err := runCmd(t, getenv, "partners", "apply", "-f", cfgPath); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(cfgPath)
	renewed, err := devpki.New("acme-2027", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "acme-2027.crt"), renewed.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(dir, "changed.yaml")
	if err := os.WriteFile(changed, []byte(`partners:
  - as2_id: "ACME CORP"
    url: https://as2.acme.example/as2
    certificates:
      - certificate: partner.crt
      - certificate: acme-2027.crt
        not_before_use: 2027-01-15T00:00:00Z
    sign: sha-256
    encrypt: aes256-cbc
    mdn: async
    async_mdn_url: https://edihub.example/as2
    mdn_signed: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, getenv, "partners", "diff", "-f", changed)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ACME CORP: update (from version 1)", `~ url: "http://127.0.0.1:1/as2" → "https://as2.acme.example/as2"`, `~ mdn: "sync" → "async"`, `- certificate: [certificate "test"`, `+ certificates[1].certificate: [certificate "acme-2027"`, `+ certificates[1].not_before_use: "2027-01-15T00:00:00Z"`, "1 change(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("partners diff lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "BEGIN CERTIFICATE") {
		t.Errorf("partners diff shows PEM text:\n%s", out)
	}
	if _, _, err := runCmd(t, getenv, "partners", "apply", "-f", changed); err != nil {
		t.Fatal(err)
	}

	// export, applied back, changes nothing.
	out, _, err = runCmd(t, getenv, "partners", "export")
	if err != nil {
		t.Fatal(err)
	}
	exported := filepath.Join(t.TempDir(), "exported.yaml")
	if err := os.WriteFile(exported, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, getenv, "partners", "diff", "-f", exported)
	if err != nil || !strings.Contains(out, "ACME CORP: unchanged (version 2)") || !strings.Contains(out, "0 change(s)") {
		t.Errorf("diff of the export = %v\n%s\nwant unchanged", err, out)
	}

	out, _, err = runCmd(t, getenv, "partners", "history", "ACME CORP")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "revision 2") || !strings.Contains(out, "ACME CORP version 2  update  by cli:") || !strings.Contains(out, `~ mdn: "sync" → "async"`) ||
		!strings.Contains(out, "ACME CORP version 1  create") {
		t.Errorf("partners history =\n%s", out)
	}

	out, _, err = runCmd(t, getenv, "partners", "restore", "-version", "1", "ACME CORP")
	if err != nil || !strings.Contains(out, "restored ACME CORP version 1 as version 3") {
		t.Fatalf("partners restore = %v\n%s", err, out)
	}
	out, _, _ = runCmd(t, getenv, "partners", "get", "ACME CORP")
	if !strings.Contains(out, "mdn: sync") || !strings.Contains(out, "url: http://127.0.0.1:1/as2") {
		t.Errorf("after restore, partners get =\n%s\nwant version 1's profile", out)
	}

	if _, _, err := runCmd(t, getenv, "partners", "delete", "-version", "2", "ACME CORP"); err == nil || !strings.Contains(err.Error(), "is at version 3") {
		t.Errorf("delete of version 2 when 3 is stored = %v, want a conflict naming version 3", err)
	}
	if out, _, err := runCmd(t, getenv, "partners", "delete", "-version", "3", "ACME CORP"); err != nil || !strings.Contains(out, "deleted ACME CORP") {
		t.Errorf("partners delete = %v %q", err, out)
	}
	out, _, _ = runCmd(t, getenv, "partners", "get")
	if strings.Contains(out, "ACME CORP") {
		t.Errorf("partners get after the delete lists ACME CORP:\n%s", out)
	}
}

// TestPartnersVerbUsage: an unknown or missing subcommand is a usage error
// that lists the subcommands; help shows a subcommand's flags.
func TestPartnersVerbUsage(t *testing.T) {
	_, stderr, err := runCmd(t, env(), "partners", "frob")
	if !errors.Is(err, errUsage) || !strings.Contains(stderr, `unknown subcommand "frob"`) || !strings.Contains(stderr, "apply") {
		t.Errorf("partners frob = %v\n%s", err, stderr)
	}
	out, _, err := runCmd(t, env(), "help", "partners", "apply")
	if err != nil || !strings.Contains(out, "-dry-run") || !strings.Contains(out, "-prune") {
		t.Errorf("help partners apply = %v\n%s", err, out)
	}
	out, _, err = runCmd(t, env(), "partners", "profiles")
	if err != nil || !strings.Contains(out, "biztalk") || !strings.Contains(out, "source:") {
		t.Errorf("partners profiles = %v\n%s", err, out)
	}
}

// TestPartnersUpgradeKeepsEverything: an old configuration file whose
// partners use every kind of key (TLS with a CA bundle and a client
// certificate, basic auth, extra headers, a proxy, MDN hosts, replay and
// retry settings, two certificates) is imported with one command, and the
// profiles the database then serves equal the ones the file makes.
func TestPartnersUpgradeKeepsEverything(t *testing.T) {
	cfgPath := writeConfig(t, `    key_encryption: rsa-oaep-sha256
    transfer_encoding: base64
    chunked: true
    compress: true
    compress_order: after-signing
    mdn_micalg: sha-384
    require_encrypted: false
    timeout: 45s
    max_attempts: 3
    resend_overdue: 2
    retry_window: 6h
    replay_window: 2h
    refuse_replays: true
    mdn_hosts: [mdn.acme.example, 10.0.0.7]
    allow_private_mdn_targets: true
  - as2_id: "GLOBEX"
    url: https://as2.globex.example:8443/as2
    certificate: two.crt
    mdn: async
    async_mdn_url: https://hub.example/as2
    mic_include_headers: true
    require_signed: false
    auth: {user: edi, password_file: globex.pw}
    headers: {X-Partner-Key: k-123}
    proxy: http://proxy.example:3128
    tls: {ca_file: partner.crt, cert_file: partner.crt, key_file: station.key}
`)
	dir := filepath.Dir(cfgPath)
	second, err := devpki.New("second", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	two := append(append([]byte{}, certPEM...), second.CertPEM()...)
	for name, b := range map[string][]byte{"two.crt": two, "globex.pw": []byte("s3cret-password\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db := pgtest.URL(t)
	// The secrets (globex.pw, station.key, partner.crt) are names in the
	// secrets directory: the station's directory here.
	getenv := env("EDIHUB_DATABASE_URL", db, "EDIHUB_CONFIG", cfgPath, "EDIHUB_SECRETS_DIR", dir)
	if out, _, err := runCmd(t, getenv, "partners", "apply", "-f", cfgPath); err != nil {
		t.Fatalf("partners apply -f edihub.yaml = %v\n%s", err, out)
	}

	file, err := config.Load(cfgPath, config.Options{SecretsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	store, err := openStore(context.Background(), zap.NewNop(), db, postgres.Options{MaxConns: 2}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	served, err := partners.Snapshot(context.Background(), store, file, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if served.Revision == 0 || len(served.Partners) != len(file.Partners) {
		t.Fatalf("served revision %d with %d partners, want the file's %d from the database", served.Revision, len(served.Partners), len(file.Partners))
	}
	for i := range file.Partners {
		want := file.Partners[i]
		got, ok := served.Partner(want.AS2ID)
		if !ok {
			t.Fatalf("partner %q not served from the database", want.AS2ID)
		}
		if diff := cmp.Diff(comparable(want), comparable(*got)); diff != "" {
			t.Errorf("partner %q from the database differs from the file's (-file +database):\n%s", want.AS2ID, diff)
		}
	}
}

// comparable is a profile with what cmp cannot compare (TLS settings,
// certificates) turned into what they mean.
func comparable(p config.Partner) map[string]any {
	m := map[string]any{
		"as2_id": p.AS2ID, "station": p.Station, "url": p.URL.String(), "sign": p.Sign, "encrypt": p.Encrypt, "mdn": p.MDN,
		"mdn_micalg": p.MDNMICAlg, "key_encryption": p.KeyEncryption, "transfer_encoding": p.TransferEncoding,
		"compress_order": p.CompressOrder, "compress": p.Compress, "mdn_signed": p.MDNSigned, "require_signed": p.RequireSigned,
		"require_encrypted": p.RequireEncrypted, "chunked": p.Chunked, "mic_include_headers": p.MICIncludeHeaders,
		"mdn_hosts": p.MDNHosts, "allow_private": p.AllowPrivateMDNTargets, "basic_auth": p.BasicAuth, "headers": p.Headers,
		"replay_window": p.ReplayWindow, "refuse_replays": p.RefuseReplays, "async_mdn_url": p.AsyncMDNURL, "timeout": p.Timeout,
		"max_attempts": p.MaxAttempts, "resend_overdue": p.ResendOverdue, "retry_window": p.RetryWindow, "profile": p.Profile,
	}
	if p.Proxy != nil {
		m["proxy"] = p.Proxy.String()
	}
	var serials []string
	for _, c := range p.Certificates {
		serials = append(serials, c.SerialNumber.String()+" "+c.Subject.String())
	}
	m["certificates"] = serials
	if p.TLS != nil {
		m["tls_min_version"] = p.TLS.MinVersion
		m["tls_client_certificates"] = len(p.TLS.Certificates)
		m["tls_root_cas"] = p.TLS.RootCAs != nil
		if p.TLS.RootCAs != nil {
			m["tls_root_cas_subjects"] = len(p.TLS.RootCAs.Subjects()) //nolint:staticcheck // a count is all that is compared
		}
	}
	return m
}
