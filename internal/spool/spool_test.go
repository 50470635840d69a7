package spool_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/spool"
)

func TestSpoolBoundsAndCleansUp(t *testing.T) {
	parent := t.TempDir()
	s, err := spool.New(parent, 100)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(bytes.Repeat([]byte("a"), 60)); err != nil {
		t.Fatal(err)
	}
	b, _ := s.Create()
	if n, err := b.Write(bytes.Repeat([]byte("b"), 41)); !errors.Is(err, spool.ErrFull) || n != 0 {
		t.Fatalf("write past the limit = %d, %v; want 0, ErrFull", n, err)
	}
	if _, err := b.Write(bytes.Repeat([]byte("b"), 40)); err != nil {
		t.Fatalf("write up to the limit: %v", err)
	}
	if s.Used() != 100 || s.Fits(1) {
		t.Fatalf("Used = %d, Fits(1) = %v; want 100, false", s.Used(), s.Fits(1))
	}
	got, _ := io.ReadAll(a.Reader())
	if string(got) != string(bytes.Repeat([]byte("a"), 60)) {
		t.Fatalf("Reader = %q", got)
	}
	a.Close()
	a.Close()
	if s.Used() != 40 {
		t.Fatalf("Used after Close = %d, want 40", s.Used())
	}
	if left, _ := filepath.Glob(filepath.Join(s.Dir(), "f-*")); len(left) != 1 {
		t.Fatalf("files after one Close: %v", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Fatalf("spool directory after Close: %v", err)
	}
}

// TestAbandonedDirectoriesRemoved: a directory whose process is gone
// (no lock held) is removed by the next New; a live one is kept.
func TestAbandonedDirectoriesRemoved(t *testing.T) {
	parent := t.TempDir()
	live, err := spool.New(parent, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead := filepath.Join(parent, "edihub-spool-dead")
	os.MkdirAll(dead, 0o700)
	os.WriteFile(filepath.Join(dead, ".lock"), nil, 0o600)
	os.WriteFile(filepath.Join(dead, "f-1"), []byte("left behind"), 0o600)
	s, err := spool.New(parent, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("abandoned directory still there: %v", err)
	}
	if _, err := os.Stat(live.Dir()); err != nil {
		t.Errorf("live directory removed: %v", err)
	}
}
