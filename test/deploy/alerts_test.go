package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	ruleFile      = "../../deploy/k8s/monitoring/prometheusrule.yaml"
	ruleTestFile  = "testdata/prometheusrule_test.yaml"
	operationsDoc = "../../docs/operations.md"
	runbookPrefix = "https://github.com/edihub/edihub/blob/main/docs/operations.md#"
)

// promRule is the part of a Prometheus rule these tests read.
type promRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Annotations map[string]string `json:"annotations"`
}

// ruleGroups returns the spec of the PrometheusRule, which is a Prometheus
// rule file as it is (groups), and the alerts in it.
func ruleGroups(t *testing.T) (spec []byte, alerts []promRule) {
	t.Helper()
	b, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec) == 0 {
		t.Fatalf("%s: kind %q with spec %s, want a PrometheusRule", ruleFile, pr.Kind, pr.Spec)
	}
	var groups struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(pr.Spec, &groups); err != nil {
		t.Fatalf("%s: spec: %v", ruleFile, err)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r)
			}
		}
	}
	spec, err = yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, alerts
}

// promtool returns the path of promtool, failing the test when it is not
// installed: scripts/deps.sh (run by make test) installs it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): run scripts/deps.sh, or install Debian's prometheus package", err)
	}
	return path
}

// TestAlertRules runs promtool on the rule groups of the PrometheusRule as
// shipped: `promtool check rules`, then the unit tests of
// testdata/prometheusrule_test.yaml with `promtool test rules`.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	spec, alerts := ruleGroups(t)
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", ruleFile)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(ruleTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), bytes.TrimSpace(out))
	}

	// Every alert is exercised by at least one unit test.
	tested := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*alertname:\s*(\S+)`).FindAllStringSubmatch(string(tests), -1) {
		tested[m[1]] = true
	}
	for _, a := range alerts {
		if !tested[a.Alert] {
			t.Errorf("alert %s has no test in %s", a.Alert, ruleTestFile)
		}
	}
}

// TestAlertRunbooks checks that every alert links its own runbook, a heading
// of docs/operations.md (GitHub's anchor: the heading in lower case).
func TestAlertRunbooks(t *testing.T) {
	_, alerts := ruleGroups(t)
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} +(.+?)\s*$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	for _, a := range alerts {
		url := a.Annotations["runbook_url"]
		want := runbookPrefix + strings.ToLower(a.Alert)
		if url != want {
			t.Errorf("alert %s: runbook_url = %q, want %q", a.Alert, url, want)
			continue
		}
		if !anchors[strings.ToLower(a.Alert)] {
			t.Errorf("alert %s: docs/operations.md has no heading %q", a.Alert, a.Alert)
		}
		if a.Annotations["summary"] == "" {
			t.Errorf("alert %s has no summary", a.Alert)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case,
// spaces to hyphens, punctuation other than hyphens and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
