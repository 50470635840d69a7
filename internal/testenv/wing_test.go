package testenv_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTestsImportTheWing: no package of the product (the module but
// internal/testenv/... and test/...) imports the wing outside its tests.
func TestOnlyTestsImportTheWing(t *testing.T) {
	const module = "github.com/edihub/edihub"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	wing := module + "/internal/testenv"
	products := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, wing) || strings.HasPrefix(pkg, module+"/test/") {
			continue
		}
		products++
		for _, imp := range strings.Fields(imports) {
			if imp == wing || strings.HasPrefix(imp, wing+"/") {
				t.Errorf("product package %s imports %s; the test wing is for tests and test/ only", pkg, imp)
			}
		}
	}
	if products < 10 {
		t.Fatalf("go list found %d product packages, want the module's (cmd/edihub, internal/...): the check looked at nothing", products)
	}
}
