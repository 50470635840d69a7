package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testNow is the clock every test loads with; the fixture certificates are
// valid from 2025-01-01 to 2027-01-01.
var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var (
	validFrom  = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	validUntil = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Keys are generated once per test binary: RSA 2048 generation is slow,
// and Go refuses keys under 1024 bits.
var (
	keysOnce   sync.Once
	stationKey *rsa.PrivateKey
	partnerKey *rsa.PrivateKey
	ecKey      *ecdsa.PrivateKey
	keysErr    error
)

func testKeys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		if stationKey, keysErr = rsa.GenerateKey(rand.Reader, 2048); keysErr != nil {
			return
		}
		if partnerKey, keysErr = rsa.GenerateKey(rand.Reader, 2048); keysErr != nil {
			return
		}
		ecKey, keysErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	})
	if keysErr != nil {
		t.Fatalf("generate test keys: %v", keysErr)
	}
}

var serial struct {
	sync.Mutex
	n int64
}

// certDER returns a self-signed certificate for key.
func certDER(t testing.TB, key crypto.Signer, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	serial.Lock()
	serial.n++
	n := serial.n
	serial.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("create certificate %s: %v", cn, err)
	}
	return der
}

func certPEM(t testing.TB, key crypto.Signer, cn string, notBefore, notAfter time.Time) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER(t, key, cn, notBefore, notAfter)})
}

func pkcs8PEM(t testing.TB, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func pkcs1PEM(key *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// fixture is a configuration directory holding a valid station key and
// certificate (station.key, station.crt) and partner certificates
// (acme.crt, beta.crt).
type fixture struct {
	t   testing.TB
	dir string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	testKeys(t)
	f := &fixture{t: t, dir: t.TempDir()}
	f.write("station.key", pkcs8PEM(t, stationKey))
	f.write("station.crt", certPEM(t, stationKey, "EDIHUB", validFrom, validUntil))
	f.write("acme.crt", certPEM(t, partnerKey, "ACME CORP", validFrom, validUntil))
	f.write("beta.crt", certPEM(t, partnerKey, "BETA", validFrom, validUntil))
	return f
}

func (f *fixture) write(name string, data []byte) {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) path() string { return filepath.Join(f.dir, "edihub.yaml") }

// load writes config as edihub.yaml and loads it at testNow.
func (f *fixture) load(config string) (*File, error) {
	f.t.Helper()
	f.write("edihub.yaml", []byte(config))
	return Load(f.path(), Options{Now: func() time.Time { return testNow }})
}

const (
	stationYAML = `station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
`
	acmeYAML = `partners:
  - as2_id: "ACME CORP"
    url: https://as2.acme.example/as2
    certificate: acme.crt
`
	validYAML = stationYAML + acmeYAML
)

// acmeWith returns a valid configuration whose one partner has the extra
// lines (each indented by four spaces) added.
func acmeWith(lines ...string) string {
	s := validYAML
	for _, l := range lines {
		s += "    " + l + "\n"
	}
	return s
}

// errorCase is one expected failure: the error must be an *Error for the
// loaded file naming field (and line, when not 0) and containing msg.
type errorCase struct {
	name      string
	give      string
	files     map[string][]byte
	wantField string
	wantLine  int
	wantMsg   string
}

func runErrorCases(t *testing.T, tests []errorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for name, data := range tt.files {
				f.write(name, data)
			}
			got, err := f.load(tt.give)
			checkError(t, tt.name, got, err, f.path(), tt.wantField, tt.wantLine, tt.wantMsg)
		})
	}
}

func checkError(t *testing.T, name string, got *File, err error, file, wantField string, wantLine int, wantMsg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Load(%s) = %+v, nil; want error naming %q", name, got, wantField)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Load(%s) = %T %v, want *config.Error", name, err, err)
	}
	if e.File != file {
		t.Errorf("Load(%s) error File = %q, want %q", name, e.File, file)
	}
	if e.Field != wantField {
		t.Errorf("Load(%s) error Field = %q, want %q (error: %v)", name, e.Field, wantField, err)
	}
	if wantLine != 0 && e.Line != wantLine {
		t.Errorf("Load(%s) error Line = %d, want %d (error: %v)", name, e.Line, wantLine, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, file) {
		t.Errorf("Load(%s) = %q, want it to start with the file %q", name, msg, file)
	}
	if wantField != "" && !strings.Contains(msg, ": "+wantField+": ") {
		t.Errorf("Load(%s) = %q, want it to name field %q", name, msg, wantField)
	}
	if !strings.Contains(msg, wantMsg) {
		t.Errorf("Load(%s) = %q, want it to contain %q", name, msg, wantMsg)
	}
	if e.Fix == "" || !strings.Contains(msg, " (fix: ") {
		t.Errorf("Load(%s) = %q, want a fix", name, msg)
	}
	if strings.Contains(msg, "MII") || strings.Contains(msg, "BEGIN") && strings.Contains(msg, "-----\n") {
		t.Errorf("Load(%s) = %q, want no PEM or key material in the message", name, msg)
	}
	if strings.Contains(msg, "failed to") {
		t.Errorf("Load(%s) = %q, want no \"failed to\"", name, msg)
	}
}
