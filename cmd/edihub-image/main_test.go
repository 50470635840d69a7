package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/edihub/edihub/internal/ociimage"
)

// buildEdihub builds cmd/edihub the way make image does: static, with the
// version linked in.
func buildEdihub(t *testing.T, version string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	out := filepath.Join(t.TempDir(), "edihub")
	cmd := exec.CommandContext(t.Context(), gobin, "build", "-trimpath", "-ldflags", "-s -w -X main.buildVersion="+version, "-o", out, "../edihub")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestImage builds the image of the real edihub binary, reads it back from
// the OCI layout and the docker tarball, checks its config, and runs the
// binary it carries.
func TestImage(t *testing.T) {
	const version = "v9.8.7-test"
	bin := buildEdihub(t, version)
	dir := t.TempDir()
	out, tarPath := filepath.Join(dir, "layout"), filepath.Join(dir, "edihub.tar")
	var stdout bytes.Buffer
	getenv := func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return "1767225600" // 2026-01-01
		}
		return ""
	}
	err := run(t.Context(), []string{"-binary", bin, "-version", version, "-revision", "abc123", "-out", out, "-tar", tarPath}, getenv, &stdout)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Log(strings.TrimSpace(stdout.String()))

	img := layoutImage(t, out, version)
	fromTar, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatalf("read docker tarball: %v", err)
	}
	for name, img := range map[string]v1.Image{"layout": img, "tarball": fromTar} {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		want := v1.Config{
			User:         "65532:65532",
			Entrypoint:   []string{"/usr/local/bin/edihub"},
			Cmd:          []string{"serve"},
			WorkingDir:   "/",
			Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9090/tcp": {}},
			Labels: map[string]string{
				"org.opencontainers.image.title":    "edihub",
				"org.opencontainers.image.version":  version,
				"org.opencontainers.image.source":   "https://github.com/edihub/edihub",
				"org.opencontainers.image.revision": "abc123",
				"org.opencontainers.image.created":  "2026-01-01T00:00:00Z",
			},
		}
		if diff := cmp.Diff(want, cf.Config); diff != "" {
			t.Errorf("%s: config (-want +got):\n%s", name, diff)
		}
		if cf.OS != "linux" || cf.Architecture == "" {
			t.Errorf("%s: platform %s/%s, want linux/<arch>", name, cf.OS, cf.Architecture)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers = %d, %v; want one on an empty base", name, len(layers), err)
		}
	}

	// The files: the user exists, CA certificates are there, and the binary
	// the image carries runs and reports the version of the label.
	files := map[string][]byte{}
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(h.Name, "/")
		files[name], headers[name] = b, h
	}
	if !bytes.Contains(files["etc/passwd"], []byte("nonroot:x:65532:65532:")) {
		t.Errorf("etc/passwd = %q, want user nonroot 65532", files["etc/passwd"])
	}
	if !bytes.Contains(files["etc/ssl/certs/ca-certificates.crt"], []byte("BEGIN CERTIFICATE")) {
		t.Error("no CA certificates in the image")
	}
	if h := headers["usr/local/bin/edihub"]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Fatalf("usr/local/bin/edihub header = %+v, want an executable owned by root", h)
	}
	extracted := filepath.Join(dir, "edihub-from-image")
	if err := os.WriteFile(extracted, files["usr/local/bin/edihub"], 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := exec.CommandContext(t.Context(), extracted, "version").Output()
	if err != nil {
		t.Fatalf("edihub version from the image: %v", err)
	}
	if !strings.HasPrefix(string(got), "edihub "+version+" ") {
		t.Errorf("edihub version = %q, want edihub %s ...", got, version)
	}
	if !slices.Contains(ociimage.Ports, "8080/tcp") {
		t.Error("ociimage.Ports lost the AS2 port")
	}
}

func TestRunRefusesMissingFlags(t *testing.T) {
	err := run(t.Context(), []string{"-version", "v1"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-binary") {
		t.Errorf("run without -binary = %v, want an error naming -binary", err)
	}
}

// TestDockerfileMatchesImage keeps the Dockerfile equivalent to the image
// built here: same user, ports, entrypoint and command, an empty final base,
// and a build base pinned to a patch release (or a digest).
func TestDockerfileMatchesImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	directives := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "FROM":
			froms = append(froms, f[1])
		case "USER", "EXPOSE", "ENTRYPOINT", "CMD":
			directives[f[0]] = strings.Join(f[1:], " ")
		}
	}
	want := map[string]string{
		"USER":       ociimage.User,
		"EXPOSE":     "8080 9090",
		"ENTRYPOINT": `["` + ociimage.BinaryPath + `"]`,
		"CMD":        `["serve"]`,
	}
	if diff := cmp.Diff(want, directives); diff != "" {
		t.Errorf("Dockerfile directives (-want +got):\n%s", diff)
	}
	if len(froms) != 2 || froms[1] != "scratch" {
		t.Fatalf("Dockerfile bases = %v, want a build stage and scratch", froms)
	}
	pinned := regexp.MustCompile(`^[^:@]+(:\d+\.\d+\.\d+[^@]*|@sha256:[0-9a-f]{64})$`)
	if !pinned.MatchString(froms[0]) {
		t.Errorf("build base %s is pinned neither to a patch release nor by digest", froms[0])
	}
}

// layoutImage reads the one image of the OCI layout in dir, which must be
// named version.
func layoutImage(t *testing.T, dir, version string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("layout index = %+v, want one image named %s", im.Manifests, version)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
