// Package scripts tests the shell scripts of scripts/ that make test and
// make run rely on.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDepsPicksTheDistributionsPostgreSQL runs scripts/deps.sh's package
// choice against a fake apt-cache answering as Debian 12 and 13 do: the
// server package is the one the postgresql metapackage depends on, whatever
// its major version.
func TestDepsPicksTheDistributionsPostgreSQL(t *testing.T) {
	tests := []struct {
		name string
		give string // what apt-cache depends postgresql prints
		want string
	}{
		{"Debian 12", "postgresql\n  Depends: postgresql-15\n", "postgresql-15"},
		{"Debian 13", "postgresql\n  Depends: postgresql-17\n  Depends: postgresql-common\n", "postgresql-17"},
		{"unknown to apt", "", "postgresql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			fake := "#!/bin/sh\n[ \"$1 $2\" = \"depends postgresql\" ] || exit 100\nprintf '%s' '" + tt.give + "'\n"
			if err := os.WriteFile(filepath.Join(bin, "apt-cache"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), "bash", "../../scripts/deps.sh", "--postgres-package")
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("deps.sh --postgres-package: %v", err)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("deps.sh --postgres-package = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDepsOnThisMachine: the real apt-cache names a versioned server
// package, the one whose binaries internal/pgserver finds.
func TestDepsOnThisMachine(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "bash", "../../scripts/deps.sh", "--postgres-package").Output()
	if err != nil {
		t.Fatalf("deps.sh --postgres-package: %v", err)
	}
	pkg := strings.TrimSpace(string(out))
	major, ok := strings.CutPrefix(pkg, "postgresql-")
	if !ok {
		t.Fatalf("deps.sh --postgres-package = %q, want postgresql-<major> (run apt-get update?)", pkg)
	}
	if _, err := os.Stat(filepath.Join("/usr/lib/postgresql", major, "bin", "postgres")); err != nil {
		t.Errorf("deps.sh names %s, but its server is not installed: %v", pkg, err)
	}
}
