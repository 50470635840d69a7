// Command testsummary reads "go test -json" on standard input and prints a
// compact report: one line per package as it finishes, the full output of
// every failing test, and a closing line "N passed, N failed, N skipped".
// It exits non-zero when a test or package failed, or when any test was
// skipped: edihub's test command provisions everything its tests need, so a
// skip means something is missing.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type key struct{ pkg, test string }

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout))
}

func summarize(in io.Reader, out io.Writer) int {
	var (
		output                  = map[key]*strings.Builder{}
		passed, failed, skipped []key
		pkgFailed               []string
		pkgs                    int
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(out, string(line)) // not JSON: a build error or vet output
			continue
		}
		if e.Action == "build-output" {
			fmt.Fprint(out, e.Output)
			continue
		}
		if e.Action == "build-fail" {
			pkgFailed = append(pkgFailed, e.ImportPath+" (build failed)")
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			b := output[k]
			if b == nil {
				b = &strings.Builder{}
				output[k] = b
			}
			b.WriteString(e.Output)
		case "pass":
			if e.Test == "" {
				pkgs++
				fmt.Fprintf(out, "ok    %s (%.1fs)\n", e.Package, e.Elapsed)
			} else {
				passed = append(passed, k)
			}
			delete(output, k)
		case "skip":
			if e.Test == "" {
				// A package without test files: nothing ran, nothing to report.
				delete(output, k)
				continue
			}
			skipped = append(skipped, k)
		case "fail":
			if e.Test == "" {
				pkgs++
				fmt.Fprintf(out, "FAIL  %s (%.1fs)\n", e.Package, e.Elapsed)
				pkgFailed = append(pkgFailed, e.Package)
				if b := output[k]; b != nil {
					fmt.Fprint(out, indent(b.String()))
				}
			} else {
				failed = append(failed, k)
				if b := output[k]; b != nil {
					fmt.Fprintf(out, "--- FAIL: %s.%s\n%s", e.Package, e.Test, indent(b.String()))
				}
			}
			delete(output, k)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading go test output:", err)
		return 1
	}
	fmt.Fprintln(out)
	if len(skipped) > 0 {
		fmt.Fprintln(out, "Skipped tests (the test command must provision what they need):")
		for _, k := range sorted(skipped) {
			var text string
			if b := output[k]; b != nil {
				text = b.String()
			}
			fmt.Fprintf(out, "  %s.%s\n%s", k.pkg, k.test, indent(text))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(out, "Failed tests:")
		for _, k := range sorted(failed) {
			fmt.Fprintf(out, "  %s.%s\n", k.pkg, k.test)
		}
	}
	if len(pkgFailed) > 0 {
		fmt.Fprintln(out, "Failed packages:")
		for _, p := range pkgFailed {
			fmt.Fprintf(out, "  %s\n", p)
		}
	}
	fmt.Fprintf(out, "%d packages tested\n", pkgs)
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", len(passed), len(failed), len(skipped))
	if len(failed) > 0 || len(pkgFailed) > 0 || len(skipped) > 0 || len(passed) == 0 {
		return 1
	}
	return 0
}

func sorted(ks []key) []key {
	out := append([]key(nil), ks...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].pkg != out[j].pkg {
			return out[i].pkg < out[j].pkg
		}
		return out[i].test < out[j].test
	})
	return out
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString("      " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
