package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// summary gathers the run's figures into one table printed at its end:
// each figure with its reference measured in the same run, their ratio,
// the target the ratio is held to and whether it met it. A figure without
// a documented target prints "–" for both.
type summary struct {
	mu   sync.Mutex
	rows []figure
}

// figure is one row of the summary.
type figure struct {
	name       string
	value      string
	reference  string // what the value is compared with, measured in this run
	ratio      float64
	ratioValid bool
	target     string // "≥ 70%", "≤ 1.15", "" when none is documented
	percent    bool   // the ratio printed as a percentage (so is any with a target in %)
	pass       *bool
}

// ratioAtLeast returns a figure whose ratio must be at least min
// (printed as a percentage when percent).
func ratioAtLeast(name, value, reference string, ratio, minimum float64, percent bool) figure {
	ok := ratio >= minimum
	t := fmt.Sprintf("≥ %.2f", minimum)
	if percent {
		t = fmt.Sprintf("≥ %.0f%%", 100*minimum)
	}
	return figure{name: name, value: value, reference: reference, ratio: ratio, ratioValid: true, target: t, pass: &ok}
}

// ratioAtMost returns a figure whose ratio must be at most maximum.
func ratioAtMost(name, value, reference string, ratio, maximum float64) figure {
	ok := ratio <= maximum
	return figure{name: name, value: value, reference: reference, ratio: ratio, ratioValid: true, target: fmt.Sprintf("≤ %.2f", maximum), pass: &ok}
}

// below returns a figure whose value (bytes, say) must stay below limit;
// the ratio is value / reference.
func below(name, value, reference string, ratio float64, ok bool, target string) figure {
	return figure{name: name, value: value, reference: reference, ratio: ratio, ratioValid: true, target: target, pass: &ok}
}

// withoutTarget is f shown for comparison only: no target, nothing to
// meet, its ratio printed as its target would have printed it.
func (f figure) withoutTarget() figure {
	f.percent = f.percent || strings.Contains(f.target, "%")
	f.target, f.pass = "", nil
	return f
}

// add records f; nil s (a section run on its own) records nothing.
func (s *summary) add(f figure) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, f)
}

// cells is the table as rows of cells, the header first.
func (s *summary) cells() [][]string {
	cells := [][]string{{"figure", "value", "reference (same run)", "ratio", "target", "result"}}
	for _, f := range s.rows {
		ratio, result, target := "–", "–", f.target
		if f.ratioValid {
			ratio = fmt.Sprintf("%.2f", f.ratio)
			if f.percent || strings.Contains(f.target, "%") {
				ratio = fmt.Sprintf("%.0f%%", 100*f.ratio)
			}
		}
		if target == "" {
			target = "–"
		}
		if f.pass != nil {
			result = "pass"
			if !*f.pass {
				result = "FAIL"
			}
		}
		cells = append(cells, []string{f.name, f.value, f.reference, ratio, target, result})
	}
	return cells
}

// print writes the table and returns the number of figures that missed
// their target.
func (s *summary) print(out io.Writer) int {
	if s == nil || len(s.rows) == 0 {
		return 0
	}
	cells := s.cells()
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	fmt.Fprintln(out, "Summary (every reference measured in this run; on a shared machine compare the \"others used\" lines above)")
	for i, row := range cells {
		var b strings.Builder
		for j, c := range row {
			b.WriteString("| " + c + strings.Repeat(" ", width[j]-len([]rune(c))) + " ")
		}
		fmt.Fprintln(out, b.String()+"|")
		if i == 0 {
			b.Reset()
			for _, w := range width {
				b.WriteString("|" + strings.Repeat("-", w+2))
			}
			fmt.Fprintln(out, b.String()+"|")
		}
	}
	fmt.Fprintf(out, "%d of %d figures with a target met it\n", countPassed(s.rows), countTargets(s.rows))
	return countTargets(s.rows) - countPassed(s.rows)
}

func countTargets(rows []figure) int {
	n := 0
	for _, f := range rows {
		if f.pass != nil {
			n++
		}
	}
	return n
}

func countPassed(rows []figure) int {
	n := 0
	for _, f := range rows {
		if f.pass != nil && *f.pass {
			n++
		}
	}
	return n
}
