// Package ociimage builds edihub's container image without a container
// runtime: one layer holding the static binary, the CA certificates and the
// passwd and group entries of an unprivileged user, on an empty base, so
// nothing is pulled from a registry. The result is written as an OCI image
// layout (for skopeo, crane, podman, containerd) and a tarball that
// `docker load` reads.
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths and identity inside the image.
const (
	BinaryPath = "/usr/local/bin/edihub"
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
	// UID and GID of the user the image runs as (distroless' nonroot).
	UID = 65532
	GID = 65532
	// User is the config's User: numeric, so that Kubernetes'
	// runAsNonRoot can verify it without reading /etc/passwd.
	User = "65532:65532"
)

// Ports the image exposes: AS2 and API, ops.
var Ports = []string{"8080/tcp", "9090/tcp"}

// Label keys of the OCI image spec (annotations.md) set on the config.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// Options describe the image to build.
type Options struct {
	// Binary is the path of a statically linked linux edihub binary.
	Binary string
	// CACertificates is the path of a PEM bundle of CA certificates
	// (Debian's /etc/ssl/certs/ca-certificates.crt).
	CACertificates string
	// Version is the release (label and tag); required.
	Version string
	// Source is the URL of the source repository; required.
	Source string
	// Revision is the VCS revision built; optional.
	Revision string
	// Created is the image's creation time; zero gives the Unix epoch, so
	// the same inputs give the same image digest.
	Created time.Time
	// Arch is the GOARCH of Binary; default amd64.
	Arch string
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Build returns the image. It refuses a binary that is not a statically
// linked ELF executable (the base has no C library or loader).
func Build(o Options) (v1.Image, error) {
	if o.Binary == "" || o.CACertificates == "" || o.Version == "" || o.Source == "" {
		return nil, errors.New("ociimage: Binary, CACertificates, Version and Source are required")
	}
	if !tagPattern.MatchString(o.Version) {
		return nil, fmt.Errorf("ociimage: version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128)", o.Version)
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	bin, ca, err := readInputs(o)
	if err != nil {
		return nil, err
	}
	created := o.Created.UTC()
	if o.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}

	files, err := rootfs(bin, ca, created)
	if err != nil {
		return nil, err
	}
	img, err := layerImage(files, created)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	cf = cf.DeepCopy()
	configure(cf, o, created)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	return img, nil
}

// readInputs reads the binary, once checked to be static, and the CA
// certificates.
func readInputs(o Options) (bin, ca []byte, err error) {
	if err = checkStatic(o.Binary); err != nil {
		return nil, nil, err
	}
	bin, err = os.ReadFile(o.Binary)
	if err != nil {
		return nil, nil, fmt.Errorf("ociimage: %w", err)
	}
	ca, err = os.ReadFile(o.CACertificates)
	if err != nil {
		return nil, nil, fmt.Errorf("ociimage: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, nil, fmt.Errorf("ociimage: %s holds no PEM certificate", o.CACertificates)
	}
	return bin, ca, nil
}

// layerImage returns an OCI image on the empty base whose one layer is
// the tar archive files.
func layerImage(files []byte, created time.Time) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "make image (edihub binary, CA certificates, nonroot user)",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: append layer: %w", err)
	}
	return img, nil
}

// configure sets how the image runs (platform, user, entrypoint,
// environment, ports) and its labels on cf.
func configure(cf *v1.ConfigFile, o Options, created time.Time) {
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Created = v1.Time{Time: created}
	cf.Config.User = User
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{
		"PATH=/usr/local/bin",
		"SSL_CERT_FILE=" + CAPath,
	}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = map[string]string{
		LabelTitle:   "edihub",
		LabelVersion: o.Version,
		LabelSource:  o.Source,
		LabelCreated: created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		cf.Config.Labels[LabelRevision] = o.Revision
	}
}

// checkStatic refuses anything but a statically linked ELF executable: one
// with an interpreter (PT_INTERP) or dynamic libraries would not start on
// an empty base.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("ociimage: %s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("ociimage: %s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("ociimage: %s needs %s; build it with CGO_ENABLED=0", path, strings.Join(libs, ", "))
	}
	return nil
}

// rootfs returns the layer's tar: directories, the binary, the CA bundle,
// passwd and group, all owned by root except the user's home, with
// created as every modification time.
func rootfs(bin, ca []byte, created time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID)
	entries := []struct {
		name     string
		mode     int64
		uid, gid int
		body     []byte
		dir      bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(CAPath, "/"), mode: 0o644, body: ca},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, body: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: created,
			Typeflag: tar.TypeReg, Size: int64(len(e.body)), Format: tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: tar %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("ociimage: tar %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: tar: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as an OCI image layout in dir (replacing what was
// there), its manifest annotated with the tag as
// org.opencontainers.image.ref.name, so `skopeo copy oci:dir:tag` and
// `podman load` find it.
func WriteLayout(dir string, img v1.Image, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img to path as a tarball `docker load` reads, tagged
// ref (for example edihub:v1.2.3).
func WriteTarball(path string, img v1.Image, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("ociimage: tag %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("ociimage: tarball %s: %w", path, err)
	}
	return nil
}
