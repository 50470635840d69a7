package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/freeport"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// imageUID is the image's user (ociimage.User).
const imageUID = 65532

// TestImageBoringServes builds the image the way "make image BORING=1"
// does (the build command is taken from the Makefile, so the two cannot
// drift), unpacks it into a directory and runs the binary it carries there
// as the image's user, chrooted into the image's files alone when the test
// runs as root: a static BoringCrypto edihub that needs no C library from
// the host. It reports the BoringCrypto experiment, serves a real
// PostgreSQL, and receives a signed and encrypted AS2 message with a
// signed MDN back: the RSA, AES and SHA-2 of that path are BoringSSL's.
func TestImageBoringServes(t *testing.T) {
	const version = "v9.8.7-boring"
	bin := buildFromMakefile(t, version)
	root := unpackImage(t, bin, version)

	out, err := imageCommand(t.Context(), root, nil, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("edihub version in the image: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "X:boringcrypto") || !strings.HasPrefix(string(out), "edihub "+version+" ") {
		t.Fatalf("edihub version = %q, want %s built with X:boringcrypto", out, version)
	}

	station, err := devpki.New("boring-station", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	partner, err := devpki.New("boring-partner", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc", "edihub")
	mkdirOwned(t, conf)
	if err := station.WriteFiles(filepath.Join(conf, "station.key"), filepath.Join(conf, "station.crt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "partner.crt"), partner.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "edihub.yaml"), []byte(boringConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	chownAll(t, conf)
	for _, d := range []string{"tmp", "var/spool/edihub"} { // the deployment's emptyDirs
		mkdirOwned(t, filepath.Join(root, d))
	}

	httpAddr, opsAddr := addr(t), addr(t)
	serve := imageCommand(context.Background(), root, []string{
		"EDIHUB_DATABASE_URL=" + pgtest.URL(t), "EDIHUB_CONFIG=/etc/edihub/edihub.yaml",
		"EDIHUB_LEADER_BACKEND=postgres", "EDIHUB_IDENTITY=boring-1", "EDIHUB_SPOOL_DIR=/var/spool/edihub",
		"EDIHUB_HTTP_ADDR=" + httpAddr, "EDIHUB_OPS_ADDR=" + opsAddr,
	}, "serve")
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		if t.Failed() {
			t.Logf("edihub serve:\n%s", logs.String())
		}
	})
	waitReady(t, "http://"+opsAddr+"/readyz")

	m := postSigned(t, "http://"+httpAddr+"/as2", partner, station)
	if !m.Disposition.Successful() || !m.Signed || m.Signer == nil || !m.Signer.Equal(station.Cert) {
		t.Fatalf("MDN: disposition %q, signed %v by %v; want processed, signed by the station", m.Disposition, m.Signed, m.Signer)
	}
}

// boringConfig is the station and its partner, in the image's /etc/edihub.
const boringConfig = `station: {as2_id: "IMAGE", private_key: station.key, certificate: station.crt}
partners:
  - as2_id: "IMAGE PARTNER"
    url: http://127.0.0.1:1/as2
    certificate: partner.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: sync
    mdn_signed: true
`

// buildFromMakefile runs the go build command "make image BORING=1" runs,
// writing the binary into the test's directory instead of bin/.
func buildFromMakefile(t *testing.T, version string) string {
	t.Helper()
	dry, err := exec.CommandContext(t.Context(), "make", "-C", "../..", "-n", "-s", "image", "BORING=1", "VERSION="+version, "REVISION=test").Output()
	if err != nil {
		t.Fatalf("make -n image BORING=1: %v", err)
	}
	line, _, _ := strings.Cut(string(dry), "\n")
	const target = "-o bin/edihub-static ./cmd/edihub"
	if !strings.Contains(line, "go build") || !strings.HasSuffix(line, target) {
		t.Fatalf("make image BORING=1 builds with %q; the test wants a go build ending in %q", line, target)
	}
	out := filepath.Join(t.TempDir(), "edihub-static")
	cmd := exec.CommandContext(t.Context(), "sh", "-c", strings.TrimSuffix(line, target)+"-o "+out+" ./cmd/edihub")
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	return out
}

// unpackImage builds the image of bin and writes its files into a fresh
// directory, as a container runtime would.
func unpackImage(t *testing.T, bin, version string) string {
	t.Helper()
	dir := t.TempDir()
	if err := run(t.Context(), []string{"-binary", bin, "-version", version, "-out", filepath.Join(dir, "layout")}, func(string) string { return "" }, io.Discard); err != nil {
		t.Fatalf("build the image: %v", err)
	}
	img := layoutImage(t, filepath.Join(dir, "layout"), version)
	root := filepath.Join(dir, "root")
	// The root must be reachable by the image's user (t.TempDir's parents
	// may be private to root).
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		writeEntry(t, root, h, tr)
	}
	return root
}

func writeEntry(t *testing.T, root string, h *tar.Header, r io.Reader) {
	t.Helper()
	name := filepath.Join(root, filepath.Clean("/"+h.Name))
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(name, h.FileInfo().Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, h.FileInfo().Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("image entry %s: unexpected type %c", h.Name, h.Typeflag)
	}
}

// imageCommand runs the image's binary with args as the image's user,
// inside root. Chrooting needs root; otherwise the binary runs from the
// unpacked directory with the host's files around it.
func imageCommand(ctx context.Context, root string, env []string, args ...string) *exec.Cmd {
	binary := "/usr/local/bin/edihub"
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}, env...)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}, Pdeathsig: syscall.SIGKILL}
		cmd.Dir = "/"
		return cmd
	}
	cmd.Path = filepath.Join(root, binary)
	cmd.Dir = root
	return cmd
}

func addr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mkdirOwned(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chownAll(t, dir)
}

// chownAll gives dir and what it holds to the image's user, when the test
// may (as root).
func chownAll(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, imageUID, imageUID)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered 200: %v", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// postSigned posts an EDI document signed by partner and encrypted to
// station, asking for a signed sync MDN, and returns the MDN verified
// with the station's certificate.
func postSigned(t *testing.T, url string, partner, station *devpki.Identity) *mdn.MDN {
	t.Helper()
	w, err := as2.Wrap([]byte("ISA*00*          *00*          *ZZ*IMAGE PARTNER  *ZZ*IMAGE          *261202*1200*U*00401*000000001*0*P*>~"), "application/EDI-X12", "po.x12",
		as2.WrapOptions{Sign: crypto.SHA256, SignerKey: partner.Key, SignerCert: partner.Cert, Encrypt: cms.AES256CBC, RecipientCert: station.Cert})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(w.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = w.Header.Clone()
	req.Header.Set("AS2-Version", "1.2")
	req.Header.Set("AS2-From", `"IMAGE PARTNER"`)
	req.Header.Set("AS2-To", "IMAGE")
	req.Header.Set("Message-ID", fmt.Sprintf("<boring-%d@image.test>", time.Now().UnixNano()))
	req.Header.Set("Disposition-Notification-To", "ops@image.test")
	req.Header.Set("Disposition-Notification-Options", mdn.RequestOptions(crypto.SHA256))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /as2: %d, %v: %s", resp.StatusCode, err, body)
	}
	m, err := mdn.Parse(resp.Header, body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{station.Cert}, RequireSigned: true})
	if err != nil {
		t.Fatalf("MDN: %v", err)
	}
	return m
}
