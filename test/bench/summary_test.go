package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/edihub/edihub/test/machine"
)

// The table counts only the figures with a target, prints a ratio as a
// percentage when its target is one or the figure asks for it, and
// returns the number of targets missed; a figure without its target
// (withoutTarget) is neither counted nor failed.
func TestSummaryPrint(t *testing.T) {
	s := &summary{}
	s.add(ratioAtLeast("share", "565", "RSA bound 852 msg/s", 0.663, 0.70, true))
	s.add(ratioAtMost("profile", "1.14", "RSA share", 1.14, 1.15))
	s.add(figure{name: "side by side", value: "700", reference: "bound 1022", ratio: 0.686, ratioValid: true, percent: true})
	s.add(ratioAtLeast("side build", "700", "RSA bound 1022 msg/s", 0.686, 0.70, true).withoutTarget())
	s.add(figure{name: "plain ratio", value: "142.7", reference: "openssl", ratio: 0.767, ratioValid: true})
	var out bytes.Buffer
	failed := s.print(&out)
	if failed != 1 {
		t.Errorf("print returned %d missed targets, want 1", failed)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 7 {
			continue
		}
		rows[strings.TrimSpace(cells[1])] = strings.Join(strings.Fields(strings.Join(cells[4:7], "|")), " ")
	}
	for name, want := range map[string]string{
		"share":        "66% | ≥ 70% | FAIL",
		"profile":      "1.14 | ≤ 1.15 | pass",
		"side by side": "69% | – | –",
		"side build":   "69% | – | –",
		"plain ratio":  "0.77 | – | –",
	} {
		if got := rows[name]; got != want {
			t.Errorf("row %q: ratio | target | result = %q, want %q\n%s", name, got, want, out.String())
		}
	}
	if !strings.Contains(out.String(), "1 of 2 figures with a target met it") {
		t.Errorf("the count of targets met is missing or wrong:\n%s", out.String())
	}
}

// The bench page carries the machine, its load during the run and the
// same rows as the printed table, as a Markdown table with one header
// separator, and says how to regenerate it.
func TestSummaryWritePage(t *testing.T) {
	s := &summary{}
	s.add(ratioAtLeast("share", "565", "RSA bound 852 msg/s", 0.663, 0.70, true))
	s.add(ratioAtMost("profile", "1.14", "RSA share", 1.14, 1.15))
	m := machine.Machine{CPU: "Test CPU | 2 GHz", Cores: 2, MemoryGiB: 24, Go: "go1.26", LoadMin: 0.5, LoadMean: 1.25, LoadMax: 3}
	var out bytes.Buffer
	if err := s.writePage(&out, m, "go run ./test/bench -page docs/bench.md"); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{
		"`go run ./test/bench -page docs/bench.md`",
		"| CPU | Test CPU / 2 GHz |",
		"| load average during the run (min / mean / max) | 0.5 / 1.2 / 3.0 on 2 cores |",
		"| figure | value | reference (same run) | ratio | target | result |\n|---|---|---|---|---|---|\n",
		"| share | 565 | RSA bound 852 msg/s | 66% | ≥ 70% | FAIL |",
		"| profile | 1.14 | RSA share | 1.14 | ≤ 1.15 | pass |",
		"1 of 2 figures with a target met it.",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}
