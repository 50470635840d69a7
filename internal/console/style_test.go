package console_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cssRules maps each selector of the stylesheet to its declarations
// (property: value), later rules overriding earlier ones as in a browser
// for selectors of equal specificity.
func cssRules(t *testing.T, css string) map[string]map[string]string {
	t.Helper()
	css = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(css, "")
	rules := map[string]map[string]string{}
	for _, block := range strings.Split(css, "}") {
		sel, body, ok := strings.Cut(block, "{")
		if !ok || strings.Contains(body, "{") {
			continue // an at-rule's head; its rules are not needed here
		}
		for _, s := range strings.Split(sel, ",") {
			s = strings.Join(strings.Fields(s), " ")
			if rules[s] == nil {
				rules[s] = map[string]string{}
			}
			for _, decl := range strings.Split(body, ";") {
				if prop, val, ok := strings.Cut(decl, ":"); ok {
					rules[s][strings.TrimSpace(prop)] = strings.TrimSpace(val)
				}
			}
		}
	}
	return rules
}

// TestDangerLinksStyled: a link styled as a button for a destructive
// action (class "button danger": cancel a message, delete a partner) is
// red, not the blue of a primary button, and every template's danger link
// is covered by the rule.
func TestDangerLinksStyled(t *testing.T) {
	css, err := os.ReadFile(filepath.Join("static", "console.css"))
	if err != nil {
		t.Fatal(err)
	}
	rules := cssRules(t, string(css))
	const red = "#a61b12"
	got := rules[".button.danger"]
	if got["color"] != red || !strings.Contains(got["border-color"], red) {
		t.Errorf(".button.danger = %v, want color and border-color %s", got, red)
	}
	if primary := rules[".button"]["background"]; got["background"] == "" || got["background"] == primary {
		t.Errorf(".button.danger background = %q, want one of its own (.button's is %q)", got["background"], primary)
	}
	templates, err := filepath.Glob(filepath.Join("templates", "*.html"))
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, p := range templates {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`<a [^>]*class="([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
			classes := strings.Fields(m[1])
			if containsAll(classes, "button", "danger") {
				links++
			}
		}
	}
	if links == 0 {
		t.Errorf("no template has a danger link (class \"button danger\"); want the cancel and delete links")
	}
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, s := range list {
			found = found || s == w
		}
		if !found {
			return false
		}
	}
	return true
}
