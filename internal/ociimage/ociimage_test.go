package ociimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// staticBinary builds a tiny static Go program.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tiny")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func caBundle(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildRefuses(t *testing.T) {
	bin, ca := staticBinary(t), caBundle(t)
	// A dynamically linked executable of the machine: the shell.
	dynamic, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	dynamic, _ = filepath.EvalSymlinks(dynamic)
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give Options
		want string
	}{
		{"dynamic binary", Options{Binary: dynamic, CACertificates: ca, Version: "v1", Source: "s"}, "dynamically linked"},
		{"not ELF", Options{Binary: notELF, CACertificates: ca, Version: "v1", Source: "s"}, "not an ELF"},
		{"bad tag", Options{Binary: bin, CACertificates: ca, Version: "v1+meta", Source: "s"}, "not a valid image tag"},
		{"no CA", Options{Binary: bin, CACertificates: notELF, Version: "v1", Source: "s"}, "no PEM certificate"},
		{"no version", Options{Binary: bin, CACertificates: ca, Source: "s"}, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Build(tt.give); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build(%+v) = %v, want an error containing %q", tt.give, err, tt.want)
			}
		})
	}
}

// TestBuildReproducible: the same inputs give the same digest, a different
// version another one.
func TestBuildReproducible(t *testing.T) {
	o := Options{Binary: staticBinary(t), CACertificates: caBundle(t), Version: "v1", Source: "https://example.com/src"}
	digest := func(o Options) string {
		img, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b := digest(o), digest(o)
	o.Version = "v2"
	c := digest(o)
	if a != b || a == c {
		t.Errorf("digests v1, v1, v2 = %s, %s, %s; want equal, equal, different", a, b, c)
	}
}
