package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestLinksResolve checks every relative link of the README and docs/:
// the file it names exists and, where it names a heading (#anchor), the
// heading is there, by GitHub's rule for anchors.
func TestLinksResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel(file), target, rel(dest))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			if !anchors[dest][anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", rel(file), target, rel(dest), anchor)
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation but hyphens and underscores
// dropped, spaces as hyphens, repeats suffixed -1, -2, ...
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := map[string]bool{}
	for line := range strings.SplitSeq(stripCode(string(b)), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchor := a.String()
		if n := seen[anchor]; n > 0 {
			out[anchor+"-"+strconv.Itoa(n)] = true
		} else {
			out[anchor] = true
		}
		seen[anchor]++
	}
	return out
}

// stripCode blanks fenced code blocks, where neither links nor headings
// count.
func stripCode(s string) string {
	var b strings.Builder
	in := false
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			b.WriteString("\n")
			continue
		}
		if !in {
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}
