// Package openssltest runs the openssl command line tool as the independent
// peer in AS2 and CMS tests: it makes throwaway keys once per test binary
// and builds or checks messages with `openssl cms`.
//
// A missing openssl fails the test; it never skips.
package openssltest

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
)

// Identity is a throwaway key pair made by openssl.
type Identity struct {
	Name     string
	KeyPath  string // PEM PKCS#8 private key
	CertPath string // PEM self-signed certificate
	Key      crypto.Signer
	Cert     *x509.Certificate
}

// Identities made once per test binary: A signs (the partner), B decrypts
// (the station), C is an unrelated third party.
type Identities struct {
	Dir     string
	A, B, C *Identity
}

var (
	once    sync.Once
	ids     *Identities
	onceErr error
)

// Keys returns the shared identities, creating them on first use.
func Keys(t testing.TB) *Identities {
	t.Helper()
	Require(t)
	once.Do(func() {
		dir, err := os.MkdirTemp("", "as2-openssl-")
		if err != nil {
			onceErr = err
			return
		}
		ids = &Identities{Dir: dir}
		for _, p := range []struct {
			dst  **Identity
			name string
		}{{&ids.A, "as2-a"}, {&ids.B, "as2-b"}, {&ids.C, "as2-c"}} {
			id, err := newIdentity(dir, p.name)
			if err != nil {
				onceErr = err
				return
			}
			*p.dst = id
		}
	})
	if onceErr != nil {
		t.Fatalf("openssl identities: %v", onceErr)
	}
	return ids
}

// Cleanup removes the shared key directory; call it from TestMain.
func Cleanup() {
	if ids != nil {
		os.RemoveAll(ids.Dir)
	}
}

func newIdentity(dir, name string) (*Identity, error) {
	id := &Identity{
		Name:     name,
		KeyPath:  filepath.Join(dir, name+".key"),
		CertPath: filepath.Join(dir, name+".crt"),
	}
	cmd := exec.Command("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
		"-keyout", id.KeyPath, "-out", id.CertPath, "-days", "365", "-subj", "/CN="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("openssl req: %v: %s", err, out)
	}
	keyPEM, err := os.ReadFile(id.KeyPath)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM key", id.KeyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	id.Key = k.(crypto.Signer)
	certPEM, err := os.ReadFile(id.CertPath)
	if err != nil {
		return nil, err
	}
	blk, _ = pem.Decode(certPEM)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", id.CertPath)
	}
	if id.Cert, err = x509.ParseCertificate(blk.Bytes); err != nil {
		return nil, err
	}
	return id, nil
}

// Require fails the test when openssl is not on PATH.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl is required on PATH for the AS2 interop tests (install OpenSSL 3): %v", err)
	}
}

// Run runs openssl with args and stdin, failing the test on a non-zero
// exit, and returns stdout.
func Run(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	Require(t)
	out, err := TryRun(stdin, args...)
	if err != nil {
		t.Fatalf("openssl %v: %v", args, err)
	}
	return out
}

// TryRun runs openssl and returns stdout, or an error holding stderr.
func TryRun(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("openssl", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// WriteFile writes b into dir/name and returns the path.
func WriteFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ReadFile reads a file or fails the test.
func ReadFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// InnerMIME is the payload entity AS2 test messages carry: an EDI document
// with a quoted filename, in transfer encoding cte (binary or base64).
func InnerMIME(cte, payload string) []byte {
	body := payload
	if cte == "base64" {
		body = base64.StdEncoding.EncodeToString([]byte(payload)) + "\r\n"
	}
	return []byte("Content-Type: application/EDI-X12\r\nContent-Transfer-Encoding: " + cte +
		"\r\nContent-Disposition: attachment; filename=\"order 1.edi\"\r\n\r\n" + body)
}

// CompressedEntity wraps ent in CMS CompressedData (this openssl has no
// zlib, so edihub's own cms.Compress builds it) as an application/pkcs7-mime
// entity in transfer encoding cte.
func CompressedEntity(t testing.TB, ent []byte, cte string) []byte {
	t.Helper()
	der, err := cms.Compress(ent)
	if err != nil {
		t.Fatal(err)
	}
	return smimeEntity("compressed-data", "smime.p7z", der, cte)
}

// smimeEntity is an application/pkcs7-mime entity of smime-type
// smimeType holding der in the transfer encoding cte ("binary" or
// "base64").
func smimeEntity(smimeType, name string, der []byte, cte string) []byte {
	body := der
	if cte == "base64" {
		body = []byte(base64.StdEncoding.EncodeToString(der) + "\r\n")
	}
	return append([]byte("Content-Type: application/pkcs7-mime; smime-type="+smimeType+"; name="+name+"\r\n"+
		"Content-Transfer-Encoding: "+cte+"\r\n\r\n"), body...)
}
