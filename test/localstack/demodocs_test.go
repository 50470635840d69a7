package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/edi"
)

// TestDemoDocuments: the demo exchange's documents are whole X12
// interchanges that edi.Parse reads without a problem, with the control
// numbers they were given, and a second start of the stack (the same
// state, the same clock) gives control numbers no document of the first
// had.
func TestDemoDocuments(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 7, 9, 30, 0, 0, time.UTC)
	seen := map[string]int{} // ISA13 -> start
	for start := 1; start <= 2; start++ {
		docs, err := writeDemoDocuments(dir, exchangeCount, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) != 2*exchangeCount {
			t.Fatalf("start %d: writeDemoDocuments wrote %d documents, want %d", start, len(docs), 2*exchangeCount)
		}
		for _, d := range docs {
			b, err := os.ReadFile(d.Path)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := edi.Parse(bytes.NewReader(b), edi.DefaultLimits)
			if err != nil {
				t.Fatalf("Parse(%s) error %v, want none\n%s", d.Path, err, b)
			}
			if doc.Standard != edi.X12 || len(doc.Interchanges) != 1 {
				t.Fatalf("Parse(%s) = %s with %d interchanges, want X12 with 1\n%s", d.Path, doc.Standard, len(doc.Interchanges), b)
			}
			ic := doc.Interchanges[0]
			if !ic.OK() || len(ic.Groups) != 1 || ic.Groups[0].Implicit || len(ic.Groups[0].Sets) != 1 {
				t.Fatalf("Parse(%s) = %+v, want one group with one set and no problems\n%s", d.Path, ic, b)
			}
			if g, s := ic.Groups[0], ic.Groups[0].Sets[0]; s.Type != "850" || g.ControlNumber != strconv.FormatInt(d.Control, 10) {
				t.Errorf("Parse(%s): set %s in group %s, want 850 in group %d", d.Path, s.Type, g.ControlNumber, d.Control)
			}
			if ic.Sender.ID != d.From || ic.Receiver.ID != d.To {
				t.Errorf("Parse(%s): from %q to %q, want %q to %q", d.Path, ic.Sender.ID, ic.Receiver.ID, d.From, d.To)
			}
			if want := strconv.FormatInt(d.Control+1e9, 10)[1:]; ic.ControlNumber != want {
				t.Errorf("Parse(%s): ISA13 %s, want %s", d.Path, ic.ControlNumber, want)
			}
			if s, ok := seen[ic.ControlNumber]; ok {
				t.Errorf("start %d: ISA13 %s again (first in start %d)", start, ic.ControlNumber, s)
			}
			seen[ic.ControlNumber] = start
		}
	}
}

// TestReserveControlNumbers: the reserved numbers never go back, neither
// across starts nor when the counter file is gone, and stay within ISA13's
// nine digits.
func TestReserveControlNumbers(t *testing.T) {
	dir := t.TempDir()
	t0 := controlEpoch.Add(1000 * time.Second)
	tests := []struct {
		name   string
		now    time.Time
		remove bool
		want   int64
	}{
		{"first start: the clock", t0, false, 1000},
		{"same second: the counter", t0, false, 1006},
		{"clock went back: the counter", t0.Add(-time.Hour), false, 1012},
		{"file gone: the clock", t0.Add(time.Hour), true, 1000 + 3600},
		{"past nine digits: from 1", controlEpoch.Add(maxControl * time.Second), true, 1},
	}
	for _, tt := range tests {
		if tt.remove {
			if err := os.Remove(dir + "/" + controlFile); err != nil {
				t.Fatal(err)
			}
		}
		got, err := reserveControlNumbers(dir, 6, tt.now)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: reserveControlNumbers(6) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestExampleDocuments: the sample documents the README and docs/local-stack.md send are whole
// interchanges with no envelope problem.
func TestExampleDocuments(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "examples", "*.x12"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("docs/examples/*.x12 = %v, %v; want the samples the README sends", paths, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := edi.Parse(bytes.NewReader(b), edi.DefaultLimits)
		if err != nil || len(doc.Interchanges) != 1 || !doc.Interchanges[0].OK() || len(doc.Interchanges[0].Groups) != 1 || doc.Interchanges[0].Groups[0].Implicit {
			t.Errorf("Parse(%s) = %+v, %v; want one interchange with one group and no problems", p, doc, err)
		}
	}
}
