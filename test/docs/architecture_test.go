package docs

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/edihub/edihub/"

// root is the repository root, two levels above this package.
var root = filepath.Join("..", "..")

// TestArchitectureListsEveryPackage keeps docs/architecture.md's Packages
// table equal to the module: every package has a row, every row is a
// package, and each row's "depends on" column names exactly the module's
// packages that package imports (tests aside).
func TestArchitectureListsEveryPackage(t *testing.T) {
	rows := packageRows(t, filepath.Join(root, "docs", "architecture.md"))
	pkgs := modulePackages(t)

	for _, dir := range sortedKeys(pkgs) {
		if _, ok := rows[dir]; !ok {
			t.Errorf("docs/architecture.md has no row for package %s; add one (what it provides, what it depends on)", dir)
		}
	}
	for _, dir := range sortedKeys(rows) {
		imports, ok := pkgs[dir]
		if !ok {
			t.Errorf("docs/architecture.md lists %s, which is not a package of the module", dir)
			continue
		}
		if got := rows[dir]; !slices.Equal(got, imports) {
			t.Errorf("docs/architecture.md: %s depends on %v, want %v (the module's packages it imports)", dir, got, imports)
		}
	}
}

// packageRows reads the Packages table: package path → the module's
// packages its "depends on" column names, sorted.
func packageRows(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Packages\n")
	if !ok {
		t.Fatalf("%s has no '## Packages' section", path)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	rows := make(map[string][]string)
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var deps []string
		for _, m := range code.FindAllStringSubmatch(cells[3], -1) {
			dep := m[1]
			if !strings.HasPrefix(dep, "test/") && !strings.HasPrefix(dep, "cmd/") {
				dep = "internal/" + dep
			}
			deps = append(deps, dep)
		}
		slices.Sort(deps)
		if _, dup := rows[pkg]; dup {
			t.Errorf("%s lists %s twice", path, pkg)
		}
		rows[pkg] = slices.Compact(deps)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no rows found in the Packages table", path)
	}
	return rows
}

// modulePackages finds every package of the module below cmd/, internal/
// and test/ (a folder with a go.mod of its own is another module) and the
// module's packages each imports in its non-test files.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := make(map[string][]string)
	for _, top := range []string{"cmd", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			p, err := build.ImportDir(path, 0)
			if err != nil {
				var none *build.NoGoError
				if errors.As(err, &none) {
					return nil
				}
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			var deps []string
			for _, imp := range p.Imports {
				if dep, ok := strings.CutPrefix(imp, module); ok {
					deps = append(deps, dep)
				}
			}
			slices.Sort(deps)
			pkgs[filepath.ToSlash(rel)] = deps
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pkgs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
