package pgserver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNewestBinDir(t *testing.T) {
	tests := []struct {
		name string
		give []string // <major>/bin directories with initdb and postgres
		only []string // <major>/bin directories with initdb alone
		want string   // major, "" for ErrNoBinaries
	}{
		{name: "Debian 12", give: []string{"15"}, want: "15"},
		{name: "Debian 13", give: []string{"17"}, want: "17"},
		{name: "several majors", give: []string{"9.6", "13", "17", "15"}, want: "17"},
		{name: "two-digit after one-digit", give: []string{"9.6", "10"}, want: "10"},
		{name: "newest incomplete", give: []string{"15"}, only: []string{"17"}, want: "15"},
		{name: "not a version", give: []string{"15", "contrib"}, want: "15"},
		{name: "none", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := t.TempDir()
			mk := func(major string, files ...string) {
				dir := filepath.Join(lib, major, "bin")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, f := range files {
					if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, m := range tt.give {
				mk(m, "initdb", "postgres")
			}
			for _, m := range tt.only {
				mk(m, "initdb")
			}
			got, err := newestBinDir(lib)
			want := ""
			if tt.want != "" {
				want = filepath.Join(lib, tt.want, "bin")
			}
			if got != want || (want == "") != (err != nil) {
				t.Errorf("newestBinDir(%v) = %q, %v; want %q", tt.give, got, err, want)
			}
		})
	}
}

// TestFindBinDirOnThisMachine finds the server binaries the machine has
// (scripts/deps.sh installs the distribution's), whatever their major.
func TestFindBinDirOnThisMachine(t *testing.T) {
	dir, err := FindBinDir()
	if err != nil {
		t.Fatalf("FindBinDir: %v (run scripts/deps.sh)", err)
	}
	for _, f := range []string{"initdb", "postgres"} {
		if !isFile(filepath.Join(dir, f)) {
			t.Errorf("FindBinDir() = %s, which has no %s", dir, f)
		}
	}
	t.Logf("PostgreSQL server binaries in %s", dir)
}
