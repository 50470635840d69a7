// Command edihub-image builds edihub's OCI image from a static binary,
// without a container runtime (make image): see internal/ociimage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/edihub/edihub/internal/ociimage"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "edihub-image:", err)
		os.Exit(1)
	}
}

func run(_ context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("edihub-image", flag.ContinueOnError)
	var (
		o       ociimage.Options
		out     string
		tarPath string
	)
	fs.StringVar(&o.Binary, "binary", "", "statically linked edihub binary (CGO_ENABLED=0)")
	fs.StringVar(&o.CACertificates, "ca", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to include")
	fs.StringVar(&o.Version, "version", "", "release version: the image's label and tag")
	fs.StringVar(&o.Source, "source", "https://github.com/edihub/edihub", "source repository URL (label)")
	fs.StringVar(&o.Revision, "revision", "", "VCS revision built (label)")
	fs.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH of the binary")
	fs.StringVar(&out, "out", "", "directory to write the OCI image layout to (replaced)")
	fs.StringVar(&tarPath, "tar", "", "also write a tarball that docker load reads")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Binary == "" || o.Version == "" || out == "" {
		return errors.New("-binary, -version and -out are required")
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org) sets the creation time;
	// without it the image is dated at the epoch, so the same binary gives
	// the same digest.
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: want Unix seconds: %w", s, err)
		}
		o.Created = time.Unix(sec, 0)
	}
	img, err := ociimage.Build(o)
	if err != nil {
		return err
	}
	ref := "edihub:" + o.Version
	if err := ociimage.WriteLayout(out, img, o.Version); err != nil {
		return err
	}
	if tarPath != "" {
		if err := ociimage.WriteTarball(tarPath, img, ref); err != nil {
			return err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s: OCI layout in %s", ref, digest, out)
	if tarPath != "" {
		fmt.Fprintf(stdout, ", docker load -i %s", tarPath)
	}
	fmt.Fprintln(stdout)
	return nil
}
