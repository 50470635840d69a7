package partners_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/devpki"
)

// Live.Run starts goroutines: every test that runs it must stop them.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// Identities are made once per test binary: RSA key generation is slow
// under the race detector.
var (
	pkiOnce                   sync.Once
	stationID, acmeID, betaID *devpki.Identity
	pkiErr                    error
)

func identities(t testing.TB) {
	t.Helper()
	pkiOnce.Do(func() {
		if stationID, pkiErr = devpki.New("EDIHUB", devpki.Options{}); pkiErr != nil {
			return
		}
		if acmeID, pkiErr = devpki.New("ACME CORP", devpki.Options{}); pkiErr != nil {
			return
		}
		betaID, pkiErr = devpki.New("BETA", devpki.Options{})
	})
	if pkiErr != nil {
		t.Fatalf("devpki: %v", pkiErr)
	}
}

const stationYAML = `station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
`

// acmeYAML and betaYAML are partner entries of a partners list.
const (
	acmeYAML = `  - as2_id: "ACME CORP"
    url: https://as2.acme.example/as2
    certificate: acme.crt
    sign: sha-256
`
	betaYAML = `  - as2_id: BETA
    url: https://as2.beta.example/as2
    certificate: beta.crt
`
)

// stationDir is a directory holding the station's key and certificate
// (station.key, station.crt), the partners' certificates (acme.crt,
// beta.crt) and edihub.yaml: the station and the partners entries given
// (each an item of the partners list, or none). It returns the path of
// edihub.yaml.
func stationDir(t testing.TB, entries ...string) string {
	t.Helper()
	identities(t)
	dir := t.TempDir()
	if err := stationID.WriteFiles(filepath.Join(dir, "station.key"), filepath.Join(dir, "station.crt")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "acme.crt"), acmeID.CertPEM())
	writeFile(t, filepath.Join(dir, "beta.crt"), betaID.CertPEM())
	return writeConfig(t, dir, entries...)
}

// writeConfig (re)writes dir/edihub.yaml with the station and entries.
func writeConfig(t testing.TB, dir string, entries ...string) string {
	t.Helper()
	text := stationYAML
	if len(entries) > 0 {
		text += "partners:\n"
		for _, e := range entries {
			text += e
		}
	}
	path := filepath.Join(dir, "edihub.yaml")
	writeFile(t, path, []byte(text))
	return path
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadBase loads the configuration file at path; its directory is the
// secrets directory too.
func loadBase(t testing.TB, path string) *config.File {
	t.Helper()
	f, err := config.Load(path, config.Options{SecretsDir: filepath.Dir(path)})
	if err != nil {
		t.Fatalf("config.Load(%s): %v", path, err)
	}
	return f
}

// testLogger logs to t and records the entries for assertions.
func testLogger(t testing.TB) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

// history is every recorded partner change, newest first.
func history(t testing.TB, st *postgres.Store, as2ID string) []postgres.PartnerHistoryEntry {
	t.Helper()
	h, err := st.PartnerHistory(context.Background(), as2ID, 1000)
	if err != nil {
		t.Fatalf("PartnerHistory(%q): %v", as2ID, err)
	}
	return h
}

// waitFor polls cond every few milliseconds for up to limit and returns
// how long it took to hold; it fails the test when it never did.
func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inline writes a partner entry's acme.crt or beta.crt as PEM text: what
// Service.Put (the API) takes.
func inline(entry string) []byte {
	for name, id := range map[string]interface{ CertPEM() []byte }{"acme.crt": acmeID, "beta.crt": betaID} {
		block := "|\n  " + strings.ReplaceAll(strings.TrimRight(string(id.CertPEM()), "\n"), "\n", "\n  ")
		entry = strings.ReplaceAll(entry, "certificate: "+name, "certificate: "+block)
	}
	return []byte(entry)
}
