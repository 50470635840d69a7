package style

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, two levels above this package.
var root = filepath.Join("..", "..")

// TestErrorfWrapForm: every fmt.Errorf of the module's code (tests
// aside) that wraps puts each %w where the style guide says: last, after
// the context ("claim outbox: %w"), or first, a sentinel that classifies
// the error with its detail after it ("%w: %s"), or both at once ("%w:
// content key: %w", the sentinel and the cause). A %w in the middle, or
// more than two, reads as neither form.
func TestErrorfWrapForm(t *testing.T) {
	fset := token.NewFileSet()
	calls := 0
	for _, path := range goFiles(t) {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		fmtName := importName(f, "fmt")
		if fmtName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isCall(call, fmtName, "Errorf") || len(call.Args) == 0 {
				return true
			}
			format, ok := stringConst(call.Args[0])
			if !ok {
				return true
			}
			calls++
			if why := wrapFormProblem(format); why != "" {
				t.Errorf("%s: fmt.Errorf(%q): %s", fset.Position(call.Pos()), format, why)
			}
			return true
		})
	}
	if calls < 100 {
		t.Fatalf("found %d fmt.Errorf calls with a constant format, want hundreds: is the walk reading the module?", calls)
	}
}

// TestWrapFormProblem holds wrapFormProblem to the forms the style guide
// names.
func TestWrapFormProblem(t *testing.T) {
	tests := []struct {
		give string
		want bool // a problem
	}{
		{"no wrap at %d", false},
		{"claim outbox: %w", false},
		{"%w: %s", false},
		{"%w", false},
		{"%w: content key: %w", false},
		{"100%% done: %w", false},
		{"read %s: %w: retry", true},
		{"%w (%s)", false},
		{"lease %q: %w after %v", true},
		{"%w: %w: %w", false},
		{"%w: %w: more than %d bytes", false},
		{"%w: the write returned %q (%w); %w. more", true},
		{"context: %w (set X)", true},
		{"%w: %s: %w", false},
		{"%w: %s: %w: %s", true},
		{"x: %w\n%s", true},
	}
	for _, tt := range tests {
		if got := wrapFormProblem(tt.give); (got != "") != tt.want {
			t.Errorf("wrapFormProblem(%q) = %q, want a problem: %v", tt.give, got, tt.want)
		}
	}
}

// wrapFormProblem says what is wrong with where format's %w verbs stand,
// or "" when nothing is. Sentinels lead, each followed by ": " (an error
// may be classified twice, "%w: %w: detail", the second a narrower
// class); a cause is the last verb, at the very end.
func wrapFormProblem(format string) string {
	rest := format
	for strings.HasPrefix(rest, "%w: ") {
		rest = rest[len("%w: "):]
	}
	verbs := wrapVerbs(rest)
	switch {
	case len(verbs) == 0:
		return ""
	case rest == "%w" && len(rest) < len(format):
		return "" // "%w: %w"
	case len(verbs) > 1:
		return `more than one cause: wrap sentinels first ("%w: detail") and one cause last ("context: %w"), and say the rest in words`
	case verbs[0] == 0 && len(rest) == len(format):
		return "" // one sentinel, detail after it without ": " ("%w (detail)")
	case verbs[0] != len(rest)-2:
		return `a %w in the middle: wrap a cause last ("context: %w") or a classifying sentinel first ("%w: detail")`
	}
	return ""
}

// wrapVerbs returns the byte offsets of format's %w verbs (%% skipped;
// flags and widths are not used with %w here).
func wrapVerbs(format string) []int {
	var at []int
	for i := 0; i < len(format)-1; i++ {
		if format[i] != '%' {
			continue
		}
		if format[i+1] == 'w' {
			at = append(at, i)
		}
		i++ // the verb, or the second % of %%
	}
	return at
}

// goFiles lists the module's non-test Go files, testdata and hidden
// folders aside.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// importName is the name f refers to the package path by, "" when f does
// not import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

func isCall(call *ast.CallExpr, pkg, fn string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != fn {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// stringConst is e's value when e is a string literal or a sum of them.
func stringConst(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok := stringConst(e.X)
		if !ok {
			return "", false
		}
		y, ok := stringConst(e.Y)
		return x + y, ok
	case *ast.ParenExpr:
		return stringConst(e.X)
	}
	return "", false
}
