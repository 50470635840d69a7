package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var metricRef = regexp.MustCompile(`\bedihub_[a-z0-9_]+`)

// definedMetrics returns every string literal of the product's code (not
// tests) that looks like an edihub metric name, and the literal prefixes
// ("edihub_db_pool_") that names are built from.
func definedMetrics(t *testing.T) (names map[string]bool, prefixes map[string]map[string]bool) {
	t.Helper()
	names = map[string]bool{}
	prefixes = map[string]map[string]bool{}
	for _, root := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			var lits []string
			ast.Inspect(f, func(n ast.Node) bool {
				if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					if s, err := strconv.Unquote(bl.Value); err == nil {
						lits = append(lits, s)
					}
				}
				return true
			})
			for _, s := range lits {
				if !strings.HasPrefix(s, "edihub_") {
					continue
				}
				if strings.HasSuffix(s, "_") {
					set := map[string]bool{}
					for _, l := range lits {
						set[l] = true
					}
					prefixes[s] = set
					continue
				}
				names[s] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names, prefixes
}

func defined(name string, names map[string]bool, prefixes map[string]map[string]bool) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		base := strings.TrimSuffix(name, suffix)
		if suffix != "" && base == name {
			continue
		}
		if names[base] {
			return true
		}
		for p, lits := range prefixes {
			if strings.HasPrefix(base, p) && lits[strings.TrimPrefix(base, p)] {
				return true
			}
		}
	}
	return false
}

// TestDashboardsAndAlertsUseRealMetrics fails when the Grafana dashboard or
// an alert rule refers to a metric edihub does not export: a renamed metric
// must not leave a dashboard silently empty or an alert that never fires.
func TestDashboardsAndAlertsUseRealMetrics(t *testing.T) {
	names, prefixes := definedMetrics(t)
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the code; the scan is broken", len(names))
	}
	for _, file := range []string{"../../deploy/k8s/monitoring/grafana-dashboard.json", "../../deploy/k8s/monitoring/prometheusrule.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		refs := map[string]bool{}
		for _, m := range metricRef.FindAllString(string(b), -1) {
			refs[m] = true
		}
		if len(refs) == 0 {
			t.Errorf("%s refers to no edihub metric", file)
		}
		var missing []string
		for m := range refs {
			if !defined(m, names, prefixes) {
				missing = append(missing, m)
			}
		}
		sort.Strings(missing)
		for _, m := range missing {
			t.Errorf("%s uses %s, which edihub does not export", filepath.Base(file), m)
		}
	}
}
