package browser

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindFailsWithTheInstallCommand: without Chromium, the error a test
// fails with says what to install.
func TestFindFailsWithTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := find(filepath.Join(t.TempDir(), "chromium"))
	if !errors.Is(err, ErrNoChromium) {
		t.Fatalf("find(a missing path) = %v, want ErrNoChromium", err)
	}
	if !strings.Contains(err.Error(), "apt-get install chromium") {
		t.Errorf("find error = %q, want the install command in it", err)
	}
}

func TestFindLooksOnPath(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got, err := find(filepath.Join(t.TempDir(), "chromium"))
	if err != nil || got != fake {
		t.Errorf("find(a missing path) with chromium on PATH = %q, %v; want %q", got, err, fake)
	}
}
